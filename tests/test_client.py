"""The streaming client against canned raw HTTP responses: timing fields, tokens, error classes."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnload.client.chat import ApiClient, chat_body, new_stream
from attnload.client.classify import classify_status
from attnload.client.transport import Timeouts
from attnload.errors import ErrorClass, RequestFailed

pytestmark = pytest.mark.usefixtures("client_impl")  # every test on both per-chunk paths


def sse(*events: str) -> bytes:
    return b"".join(f"data: {e}\n\n".encode() for e in events)


def chunk(content: str | None = None, finish: str | None = None, role: bool = False) -> str:
    delta: dict[str, str] = {"role": "assistant", "content": ""} if role else {}
    if content is not None:
        delta["content"] = content
    return json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


USAGE = json.dumps(
    {
        "choices": [],
        "usage": {"prompt_tokens": 7, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 4}},
    }
)


def http(
    status: int, body: bytes, content_type: str = "text/event-stream", chunked: bool = True, extra: str = ""
) -> list[bytes]:
    head = f"HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\n{extra}"
    if not chunked:
        return [f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body]
    return [
        f"{head}Transfer-Encoding: chunked\r\n\r\n".encode(),
        f"{len(body):x}\r\n".encode() + body + b"\r\n",
        b"0\r\n\r\n",
    ]


class CannedServer:
    """Answers each connection's request with the next scripted list of writes."""

    def __init__(self, scripts: list[list[bytes]], close_after: bool = False) -> None:
        self.scripts = scripts
        self.close_after = close_after
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.requests: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while self.scripts:
            conn, _ = self.sock.accept()
            with conn:
                while self.scripts:
                    data = conn.recv(65536)
                    if not data:
                        break
                    self.requests.append(data)
                    for part in self.scripts.pop(0):
                        if part == b"RESET":
                            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                            break
                        conn.sendall(part)
                    if self.close_after:
                        break
                try:
                    while not self.close_after and conn.recv(65536):
                        pass  # hold the connection open (a stall) until the client closes it
                except OSError:
                    pass


@pytest.fixture
def serve() -> Iterator[object]:
    servers: list[CannedServer] = []

    def make(*scripts: list[bytes], close_after: bool = False) -> ApiClient:
        server = CannedServer(list(scripts), close_after)
        servers.append(server)
        return ApiClient(
            f"http://127.0.0.1:{server.port}/v1/chat/completions",
            "sk-test-secret-123",
            Timeouts(connect_s=2, idle_s=1.0, total_s=3.0),
        )

    yield make
    for server in servers:
        server.sock.close()


def send(client: ApiClient, max_tokens: int = 3, stream: bool = True):  # type: ignore[no-untyped-def]
    body = chat_body("m", [{"role": "user", "content": "hi"}], max_tokens=max_tokens, temperature=0, stream=stream)
    return client.send(body, model_key="k", profile="p", stage=0)


def test_ok_stream_uses_server_usage(serve) -> None:  # type: ignore[no-untyped-def]
    body = sse(chunk(role=True), chunk("a "), chunk("b "), chunk("c "), chunk(finish="length"), USAGE, "[DONE]")
    record = send(serve(http(200, body)))
    assert (record.outcome, record.error) == ("ok", None)
    assert (record.prompt_tokens, record.completion_tokens, record.cached_prompt_tokens) == (7, 3, 4)
    assert not record.tokens_estimated and record.ttft_s is not None and len(record.itl_samples) == 2


def test_keep_alive_connection_is_reused(serve) -> None:  # type: ignore[no-untyped-def]
    body = sse(chunk("a "), chunk(finish="stop"), "[DONE]")
    client = serve(http(200, body), http(200, body))
    assert send(client).outcome == "ok" and send(client).outcome == "ok"


def test_estimates_tokens_without_usage(serve) -> None:  # type: ignore[no-untyped-def]
    record = send(serve(http(200, sse(chunk("one two "), chunk("three "), chunk(finish="stop"), "[DONE]"))))
    assert record.outcome == "ok" and record.tokens_estimated and record.completion_tokens == 3


@pytest.mark.parametrize(
    ("script", "kind"),
    [
        (
            http(
                401,
                b'{"error": {"message": "Invalid API key sk-test-secret-123", "code": "invalid_api_key"}}',
                "application/json",
                chunked=False,
            ),
            ErrorClass.AUTH,
        ),
        (
            http(404, b'{"error": {"message": "model not found", "code": "model_not_found"}}', "application/json"),
            ErrorClass.NOT_FOUND,
        ),
        (http(404, b"<html><title>404 Not Found</title></html>", "text/html", chunked=False), ErrorClass.NOT_FOUND),
        (
            http(429, b'{"error": {"message": "slow down"}}', "application/json", extra="Retry-After: 2\r\n"),
            ErrorClass.RATE_LIMITED,
        ),
        (http(402, b'{"error": {"message": "pay up"}}', "application/json"), ErrorClass.QUOTA),
        (
            http(429, b'{"error": {"type": "insufficient_quota", "message": "quota"}}', "application/json"),
            ErrorClass.QUOTA,
        ),
        (
            http(400, b'{"error": {"code": "context_length_exceeded", "message": "too long"}}', "application/json"),
            ErrorClass.CONTEXT_LENGTH,
        ),
        (http(400, b'{"error": {"message": "bad temperature"}}', "application/json"), ErrorClass.BAD_REQUEST),
        (
            http(503, b"<html><head><title>503 Service Unavailable</title></head></html>", "text/html"),
            ErrorClass.SERVER,
        ),
        (http(200, b"<html>gateway login</html>", "text/html", chunked=False), ErrorClass.BAD_RESPONSE),
        (http(200, sse('{"id": 1}')), ErrorClass.BAD_RESPONSE),
        (http(200, sse("{not json")), ErrorClass.BAD_RESPONSE),
        (http(200, sse(chunk("a "), '{"error": {"message": "overloaded", "code": 500}}')), ErrorClass.SERVER),
        (http(200, b'event: error\ndata: {"message": "boom"}\n\n'), ErrorClass.SERVER),
        (http(200, sse(chunk("a "), chunk("b "))), ErrorClass.TRUNCATED),
        (http(200, sse(chunk("a "), chunk(finish="length"), "[DONE]")), ErrorClass.TRUNCATED),
        (
            [b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n", b"RESET"],
            ErrorClass.CONNECTION,
        ),
        ([b"garbage\r\n\r\n"], ErrorClass.BAD_RESPONSE),
    ],
)
def test_failures_map_to_design_classes(serve, script: list[bytes], kind: ErrorClass) -> None:  # type: ignore[no-untyped-def]
    record = send(serve(script, close_after=True), max_tokens=5)
    assert (record.outcome, record.error) == ("failed", kind.label)


def test_stall_is_a_timeout(serve) -> None:  # type: ignore[no-untyped-def]
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    body = sse(chunk("a "))
    record = send(serve([head, f"{len(body):x}\r\n".encode() + body + b"\r\n"]))
    assert record.error == "timeout" and record.ttft_s is not None


def test_refused_connection_is_connection_class() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = ApiClient(f"http://127.0.0.1:{port}/v1/chat/completions", None, Timeouts(connect_s=1))
    assert send(client).error == "connection"


def test_dead_proxy_is_proxy_class(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{port}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    client = ApiClient("https://api.example.invalid/v1/chat/completions", None, Timeouts(connect_s=1))
    assert send(client).error == "proxy"


def test_error_detail_never_contains_the_key() -> None:
    failure = classify_status(401, b'{"error": {"message": "bad key sk-test-secret-123456"}}')
    assert failure.kind is ErrorClass.AUTH and "sk-test-secret" not in str(failure)


def test_sse_splitter_handles_crlf_and_split_events() -> None:
    splitter = new_stream(True, 16).sse  # the splitter of the implementation in use
    for piece in (b'data: {"a"', b": 1}\r\n\r\ndata: [DO", b"NE]\r\n\r\n"):
        splitter.feed(piece)
    assert splitter.events == [(b"message", b'{"a": 1}'), (b"message", b"[DONE]")]


@settings(max_examples=200, deadline=None)
@given(
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12),
    garbage=st.binary(max_size=40),
    position=st.integers(min_value=0, max_value=400),
)
def test_sse_fuzz_only_classified_errors(cuts: list[int], garbage: bytes, position: int) -> None:
    """Split, merged or garbled streams yield events or a classified failure, nothing else."""
    stream = sse(chunk(role=True), chunk("a b "), chunk("c "), chunk(finish="length"), USAGE, "[DONE]")
    position = min(position, len(stream))
    stream = stream[:position] + garbage + stream[position:]
    state = new_stream(streaming=True, max_tokens=3)
    points = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    try:
        for start, end in zip(points, points[1:], strict=False):
            state.sse.feed(stream[start:end])
            state.consume(at=float(end), origin=0.0)
    except RequestFailed as failure:
        assert isinstance(failure.kind, ErrorClass)


# ---------------------------------------------------------------------------- the hostile server, mode by mode

from hostile_server import EXPECTED, MODES, HostileServer, Timing  # noqa: E402


@pytest.fixture(scope="module")
def hostile() -> Iterator[HostileServer]:
    server = HostileServer(Timing(delay_s=0.0, slow_s=1.5, stall_s=5.0))
    yield server
    server.stop()


def hostile_send(server: HostileServer, mode: str, client: ApiClient | None = None):  # type: ignore[no-untyped-def]
    client = client or ApiClient(
        server.url + "/api/v1/chat/completions",
        "sk-hostile-key-0123456789",
        Timeouts(connect_s=2, ttft_s=0.5, idle_s=0.5, total_s=3.0),
    )
    body = chat_body(mode, [{"role": "user", "content": "hi"}], max_tokens=8, temperature=0)
    return client, client.send(body, model_key="k", profile="p", stage=0)


@pytest.mark.parametrize("mode", MODES)
def test_each_hostile_mode_maps_to_its_class(hostile: HostileServer, mode: str) -> None:
    before = hostile.hostile.counts[mode]
    client, record = hostile_send(hostile, mode)
    client.close()
    assert (record.error or "ok") == EXPECTED[mode], client.last_failure
    assert record.outcome == ("ok" if mode == "ok" else "failed")
    assert hostile.hostile.counts[mode] == before + 1  # one request on the wire, no retries
    if client.last_failure is not None:
        assert "sk-hostile-key" not in str(client.last_failure)


def test_keep_alive_survives_every_mode_in_turn(hostile: HostileServer) -> None:
    """One client (one user) walking through all modes: each failure closes, the next request reconnects."""
    client = None
    for mode in (*MODES, "ok"):
        client, record = hostile_send(hostile, mode, client)
        assert (record.error or "ok") == EXPECTED[mode]
    assert client is not None
    client.close()


def test_retry_after_backoff_delays_the_next_request(hostile: HostileServer) -> None:
    client = ApiClient(
        hostile.url + "/v1/chat/completions", None, Timeouts(connect_s=2, total_s=3.0), retry_after_max_s=0.3
    )
    _, record = hostile_send(hostile, "rate_limited", client)
    assert record.error == "rate_limited" and client.last_failure and client.last_failure.retry_after_s == 1.0
    started = time.perf_counter()
    _, record = hostile_send(hostile, "ok", client)
    waited = time.perf_counter() - started
    assert record.outcome == "ok" and 0.25 <= waited and record.e2e_s < waited - 0.2  # capped, not in latency


def test_stale_keep_alive_connection_is_resent_once(serve) -> None:  # type: ignore[no-untyped-def]
    """A server that closes an idle keep-alive connection without saying so is not a failure."""
    body = sse(chunk("a "), chunk(finish="stop"), "[DONE]")
    client = serve(http(200, body), http(200, body), close_after=True)
    assert send(client).outcome == "ok"
    record = send(client)
    assert (record.outcome, record.error) == ("ok", None)


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (400, b'{"detail": "Request is too long for the model context window"}', ErrorClass.CONTEXT_LENGTH),
        (400, b'{"error": "model not found: llama-9"}', ErrorClass.NOT_FOUND),
        (400, b'{"message": "Insufficient balance", "code": 1008}', ErrorClass.QUOTA),
        (500, b'{"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}}', ErrorClass.RATE_LIMITED),
        (403, b'{"errors": [{"message": "forbidden"}]}', ErrorClass.AUTH),
        (502, b"<!DOCTYPE html><html><title>502 Bad Gateway</title></html>", ErrorClass.SERVER),
        (504, b"upstream timed out", ErrorClass.TIMEOUT),
        (301, b"", ErrorClass.BAD_RESPONSE),
        (422, b'[{"error": {"message": "bad field"}}]', ErrorClass.BAD_REQUEST),
    ],
)
def test_gateway_error_shapes(status: int, body: bytes, kind: ErrorClass) -> None:
    assert classify_status(status, body).kind is kind


def test_retry_after_http_date_is_parsed() -> None:
    from email.utils import formatdate

    failure = classify_status(429, b"{}", formatdate(time.time() + 30, usegmt=True))
    assert failure.kind is ErrorClass.RATE_LIMITED and failure.retry_after_s is not None
    assert 25 <= failure.retry_after_s <= 31


class _FakeSocket:
    """Plays scripted ``recv`` results (bytes or an exception) to the whole ``_exchange`` path."""

    def __init__(self, reads: list[bytes | BaseException]) -> None:
        self.reads = reads

    def sendall(self, data: bytes) -> None:
        pass

    def settimeout(self, value: float) -> None:
        pass

    def recv(self, size: int) -> bytes:
        if not self.reads:
            return b""
        item = self.reads.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        pass


_GOOD = b"".join(http(200, sse(chunk(role=True), chunk("a b "), chunk("c "), chunk(finish="stop"), USAGE, "[DONE]")))


@settings(max_examples=300, deadline=None)
@given(
    cuts=st.lists(st.integers(min_value=0, max_value=len(_GOOD)), max_size=10),
    garbage=st.binary(max_size=30),
    position=st.integers(min_value=0, max_value=len(_GOOD)),
    drop=st.integers(min_value=0, max_value=len(_GOOD)),
    ending=st.sampled_from([None, ConnectionResetError("reset"), TimeoutError("slow"), OSError("x")]),
    stream=st.booleans(),
)
def test_exchange_fuzz_only_classified_failures(
    cuts: list[int], garbage: bytes, position: int, drop: int, ending: BaseException | None, stream: bool
) -> None:
    """Garbled, truncated or split HTTP + SSE through the whole ``send`` path: a record, never an exception."""
    raw = _GOOD[:position] + garbage + _GOOD[position:]
    raw = raw[: max(drop, 1)] if drop < len(_GOOD) // 2 else raw
    points = sorted({min(c, len(raw)) for c in cuts} | {0, len(raw)})
    reads: list[bytes | BaseException] = [raw[a:b] for a, b in zip(points, points[1:], strict=False) if b > a]
    if ending is not None:
        reads.append(ending)
    client = ApiClient("http://127.0.0.1:9/v1/chat/completions", None, Timeouts(connect_s=1, total_s=5))
    client._sock = _FakeSocket(reads)
    client._connect = lambda: _FakeSocket([])  # type: ignore[method-assign]
    body = chat_body("m", [{"role": "user", "content": "hi"}], max_tokens=3, temperature=0, stream=stream)
    record = client.send(body, model_key="k", profile="p", stage=0)
    assert record.outcome in ("ok", "failed")
    if record.outcome == "failed":
        assert record.error in {c.label for c in ErrorClass}
