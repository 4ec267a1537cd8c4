"""A server that writes several SSE events per write is flagged ``server_bursts``, not client saturation;
each closed-loop stage says how its users were started (``--start-spread``) and how spread out they were.

Real processes: ``attnload run`` (master and one worker) against ``tests/fakes/burst_server.py``, which
writes 4 one-token events per write every 40 ms.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from helpers import FAKES, Processes, attnload, free_port, http_text, latest_results, wait_http
from helpers.exposition import metric_sum

PER_WRITE = 4
INTERVAL_MS = 40
SPREAD_S = 2.0
GOLDEN = 0.6180339887498949


def _config(directory: Path, base_url: str) -> Path:
    data = {
        "base_url": base_url,
        "models": {"bursty": {"id": "burst-model", "attention_type": "GQA"}},
        "test_prompts": {"short": "hello"},
        "request": {"max_tokens": 48},
    }
    path = directory / "config.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_server_bursts_are_not_client_saturation(processes: Processes, tmp_path: Path) -> None:
    port = free_port()
    server = processes.start(
        [sys.executable, str(FAKES / "burst_server.py"), str(port), str(PER_WRITE), str(INTERVAL_MS), "48"],
        name="burst",
    )
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/v1/models", server)
    results = tmp_path / "results"
    run = processes.start(
        attnload(
            "run",
            "-c",
            str(_config(tmp_path, url)),
            "--shape",
            "concurrency:4",
            "--stage-duration",
            "8s",
            "--spawn-rate",
            "100",
            "--start-spread",
            str(SPREAD_S),
            "--workers",
            "1",
            "--fail-on",
            "saturated",
            "--results",
            str(results),
            "--metrics-port",
            "0",
        ),
        name="run",
    )
    code = run.wait(timeout=90)
    log = processes.log_of(run)
    assert code == 0, log[-3000:]
    data = latest_results(results)
    client = data["client"]
    assert client["client_saturated"] is False, client
    assert not any("ITL p50 collapsed" in r for r in client["saturation_reasons"]), client
    # the client's own health: one worker, its loop on time
    assert len(client["loop_lag_s"]) == 1, client
    (lag,) = client["loop_lag_s"].values()
    assert lag["count"] > 50 and lag["p50"] < 0.005, lag
    model = data["models"][0]
    (stage,) = model["stages"]
    assert stage["requests"]["ok"] > 20, stage
    assert "server_bursts" in stage["flags"], stage
    assert stage["tokens_per_read_p50"] == PER_WRITE * 1.0 or abs(stage["tokens_per_read_p50"] - PER_WRITE) < 0.1
    assert abs(stage["server_bursts"]["tokens_per_read_p50"] - PER_WRITE) < 0.1, stage["server_bursts"]
    assert "flush cadence" in stage["server_bursts"]["note"]
    assert stage["itl_s"]["p50"] < 0.0005 and stage["itl_s"]["p99"] > 0.03, stage["itl_s"]
    # the arrival phase: 4 users started within ~ms, first requests at frac(j·φ)·2 s, j = 1..4
    offsets = [(j * GOLDEN) % 1.0 * SPREAD_S for j in range(1, 5)]
    spread = stage["start_spread"]
    assert spread["mode"] == "fixed" and spread["seconds"] == SPREAD_S and spread["users"] == 4, spread
    assert abs(spread["first_requests_spread_s"] - (max(offsets) - min(offsets))) < 0.2, spread
    print(
        f"bursts: ITL p50 {stage['itl_s']['p50']} p99 {stage['itl_s']['p99']}, tokens/read "
        f"{stage['tokens_per_read_p50']}, loop lag p50 {lag['p50']} p99 {lag['p99']}, CPU {client['cpu_max_ratio']}, "
        f"first requests over {spread['first_requests_spread_s']} s"
    )
    assert "server bursts" in log, log[-3000:]
    html = (results / data_html_name(results)).read_text(encoding="utf-8")
    assert "server_bursts" in html and "start spread" in html


def data_html_name(results: Path) -> str:
    return (results / "latest.txt").read_text().strip().replace(".json", ".html")


def test_a_client_whose_loop_is_behind_is_still_saturated(processes: Processes, tmp_path: Path) -> None:
    """One event per write every 10 ms, read by a client that spins 30 ms of every 35: its reads back up,
    the same zero-gap shape appears, and this time it is the client's (flagged saturated, no server_bursts).
    Its loop lag is on /metrics while it runs."""
    port = free_port()
    server = processes.start(
        [sys.executable, str(FAKES / "burst_server.py"), str(port), "1", "10", "48"], name="steady"
    )
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/v1/models", server)
    results, metrics_port = tmp_path / "results", free_port()
    env = {
        "ATTNLOAD_CONFIG": str(_config(tmp_path, url)),
        "ATTNLOAD_RESULTS": str(results),
        "ATTNLOAD_METRICS_PORT": str(metrics_port),
        "ATTNLOAD_SHAPE": "concurrency:4",
        "ATTNLOAD_STAGE_DURATION": "8s",
        "ATTNLOAD_SPAWN_RATE": "100",
    }
    run = processes.start(
        [sys.executable, "-m", "locust", "-f", str(FAKES / "hog_locustfile.py"), "--headless"], env=env, name="hog"
    )
    wait_http(f"http://127.0.0.1:{metrics_port}/metrics", run)
    deadline = time.monotonic() + 20
    lag = None
    while lag is None and time.monotonic() < deadline:
        time.sleep(1.0)
        text = http_text(f"http://127.0.0.1:{metrics_port}/metrics")
        lag = metric_sum(text, "attnload_worker_loop_lag_seconds", worker="local", quantile="0.5") or None
    assert lag is not None and lag > 0.005, lag
    run.wait(timeout=90)
    data = latest_results(results)
    client = data["client"]
    assert client["client_saturated"] is True, client
    assert any("ITL p50 collapsed" in r and "the client is behind" in r for r in client["saturation_reasons"]), client
    assert client["loop_lag_s"]["local"]["p50"] > 0.005, client["loop_lag_s"]
    print(f"hog: {client['saturation_reasons']}, loop lag {client['loop_lag_s']['local']}")
    (stage,) = data["models"][0]["stages"]
    assert "server_bursts" not in stage["flags"] and stage["server_bursts"] is None, stage
    assert stage["itl_s"]["p50"] < 0.0005, stage["itl_s"]
