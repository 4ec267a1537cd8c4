"""The hot path: one keep-alive HTTP/1.1 connection per user, streaming answers of any API (attnload.apis).

Why not Locust's ``FastHttpSession`` or the openai SDK: ``iter_lines()`` waits for 1024
bytes before yielding and the SDK costs ~0.3 ms CPU per chunk (docs/design.md, pitfalls), both
distorting TTFT/ITL at high concurrency. Here a gevent socket is read in whatever chunks
the kernel gives, geventhttpclient's C parser (llhttp) removes HTTP framing, and
``SseSplitter`` cuts events without per-chunk string concatenation. Every byte of a
``recv`` is stamped with the time that ``recv`` returned. The per-chunk work (splitting,
the plain-delta check, stamping, token counting) runs in C when the extension was built
(``CStream``: client/compiled.py, native/) and in Python otherwise (``PyStream``); ``attnload.native``
chooses, and both give the same records (docs/performance.md, "The compiled path").

Failures become :class:`RequestFailed` with a docs/design.md :class:`ErrorClass` in one place
(``classify_status``, ``classify_exception``); a hostile server can only produce a
classified failure, never an exception out of :meth:`ApiClient.send`.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import gevent
import gevent.socket
import gevent.ssl
from gevent import GreenletExit
from geventhttpclient.response import HTTPParseError

from attnload.apis import api_of, request_body
from attnload.client.backoff import Backoff
from attnload.client.budget import DRAIN_READS, MAX_HEADER_BYTES, YIELD_EVERY
from attnload.client.checks import NEVER, header
from attnload.client.classify import classify_exception, classify_status
from attnload.client.proxy import proxy_refusal
from attnload.client.stream import (
    BODY_ERRORS,
    PUMP_ABANDON,
    PUMP_DONE_OPEN,
    PUMP_EOF,
    PUMP_TIMEOUT,
    Stream,
    frames_chunked,
    frames_in_c,
    new_stream,
)
from attnload.client.transport import RECV_BYTES, Endpoint, Response, SocketReader, Timeouts, head_end
from attnload.errors import ErrorClass, RequestFailed
from attnload.measure.recorder import RequestRecord, split_gaps
from attnload.measure.tokens import prompt_tokens, tools_tokens

if TYPE_CHECKING:
    from attnload.client.compiled import CStream

FRAMING_TAIL_S = 1.0
DRAIN_STOPS: tuple[type[Exception], ...] = (BlockingIOError, OSError, RequestFailed, *BODY_ERRORS)
"""What ends ``_read_buffered`` quietly: nothing more buffered, or bytes that would not make a complete answer."""


class ApiClient:
    """Sends one API's requests (attnload.apis) to one endpoint over one keep-alive connection (one user)."""

    _reader: SocketReader | None = None
    """Timer-free reader of the current plain-TCP socket (rebuilt when the socket changes)."""
    _tls_reads = 0
    """TLS reads so far: every ``YIELD_EVERY``-th yields to the hub (plain reads always wait on it)."""

    def _recv(self, sock: Any, wait_s: float) -> bytes:
        """One read of at most ``RECV_BYTES`` within ``wait_s``; raises ``TimeoutError`` past it."""
        if type(sock) is not gevent.socket.socket:  # TLS: only its own recv decrypts
            self._tls_reads += 1
            if self._tls_reads % YIELD_EVERY == 0:
                gevent.sleep(0)  # its recv returns buffered bytes without a hub switch: let others run
            sock.settimeout(wait_s)
            return bytes(sock.recv(RECV_BYTES))
        return self._reader_of(sock).recv(wait_s)

    def _reader_of(self, sock: Any) -> SocketReader:
        reader = self._reader
        if reader is None or reader.sock is not sock:
            reader = self._reader = SocketReader(sock)
        return reader

    def __init__(
        self,
        url: str,
        api_key: str | None,
        timeouts: Timeouts,
        ssl_context: gevent.ssl.SSLContext | None = None,
        retry_after_max_s: float = 0.0,
        backoff: Backoff | None = None,
        waits_backoff: bool = True,
        api: str = "chat",
        key_header: str | None = None,
    ) -> None:
        self.endpoint = Endpoint.from_url(url)
        self.backoff = backoff
        """Connection failures back off (``client/backoff.py``); shared by an open loop's clients of one model."""
        self.waits_backoff = waits_backoff
        """True: :meth:`send` sleeps out the backoff first (a closed-loop user); False: the caller drops instead."""
        self.api = api_of(api)
        """The API ``url`` speaks (attnload.apis): its headers, the stream reader; the caller builds the body."""
        self.timeouts = timeouts
        self.retry_after_max_s = retry_after_max_s
        """Above 0: after a 429 with Retry-After, wait that long (capped) before this user's next request."""
        self.last_failure: RequestFailed | None = None
        """The last request's classified failure with its detail (``attnload check`` prints it)."""
        self._resume_at = 0.0
        self._sock: Any = None
        self._ssl = ssl_context
        auth = self.api.headers(api_key, key_header)
        target = self.endpoint.path  # with its query string: client/transport.py
        if self.endpoint.proxy and not self.endpoint.tls:  # absolute-form via a proxy, with the proxy's login
            target = f"http://{self.endpoint.host_header}{self.endpoint.path}"
            auth += self.endpoint.proxy_auth
        self._head = (
            f"POST {target} HTTP/1.1\r\nHost: {self.endpoint.host_header}\r\n"
            f"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
            f"User-Agent: attnload\r\n{auth}Content-Length: "
        ).encode()

    def close(self) -> None:
        if self._reader is not None:
            self._reader.release()
            self._reader = None
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    # ------------------------------------------------------------------ connection

    def _connect(self) -> Any:
        endpoint = self.endpoint
        address = endpoint.proxy or (endpoint.host, endpoint.port)
        try:
            sock = gevent.socket.create_connection(address, timeout=self.timeouts.connect_s)
        except OSError as exc:
            if endpoint.proxy:
                raise RequestFailed(ErrorClass.PROXY, f"proxy {address[0]}:{address[1]} unreachable ({exc})") from None
            raise
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if endpoint.proxy and endpoint.tls:
            sock = self._tunnel(sock)
        if endpoint.tls:
            context = self._ssl or gevent.ssl.create_default_context()
            sock = context.wrap_socket(sock, server_hostname=endpoint.host)
        return sock

    def _tunnel(self, sock: Any) -> Any:
        endpoint = self.endpoint
        authority = endpoint.authority
        sock.sendall(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n{endpoint.proxy_auth}\r\n".encode())
        reply = b""
        deadline = time.perf_counter() + self.timeouts.connect_s
        while b"\r\n\r\n" not in reply:
            if len(reply) > MAX_HEADER_BYTES or time.perf_counter() > deadline:
                raise RequestFailed(ErrorClass.PROXY, "the proxy's CONNECT reply did not end in time or size")
            data = sock.recv(4096)
            if not data:
                raise RequestFailed(ErrorClass.PROXY, "proxy closed the CONNECT tunnel")
            reply += data
        status = reply.split(b" ", 2)[1:2]
        if status != [b"200"]:
            kind = ErrorClass.PROXY_AUTH if status in ([b"407"], [b"401"]) else ErrorClass.PROXY  # 401: tinyproxy's
            raise RequestFailed(kind, f"proxy refused CONNECT: {reply.splitlines()[0].decode(errors='replace')}")
        return sock

    # ------------------------------------------------------------------ request

    def send(
        self,
        body: dict[str, Any],
        *,
        model_key: str,
        profile: str,
        stage: int,
        intended_start: float | None = None,
        capture_text: bool = False,
        abandon: tuple[int | None, float | None] | None = None,
    ) -> RequestRecord:
        """Run one request to completion and return its record; never raises for server faults.

        ``intended_start`` (perf_counter seconds) is the open-loop schedule's send time:
        latencies count from it, so a late client cannot hide queueing (coordinated omission).
        ``capture_text`` keeps the streamed content in ``record.reply_text`` (a conversation's
        next turn resends it); off by default so the hot path stores no text.
        ``abandon`` (``--abandon-after``): ``(content chunks, seconds after origin)``, one of them
        None; once reached the client closes the connection and the request ends ``abandoned``.
        """
        if self._resume_at:
            self._back_off()
        if self.backoff is not None and self.waits_backoff and (wait := self.backoff.wait_s()) > 0:
            gevent.sleep(wait)  # as for a 429: no request is in flight, and the wait is no one's latency
        started = time.perf_counter()
        origin = intended_start if intended_start is not None else started
        streaming = self.api.streams(body)
        stream = new_stream(streaming, self.api.max_tokens(body), self.api.name)
        if capture_text:
            stream.texts = []
        if abandon is not None:
            stream.abandon_chunks, stream.abandon_at = abandon[0] or NEVER, origin + (abandon[1] or NEVER)
        error: RequestFailed | None = None
        outcome = "ok"
        try:
            self._exchange(json.dumps(body, ensure_ascii=False).encode(), stream, origin)
            stream.finish()
        except RequestFailed as exc:
            error, outcome = exc, "failed"
        except Abandoned:
            outcome = "abandoned"
            self.close()  # the server sees the connection go; this user's next request opens a new one
        except GreenletExit:
            if stream.response is not None and not stream.done:
                self._read_buffered(stream, origin)
            self.close()
            if stream.response is None:
                raise  # stopped before the request was on the wire: no request exists to count
            if stream.done:  # the whole answer had arrived (maybe unread) when the test stopped
                try:
                    stream.finish()
                except RequestFailed as exc:
                    error, outcome = exc, "failed"
            else:
                outcome = "cancelled"
                error = RequestFailed(ErrorClass.CANCELLED, "the test stopped during the request")
            record = self._record(
                body, stream, origin, outcome, error, model_key, profile, stage, intended_start, started
            )
            raise Cancelled(record) from None
        except Exception as exc:  # noqa: BLE001 - one boundary maps every foreign error to a class
            error, outcome = classify_exception(exc, self.endpoint.proxy is not None), "failed"
        self.last_failure = error
        if error is not None:
            # Its traceback holds this frame (which holds it): a cycle keeping the response's buffers alive
            # until a full collection, which load processes run only every 10 minutes (runner/gcpolicy.py).
            error.__traceback__ = error.__context__ = error.__cause__ = None
            self.close()
            if error.retry_after_s and self.retry_after_max_s > 0:
                self._resume_at = time.perf_counter() + min(error.retry_after_s, self.retry_after_max_s)
        record = self._record(body, stream, origin, outcome, error, model_key, profile, stage, intended_start, started)
        if self.backoff is not None:  # what waits and what resets it: client/backoff.py
            self.backoff.after(None if error is None else error.kind, record.http_status is not None)
        return record

    def _read_buffered(self, stream: Stream, origin: float) -> None:
        """At a stop, take what already sits in the kernel's receive buffer, without waiting.

        The server counts a response complete once it has written it; if the test stops before
        this client read those bytes, calling the request cancelled would disagree with the
        server about a response that had in fact been delivered. At most ``DRAIN_READS`` reads:
        a server that never stops writing would otherwise keep this loop (which never yields)
        reading for ever and the stop would never end.
        """
        sock, response = self._sock, stream.response
        if sock is None or response is None or type(sock) is not gevent.socket.socket:
            return  # TLS bytes need the TLS layer's own (blocking) reads
        try:
            for _ in range(DRAIN_READS):
                if stream.done:
                    return
                data = os.read(sock.fileno(), RECV_BYTES)  # the fd is non-blocking under gevent
                if not data:
                    return
                if frames_in_c(stream) and stream.framed:
                    stream.feed_body(data)
                else:
                    response.feed(data)
                if stream.streaming and stream.sse.events:
                    stream.consume(time.perf_counter(), origin)
        except DRAIN_STOPS:
            return  # nothing more buffered, or bytes that would not have made a complete answer

    def _back_off(self) -> None:
        """Honour the last 429's Retry-After; the wait is not part of the next request's latency."""
        wait = self._resume_at - time.perf_counter()
        self._resume_at = 0.0
        if wait > 0:
            gevent.sleep(wait)  # a GreenletExit here cancels nothing: no request is in flight

    def _exchange(self, payload: bytes, stream: Stream, origin: float) -> None:
        timeouts = self.timeouts
        deadline = origin + timeouts.total_s
        first_deadline = origin + timeouts.ttft_s if timeouts.ttft_s else deadline
        request = self._head + str(len(payload)).encode() + b"\r\n\r\n" + payload
        sock, reused = self._send_request(request)
        response = Response(stream.sse if stream.streaming else None)
        stream.response = response
        fresh = not reused  # a reused connection that dies before any byte was closed idle: resend once
        head_bytes = 0
        after_end = False
        compiled = stream if stream.streaming and frames_in_c(stream) and type(sock) is gevent.socket.socket else None
        """This stream while the compiled loop may take its body (None: it will not)."""
        head_tail: bytes | None = b""
        """The head's last bytes so far (None once the head ended)."""
        while True:
            now = time.perf_counter()
            limit = deadline if stream.first_at is not None or not stream.streaming else min(first_deadline, deadline)
            wait = limit - now
            if response.headers_complete:
                wait = min(wait, timeouts.idle_s)
            if wait <= 0:
                raise RequestFailed(ErrorClass.TIMEOUT, _timeout_detail(stream, timeouts))
            try:
                data = self._recv(sock, wait)
            except ConnectionResetError as reset:
                if fresh:
                    raise self._answer_or(reset, response) from None
                data = b""
            except (TimeoutError, gevent.socket.timeout):
                raise RequestFailed(ErrorClass.TIMEOUT, _timeout_detail(stream, timeouts)) from None
            at = time.perf_counter()
            if not data:
                self.close()
                if not fresh:
                    fresh = True
                    sock = self._sock = self._connect()
                    sock.sendall(request)
                    continue
                stream.eof = True
                return
            fresh = True
            try:
                if compiled is not None and head_tail is not None and not response.headers_complete:
                    head_tail, framed = _feed_head(response, compiled, data, head_tail)
                    if framed:
                        self._pump(compiled, response, sock, at, deadline, first_deadline)
                        return
                else:
                    response.feed(data)
            except BODY_ERRORS as exc:
                if not response.ended:
                    raise RequestFailed(ErrorClass.BAD_RESPONSE, f"malformed HTTP response ({exc})") from None
                after_end = True  # llhttp refused bytes after the message's end: the answer stands
            if not response.headers_complete:
                head_bytes += len(data)
                if head_bytes > MAX_HEADER_BYTES:
                    raise RequestFailed(ErrorClass.BAD_RESPONSE, f"response headers exceed {MAX_HEADER_BYTES} bytes")
            if stream.sse.events and stream.streaming:  # only a 200 feeds the splitter: the streaming common case first
                stream.consume(at, origin)
                # The per-read point: content chunks so far = len(stream.chunk_tokens), elapsed = at - origin;
                # a stop condition on either is checked here, once per read, on both implementations.
                if stream.done:
                    stream.done_at = at
                    if after_end:
                        self.close()
                    else:
                        self._finish_framing(sock, response)
                    return
                if len(stream.chunk_tokens) >= stream.abandon_chunks or at >= stream.abandon_at:
                    raise Abandoned  # --abandon-after reached: send() closes the connection
            ended = response.message_complete or after_end  # after_end: the connection carries junk, it goes
            if response.headers_complete and response.get_code() != 200:
                if ended:
                    raise self._refused(response)
                continue
            if ended:
                if after_end or response.should_close():
                    self.close()
                return

    def _answer_or(self, reset: ConnectionResetError, response: Response) -> Exception:
        """A reset right after an error's head (a proxy's 401/407 closing with the body unread) is that error."""
        if response.headers_complete and response.get_code() != 200:
            return self._refused(response)
        return reset

    def _refused(self, response: Response) -> RequestFailed:
        """A complete non-200 response as its error class, in the API's own words (a proxy's refused login:
        ``proxy_auth``)."""
        failure = classify_status(response.get_code(), bytes(response.body), header(response, "retry-after"), self.api)
        return proxy_refusal(failure, self.endpoint.proxy is not None, lambda name: header(response, name))

    def _send_request(self, request: bytes) -> tuple[Any, bool]:
        """Send on the keep-alive connection, or a new one: (socket, whether it was a reused one)."""
        reused = self._sock is not None
        if self._sock is None:
            self._sock = self._connect()
        try:
            self._sock.sendall(request)
        except OSError:
            if not reused:
                raise
            self.close()  # a keep-alive connection the server closed: reconnect once
            self._sock = self._connect()
            self._sock.sendall(request)
        return self._sock, reused

    def _pump(
        self, stream: CStream, response: Response, sock: Any, at: float, deadline: float, first_deadline: float
    ) -> None:
        """The rest of a 200's chunked stream in the compiled loop (``StreamBase.pump``, native/readloop.c).

        The same reads, stamps, deadlines and stop conditions as the loop in ``_exchange`` and
        ``_finish_framing``, without a Python frame per read; each way it can end maps to what
        that loop does at the same point.
        """
        reader = self._reader_of(sock)
        reader.greenlet = gevent.getcurrent()
        timeouts = self.timeouts
        try:
            code = stream.pump(
                reader,
                at,
                deadline,
                first_deadline,
                timeouts.idle_s,
                float(stream.abandon_chunks),
                stream.abandon_at,
                FRAMING_TAIL_S,
            )
        except TimeoutError:
            raise RequestFailed(ErrorClass.TIMEOUT, _timeout_detail(stream, timeouts)) from None
        except BODY_ERRORS as exc:
            raise RequestFailed(ErrorClass.BAD_RESPONSE, f"malformed HTTP response ({exc})") from None
        if code == PUMP_ABANDON:
            raise Abandoned
        if code == PUMP_TIMEOUT:
            raise RequestFailed(ErrorClass.TIMEOUT, _timeout_detail(stream, timeouts))
        if code == PUMP_EOF:
            self.close()
            stream.eof = True
            return
        response.message_complete = code != PUMP_DONE_OPEN  # done or complete: the body's last chunk came
        if code == PUMP_DONE_OPEN or stream.trailing or response.should_close():
            self.close()

    def _finish_framing(self, sock: Any, response: Response) -> None:
        """After [DONE], read the few bytes that end the HTTP message so the connection stays reusable.

        Servers such as uvicorn send the terminating chunk separately; closing instead would reset
        the connection and open a new one per request (ports run out at 10k streams). The latency
        was already stamped at [DONE], so this wait is not measured. Bounded in time and bytes:
        a server that goes on writing after [DONE] just loses the connection.
        """
        deadline = time.perf_counter() + FRAMING_TAIL_S
        budget = RECV_BYTES
        try:
            while not response.message_complete and budget > 0:
                wait = deadline - time.perf_counter()
                data = self._recv(sock, wait) if wait > 0 else b""
                if not data:
                    break
                budget -= len(data)
                response.feed(data)
                if response.sse is not None:
                    response.sse.discard()  # events after [DONE] are not part of the answer
        except (OSError, HTTPParseError, gevent.socket.timeout, RequestFailed):
            pass  # the answer is complete; only the connection's reuse is at stake
        if not response.message_complete or response.should_close():
            self.close()

    def _record(
        self,
        body: dict[str, Any],
        stream: Stream,
        origin: float,
        outcome: str,
        error: RequestFailed | None,
        model_key: str,
        profile: str,
        stage: int,
        intended_start: float | None,
        started: float,
    ) -> RequestRecord:
        end = stream.done_at or time.perf_counter()
        usage = stream.usage or {}
        reported_prompt = usage.get("prompt_tokens")
        reported_completion = usage.get("completion_tokens")
        if stream.streaming and not stream.done and isinstance(reported_completion, int):
            # a usage seen before the stream's end is provisional (Messages sends one in message_start): a cut
            # request counts the tokens it streamed, as chat's (whose usage comes only at the end) do
            reported_completion = max(reported_completion, sum(stream.chunk_tokens))
        details = usage.get("prompt_tokens_details") or {}
        reasoning_details = usage.get("completion_tokens_details")
        estimated = not isinstance(reported_prompt, int) or not isinstance(reported_completion, int)
        completion = reported_completion if isinstance(reported_completion, int) else sum(stream.chunk_tokens)
        reasoning = stream.reasoning_tokens
        if reasoning and stream.streaming and not estimated and completion == len(stream.chunk_tokens):
            reasoning = stream.reasoning_chunks  # the server's count says one token per delta: count deltas
        return RequestRecord(
            model_key=model_key,
            profile=profile,
            stage=stage,
            outcome=outcome,
            error=error.kind.label if error else None,
            ttft_s=None if stream.first_at is None else stream.first_at - origin,
            itl_samples=split_gaps(stream.gaps, stream.chunk_tokens, completion if not estimated else None),
            e2e_s=end - origin,
            prompt_tokens=reported_prompt
            if isinstance(reported_prompt, int)
            else prompt_tokens(self.api.prompt_messages(body)) + tools_tokens(body.get("tools")),
            completion_tokens=completion,
            cached_prompt_tokens=cached_tokens(details),
            tokens_estimated=estimated,
            dispatch_lag_s=None if intended_start is None else started - intended_start,
            reply_text=None if stream.texts is None else "".join(stream.texts),
            started_perf=started,
            http_status=_status_code(stream),
            ttfat_s=None if stream.answer_at is None else stream.answer_at - origin,
            reasoning_tokens=reasoning,
            server_reasoning_tokens=server_reasoning(reasoning_details),
            error_detail=error.detail if error is not None and outcome == "failed" else None,
            error_body=error.body if error is not None and outcome == "failed" else None,
        )


def _feed_head(response: Response, stream: CStream, data: bytes, seen: bytes) -> tuple[bytes | None, bool]:
    """Feed llhttp one read, but no further than the head's end; a 200's chunked body then goes to
    the compiled loop's framing. Returns the head's last bytes so far (None once it ended, so the
    next search is not needed) and whether the compiled framing took the body."""
    cut = head_end(seen, data)
    if cut < 0:
        response.feed(data)
        return (seen + data)[-3:], False
    response.feed(data[:cut])
    if frames_chunked(response):
        stream.start_body(data[cut:])
        return None, True
    if cut < len(data):  # llhttp reads an empty feed as the peer's close
        response.feed(data[cut:])
    return None, False


def _status_code(stream: Stream) -> int | None:
    """The HTTP status of the response, once its head arrived (per request, for ``--requests-out``)."""
    response = stream.response
    return response.get_code() if response is not None and response.headers_complete else None


class Abandoned(Exception):
    """The client gives up on the stream on purpose (``--abandon-after``): not a failure."""


def server_reasoning(details: object) -> int | None:
    """``usage.completion_tokens_details.reasoning_tokens`` (Responses: ``output_tokens_details``, mapped to
    it); None when the server did not report it. Never trusted alone: vLLM 0.32 reports 0 when the
    template opens the think block in the prompt, while the reasoning streams."""
    value = details.get("reasoning_tokens") if isinstance(details, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def cached_tokens(details: object) -> int | None:
    """``usage.prompt_tokens_details.cached_tokens``; None when the server did not report it (vLLM only
    does with ``--enable-prompt-tokens-details``): absent is not zero."""
    value = details.get("cached_tokens") if isinstance(details, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


class Cancelled(Exception):
    """Carries the record of a request the test stopped; the user records it, then exits."""

    def __init__(self, record: RequestRecord) -> None:
        super().__init__("cancelled")
        self.record = record


def _timeout_detail(stream: Stream, timeouts: Timeouts) -> str:
    if stream.response is None or not stream.response.headers_complete:
        limit = (
            f"ttft {timeouts.ttft_s:g} s" if timeouts.ttft_s and stream.streaming else f"total {timeouts.total_s:g} s"
        )
        return f"no response headers in time ({limit})"
    if stream.first_at is None:
        return f"no first token in time (ttft {timeouts.ttft_s or timeouts.total_s:g} s)"
    return f"stream stalled (idle {timeouts.idle_s:g} s or total {timeouts.total_s:g} s exceeded)"


def chat_body(model_id: str, messages: Sequence[dict[str, Any]], **settings: Any) -> dict[str, Any]:
    """A chat completions body (``request_body`` for ``api = "chat"``): streaming with usage by default."""
    return request_body("chat", model_id, messages, **settings)
