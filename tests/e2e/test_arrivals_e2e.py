"""Bursty open loop and abandoned streams end to end, judged server side.

- ``--shape rate:20 --burstiness B`` for 30 s on 2 workers against ``tests/fakes/recording_server.py``,
  which logs the wall time each request arrived: the coefficient of variation of the *merged*
  inter-arrival gaps is within 20 % of 1/√B (2.0 at B = 0.25, 1.0 at B = 1) and the mean rate
  within 10 % of 20/s. The stage is one seeded schedule (the config's seed, 0 by default, is not
  chosen to pass); the CV of 600 gamma(0.25) gaps has a real sampling spread (p2.5-p97.5 of
  the ratio 0.89-1.15 over 1000 seeds, ``tests/test_arrivals_abandon.py``), so the server's CV is
  also checked against the schedule's own CV, which it must match closely whatever the seed. Only a run
  sent on schedule is judged (dispatch-lag p90 ≤ 20 ms, from its own results); a run the shared
  machine's load knocked off schedule is repeated (3 tries), never tuned around.
- ``--abandon-rate 0.3 --abandon-after 5`` against the simulator (``--mode fixed``): 25-35 % of
  800 requests end ``abandoned``, none failed, the server counts exactly those connections as
  aborted and emitted about 5 tokens for each.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

import pytest

from attnload.workload.arrivals import gamma_offsets
from helpers import (
    FAKES,
    Processes,
    attnload,
    free_port,
    http_json,
    http_text,
    latest_results,
    start_sim,
    wait_http,
    write_config,
)

MODEL = {"gqa_model": ("llama-3-70b", "GQA")}


def _run(processes: Processes, config: Path, results: Path, *args: str, timeout_s: float = 150) -> dict[str, Any]:
    process = processes.start(
        attnload("run", "-c", str(config), "--results", str(results), "--metrics-port", str(free_port()), *args),
        name="run",
    )
    assert process.wait(timeout=timeout_s) == 0, processes.log_of(process)[-3000:]
    return latest_results(results)


def _cv(times: list[float]) -> float:
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    return statistics.pstdev(gaps) / statistics.fmean(gaps)


ON_SCHEDULE_LAG_S = 0.020
"""A run whose dispatch-lag p90 exceeds this (0.4 of a mean gap at 20/s) did not send on its schedule: the
shared machine descheduled the workers, so due arrivals left together, and the server then measures the
machine, not the schedule. (p99 is no guide: a stage's first sends, opening connections, lag ~0.5 s.)"""
ATTEMPTS = 3


def _bursty_run(processes: Processes, tmp_path: Path, burstiness: float) -> tuple[list[float], dict[str, Any]]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    port, log = free_port(), tmp_path / "received.jsonl"
    server = processes.start(
        [sys.executable, str(FAKES / "recording_server.py"), str(port), str(log), "0"], name="recorder"
    )
    wait_http(f"http://127.0.0.1:{port}/health", server)
    config = write_config(
        tmp_path, f"http://127.0.0.1:{port}/v1", MODEL, workload={"p": {"prompt_tokens": 20, "max_tokens": 16}}
    )
    data = _run(
        processes,
        config,
        tmp_path / "r",
        "--shape",
        "rate:20",
        "--stage-duration",
        "30s",
        "--workers",
        "2",
        "--burstiness",
        f"{burstiness:g}",
    )
    server.terminate()
    return sorted(json.loads(line)["t_recv"] for line in log.read_text(encoding="utf-8").splitlines()), data


@pytest.mark.slow
@pytest.mark.parametrize("burstiness", [0.25, 1.0])
def test_bursty_arrivals_keep_their_cv_over_the_whole_fleet(
    processes: Processes, tmp_path: Path, burstiness: float
) -> None:
    """Judged only on a run the results certify as sent on schedule (dispatch-lag p90 ≤ 20 ms); a run the
    machine's load knocked off it is repeated, up to 3 times, and the test skips (saying so) if none kept it."""
    lags = []
    for attempt in range(ATTEMPTS):
        arrivals, data = _bursty_run(processes, tmp_path / f"try{attempt}", burstiness)
        stage = data["models"][0]["stages"][0]
        lags.append(stage["dispatch_lag_s"]["p90"])
        if lags[-1] <= ON_SCHEDULE_LAG_S:
            break
    else:
        pytest.skip(f"the workers never kept the schedule on this loaded machine (dispatch-lag p90 {lags} s)")
    assert len(arrivals) == 600  # the stage's exact count, sent by two workers
    target = burstiness**-0.5
    server_cv = _cv(arrivals)
    schedule_cv = _cv(gamma_offsets(20.0, 30.0, burstiness, share_index=0, share_count=1, seed=0, stage=0, stream=0))
    print(
        f"burstiness {burstiness:g}: server CV {server_cv:.3f}, schedule CV {schedule_cv:.3f}, target {target:.3f}, "
        f"dispatch-lag p90 {lags[-1] * 1000:.1f} ms (attempt {len(lags)})"
    )
    assert server_cv == pytest.approx(target, rel=0.20)
    assert server_cv == pytest.approx(schedule_cv, rel=0.05)  # the server saw the fleet's one schedule
    mean_rate = (len(arrivals) - 1) / (arrivals[-1] - arrivals[0])
    assert mean_rate == pytest.approx(20.0, rel=0.10)
    assert (stage["arrivals"], stage["burstiness"]) == ("gamma", burstiness)
    assert (data["config"]["arrivals"], data["config"]["burstiness"]) == ("gamma", burstiness)
    assert stage["dispatch_lag_s"]["count"] == 600  # every send timed against its intended (bursty) instant
    assert stage["requests"]["failed"] == 0


@pytest.mark.slow
def test_abandoned_streams_close_mid_stream_and_are_not_failures(processes: Processes, tmp_path: Path) -> None:
    sim = start_sim(processes, "--mode", "fixed", "--ttft-ms", "20", "--itl-ms", "10")
    config = write_config(
        tmp_path, sim + "/api", MODEL, workload={"p": {"prompt_tokens": 50, "max_tokens": 40, "ignore_eos": True}}
    )
    csv_prefix = tmp_path / "csv" / "run"
    data = _run(
        processes,
        config,
        tmp_path / "r",
        "--shape",
        "rate:40",
        "--stage-duration",
        "20s",
        "--workers",
        "2",
        "--abandon-rate",
        "0.3",
        "--abandon-after",
        "5",
        "--stop-timeout",
        "5",
        "--csv",
        str(csv_prefix),
    )
    summary = data["models"][0]
    requests = summary["requests"]
    total = requests["ok"] + requests["failed"] + requests["cancelled"] + requests["abandoned"]
    assert total == 800 and requests["failed"] == 0
    assert requests["cancelled"] <= 0.02 * total, requests  # only requests still in flight at the stop
    assert 0.25 <= requests["abandoned"] / total <= 0.35, requests
    assert summary["stages"][0]["requests"]["abandoned"] == requests["abandoned"]
    assert summary["profiles"]["p"]["requests"]["abandoned"] == requests["abandoned"]
    assert {k: n for k, n in summary["errors"].items() if k != "cancelled"} == {}  # abandoned is not an error class
    # TTFT yes, e2e no (a request cancelled at the stop may or may not have had its first token)
    assert requests["ok"] + requests["abandoned"] <= summary["ttft_s"]["count"] <= total
    assert summary["e2e_s"]["count"] == requests["ok"]
    truth = http_json(sim + "/stats")["models"]["llama-3-70b"]
    assert truth["received"] == total
    assert truth["completed"] == requests["ok"]
    # each abandoned stream's connection was seen closing (and any cancelled at the stop)
    assert truth["cancelled"] == requests["abandoned"] + requests["cancelled"]
    emitted_per_abandoned = (truth["completion_tokens"] - truth["completed_completion_tokens"]) / requests["abandoned"]
    assert 5.0 <= emitted_per_abandoned <= 9.0  # about 5 chunks (one token each) before the server saw it go
    server_view = summary["server"]  # the server's /metrics as the run scraped it, next to the client's count
    assert server_view["aborted"] == pytest.approx(requests["abandoned"], abs=max(3, 0.05 * requests["abandoned"]))
    print(
        f"abandoned {requests['abandoned']}/{total} ({requests['abandoned'] / total:.1%}), server aborted "
        f"{truth['cancelled']} (scraped {server_view['aborted']}), {emitted_per_abandoned:.2f} tokens emitted each"
    )
    metrics = http_text(sim + "/metrics")
    assert (
        f'vllm:request_success_total{{engine="0",finished_reason="abort",model_name="llama-3-70b"}} '
        f"{float(requests['abandoned'] + requests['cancelled'])}"
    ) in metrics
    rows = (csv_prefix.parent / "run_llm.csv").read_text(encoding="utf-8").splitlines()
    header = rows[0].split(",")
    aggregated = dict(zip(header, rows[-1].split(","), strict=True))
    assert aggregated["Requests Abandoned"] == str(requests["abandoned"])
    html = (tmp_path / "r" / latest_name(tmp_path / "r")).with_suffix(".html").read_text(encoding="utf-8")
    assert f"abandoned {requests['abandoned']}" in html


def latest_name(results: Path) -> str:
    return (results / "latest.txt").read_text().strip()
