"""Issue 23's findings end to end, checked at the server: when closed-loop users' first requests arrive
(``--start-spread``), and cached tokens from a server that sends no ``prompt_tokens_details``.

The recording server (``tests/fakes/recording_server.py``) logs the wall time each request arrived and the
time its answer ended; with a 430 ms chunk delay every request takes ~3 s, like the issue's fixed
server (50 ms TTFT + 128 tokens × 23 ms). It sends no ``usage``, as vLLM sends no cached tokens
without ``--enable-prompt-tokens-details``.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import FAKES, Processes, attnload, free_port, latest_results, wait_http, write_config

CHUNK_DELAY_MS = 430.0
"""7 pieces of the recording server's reply × 430 ms ≈ 3 s a request."""
MODELS = {"gqa_model": ("llama-3-70b", "GQA")}


def _recorder(processes: Processes, tmp_path: Path, delay_ms: float) -> tuple[str, Path]:
    port, log = free_port(), tmp_path / "received.jsonl"
    process = processes.start(
        [sys.executable, str(FAKES / "recording_server.py"), str(port), str(log), str(delay_ms)],
        name="recorder",
    )
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/health", process)
    return url, log


def _received(log: Path) -> list[dict[str, Any]]:
    return sorted(
        (json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip()),
        key=lambda e: e["t_recv"],
    )


def _run(
    processes: Processes,
    tmp_path: Path,
    *args: str,
    profile: dict[str, Any] | None = None,
    delay_ms: float = CHUNK_DELAY_MS,
) -> tuple[list[dict[str, Any]], dict[str, Any], str]:
    url, log = _recorder(processes, tmp_path, delay_ms)
    config = write_config(tmp_path, url, MODELS, workload={"p": profile or {"prompt_tokens": 50, "max_tokens": 16}})
    run = processes.start(
        attnload("run", "-c", str(config), "--results", str(tmp_path / "r"), "--metrics-port", str(free_port()), *args),
        name="run",
    )
    assert run.wait(timeout=120) == 0, processes.log_of(run)[-3000:]
    return _received(log), latest_results(tmp_path / "r"), processes.log_of(run)


@pytest.mark.parametrize("workers", ["0", "2"])
def test_four_users_started_together_are_spread_over_half_a_request(
    processes: Processes, tmp_path: Path, workers: str
) -> None:
    """Default ``--start-spread auto``: four users of one (the first) stage; their first requests reach the
    server ≥ half a request's duration apart (first to last), and latencies are what the server served."""
    entries, data, _ = _run(processes, tmp_path, "--users", "4", "--duration", "10s", "--workers", workers)
    durations = [e["t_end"] - e["t_recv"] for e in entries]
    request_s = statistics.median(durations)
    assert 2.5 < request_s < 3.6, request_s
    first_four = [e["t_recv"] for e in entries[:4]]
    assert first_four[-1] - first_four[0] >= 0.5 * request_s, first_four
    # In phase they would all have come within Locust's spawn batch; spread, no two came together.
    gaps = [b - a for a, b in zip(first_four, first_four[1:], strict=False)]
    assert min(gaps) > 0.1 * request_s, gaps
    # A delayed first request is simply sent later: the client's e2e is the server's duration.
    e2e_p50 = data["models"][0]["e2e_s"]["p50"]
    assert e2e_p50 == pytest.approx(request_s, rel=0.1)
    stage = data["models"][0]["stages"][0]
    assert (stage["users"], stage["users_total"]) == (4, 4)


def test_start_spread_off_starts_in_lock_step(processes: Processes, tmp_path: Path) -> None:
    entries, _, _ = _run(processes, tmp_path, "--users", "4", "--duration", "5s", "--start-spread", "off")
    first_four = [e["t_recv"] for e in entries[:4]]
    assert first_four[-1] - first_four[0] < 0.5, first_four  # one spawn batch, one moment


def test_a_server_without_cached_tokens_gives_null_and_a_note(processes: Processes, tmp_path: Path) -> None:
    """Conversations against a server that sends no usage: cached tokens are null everywhere, the console
    names vLLM's flag, and the turn table says the server's hit ratio was not read."""
    profile = {"conversation": {"turns": 2, "think_time_s": 0.0, "user_tokens": 20}, "max_tokens": 8}
    _, data, log = _run(processes, tmp_path, "--users", "2", "--duration", "4s", profile=profile, delay_ms=5.0)
    model = data["models"][0]
    assert model["requests"]["ok"] > 4
    assert model["cached_prompt_tokens"] is None and all(s["cached_prompt_tokens"] is None for s in model["stages"])
    assert [t["turn"] for t in model["turns"]][:2] == [1, 2]
    assert all(t["cached_tokens_mean"] is None for t in model["turns"])
    assert "--enable-prompt-tokens-details" in log
    html = (tmp_path / "r" / (tmp_path / "r" / "latest.txt").read_text().strip()).with_suffix(".html").read_text()
    assert "--enable-prompt-tokens-details" in html and 'id="turn-prefix-cache"' in html
