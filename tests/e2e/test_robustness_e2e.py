"""Robustness with real processes: a hostile server under load, a worker killed mid-run, SIGTERM on the master.

Every request the server saw must be counted exactly once (server count = ok + failed +
cancelled) in results, in /metrics and (ok + failed) in Locust's own stats table, each
failure under the docs/design.md error class its mode stands for.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import urllib.parse
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from helpers import (
    FAKES,
    ROOT,
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
from helpers.exposition import sums_by_label
from hostile_server import EXPECTED, MODES

LOCUST = [sys.executable, "-m", "locust", "-f", str(ROOT / "locustfiles" / "chat.py")]
KEY_ENV = "ATTNLOAD_ROBUST_KEY"


def start_hostile(processes: Processes, slow_s: float = 3.0, stall_s: float = 20.0) -> str:
    port = free_port()
    process = processes.start(
        [
            sys.executable,
            str(FAKES / "hostile_server.py"),
            "--port",
            str(port),
            "--slow-s",
            str(slow_s),
            "--stall-s",
            str(stall_s),
            "--delay-s",
            "0.02",
        ],
        name="hostile",
    )
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/health", process)
    return url


def hostile_config(directory: Path, base_url: str, model: str = "cycle") -> Path:
    data = {
        "base_url": base_url + "/api",
        "api_key_env": KEY_ENV,
        "models": {"hostile": {"id": model, "attention_type": "MLA"}},
        "test_prompts": {"short": "hello"},
        "request": {"max_tokens": 8, "ttft_timeout_s": 1.0, "idle_timeout_s": 1.0, "total_timeout_s": 5.0},
    }
    path = directory / "config.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def metric_values(text: str, name: str, label: str) -> Counter[str]:
    return Counter({key: int(total) for key, total in sums_by_label(text, name, label).items()})


def wait_for(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"{what} within {timeout_s} s"
        time.sleep(0.3)


def expected_by_class(counts: dict[str, int]) -> Counter[str]:
    expected: Counter[str] = Counter()
    for mode, n in counts.items():
        expected[EXPECTED[mode]] += n
    return expected


def test_hostile_server_64_users_2_workers(processes: Processes, tmp_path: Path) -> None:
    """All 16 modes under 64 users for 30 s: no worker lost, each request counted once under its class."""
    hostile = start_hostile(processes)
    config = hostile_config(tmp_path, hostile)
    web, master_port, metrics_port = free_port(), free_port(), free_port()
    results = tmp_path / "results"
    env = {
        "ATTNLOAD_CONFIG": str(config),
        "ATTNLOAD_RESULTS": str(results),
        "ATTNLOAD_METRICS_PORT": str(metrics_port),
        "ATTNLOAD_SHAPE": "concurrency:64",
        "ATTNLOAD_STAGE_DURATION": "30s",
        "ATTNLOAD_SPAWN_RATE": "64",
        KEY_ENV: "sk-robust-key-6e2f0a9b1c",
    }
    master = processes.start(
        [
            *LOCUST,
            "--master",
            "--web-host",
            "127.0.0.1",
            "--web-port",
            str(web),
            "--master-bind-host",
            "127.0.0.1",
            "--master-bind-port",
            str(master_port),
        ],
        env=env,
        name="master",
    )
    workers = [
        processes.start(
            [*LOCUST, "--worker", "--master-host", "127.0.0.1", "--master-port", str(master_port)],
            env=env,
            name="worker",
        )
        for _ in range(2)
    ]
    wait_http(f"http://127.0.0.1:{web}/", master)
    wait_for(lambda: len(http_json(f"http://127.0.0.1:{web}/stats/requests")["workers"]) == 2, 30, "workers connected")
    http_json(
        f"http://127.0.0.1:{web}/swarm", data=urllib.parse.urlencode({"user_count": 64, "spawn_rate": 64}).encode()
    )
    wait_for(lambda: (results / "latest.txt").exists(), 90, "results written")
    time.sleep(2.0)  # the master rewrites once more after the workers' final deltas

    counts = http_json(hostile + "/counts")["counts"]
    data = latest_results(results)
    metrics = http_text(f"http://127.0.0.1:{metrics_port}/metrics")
    stats = http_json(f"http://127.0.0.1:{web}/stats/requests")

    assert all(w.poll() is None for w in workers), "a worker died"
    assert data["client"]["workers"] == 2 and data["client"]["workers_lost"] == 0
    for process in (master, *workers):
        assert "Traceback" not in processes.log_of(process), processes.log_of(process)[-3000:]

    assert set(counts) == set(MODES), counts  # every mode was served
    summary = data["models"][0]
    requests, errors = summary["requests"], summary["errors"]
    server_total = sum(counts.values())
    assert requests["ok"] + requests["failed"] + requests["cancelled"] == server_total, (requests, errors, counts)
    assert errors.get("cancelled", 0) == requests["cancelled"]  # the cancelled class counts them too
    failures = {k: v for k, v in errors.items() if k != "cancelled"}
    assert sum(failures.values()) == requests["failed"]

    by_outcome = metric_values(metrics, "attnload_requests_total", "outcome")
    assert by_outcome == Counter({k: v for k, v in requests.items() if v})
    assert metric_values(metrics, "attnload_request_errors_total", "error") == Counter(errors)

    # Locust's own table is fed by the workers' stats reports, which a loaded host can deliver after the
    # results: wait (bounded) for it to settle rather than trusting the 2 s above.
    want = (requests["ok"] + requests["failed"], requests["failed"])

    def locust_row(stats: dict[str, Any]) -> tuple[int, int]:
        row = next(r for r in stats["stats"] if r["name"] == "hostile")
        return row["num_requests"], row["num_failures"]

    deadline = time.monotonic() + 20.0
    while locust_row(stats) != want and time.monotonic() < deadline:
        time.sleep(0.5)
        stats = http_json(f"http://127.0.0.1:{web}/stats/requests")
    assert locust_row(stats) == want

    # Each class holds exactly its modes' requests, less those cancelled when the test stopped.
    expected = expected_by_class(counts)
    got = Counter({"ok": requests["ok"], **failures})
    for label, n in got.items():
        assert n <= expected[label], (label, n, expected)
    assert sum(expected.values()) - sum(got.values()) == requests["cancelled"]
    assert requests["cancelled"] <= 64
    for label in expected:
        assert got[label] > 0.5 * expected[label], (label, got, expected)


def test_sigkill_one_worker_mid_run(processes: Processes, tmp_path: Path) -> None:
    """The master keeps going, the run finishes, the dead worker's counts stay and results record the loss."""
    psutil = pytest.importorskip("psutil")
    hostile = start_hostile(processes)
    config = hostile_config(tmp_path, hostile, model="ok")
    metrics_port = free_port()
    results = tmp_path / "results"
    run = processes.start(
        attnload(
            "run",
            "-c",
            str(config),
            "--users",
            "8",
            "--duration",
            "16s",
            "--workers",
            "2",
            "--results",
            str(results),
            "--metrics-port",
            str(metrics_port),
        ),
        env={KEY_ENV: "sk-robust-key-6e2f0a9b1c"},
        name="run",
    )
    metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    wait_http(metrics_url, run, timeout_s=60)

    def ok_total() -> int:
        return metric_values(http_text(metrics_url), "attnload_requests_total", "outcome")["ok"]

    wait_for(lambda: ok_total() > 50, 30, "requests reported")
    time.sleep(3.5)  # at least one more report from each worker
    before = ok_total()
    worker = next(p for p in psutil.Process(run.pid).children(recursive=True) if "--worker" in p.cmdline())
    os.kill(worker.pid, signal.SIGKILL)
    assert run.wait(timeout=90) == 0, processes.log_of(run)[-3000:]
    log = processes.log_of(run)
    data = latest_results(results)
    summary = data["models"][0]
    assert data["client"]["workers"] == 2 and data["client"]["workers_lost"] == 1, data["client"]
    assert summary["requests"]["ok"] > before  # the dead worker's counts are kept and the other went on
    assert "Traceback" not in log


def test_sigterm_master_counts_in_flight_as_cancelled(processes: Processes, tmp_path: Path) -> None:
    """Pods get SIGTERM: in-flight requests become `cancelled`, results are written, nothing is lost."""
    hostile = start_hostile(processes, slow_s=30.0)
    config = hostile_config(tmp_path, hostile)
    master_port = free_port()
    results = tmp_path / "results"
    env = {
        "ATTNLOAD_CONFIG": str(config),
        "ATTNLOAD_RESULTS": str(results),
        "ATTNLOAD_METRICS_PORT": "0",
        "ATTNLOAD_SHAPE": "concurrency:16",
        "ATTNLOAD_STAGE_DURATION": "120s",
        "ATTNLOAD_SPAWN_RATE": "16",
        KEY_ENV: "sk-robust-key-6e2f0a9b1c",
    }
    master = processes.start(
        [
            *LOCUST,
            "--master",
            "--headless",
            "--expect-workers",
            "2",
            "--master-bind-host",
            "127.0.0.1",
            "--master-bind-port",
            str(master_port),
        ],
        env=env,
        name="master",
    )
    workers = [
        processes.start(
            [*LOCUST, "--worker", "--master-host", "127.0.0.1", "--master-port", str(master_port)],
            env=env,
            name="worker",
        )
        for _ in range(2)
    ]
    wait_for(lambda: http_json(hostile + "/counts")["total"] > 100, 60, "load running")
    time.sleep(1.0)
    master.send_signal(signal.SIGTERM)
    master.wait(timeout=60)
    for worker in workers:
        worker.wait(timeout=30)  # the master told them to quit
    counts = http_json(hostile + "/counts")["counts"]
    data = latest_results(results)
    requests = data["models"][0]["requests"]
    assert requests["cancelled"] > 0, requests
    assert requests["ok"] + requests["failed"] + requests["cancelled"] == sum(counts.values()), (requests, counts)
    assert "Traceback" not in processes.log_of(master)


def test_ctrl_c_on_attnload_run_keeps_results(processes: Processes, tmp_path: Path) -> None:
    """Ctrl-C on `attnload run` (SIGINT to it, SIGTERM to its master): results written, in-flight cancelled."""
    hostile = start_hostile(processes, slow_s=30.0)
    config = hostile_config(tmp_path, hostile)
    results = tmp_path / "results"
    run = processes.start(
        attnload(
            "run",
            "-c",
            str(config),
            "--users",
            "16",
            "--duration",
            "120s",
            "--workers",
            "2",
            "--results",
            str(results),
            "--metrics-port",
            "0",
        ),
        env={KEY_ENV: "sk-robust-key-6e2f0a9b1c"},
        name="run",
    )
    wait_for(lambda: http_json(hostile + "/counts")["total"] > 100, 60, "load running")
    run.send_signal(signal.SIGINT)
    run.wait(timeout=60)
    data = latest_results(results)
    requests = data["models"][0]["requests"]
    counts = http_json(hostile + "/counts")["counts"]
    assert requests["cancelled"] > 0, requests
    assert requests["ok"] + requests["failed"] + requests["cancelled"] == sum(counts.values()), (requests, counts)
    assert "Traceback" not in processes.log_of(run)


def test_sigterm_one_worker_drains_it(processes: Processes, tmp_path: Path) -> None:
    """A worker pod deleted mid-run: its in-flight requests arrive as cancelled; the run goes on without it."""
    hostile = start_hostile(processes, slow_s=30.0)
    config = hostile_config(tmp_path, hostile)
    web, master_port = free_port(), free_port()
    results = tmp_path / "results"
    env = {
        "ATTNLOAD_CONFIG": str(config),
        "ATTNLOAD_RESULTS": str(results),
        "ATTNLOAD_METRICS_PORT": "0",
        "ATTNLOAD_SHAPE": "concurrency:16",
        "ATTNLOAD_STAGE_DURATION": "12s",
        "ATTNLOAD_SPAWN_RATE": "16",
        KEY_ENV: "sk-robust-key-6e2f0a9b1c",
    }
    master = processes.start(
        [
            *LOCUST,
            "--master",
            "--web-host",
            "127.0.0.1",
            "--web-port",
            str(web),
            "--master-bind-host",
            "127.0.0.1",
            "--master-bind-port",
            str(master_port),
        ],
        env=env,
        name="master",
    )
    workers = [
        processes.start(
            [*LOCUST, "--worker", "--master-host", "127.0.0.1", "--master-port", str(master_port)],
            env=env,
            name="worker",
        )
        for _ in range(2)
    ]
    wait_http(f"http://127.0.0.1:{web}/", master)
    wait_for(lambda: len(http_json(f"http://127.0.0.1:{web}/stats/requests")["workers"]) == 2, 30, "workers connected")
    http_json(
        f"http://127.0.0.1:{web}/swarm", data=urllib.parse.urlencode({"user_count": 16, "spawn_rate": 16}).encode()
    )
    wait_for(lambda: http_json(hostile + "/counts")["total"] > 100, 60, "load running")
    workers[0].send_signal(signal.SIGTERM)
    assert workers[0].wait(timeout=30) is not None
    wait_for(lambda: (results / "latest.txt").exists(), 60, "results written")
    time.sleep(2.0)
    counts = http_json(hostile + "/counts")["counts"]
    data = latest_results(results)
    requests = data["models"][0]["requests"]
    assert requests["cancelled"] > 0 and workers[1].poll() is None
    assert requests["ok"] + requests["failed"] + requests["cancelled"] == sum(counts.values()), (requests, counts)


def test_stop_timeout_lets_in_flight_requests_finish_and_counts_them(processes: Processes, tmp_path: Path) -> None:
    """Headless with --stop-timeout: workers let their in-flight requests finish (seconds, longer than
    Locust's 0.5 s wait at quit) and the master waits for those last counts before writing results."""
    sim = start_sim(processes, "--mode", "fixed", "--ttft-ms", "200", "--itl-ms", "100")
    config = write_config(
        tmp_path, sim, models={"m": ("llama-3-70b", "GQA")}, benchmark={"max_tokens": 30, "temperature": 0}
    )
    results = tmp_path / "results"
    run = processes.start(
        attnload(
            "run",
            "-c",
            str(config),
            "--users",
            "40",
            "--spawn-rate",
            "40",
            "--duration",
            "6s",
            "--stop-timeout",
            "10",
            "--workers",
            "2",
            "--results",
            str(results),
            "--metrics-port",
            "0",
        ),
        name="run",
    )
    assert run.wait(timeout=120) == 0, processes.log_of(run)[-3000:]
    requests = latest_results(results)["models"][0]["requests"]
    server = http_json(sim + "/stats")["models"]["llama-3-70b"]
    assert server["cancelled"] == 0 and server["completed"] == server["received"], server  # all finished
    assert requests == {"ok": server["completed"], "failed": 0, "cancelled": 0, "abandoned": 0}, (requests, server)
