"""The compiled per-chunk path (native/sse.c, stream.c, histogram.c) against the pure-Python reference.

Equivalence, property-based: random streams (plain deltas with ASCII, Unicode, spaces, empty
or escaped content, role/finish/usage chunks, [DONE], comments, error events, CRLF) cut into
random reads give the same events, pending bytes, gaps, chunk tokens, texts, usage, finish and
failures on both paths; the histogram and the gap pairs give identical numbers. Then the switch:
``ATTNLOAD_PURE_PYTHON=1``, one log line when the extension is missing, and an install built
without a C compiler (``CC=false``) that still states on the fallback.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnload import native
from attnload.client import sse
from attnload.client import stream as streams
from attnload.errors import RequestFailed
from attnload.measure.histogram import LogHistogram
from attnload.measure.recorder import split_gaps
from helpers import ROOT

pytestmark = pytest.mark.skipif(native.extension() is None, reason="attnload.native._fastpath is not built")
compiled_types = pytest.importorskip("attnload.client.compiled", reason="attnload.native._fastpath is not built")

HEAD = '{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{'
CONTENTS = [
    "the ",
    " quick",
    "",
    "a b  c",
    "é",
    "中文 ",
    "\u3000x",
    "x\u00a0y",
    "tab\\tbed",
    'q\\"uote',
    "\\u00e9",
    "    ",
    "word",
]


def _delta(content: str, role: bool = False, finish: str | None = None) -> bytes:
    role_part = '"role":"assistant",' if role else ""
    finish_part = json.dumps(finish)
    return (HEAD + role_part + f'"content":"{content}"' + '},"finish_reason":' + finish_part + "}]}").encode()


EVENTS = st.one_of(
    st.sampled_from(CONTENTS).map(lambda c: b"data: " + _delta(c) + b"\n\n"),
    st.sampled_from(CONTENTS).map(lambda c: b"data: " + _delta(c, role=True) + b"\n\n"),
    st.just(b"data: " + _delta("", finish="stop") + b"\n\n"),
    st.just(b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":9}}\n\n'),
    st.just(b'data: {"choices":[{"index":0,"delta":{"reasoning_content":"think "},"finish_reason":null}]}\n\n'),
    st.just(b"data: [DONE]\n\n"),
    st.just(b": ping\n\n"),
    st.just(b"event: error\ndata: overloaded\n\n"),
    st.just(b'data: {"a":\ndata: 1}\n\n'),
    st.just(b"data: " + _delta("x")[:-3] + b"\xff\xfe" + b'"}]}\n\n'),  # invalid UTF-8 in content
    st.just(b"data:" + _delta("nospace") + b"\n\n"),
    st.just(b"id: 4\nevent: message\ndata: " + _delta("named ") + b"\n\n"),
)


def _run_stream(compiled: bool, stream: bytes, cuts: list[int], capture: bool, max_tokens: int) -> tuple[object, ...]:
    native.use(compiled)
    try:
        state = streams.new_stream(True, max_tokens)
        assert type(state) is (streams.COMPILED_STREAM if compiled else streams.PyStream)
        if capture:
            state.texts = []
        failure = None
        points = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
        try:
            for start, end in zip(points, points[1:], strict=False):
                state.sse.feed(stream[start:end])
                if state.sse.events:
                    state.consume(float(end), 0.0)
        except RequestFailed as exc:
            failure = (exc.kind, exc.detail)
        return (
            failure,
            state.first_at,
            state.last_at if state.first_at is not None else None,
            list(state.gaps),
            list(state.chunk_tokens),
            state.texts,
            state.done,
            state.usage,
            state.finish_reason,
            state.sse.pending,
            state.sse.dropped,
            state.events_left,
            state.plain_head,
            state.plain_tail,
        )
    finally:
        native.reset()


@settings(max_examples=400, deadline=None)
@given(
    events=st.lists(EVENTS, max_size=25),
    crlf=st.booleans(),
    capture=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=6000), max_size=30),
    max_tokens=st.sampled_from([0, 2, 64]),
)
def test_random_chunkings_give_identical_runs(
    events: list[bytes], crlf: bool, capture: bool, cuts: list[int], max_tokens: int
) -> None:
    stream = b"".join(events)
    if crlf:
        stream = stream.replace(b"\n", b"\r\n")
    assert _run_stream(True, stream, cuts, capture, max_tokens) == _run_stream(False, stream, cuts, capture, max_tokens)


def _split(compiled: bool, stream: bytes, cuts: list[int], max_event_bytes: int, max_dataless: int) -> list[object]:
    cls = compiled_types.CompiledSseSplitter if compiled else sse.SseSplitter
    splitter = cls(max_event_bytes, max_dataless)
    seen: list[object] = []
    points = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    for start, end in zip(points, points[1:], strict=False):
        try:
            splitter.feed(stream[start:end])
        except RequestFailed as exc:
            seen.append((exc.kind, exc.detail))
            break
        seen.append((list(splitter.events), splitter.pending, splitter.dropped))
        splitter.events = []
    return seen


@settings(max_examples=400, deadline=None)
@given(
    pieces=st.lists(
        st.sampled_from(
            [
                b"data:",
                b"data: ",
                b" ",
                b"\n",
                b"\r",
                b"\r\n",
                b"x",
                b"yy",
                b"event: e ",
                b":",
                b"id: 1",
                b"\n\n",
                b"data: [DONE]\n\n",
            ]
        ),
        max_size=60,
    ),
    cuts=st.lists(st.integers(min_value=0, max_value=300), max_size=40),
    max_event_bytes=st.sampled_from([4, 16, 64, 1 << 20]),
    max_dataless=st.sampled_from([1, 3, 4096]),
)
def test_random_bytes_split_identically_with_the_same_budgets(
    pieces: list[bytes], cuts: list[int], max_event_bytes: int, max_dataless: int
) -> None:
    """Every read's events, pending bytes and dropped count, and the read where a budget fails."""
    stream = b"".join(pieces)
    assert _split(True, stream, cuts, max_event_bytes, max_dataless) == _split(
        False, stream, cuts, max_event_bytes, max_dataless
    )


def _histogram(compiled: bool, batches: list[list[tuple[float, int]]]) -> dict[str, object]:
    native.use(compiled)
    try:
        hist = LogHistogram()
        for batch in batches:
            hist.record_pairs(tuple(batch))
        return hist.to_wire() | {"order": list(hist.buckets)}
    finally:
        native.reset()


@settings(max_examples=300, deadline=None)
@given(
    batches=st.lists(
        st.lists(
            st.tuples(
                st.floats(min_value=0.0, max_value=100.0, allow_nan=False), st.integers(min_value=1, max_value=9)
            ),
            max_size=40,
        ),
        max_size=5,
    )
)
def test_histogram_pairs_are_identical(batches: list[list[tuple[float, int]]]) -> None:
    """Same buckets in the same order, same count, and bit-identical sum, min and max."""
    assert _histogram(True, batches) == _histogram(False, batches)


@settings(max_examples=200, deadline=None)
@given(
    gaps=st.lists(st.floats(min_value=0.0, max_value=1.0), max_size=30),
    tokens=st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=31),
    completion=st.one_of(st.none(), st.integers(min_value=0, max_value=200)),
)
def test_gap_pairs_are_identical(gaps: list[float], tokens: list[int], completion: int | None) -> None:
    results = []
    for compiled in (True, False):
        native.use(compiled)
        try:
            results.append(split_gaps(list(gaps), list(tokens), completion))
        finally:
            native.reset()
    assert results[0] == results[1]
    assert all(isinstance(g, float) and not math.isnan(g) for g, _ in results[0])


def test_pure_python_env_turns_the_extension_off() -> None:
    code = (
        "from attnload import native; from attnload.client import stream; "
        "print(native.implementation(), type(stream.new_stream(True, 4)).__name__)"
    )
    env = {**os.environ, "ATTNLOAD_PURE_PYTHON": "1"}
    pure = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    env.pop("ATTNLOAD_PURE_PYTHON")
    compiled = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert pure.stdout.split() == ["python", "PyStream"]
    assert compiled.stdout.split() == ["compiled", "CStream"]


def test_a_missing_extension_is_said_once(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(native, "extension", lambda: None)
    monkeypatch.delenv(native.PURE_ENV, raising=False)
    native.reset()
    try:
        with caplog.at_level("INFO", logger="attnload"):
            for _ in range(5):
                assert native.active() is None
                streams.new_stream(True, 4)
        lines = [r.getMessage() for r in caplog.records if "pure-Python" in r.getMessage()]
        assert len(lines) == 1 and "not installed" in lines[0]
    finally:
        native.reset()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_installs_and_runs_without_a_c_compiler(tmp_path: Path) -> None:
    """``CC=false``: the wheel builds without the extension, installs, and a client states on the fallback."""
    env = {**os.environ, "CC": "false", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    # a clean copy of the sources: a checkout's build/ (or in-place .so) from an earlier build would be reused
    source = tmp_path / "source"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv*", "build", "dist", "results", "*.so", "*.egg-info", "__pycache__", ".*_cache"
        ),
    )
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"), str(source)],
        env=env,
        capture_output=True,
        text=True,
        timeout=500,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("attnload-*.whl"))
    assert not [n for n in zipfile.ZipFile(wheel).namelist() if "_fastpath" in n and n.endswith(".so")]
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    code = (
        "import logging, sys; logging.basicConfig(level=logging.INFO); import attnload; "
        "assert attnload.__file__.startswith(sys.argv[1]), attnload.__file__; "
        "from attnload import native; from attnload.client.stream import new_stream; "
        "states = [new_stream(True, 4) for _ in range(3)]; "
        'r = states[0]; r.sse.feed(b\'data: {"choices":[{"index":0,"delta":{"content":"hi there"},'
        '"finish_reason":null}]}\\n\\ndata: [DONE]\\n\\n\'); r.consume(1.0, 0.0); '
        "print(native.implementation(), r.chunk_tokens, r.done)"
    )
    # the installed copy first on the path, ahead of this checkout's editable install
    run = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(target)!r}); " + code, str(target)],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != native.PURE_ENV},
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["python", "[2]", "True"]
    assert run.stderr.count("using the pure-Python path") == 1
