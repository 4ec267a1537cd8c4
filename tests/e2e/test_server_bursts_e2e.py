"""A server that writes several SSE events per write is flagged ``server_bursts``, not client saturation;
each closed-loop stage says how its users were started (``--start-spread``) and how spread out they were.

Real processes: ``attnload run`` (master and one worker) against ``tests/fakes/burst_server.py``, which
writes 4 one-token events per write every 40 ms.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from helpers import FAKES, Processes, attnload, free_port, latest_results, wait_http

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
    assert "server bursts" in log, log[-3000:]
    html = (results / data_html_name(results)).read_text(encoding="utf-8")
    assert "server_bursts" in html and "start spread" in html


def data_html_name(results: Path) -> str:
    return (results / "latest.txt").read_text().strip().replace(".json", ".html")
