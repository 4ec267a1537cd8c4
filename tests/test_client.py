"""The streaming client against canned raw HTTP responses: timing fields, tokens, error classes."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnload.client import ChatClient, SseSplitter, Timeouts, chat_body, classify_status
from attnload.errors import ErrorClass, RequestFailed


def sse(*events: str) -> bytes:
    return b"".join(f"data: {e}\n\n".encode() for e in events)


def chunk(content: str | None = None, finish: str | None = None, role: bool = False) -> str:
    delta: dict[str, str] = {"role": "assistant", "content": ""} if role else {}
    if content is not None:
        delta["content"] = content
    return json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


USAGE = json.dumps({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3,
                                             "prompt_tokens_details": {"cached_tokens": 4}}})


def http(status: int, body: bytes, content_type: str = "text/event-stream", chunked: bool = True,
         extra: str = "") -> list[bytes]:
    head = f"HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\n{extra}"
    if not chunked:
        return [f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body]
    return [f"{head}Transfer-Encoding: chunked\r\n\r\n".encode(), f"{len(body):x}\r\n".encode() + body + b"\r\n",
            b"0\r\n\r\n"]


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

    def make(*scripts: list[bytes], close_after: bool = False) -> ChatClient:
        server = CannedServer(list(scripts), close_after)
        servers.append(server)
        return ChatClient(f"http://127.0.0.1:{server.port}/v1/chat/completions", "sk-test-secret-123",
                          Timeouts(connect_s=2, idle_s=1.0, total_s=3.0))

    yield make
    for server in servers:
        server.sock.close()


def send(client: ChatClient, max_tokens: int = 3, stream: bool = True):  # type: ignore[no-untyped-def]
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


@pytest.mark.parametrize(("script", "kind"), [
    (http(401, b'{"error": {"message": "Invalid API key sk-test-secret-123", "code": "invalid_api_key"}}',
          "application/json", chunked=False), ErrorClass.AUTH),
    (http(404, b'{"error": {"message": "model not found", "code": "model_not_found"}}', "application/json"),
     ErrorClass.NOT_FOUND),
    (http(404, b"<html><title>404 Not Found</title></html>", "text/html", chunked=False), ErrorClass.NOT_FOUND),
    (http(429, b'{"error": {"message": "slow down"}}', "application/json", extra="Retry-After: 2\r\n"),
     ErrorClass.RATE_LIMITED),
    (http(402, b'{"error": {"message": "pay up"}}', "application/json"), ErrorClass.QUOTA),
    (http(429, b'{"error": {"type": "insufficient_quota", "message": "quota"}}', "application/json"),
     ErrorClass.QUOTA),
    (http(400, b'{"error": {"code": "context_length_exceeded", "message": "too long"}}', "application/json"),
     ErrorClass.CONTEXT_LENGTH),
    (http(400, b'{"error": {"message": "bad temperature"}}', "application/json"), ErrorClass.BAD_REQUEST),
    (http(503, b"<html><head><title>503 Service Unavailable</title></head></html>", "text/html"),
     ErrorClass.SERVER),
    (http(200, b"<html>gateway login</html>", "text/html", chunked=False), ErrorClass.BAD_RESPONSE),
    (http(200, sse('{"id": 1}')), ErrorClass.BAD_RESPONSE),
    (http(200, sse("{not json")), ErrorClass.BAD_RESPONSE),
    (http(200, sse(chunk("a "), '{"error": {"message": "overloaded", "code": 500}}')), ErrorClass.SERVER),
    (http(200, b"event: error\ndata: {\"message\": \"boom\"}\n\n"), ErrorClass.SERVER),
    (http(200, sse(chunk("a "), chunk("b "))), ErrorClass.TRUNCATED),
    (http(200, sse(chunk("a "), chunk(finish="length"), "[DONE]")), ErrorClass.TRUNCATED),
    ([b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n", b"RESET"],
     ErrorClass.CONNECTION),
    ([b"garbage\r\n\r\n"], ErrorClass.BAD_RESPONSE),
])
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
    client = ChatClient(f"http://127.0.0.1:{port}/v1/chat/completions", None, Timeouts(connect_s=1))
    assert send(client).error == "connection"


def test_dead_proxy_is_proxy_class(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{port}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    client = ChatClient("https://api.example.invalid/v1/chat/completions", None, Timeouts(connect_s=1))
    assert send(client).error == "proxy"


def test_error_detail_never_contains_the_key() -> None:
    failure = classify_status(401, b'{"error": {"message": "bad key sk-test-secret-123456"}}')
    assert failure.kind is ErrorClass.AUTH and "sk-test-secret" not in str(failure)


def test_sse_splitter_handles_crlf_and_split_events() -> None:
    splitter = SseSplitter()
    for piece in (b"data: {\"a\"", b": 1}\r\n\r\ndata: [DO", b"NE]\r\n\r\n"):
        splitter.feed(piece)
    assert splitter.events == [(b"message", b'{"a": 1}'), (b"message", b"[DONE]")]


@settings(max_examples=200, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12),
       garbage=st.binary(max_size=40), position=st.integers(min_value=0, max_value=400))
def test_sse_fuzz_only_classified_errors(cuts: list[int], garbage: bytes, position: int) -> None:
    """Split, merged or garbled streams yield events or a classified failure, nothing else."""
    from attnload.client import _Run

    stream = sse(chunk(role=True), chunk("a b "), chunk("c "), chunk(finish="length"), USAGE, "[DONE]")
    position = min(position, len(stream))
    stream = stream[:position] + garbage + stream[position:]
    run = _Run(stream=True, max_tokens=3)
    points = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    try:
        for start, end in zip(points, points[1:], strict=False):
            run.sse.feed(stream[start:end])
            run.consume(at=float(end), origin=0.0)
    except RequestFailed as failure:
        assert isinstance(failure.kind, ErrorClass)
