"""Read budgets: a server whose answer never ends costs bounded memory and time.

Unit level: the SSE splitter, the header cap and the events cap against scripted bytes;
then the real client against :mod:`runaway_server` in-process, mode by mode, and the
control-character helper every printed server text goes through.
"""

from __future__ import annotations

import json
import time
import tracemalloc
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnload import native
from attnload.client.budget import MAX_BODY_BYTES, MAX_EVENT_BYTES, MAX_HEADER_BYTES, max_events
from attnload.client.chat import ApiClient, chat_body, new_stream
from attnload.client.classify import classify_status, printable
from attnload.client.sse import EventSplitter, SseSplitter
from attnload.client.transport import Response, Timeouts
from attnload.errors import ErrorClass, RequestFailed
from runaway_server import EXPECTED, MODES, RunawayServer

try:
    from attnload.client.compiled import CompiledSseSplitter
except ImportError:  # the extension was not built
    CompiledSseSplitter = None

pytestmark = pytest.mark.usefixtures("client_impl")  # every test on both per-chunk paths
SPLITTERS = tuple(c for c in (SseSplitter, CompiledSseSplitter, Response) if c is not None)


def new_splitter(**budgets: int) -> EventSplitter:
    """A splitter of the implementation the ``client_impl`` fixture chose."""
    if native.active() is not None and CompiledSseSplitter is not None:
        return CompiledSseSplitter(**budgets)
    return SseSplitter(**budgets)


EVENT = b'data: {"choices":[{"index":0,"delta":{"content":"x "},"finish_reason":null}]}\n\n'


def test_endless_line_stays_bounded_and_is_bad_response() -> None:
    """64 KiB reads of one line: the splitter keeps pieces (no re-copying) and stops at the cap."""
    splitter = new_splitter()
    piece = b"x" * 65536
    splitter.feed(b"data: ")
    tracemalloc.start()
    fed = 0
    with pytest.raises(RequestFailed) as caught:
        for _ in range(10 * MAX_EVENT_BYTES // len(piece)):
            fed += len(piece)
            splitter.feed(piece)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert caught.value.kind is ErrorClass.BAD_RESPONSE
    assert MAX_EVENT_BYTES <= fed <= MAX_EVENT_BYTES + len(piece)  # failed at the cap, not later
    assert peak < 3 * MAX_EVENT_BYTES
    assert splitter.pending == b""  # the runaway's bytes were let go


def test_endless_line_in_tiny_reads_is_linear_not_quadratic() -> None:
    """One byte per read (a trickling server): time grows with bytes, not bytes squared."""

    def feed_bytes(n: int) -> float:
        splitter = new_splitter(max_event_bytes=10 * n)
        splitter.feed(b"data: ")
        started = time.process_time()  # CPU time: waiting for a core on a loaded machine is not the splitter's
        for _ in range(n):
            splitter.feed(b"x")
        return time.process_time() - started

    # best of three: the compiled splitter takes ~2 ms for the small case, where one preemption is noise
    small, large = min(feed_bytes(20_000) for _ in range(3)), min(feed_bytes(160_000) for _ in range(3))
    assert large < 8 * small * 3  # 8x the bytes: linear is ~8x; quadratic would be ~64x


def test_events_split_across_many_reads_still_parse() -> None:
    splitter = new_splitter()
    stream = (EVENT * 3).replace(b"\n", b"\r\n")
    for i in range(len(stream)):
        splitter.feed(stream[i : i + 1])  # a CRLF straddles every read boundary in turn
    assert len(splitter.events) == 3 and all(data.startswith(b'{"choices"') for _, data in splitter.events)
    assert splitter.dropped == 0 and splitter.pending == b""


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(
        st.sampled_from(
            [b'data: {"a": 1}', b"data: [DONE]", b"event: error", b": ping", b"", b"data: x" * 30, b"id: 7"]
        ),
        max_size=30,
    ),
    crlf=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=40),
)
def test_any_cutting_of_a_stream_gives_the_events_of_the_whole(lines: list[bytes], crlf: bool, cuts: list[int]) -> None:
    """Pieces kept apart, joined once, CRLFs straddling reads: same events as one read of it all."""
    stream = (b"\r\n" if crlf else b"\n").join(lines) + (b"\r\n\r\n" if crlf else b"\n\n")
    whole = new_splitter()
    whole.feed(stream)
    pieces = new_splitter()
    points = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    for start, end in zip(points, points[1:], strict=False):
        pieces.feed(stream[start:end])
    assert pieces.events == whole.events and pieces.pending == whole.pending


def test_dataless_blocks_are_capped() -> None:
    splitter = new_splitter(max_dataless=10)
    with pytest.raises(RequestFailed) as caught:
        splitter.feed(b"<p>html</p>\n\n" * 11)
    assert caught.value.kind is ErrorClass.BAD_RESPONSE


def test_events_beyond_what_max_tokens_allows_are_truncated() -> None:
    state = new_stream(streaming=True, max_tokens=8)
    allowed = max_events(8)
    state.sse.feed(EVENT * allowed)
    state.consume(at=1.0, origin=0.0)  # exactly the budget: still fine
    state.sse.feed(EVENT)
    with pytest.raises(RequestFailed) as caught:
        state.consume(at=2.0, origin=0.0)
    assert caught.value.kind is ErrorClass.TRUNCATED and "max_tokens 8" in caught.value.detail
    assert len(state.chunk_tokens) == allowed


def test_error_body_is_capped_and_classified_by_its_status() -> None:
    response = Response(None)
    response.feed(b"HTTP/1.1 503 Busy\r\nContent-Type: text/html\r\nConnection: close\r\n\r\n<title>busy</title>")
    with pytest.raises(RequestFailed) as caught:
        for _ in range(MAX_BODY_BYTES // 65536 + 2):
            response.feed(b"y" * 65536)
    assert caught.value.kind is ErrorClass.SERVER and len(response.body) <= 64 * 1024 + 65536


def test_unary_200_body_is_capped() -> None:
    response = Response(None)
    response.feed(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{")
    with pytest.raises(RequestFailed) as caught:
        for _ in range(MAX_BODY_BYTES // 65536 + 2):
            response.feed(b" " * 65536)
    assert caught.value.kind is ErrorClass.BAD_RESPONSE


def test_printable_strips_escapes_and_controls() -> None:
    text = "a\x1b[31mred\x1b[0m\x07 \x1b]0;owned\x07b\r\nc\u202ed\x9b"
    assert printable(text) == "ared  b  c d "
    assert printable("plain text, ünïcode 中文") == "plain text, ünïcode 中文"
    failure = classify_status(500, json.dumps({"error": {"message": "\x1b[2Jwiped \x1b[1mscreen"}}).encode())
    assert failure.detail == "HTTP 500: wiped screen" and "\x1b" not in str(failure)


# ---------------------------------------------------------------------------- the real client, mode by mode


@pytest.fixture(scope="module")
def runaway() -> Iterator[RunawayServer]:
    server = RunawayServer(limit_s=20.0)
    yield server
    server.stop()


@pytest.mark.parametrize("mode", MODES)
def test_each_runaway_mode_fails_fast_and_classified(runaway: RunawayServer, mode: str) -> None:
    client = ApiClient(
        runaway.url + "/v1/chat/completions", None, Timeouts(connect_s=2, ttft_s=5.0, idle_s=5.0, total_s=10.0)
    )
    tracemalloc.start()
    started = time.perf_counter()
    record = client.send(
        chat_body(mode, [{"role": "user", "content": "hi"}], max_tokens=8, temperature=0),
        model_key="k",
        profile="p",
        stage=0,
    )
    elapsed = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    client.close()
    assert (record.outcome, record.error) == ("failed", EXPECTED[mode]), client.last_failure
    assert elapsed < 5.0  # a budget ended it, long before the total timeout
    assert peak < 4 * MAX_EVENT_BYTES
    assert client.last_failure is not None and "\x1b" not in client.last_failure.detail


def test_runaway_total_timeout_is_a_wall_clock(runaway: RunawayServer) -> None:
    """A total timeout shorter than any budget: the endless stream ends at it, as `timeout`."""
    client = ApiClient(runaway.url + "/v1/chat/completions", None, Timeouts(connect_s=2, idle_s=5.0, total_s=0.3))
    body = chat_body("endless_events", [{"role": "user", "content": "hi"}], max_tokens=10**9, temperature=0)
    started = time.perf_counter()
    record = client.send(body, model_key="k", profile="p", stage=0)
    client.close()
    assert record.error == "timeout" and time.perf_counter() - started < 2.0


def test_header_budget_names_the_limit(runaway: RunawayServer) -> None:
    client = ApiClient(runaway.url + "/v1/chat/completions", None, Timeouts(connect_s=2, total_s=5.0))
    client.send(chat_body("endless_header", [], max_tokens=8, temperature=0), model_key="k", profile="p", stage=0)
    client.close()
    assert client.last_failure is not None and str(MAX_HEADER_BYTES) in client.last_failure.detail


# ---------------------------------------------------------------------------- attnload check's SDK probe


def test_within_returns_at_the_deadline_when_the_probe_hangs() -> None:
    from attnload.commands.check_budget import within

    started = time.perf_counter()
    result = within(started + 0.2, 0.2, lambda: time.sleep(30) or "late", lambda failure: failure.kind)
    assert result is ErrorClass.TIMEOUT and time.perf_counter() - started < 0.2 + 1.0


def test_bounded_body_caps_bytes_and_time() -> None:
    from attnload.commands.check_budget import BoundedBody

    class Endless:
        def __iter__(self) -> Iterator[bytes]:
            while True:
                yield b"x" * 1000

        def close(self) -> None:
            pass

    with pytest.raises(RequestFailed) as caught:
        for _ in BoundedBody(Endless(), time.perf_counter() + 60, 10_000, 60):
            pass
    assert caught.value.kind is ErrorClass.BAD_RESPONSE
    with pytest.raises(RequestFailed) as caught:
        for _ in BoundedBody(Endless(), time.perf_counter() - 1, 10**9, 5):
            pass
    assert caught.value.kind is ErrorClass.TIMEOUT


def test_check_output_has_no_escape_sequences(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """A server whose error text carries terminal escapes: `check` prints the words, not the escapes."""
    import socket
    import threading

    from attnload.commands.cli import main

    message = "\x1b]0;pwned\x07\x1b[2J\x1b[31mmodel overloaded\x1b[0m"
    body = json.dumps({"error": {"message": message, "type": "server_error"}}).encode()
    answer = b"HTTP/1.1 500 Oops\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "base_url": f"http://127.0.0.1:{listener.getsockname()[1]}",
                "models": {"m": {"id": "m", "attention_type": "MLA"}},
                "request": {"total_timeout_s": 5.0},
            }
        ),
        encoding="utf-8",
    )
    try:
        code = main(["check", "-c", str(config)])
    finally:
        listener.close()
    output = capsys.readouterr().out
    assert code == 1 and "model overloaded" in output and "verdict: FAILED server" in output, output
    assert not any(ch in output for ch in "\x1b\x07"), repr(output)


def test_a_failed_request_frees_its_buffers_without_the_cycle_collector(runaway: RunawayServer) -> None:
    """Load processes run a full GC only every 10 minutes (runner/gcpolicy.py): a failed request's
    response must be freed by reference counting, or a fast-failing runaway server grows the worker
    by hundreds of MB a minute."""
    import gc

    client = ApiClient(runaway.url + "/v1/chat/completions", None, Timeouts(connect_s=2, total_s=5.0))
    body = chat_body("endless_line", [{"role": "user", "content": "hi"}], max_tokens=8, temperature=0)
    gc.collect()
    gc.disable()
    try:
        before = sum(isinstance(o, SPLITTERS) for o in gc.get_objects())  # other tests' leftovers
        for _ in range(3):
            assert client.send(body, model_key="k", profile="p", stage=0).error == "bad_response"
        client.close()
        after = sum(isinstance(o, SPLITTERS) for o in gc.get_objects())
    finally:
        gc.enable()
    assert after <= before
