"""A cluster's faults around the run, with real processes against the fixed-mode simulator: a model server
that dies and comes back (users back off, then resume), results that cannot be lost to an unwritable disk,
and true words at the end when a Locust process is stopped by a signal."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from helpers import Processes, attnload, free_port, http_json, latest_results, wait_http, write_config

MODELS = {"gqa_model": ("llama-3-70b", "GQA"), "mla_model": ("deepseek-chat", "MLA")}


def sim_on(processes: Processes, port: int) -> tuple[subprocess.Popen[bytes], str]:
    args = ["--host", "127.0.0.1", "--port", str(port), "--mode", "fixed", "--ttft-ms", "50", "--itl-ms", "20"]
    process = processes.start(attnload("sim", *args), name="sim")
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/health", process)
    return process, url


def received(url: str) -> dict[str, int]:
    models = http_json(url + "/stats")["models"]
    return {model_id: int(stats.get("completed", 0)) for model_id, stats in models.items()}


def wait_until(predicate, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"{what} within {timeout_s} s"
        time.sleep(0.1)


def run_args(config: Path, results: Path, *extra: str) -> list[str]:
    return attnload("run", "-c", str(config), "--results", str(results), "--metrics-port", "0", *extra)


def test_a_dead_server_is_backed_off_and_answered_again_soon_after_it_returns(
    processes: Processes, tmp_path: Path
) -> None:
    port = free_port()
    sim, url = sim_on(processes, port)
    config = write_config(tmp_path, url, models=MODELS, benchmark={"max_tokens": 10, "temperature": 0})
    results = tmp_path / "results"
    run = processes.start(run_args(config, results, "--users", "16", "--duration", "26s", "--workers", "2"), name="run")
    wait_until(lambda: min(received(url).values() or [0]) > 10, 60, "load on both models")
    time.sleep(2.0)
    sim.kill()
    sim.wait()
    time.sleep(10.0)
    sim, url = sim_on(processes, port)
    back_at = time.monotonic()
    wait_until(lambda: len(received(url)) == 2 and min(received(url).values()) >= 1, 8.0, "an ok per model")
    assert time.monotonic() - back_at <= 8.0
    assert run.wait(timeout=90) == 1, processes.log_of(run)[-3000:]  # connection failures are failed requests
    data = latest_results(results)
    log = processes.log_of(run)
    connection = sum(m["errors"].get("connection", 0) for m in data["models"])
    assert 0 < connection <= 16 * 30, (connection, data["models"][0]["errors"])
    assert data["client"]["client_saturated"] is False, data["client"]
    assert all(m["requests"]["ok"] > 0 for m in data["models"])
    assert "unreachable" in log and "reachable again" in log, log[-3000:]
    assert "Traceback" not in log
