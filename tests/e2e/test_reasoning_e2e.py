"""Reasoning traffic end to end: TTFAT and reasoning tokens from a real stream to every output.

A fake chat server (tests/fakes/reasoning_server.py) streams 8 one-token ``reasoning`` deltas, then 4
``content`` deltas, at fixed times (TTFT 50 ms, 20 ms apart), and reports
``completion_tokens_details.reasoning_tokens: 0`` as vLLM 0.32 does. A real ``attnload run`` (one
worker, so the worker-to-master deltas carry it) must show TTFAT = TTFT + 8 × 20 ms in the results, the
console, the per-request JSONL and ``/metrics``, reasoning tokens equal to the deltas the server
wrote, and a note naming both the streamed count and the server's 0.
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from helpers import ROOT, Processes, attnload, free_port, http_json, http_text, latest_results, wait_http
from helpers.exposition import samples

FAKE = ROOT / "tests" / "fakes" / "reasoning_server.py"
TTFT_S = 0.050
ITL_S = 0.020
REASONING = 8
ANSWER = 4
TTFAT_S = TTFT_S + REASONING * ITL_S


def _server(processes: Processes) -> str:
    port = free_port()
    process = processes.start([sys.executable, str(FAKE), str(port)], name="reasoning")
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/health", process)
    return url


def _config(tmp_path: Path, url: str) -> Path:
    config = {
        "base_url": url + "/v1",
        "models": {"r1": {"id": "deepseek-r1", "attention_type": "MLA"}},
        "workload": {"p": {"prompt_tokens": 40, "max_tokens": REASONING + ANSWER}},
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def _scrape(port: int, deadline_s: float, process: Any) -> str:
    """The master's /metrics once it holds TTFAT samples (polled while the run goes on)."""
    text = ""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.5)
        try:
            text = http_text(f"http://127.0.0.1:{port}/metrics")
        except OSError:
            continue
        if any(s.name == "attnload_ttfat_seconds_count" and s.value >= 10 for s in samples(text)):
            break
    return text


def test_reasoning_stream_gives_ttfat_and_reasoning_tokens_everywhere(processes: Processes, tmp_path: Path) -> None:
    url = _server(processes)
    out = tmp_path / "requests.jsonl.gz"
    port = free_port()
    run = processes.start(
        attnload(
            "run",
            "-c",
            str(_config(tmp_path, url)),
            "--users",
            "4",
            "--spawn-rate",
            "4",
            "--duration",
            "6s",
            "--workers",
            "1",
            "--stop-timeout",
            "10",
            "--results",
            str(tmp_path / "results"),
            "--metrics-port",
            str(port),
            "--requests-out",
            str(out),
        ),
        name="run",
    )
    text = _scrape(port, 60, run)
    assert run.wait(timeout=120) == 0, processes.log_of(run)[-3000:]
    console = " ".join(processes.log_of(run).split())
    sent = http_json(url + "/stats")
    model = latest_results(tmp_path / "results")["models"][0]
    with gzip.open(out, "rt", encoding="utf-8") as handle:
        lines = [json.loads(line) for line in handle.read().splitlines()]
    ok = [line for line in lines if line["status"] == "ok"]
    assert len(ok) >= 20 and model["requests"]["ok"] == len(ok)

    # per request: TTFAT - TTFT is the reasoning's 8 gaps of 20 ms; the counts are the deltas sent
    for line in ok:
        assert (line["reasoning_tokens"], line["completion_tokens"]) == (REASONING, REASONING + ANSWER)
        assert line["server_reasoning_tokens"] == 0
        # one late wake-up (a loaded machine) moves one stamp, by tens of ms (33 ms seen in a full suite); the
        # server keeps absolute deadlines, so it never accumulates: each request within 80 ms, the median 3 ms
        assert line["ttfat_s"] - line["ttft_s"] == pytest.approx(REASONING * ITL_S, abs=0.08)
    gaps = [line["ttfat_s"] - line["ttft_s"] for line in ok]
    assert statistics.median(gaps) == pytest.approx(REASONING * ITL_S, abs=0.003)

    # results: TTFAT summary, reasoning tokens equal to what the server streamed, its 0 beside, a note
    assert model["ttft_s"]["p50"] == pytest.approx(TTFT_S, abs=0.005)
    assert model["ttfat_s"]["p50"] == pytest.approx(TTFAT_S, abs=0.005)
    assert model["ttfat_s"]["count"] == len(ok)
    assert model["reasoning_tokens"] == sent["reasoning_deltas"] == sum(line["reasoning_tokens"] for line in lines)
    assert model["reasoning_share"] == pytest.approx(
        sum(line["reasoning_tokens"] for line in lines) / model["completion_tokens"]
    )
    assert model["server_reasoning_tokens"] == 0
    note = model["reasoning_note"]
    assert "reported 0 reasoning tokens" in note and f"{model['reasoning_tokens']:,} arrived as reasoning" in note
    assert model["stages"][0]["ttfat_s"]["p50"] == pytest.approx(TTFAT_S, abs=0.005)

    # console: the reasoning table with TTFAT, and the note
    assert "reasoning (TTFAT: time to the first answer token" in console
    row = next(
        cells for cells in map(str.split, processes.log_of(run).splitlines()) if cells[:3] == ["r1", "(MLA)", "run"]
    )
    assert float(row[3]) == pytest.approx(TTFT_S * 1000, abs=5)  # TTFT p50 ms
    assert float(row[4]) == pytest.approx(TTFAT_S * 1000, abs=5)  # TTFAT p50 ms
    assert "note: r1: the server reported 0 reasoning tokens" in console

    # /metrics on the master (from the worker's deltas)
    found = {s.name: s.value for s in samples(text) if s.labels.get("target") == "r1" and "le" not in s.labels}
    assert found.get("attnload_ttfat_seconds_count", 0) >= 10
    assert found["attnload_ttfat_seconds_sum"] / found["attnload_ttfat_seconds_count"] == pytest.approx(
        TTFAT_S, abs=0.01
    )
    assert found.get("attnload_reasoning_tokens_total", 0) >= 10 * REASONING
