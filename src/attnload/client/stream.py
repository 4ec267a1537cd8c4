"""The state of one response being read, and what is done with each of its events.

``PyStream`` is the pure-Python reference; ``CStream`` keeps the same state in C and stamps the
common chunks there (attnload/native/fastpath.c); both share ``StreamChecks`` for every event the
same-bytes check does not take and for the checks at the end, so errors, budgets and
messages are one code. ``new_stream`` picks the implementation ``attnload.native`` chose.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from geventhttpclient.response import HTTPParseError, HTTPResponse

from attnload import native
from attnload.client.budget import max_events
from attnload.client.classify import classify_error_object, classify_status
from attnload.client.sse import CompiledSseSplitter, SseSplitter
from attnload.client.transport import Response
from attnload.errors import ErrorClass, RequestFailed
from attnload.measure.tokens import chunk_tokens

_EXTENSION = native.extension()

BODY_ERRORS: tuple[type[Exception], ...] = (HTTPParseError,) + ((_EXTENSION.FramingError,) if _EXTENSION else ())
"""What a malformed HTTP response raises: llhttp's error, or the compiled chunked framing's."""
PUMP_DONE, PUMP_DONE_OPEN, PUMP_COMPLETE, PUMP_EOF, PUMP_TIMEOUT, PUMP_ABANDON = range(6)
"""How ``StreamBase.pump`` ended (attnload/native/fastread.c): [DONE] then the message's end (or not: close
the connection), the body's end without [DONE], the peer closed, a deadline passed, ``--abandon-after``."""


# A plain content delta, the bulk of every stream: one choice, index 0, finish_reason null,
# delta {content} (optionally after role "assistant"), content without escapes or control
# characters, and only scalar fields (never "error" or "choices") around "choices".
# json.loads of such bytes yields exactly: no error, no usage dict, choices[0].delta.content
# == group(1).decode() — so consume() reads it without json.loads (~5 µs a chunk saved);
# anything else takes the full path below.
_PLAIN_STRING = rb'[^"\\\x00-\x1f]*'  # a JSON string body without escapes or control characters
_SCALAR_FIELD = rb'(?!"error"|"choices")"\w+":(?:"' + _PLAIN_STRING + rb'"|-?(?:0|[1-9]\d*)|null)'
_PLAIN_DELTA = re.compile(
    rb"\{(?:" + _SCALAR_FIELD + rb',)*"choices":\[\{"index":0,"delta":\{(?:"role":"assistant",)?'
    rb'"content":"(' + _PLAIN_STRING + rb')"\}(?:,"logprobs":null)?,"finish_reason":null(?:,"stop_reason":null)?\}\]'
    rb"(?:," + _SCALAR_FIELD + rb")*\}"
)
_PLAIN_CONTENT = re.compile(_PLAIN_STRING)
"""The content group of ``_PLAIN_DELTA`` alone: a chunk that repeats the previous match's bytes
around its content matches the whole pattern exactly when its content matches this."""
_TOKEN_CACHE: dict[str, int] = {}
"""chunk text -> ``chunk_tokens(text)``: token texts repeat, so most chunks hit (bounded)."""
_TOKEN_CACHE_SIZE = 65536


NEVER = float("inf")
"""A stop condition that is never reached."""


class StreamChecks:
    """What both implementations of a run share: the rare events, and the checks at the end.

    A run holds ``sse`` (its splitter), ``first_at``/``last_at``/``gaps``/``chunk_tokens``/
    ``texts`` (the timings and counts), ``plain_head``/``plain_tail`` and ``events_left``;
    ``PyStream`` keeps them in Python, ``CStream`` in C. ``consume`` stamps every chunk whose bytes
    around the content equal the last plain delta's and hands any other event to ``_event``.
    """

    __slots__ = ()

    def _event(self, kind: bytes, data: bytes, at: float) -> None:
        """One event the same-bytes check did not take: a first or changed plain delta, [DONE], JSON."""
        if kind == b"message":
            plain = _PLAIN_DELTA.fullmatch(data)
            if plain is not None:  # the bytes pin every field the slow path would read
                self.plain_head, self.plain_tail = data[: plain.start(1)], data[plain.end(1) :]
                raw = plain.group(1)
                if not raw:
                    return  # empty content, finish_reason null: nothing to record
                try:
                    text = raw.decode()
                except UnicodeDecodeError:
                    pass  # let json.loads report it exactly as it always has
                else:
                    self._stamp(at, cached_tokens(text), text)
                    return
        if data == b"[DONE]":
            self.done = True
            return
        try:
            chunk = json.loads(data)
        except ValueError:
            if kind == b"error":  # an SSE error event whose data is plain text
                raise classify_error_object(data[:300].decode("utf-8", errors="replace"), 200) from None
            raise RequestFailed(ErrorClass.BAD_RESPONSE, f"malformed JSON in stream: {data[:80]!r}") from None
        if not isinstance(chunk, dict):
            raise RequestFailed(ErrorClass.BAD_RESPONSE, f"stream chunk is not an object: {data[:80]!r}")
        if kind == b"error" or "error" in chunk:
            raise classify_error_object(chunk.get("error", chunk), 200)
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            if usage is None:
                raise RequestFailed(ErrorClass.BAD_RESPONSE, "stream chunk without `choices`")
            return
        if not choices:
            return
        choice = choices[0]
        if not isinstance(choice, dict):
            raise RequestFailed(ErrorClass.BAD_RESPONSE, "`choices[0]` is not an object")
        delta = choice.get("delta") or {}
        text = (
            delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(delta, dict)
            else None
        )
        if text and isinstance(text, str):
            content = delta.get("content")  # a content (or reasoning) chunk: time it, count it, keep its content
            self._stamp(at, chunk_tokens(text), content if isinstance(content, str) else None)
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]

    def _runaway(self) -> None:
        raise RequestFailed(
            ErrorClass.TRUNCATED,
            f"more than {max_events(self.max_tokens)} events for max_tokens "
            f"{self.max_tokens} and no [DONE]: the stream would not end, so it "
            f"was cut",
        )

    def finish(self) -> None:
        """Check the completed response: non-streaming body, [DONE], truncation."""
        response = self.response
        assert response is not None
        if response.headers_complete and response.get_code() != 200:
            raise classify_status(response.get_code(), bytes(response.body), header(response, "retry-after"))
        if not self.stream:
            self._finish_unary(bytes(response.body), response)
            return
        if response.headers_complete and not is_event_stream(response) and not self.first_at:
            # A 200 that is not SSE: a gateway error page or a JSON body (error or a non-streamed answer).
            self._finish_unary(bytes(response.body) + self.sse.pending, response)
            return
        if not self.done:
            if not response.headers_complete:
                raise RequestFailed(ErrorClass.CONNECTION, "connection closed before the response headers")
            raise RequestFailed(ErrorClass.TRUNCATED, "stream ended without [DONE]")
        self._check_length()

    def _finish_unary(self, raw: bytes, response: Response) -> None:
        try:
            data = json.loads(raw)
        except ValueError:
            snippet = raw[:120].decode("utf-8", errors="replace").replace("\n", " ")
            raise RequestFailed(ErrorClass.BAD_RESPONSE, f"response is not JSON: {snippet!r}") from None
        if not isinstance(data, dict):
            raise RequestFailed(ErrorClass.BAD_RESPONSE, "response is not a JSON object")
        if "error" in data:
            raise classify_error_object(data["error"], 200)
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise RequestFailed(ErrorClass.BAD_RESPONSE, "response has no `choices` (reading choices failed)")
        message = choices[0].get("message") or {}
        text = message.get("content") or message.get("reasoning_content") or "" if isinstance(message, dict) else ""
        self.first_at = time.perf_counter()
        self.chunk_tokens = [chunk_tokens(text)] if text else []
        content = message.get("content") if isinstance(message, dict) else None
        if self.texts is not None and isinstance(content, str):
            self.texts.append(content)
        self.finish_reason = choices[0].get("finish_reason")
        usage = data.get("usage")
        self.usage = usage if isinstance(usage, dict) else None
        self._check_length()

    def _check_length(self) -> None:
        if self.finish_reason == "length" and self.max_tokens:
            completion = (self.usage or {}).get("completion_tokens")
            produced = completion if isinstance(completion, int) else sum(self.chunk_tokens)
            if produced < self.max_tokens:
                raise RequestFailed(
                    ErrorClass.TRUNCATED, f"finish_reason length after {produced} of max_tokens {self.max_tokens}"
                )


class PyStream(StreamChecks):
    """The pure-Python run: the reference the compiled one (``CStream``) is tested against."""

    framed = False
    """The body is never framed outside llhttp on this path (``CStream.framed``: by the compiled loop)."""

    __slots__ = (
        "stream",
        "max_tokens",
        "sse",
        "response",
        "first_at",
        "last_at",
        "gaps",
        "chunk_tokens",
        "usage",
        "finish_reason",
        "done",
        "done_at",
        "eof",
        "plain_head",
        "plain_tail",
        "texts",
        "events_left",
        "abandon_chunks",
        "abandon_at",
    )

    def __init__(self, stream: bool, max_tokens: int) -> None:
        self.stream = stream
        self.max_tokens = max_tokens
        self.sse = SseSplitter()
        self.response: Response | None = None
        self.first_at: float | None = None
        self.last_at = 0.0
        self.gaps: list[float] = []
        self.chunk_tokens: list[int] = []
        self.usage: dict[str, Any] | None = None
        self.finish_reason: str | None = None
        self.done = False
        self.done_at: float | None = None
        self.eof = False
        self.plain_head: bytes | None = None  # the bytes before and after the last plain delta's content
        self.plain_tail = b""
        self.texts: list[str] | None = None
        """The content pieces as streamed, only when the caller asked for the text."""
        self.events_left = max_events(max_tokens)
        """Events this response may still carry before it counts as a stream that will not end."""
        self.abandon_chunks = self.abandon_at = NEVER
        """``--abandon-after``: content chunks read, or the perf_counter time, at which the client leaves."""

    def consume(self, at: float, origin: float) -> None:
        """Handle the events parsed so far; all of them arrived in the ``recv`` that returned at ``at``."""
        events, self.sse.events = self.sse.events, []
        self.events_left -= len(events)
        if self.events_left < 0:
            self._runaway()
        for kind, data in events:
            # A stream's chunks differ only in their content: same bytes before and after it as the
            # last plain delta means the same fields, so only the content needs checking.
            head, tail = self.plain_head, self.plain_tail
            if (
                head is not None
                and kind == b"message"
                and data.startswith(head)
                and data.endswith(tail)
                and len(data) >= len(head) + len(tail)
            ):
                raw = data[len(head) : len(data) - len(tail)]
                if _PLAIN_CONTENT.fullmatch(raw) is not None:
                    if not raw:
                        continue  # empty content, finish_reason null: nothing to record
                    try:
                        text = raw.decode()
                    except UnicodeDecodeError:
                        pass
                    else:
                        if self.first_at is None:
                            self.first_at = at
                        else:
                            self.gaps.append(at - self.last_at)
                        self.last_at = at
                        self.chunk_tokens.append(cached_tokens(text))
                        if self.texts is not None:
                            self.texts.append(text)
                        continue
            self._event(kind, data, at)

    def _stamp(self, at: float, tokens: int, text: str | None) -> None:
        """Time one content chunk, count its tokens, keep its text (None: nothing to keep)."""
        if self.first_at is None:
            self.first_at = at
        else:
            self.gaps.append(at - self.last_at)
        self.last_at = at
        self.chunk_tokens.append(tokens)
        if text is not None and self.texts is not None:
            self.texts.append(text)


CStream: type | None = None
if _EXTENSION is not None:

    class CStream(_EXTENSION.StreamBase, StreamChecks):  # type: ignore[no-redef]
        """The compiled run: splitting and the same-bytes stamping in C (attnload/native/fastpath.c)."""

        __slots__ = (
            "stream",
            "max_tokens",
            "response",
            "usage",
            "finish_reason",
            "done_at",
            "eof",
            "abandon_chunks",
            "abandon_at",
        )

        def __init__(self, stream: bool, max_tokens: int) -> None:
            self.stream = stream
            self.max_tokens = max_tokens
            self.sse = CompiledSseSplitter()
            self.response: Response | None = None
            self.usage: dict[str, Any] | None = None
            self.finish_reason: str | None = None
            self.done_at: float | None = None
            self.eof = False
            self.events_left = max_events(max_tokens)
            self.abandon_chunks = self.abandon_at = NEVER


def frames_in_c(run: PyStream) -> bool:
    """The compiled read loop can take this run's body (``StreamBase.pump``)."""
    return CStream is not None and type(run) is CStream


def frames_chunked(response: Response) -> bool:
    """A 200 whose head is parsed and whose body is chunked and no more: what the compiled loop frames."""
    encoding = response.get("transfer-encoding")
    return (
        response.headers_complete
        and not response.message_complete
        and response.get_code() == 200
        and isinstance(encoding, str)
        and encoding.strip().lower() == "chunked"
        and response.get("content-length") is None
    )


def new_stream(stream: bool, max_tokens: int) -> PyStream:
    """A run of the implementation ``attnload.native`` chose (the C one unless it is absent or turned off)."""
    if CStream is not None and native.active() is not None:
        return CStream(stream, max_tokens)  # type: ignore[no-any-return]
    return PyStream(stream, max_tokens)


def cached_tokens(text: str) -> int:
    """``chunk_tokens(text)``, cached: token texts repeat, so most chunks hit."""
    tokens = _TOKEN_CACHE.get(text)
    if tokens is None:
        tokens = chunk_tokens(text)
        if len(_TOKEN_CACHE) < _TOKEN_CACHE_SIZE:
            _TOKEN_CACHE[text] = tokens
    return tokens


def is_event_stream(response: Response) -> bool:
    return "text/event-stream" in str(header(response, "content-type") or "").lower()


def header(response: HTTPResponse, name: str) -> str | None:
    value = response.get(name)
    if isinstance(value, list):
        return value[0] if value else None
    return value
