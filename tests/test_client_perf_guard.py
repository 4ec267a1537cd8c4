"""Regression guard: attnload's client must stay cheaper per token than a naive Locust client.

Absolute CPU times are meaningless on a shared 2-core machine, so the guard is a ratio
measured in the same test: attnload's user and the naive ``FastHttpUser`` baseline
(``bench/client_proc.py``) run in turn, twice each and interleaved, against one
reference server, and their summed client CPU per server-emitted token is compared.
A load spike hits both; a slower hot path shows as a ratio drifting to 1 and beyond.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from helpers import ROOT

sys.path.insert(0, str(ROOT / "bench"))

import client_cost  # noqa: E402  (bench/ is not a package)

STREAMS = 64
ROUNDS = 2
MAX_RATIO = 1.0
"""attnload measured at 0.6–0.9 of the naive baseline; above 1.0 it is no longer the cheaper client."""


@pytest.mark.e2e
@pytest.mark.timeout(120)
def test_attnload_costs_less_cpu_per_token_than_naive_baseline(tmp_path: Path) -> None:
    client_core, server_core = client_cost.cores()
    server = client_cost.ReferenceServer(server_core, ttft_ms=20.0, itl_ms=10.0, tokens=64)
    cpu_s = {"attnload": 0.0, "naive": 0.0}
    tokens = {"attnload": 0.0, "naive": 0.0}
    try:
        for _ in range(ROUNDS):
            for kind in ("attnload", "naive"):
                row = client_cost.measure(
                    kind, STREAMS, server, client_core, warmup_s=1.0, window_s=4.0, tokens=64, workdir=tmp_path
                )
                assert row.failed == 0, f"{kind}: {row.errors}"
                assert row.window_tokens > 0, f"{kind}: no tokens in the window"
                cpu_s[kind] += row.client_cpu_s
                tokens[kind] += row.window_tokens
    finally:
        server.stop()
    ours = cpu_s["attnload"] / tokens["attnload"]
    naive = cpu_s["naive"] / tokens["naive"]
    assert ours < MAX_RATIO * naive, (
        f"attnload {ours * 1e6:.1f} µs CPU/token vs naive {naive * 1e6:.1f} µs ({ours / naive:.2f}x)"
    )


_CHUNKS = [
    b'{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
    b'"delta":{"content":"the "},"finish_reason":null}]}',  # attnload sim
    b'{"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-4o","service_tier":"default",'
    b'"system_fingerprint":"fp","choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":null,'
    b'"finish_reason":null}],"usage":null,"obfuscation":"x1"}',  # OpenAI
    b'{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
    b'"delta":{"content":" the"},"logprobs":null,"finish_reason":null,"stop_reason":null}]}',  # vLLM
    b'{"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}',
    '{"id":"c","choices":[{"index":0,"delta":{"content":"你好 世界"},"finish_reason":null}]}'.encode(),
    b'{"id":"c","choices":[{"index":0,"delta":{"content":"a\\"b\\n"},"finish_reason":null}]}',
    b'{"id":"c","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}]}',
    b'{"id":"c","choices":[{"index":0,"delta":{"reasoning_content":"think"},"finish_reason":null}]}',
    b'{"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}',
    b'{"id":"c","created":01,"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}',
    b'{"id":"c","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}],"choices":null}',
    b'{"error":"boom","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}',
    b'{"id":"c","choices":[{"index":0,"delta":{"content":"\xff"},"finish_reason":null}]}',
]


@pytest.mark.usefixtures("client_impl")  # the fast path of each implementation against json.loads
@pytest.mark.parametrize("chunk", _CHUNKS)
def test_plain_delta_fast_path_matches_json_loads(chunk: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """The regex fast path for content deltas must change cost, never results or errors."""
    import re

    from attnload.apis import openai as checks
    from attnload.client import stream as client
    from attnload.errors import RequestFailed

    def consume(fast: bool) -> tuple[object, ...]:
        if not fast:
            monkeypatch.setattr(checks, "PLAIN_DELTA", re.compile(rb"(?!)"))
        state = client.new_stream(True, 16) if fast else client.PyStream(True, 16)  # json.loads for every chunk
        state.sse.events.extend([(b"message", chunk), (b"message", chunk)])
        try:
            state.consume(1.0, 0.0)
        except RequestFailed as exc:
            return ("failed", exc.kind, str(exc))
        finally:
            monkeypatch.undo()
        return (state.first_at, state.gaps, state.chunk_tokens, state.usage, state.finish_reason)

    assert consume(True) == consume(False)


@pytest.mark.usefixtures("client_impl")
def test_plain_delta_stream_cache_matches_json_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Within one stream the fast path reuses the bytes around the last content; every mix of
    chunks (escapes, other fields, a changed id, errors) must still read as json.loads reads it."""
    import itertools
    import re

    from attnload.apis import openai as checks
    from attnload.client import stream as client
    from attnload.errors import RequestFailed

    base = b'{"id":"c","choices":[{"index":0,"delta":{"content":"%s"},"finish_reason":null}]}'
    stream = [
        base % b"a",
        base % b"bc",
        base % b"",
        base % b'q\\"',
        base % b"\x01",
        base % b"\xff",
        base.replace(b'"c"', b'"d"') % b"e",
        *_CHUNKS,
        base % b'","x":"',
    ]

    def consume(chunks: tuple[bytes, ...], fast: bool) -> tuple[object, ...]:
        if not fast:
            monkeypatch.setattr(checks, "PLAIN_DELTA", re.compile(rb"(?!)"))
        state = client.new_stream(True, 16) if fast else client.PyStream(True, 16)  # json.loads for every chunk
        try:
            for at, chunk in enumerate(chunks):
                state.sse.events.append((b"message", chunk))
                state.consume(float(at), 0.0)
        except RequestFailed as exc:
            return ("failed", exc.kind, str(exc), state.chunk_tokens)
        finally:
            monkeypatch.undo()
        return (state.first_at, state.gaps, state.chunk_tokens, state.usage, state.finish_reason)

    for first, second in itertools.product(stream, repeat=2):
        chunks = (base % b"x", first, second, base % b"y")
        assert consume(chunks, True) == consume(chunks, False), chunks
