"""The compiled read loop (native/readloop.c) against llhttp and the Python loop it replaces.

Once llhttp has parsed a 200's head, a chunked body is framed and read in C (``StreamBase.pump``).
Checked here: the C framing accepts exactly what llhttp accepts and gives the same events for
any cutting of any chunked body (sizes in any case with leading zeros, extensions, trailers,
mutated bytes); whole exchanges over real sockets end the same way on both paths, byte
garbage included; and each way a stream ends in the C loop ([DONE] with the last chunk later or
never, a stall, a close, a bad chunk, an abandon) gives the Python loop's record and leaves the
connection reused only when the message ended.
"""

from __future__ import annotations

import json
from typing import Any

import gevent
import gevent.socket
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnload import native
from attnload.client import chat
from attnload.client import stream as streams
from attnload.client.chat import ApiClient, chat_body
from attnload.client.sse import SseSplitter
from attnload.client.transport import Response, Timeouts
from attnload.measure.recorder import RequestRecord

pytestmark = pytest.mark.skipif(native.extension() is None, reason="attnload.native._fastpath is not built")
compiled_types = pytest.importorskip("attnload.client.compiled", reason="attnload.native._fastpath is not built")

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def delta(content: str) -> str:
    return json.dumps(
        {"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}]}, separators=(",", ":")
    )


BODY = b"".join(
    b"data: " + e.encode() + b"\n\n"
    for e in (
        delta("a "),
        delta("b "),
        delta("c "),
        '{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}',
        '{"choices":[],"usage":{"prompt_tokens":2,"completion_tokens":3}}',
        "[DONE]",
    )
)
EXTENSIONS = [
    b"",
    b";a",
    b";a=b",
    b';q="x y"',
    b";a=b;c",
    b';e="\\""',
    b";",
    b" ",
    b";=b",
    b";a=",
    b";a b",
    b'";a="x',
    b";\x01",
    b";a=\x7f",
]
TRAILERS = [b"", b"X-Done: 1\r\n", b"A: b\r\nC:\r\n", b"bad\r\n", b":x\r\n", b" A: b\r\n", b"A: \x01\r\n"]


@st.composite
def chunked_bodies(draw: st.DrawFn) -> bytes:
    """BODY in random chunks with random size spellings, extensions and trailers, maybe mutated."""
    body, out, at = BODY, [], 0
    while at < len(body):
        size = draw(st.integers(min_value=1, max_value=len(body) - at))
        spelling = draw(st.sampled_from(["%x", "%X", "0%x", "000%x"])) % size
        out.append(spelling.encode() + draw(st.sampled_from(EXTENSIONS)) + b"\r\n" + body[at : at + size] + b"\r\n")
        at += size
    out.append(b"0" + draw(st.sampled_from(EXTENSIONS[:5])) + b"\r\n" + draw(st.sampled_from(TRAILERS)) + b"\r\n")
    raw = b"".join(out)
    if draw(st.booleans()):
        where = draw(st.integers(min_value=0, max_value=len(raw)))
        cut = draw(st.integers(min_value=0, max_value=2))
        raw = raw[:where] + draw(st.binary(max_size=3)) + raw[where + cut :]
    return raw


def _pieces(raw: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(raw)) for c in cuts} | {0, len(raw)})
    return [raw[a:b] for a, b in zip(points, points[1:], strict=False) if b > a]


def _by_llhttp(pieces: list[bytes]) -> tuple[list[Any], bool, str]:
    """(events, ended, how): how is "" (clean), "trailing" (bytes after the end) or "failed"."""
    splitter = SseSplitter()
    response = Response(splitter)
    response.feed(HEAD)
    try:
        for piece in pieces:
            response.feed(piece)
    except streams.BODY_ERRORS:
        return splitter.events, response.ended, "trailing" if response.ended else "failed"
    return splitter.events, response.ended, ""


def _in_c(pieces: list[bytes]) -> tuple[list[Any], bool, str]:
    state = compiled_types.CStream(True, 64)
    try:
        state.start_body(b"")
        for piece in pieces:
            state.feed_body(piece)
    except streams.BODY_ERRORS:
        return state.sse.events, state.body_complete, "failed"
    return state.sse.events, state.body_complete, "trailing" if state.trailing else ""


@settings(max_examples=600, deadline=None)
@given(raw=chunked_bodies(), cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12))
def test_c_framing_accepts_what_llhttp_accepts_with_the_same_events(raw: bytes, cuts: list[int]) -> None:
    pieces = _pieces(raw, cuts)
    events, ended, how = _in_c(pieces)
    expected_events, expected_ended, expected_how = _by_llhttp(pieces)
    assert how == expected_how, raw
    if how != "failed":
        assert (events, ended) == (expected_events, expected_ended)


def test_the_pump_codes_are_the_extensions() -> None:
    extension = native.extension()
    assert [
        getattr(extension, name)
        for name in ("PUMP_DONE", "PUMP_DONE_OPEN", "PUMP_COMPLETE", "PUMP_EOF", "PUMP_TIMEOUT", "PUMP_ABANDON")
    ] == [
        streams.PUMP_DONE,
        streams.PUMP_DONE_OPEN,
        streams.PUMP_COMPLETE,
        streams.PUMP_EOF,
        streams.PUMP_TIMEOUT,
        streams.PUMP_ABANDON,
    ]


# ------------------------------------------------------------------ whole exchanges over real sockets


class Peer:
    """The server end of a socket pair: writes scripted pieces, one per client read (a pause between)."""

    def __init__(self, client: ApiClient, script: list[bytes | float], close: bool) -> None:
        self.sock, client_end = gevent.socket.socketpair()
        client._sock = client_end
        self.writer = gevent.spawn(self._write, script, close)

    def _write(self, script: list[bytes | float], close: bool) -> None:
        self.sock.recv(65536)  # the request (closing with it unread would reset the connection)
        for item in script:
            if isinstance(item, float):
                gevent.sleep(item)
            else:
                self.sock.sendall(item)
                gevent.sleep(0.002)
        if close:
            self.sock.close()

    def stop(self) -> None:
        self.writer.kill()
        self.sock.close()


def exchange(
    script: list[bytes | float],
    compiled: bool,
    close: bool = True,
    max_tokens: int = 3,
    abandon: tuple[int | None, float | None] | None = None,
) -> tuple[RequestRecord, ApiClient, int]:
    """One request against a scripted peer on the chosen path: (record, client, bodies framed in C)."""
    native.use(compiled)
    client = ApiClient("http://127.0.0.1:9/v1/chat/completions", None, Timeouts(connect_s=1, idle_s=0.5, total_s=5))
    framed = []

    def counting(response: Response) -> bool:
        takes = streams.frames_chunked(response)
        framed.append(takes)
        return takes

    chat.frames_chunked = counting  # type: ignore[assignment]
    client._connect = lambda: pytest.fail("the request must not reconnect")  # type: ignore[method-assign]
    peer = Peer(client, script, close)
    body = chat_body("m", [{"role": "user", "content": "hi"}], max_tokens=max_tokens, temperature=0)
    try:
        return client.send(body, model_key="k", profile="p", stage=0, abandon=abandon), client, sum(framed)
    finally:
        chat.frames_chunked = streams.frames_chunked
        native.reset()
        peer.stop()


def _outcome(record: RequestRecord) -> tuple[Any, ...]:
    return (
        record.outcome,
        record.error,
        record.completion_tokens,
        record.prompt_tokens,
        len(record.itl_samples),
        record.ttft_s is not None,
        record.http_status,
    )


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


@settings(max_examples=120, deadline=None)
@given(
    raw=chunked_bodies(),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8),
    head_with_body=st.booleans(),
)
def test_whole_exchanges_end_the_same_on_both_paths(raw: bytes, cuts: list[int], head_with_body: bool) -> None:
    pieces: list[bytes | float] = list(_pieces(raw, cuts))
    script = [HEAD + pieces.pop(0)] + pieces if head_with_body and pieces else [HEAD, *pieces]
    compiled, _, framed = exchange(list(script), compiled=True)
    python, _, _ = exchange(list(script), compiled=False)
    assert framed == 1
    assert _outcome(compiled) == _outcome(python)


def test_a_clean_stream_is_read_in_c_and_keeps_its_connection() -> None:
    script: list[bytes | float] = [
        HEAD,
        *(_chunk(b"data: " + delta(t).encode() + b"\n\n") for t in ("a ", "b ", "c ")),
        _chunk(b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'),
        0.05,
        b"0\r\n\r\n",
    ]
    record, client, framed = exchange(script, compiled=True, close=False)
    assert framed == 1 and (record.outcome, record.completion_tokens, len(record.itl_samples)) == ("ok", 3, 2)
    assert client._sock is not None  # the last chunk came after [DONE] and was read: reusable


def test_a_last_chunk_that_never_comes_costs_the_connection_not_the_answer() -> None:
    script: list[bytes | float] = [HEAD, _chunk(b"data: " + delta("a ").encode() + b"\n\ndata: [DONE]\n\n")]
    record, client, _ = exchange(script, compiled=True, close=False, max_tokens=1)
    assert (record.outcome, record.completion_tokens) == ("ok", 1)
    assert client._sock is None  # the message never ended: not reusable


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize(
    ("script", "error", "detail"),
    [
        ([HEAD, _chunk(b"data: " + delta("a ").encode() + b"\n\n"), 1.0], "timeout", "stream stalled"),
        ([HEAD, _chunk(b"data: " + delta("a ").encode() + b"\n\n")], "truncated", None),
        ([HEAD, _chunk(b"data: " + delta("a ").encode() + b"\n\n"), b"zz\r\n"], "bad_response", None),
    ],
)
def test_each_ending_in_c_matches_the_python_loop(
    compiled: bool, script: list[bytes | float], error: str, detail: str | None
) -> None:
    record, client, _ = exchange(list(script), compiled=compiled, close=error != "timeout")
    assert (record.outcome, record.error) == ("failed", error)
    if detail:
        assert detail in str(client.last_failure)
    assert client._sock is None


@pytest.mark.parametrize("compiled", [True, False])
def test_abandon_after_chunks_stops_in_c_as_in_python(compiled: bool) -> None:
    script: list[bytes | float] = [HEAD, *(_chunk(b"data: " + delta(f"t{i} ").encode() + b"\n\n") for i in range(6))]
    record, client, _ = exchange(script, compiled=compiled, close=False, max_tokens=6, abandon=(2, None))
    assert (record.outcome, record.completion_tokens) == ("abandoned", 2)
    assert client._sock is None


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("after", [b"HTTP/1.1 200", b"GARBAGE", b"\r\n\x00"])
def test_bytes_after_the_end_keep_the_answer_and_drop_the_connection(compiled: bool, after: bytes) -> None:
    answer = _chunk(b"data: " + delta("a ").encode() + b"\n\ndata: [DONE]\n\n") + b"0\r\n\r\n"
    record, client, _ = exchange([HEAD, answer + after], compiled=compiled, close=False, max_tokens=1)
    assert (record.outcome, record.completion_tokens) == ("ok", 1)
    assert client._sock is None
