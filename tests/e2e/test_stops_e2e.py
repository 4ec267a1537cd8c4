"""Stops that always work, with real processes against the fixed-mode simulator.

SIGTERM/SIGINT end `attnload run` with 143/130 and results marked interrupted; a SIGKILLed master
leaves a snapshot that parses; killing `attnload run` ends its Locust processes; a run that could
not do what was asked (every user crashed, the scheduler died, nothing sent) exits 1 with one line.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from helpers import ROOT, Processes, attnload, http_json, latest_results, start_sim, write_config

LOCUST = [sys.executable, "-m", "locust", "-f", str(ROOT / "locustfiles" / "chat.py")]
FAULTS = ROOT / "tests" / "data" / "fault_inject"


def fixed_sim(processes: Processes, tmp_path: Path) -> tuple[str, Path]:
    sim = start_sim(processes, "--mode", "fixed", "--ttft-ms", "50", "--itl-ms", "20")
    config = write_config(
        tmp_path, sim, models={"m": ("llama-3-70b", "GQA")}, benchmark={"max_tokens": 10, "temperature": 0}
    )
    return sim, config


def served(sim: str) -> int:
    return int(http_json(sim + "/stats")["models"].get("llama-3-70b", {}).get("received", 0))


def wait_until(predicate, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"{what} within {timeout_s} s"
        time.sleep(0.2)


def children_of(pid: int) -> list[int]:
    """Every descendant of ``pid`` (from /proc: no psutil needed)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.mark.parametrize(("signum", "code", "workers"), [(signal.SIGTERM, 143, "1"), (signal.SIGINT, 130, "0")])
def test_signal_mid_run_writes_interrupted_results_and_exits_128_plus_n(
    processes: Processes, tmp_path: Path, signum: int, code: int, workers: str
) -> None:
    sim, config = fixed_sim(processes, tmp_path)
    results = tmp_path / "results"
    run = processes.start(
        attnload(
            "run",
            "-c",
            str(config),
            "--users",
            "4",
            "--duration",
            "60s",
            "--workers",
            workers,
            "--results",
            str(results),
            "--metrics-port",
            "0",
        ),
        name="run",
    )
    wait_until(lambda: served(sim) > 20, 60, "load running")
    time.sleep(5.0)  # mid-run (~8 s in), well before the 60 s end
    sent_at = time.monotonic()
    run.send_signal(signum)
    assert run.wait(timeout=60) == code, processes.log_of(run)[-3000:]
    assert time.monotonic() - sent_at < 0 + 10.0  # --stop-timeout 0 + 10 s
    data = latest_results(results)
    assert data["interrupted"] is True
    requests = data["models"][0]["requests"]
    assert requests["ok"] > 0
    assert requests["ok"] + requests["failed"] + requests["cancelled"] == served(sim), requests
    log = processes.log_of(run)
    assert "Traceback" not in log and f"interrupted by {signal.Signals(signum).name}" in log


def test_plain_locust_master_sigterm_marks_results_interrupted(processes: Processes, tmp_path: Path) -> None:
    sim, config = fixed_sim(processes, tmp_path)
    results = tmp_path / "results"
    env = {"ATTNLOAD_CONFIG": str(config), "ATTNLOAD_RESULTS": str(results), "ATTNLOAD_METRICS_PORT": "0"}
    master = processes.start([*LOCUST, "--headless", "-u", "4", "-r", "4", "-t", "60s"], env=env, name="locust")
    wait_until(lambda: served(sim) > 20, 60, "load running")
    master.send_signal(signal.SIGTERM)
    assert master.wait(timeout=20) == 143, processes.log_of(master)[-3000:]
    data = latest_results(results)
    assert data["interrupted"] is True and data["models"][0]["requests"]["ok"] > 0


def test_sigkill_of_the_master_leaves_a_snapshot_that_parses(processes: Processes, tmp_path: Path) -> None:
    sim, config = fixed_sim(processes, tmp_path)
    results = tmp_path / "results"
    env = {
        "ATTNLOAD_CONFIG": str(config),
        "ATTNLOAD_RESULTS": str(results),
        "ATTNLOAD_METRICS_PORT": "0",
        "ATTNLOAD_SHAPE": "concurrency:4",
        "ATTNLOAD_STAGE_DURATION": "60s",
        "ATTNLOAD_SNAPSHOT_INTERVAL": "2",
    }
    master = processes.start([*LOCUST, "--headless"], env=env, name="locust")
    wait_until(lambda: results.is_dir() and any(results.glob("*.json")) and served(sim) > 20, 60, "a snapshot")
    time.sleep(2.5)  # at least one snapshot taken with requests in it
    os.kill(master.pid, signal.SIGKILL)
    master.wait(timeout=10)
    (snapshot,) = results.glob("*.json")
    data = json.loads(snapshot.read_text())
    assert data["interrupted"] is True and data["schema"] == "attnload.results/v1"
    assert 0 < data["models"][0]["requests"]["ok"] <= served(sim)
    assert sorted(p.name for p in results.iterdir()) == [snapshot.name]  # no temporary, no marker: not ended


def test_attnload_run_whose_master_is_killed_reports_the_snapshot_and_exits_1(
    processes: Processes, tmp_path: Path
) -> None:
    sim, config = fixed_sim(processes, tmp_path)
    results = tmp_path / "results"
    run = processes.start(
        attnload(
            "run",
            "-c",
            str(config),
            "--users",
            "4",
            "--duration",
            "60s",
            "--workers",
            "1",
            "--snapshot-interval",
            "2",
            "--results",
            str(results),
            "--metrics-port",
            "0",
        ),
        name="run",
    )
    wait_until(lambda: results.is_dir() and any(results.glob("*.json")) and served(sim) > 20, 60, "a snapshot")
    (master,) = [
        pid for pid in children_of(run.pid) if b"--worker" not in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    ]
    os.kill(master, signal.SIGKILL)
    assert run.wait(timeout=30) == 1, processes.log_of(run)[-3000:]
    log = processes.log_of(run)
    assert "attnload run: error: the run ended before its end (the master was killed)" in log
    assert "Traceback" not in log


def test_sigkill_of_attnload_run_ends_its_master_and_workers(processes: Processes, tmp_path: Path) -> None:
    sim, config = fixed_sim(processes, tmp_path)
    run = processes.start(
        attnload(
            "run",
            "-c",
            str(config),
            "--users",
            "4",
            "--duration",
            "60s",
            "--workers",
            "2",
            "--results",
            str(tmp_path / "results"),
            "--metrics-port",
            "0",
        ),
        name="run",
    )
    wait_until(lambda: served(sim) > 20, 60, "load running")
    children = children_of(run.pid)
    assert len(children) >= 3, children  # master + 2 workers
    os.kill(run.pid, signal.SIGKILL)
    run.wait(timeout=10)
    wait_until(lambda: not any(alive(pid) for pid in children), 15, "master and workers gone")
    sent = served(sim)
    time.sleep(2.0)
    assert served(sim) == sent  # the load stopped with them


@pytest.mark.parametrize(
    ("fault", "shape", "message"),
    [
        ("users", "concurrency:3", "every user crashed (3 of 3)"),
        ("scheduler", "rate:5", "the open-loop scheduler died (RuntimeError: injected fault (scheduler))"),
    ],
)
def test_a_run_that_could_not_send_exits_1_saying_why(
    processes: Processes, tmp_path: Path, fault: str, shape: str, message: str
) -> None:
    sim, config = fixed_sim(processes, tmp_path)
    env = {"ATTNLOAD_TEST_FAULT": fault, "PYTHONPATH": os.pathsep.join([str(FAULTS), os.environ.get("PYTHONPATH", "")])}
    run = processes.start(
        attnload(
            "run",
            "-c",
            str(config),
            "--shape",
            shape,
            "--stage-duration",
            "4s",
            "--workers",
            "1",
            "--results",
            str(tmp_path / "results"),
            "--metrics-port",
            "0",
        ),
        env=env,
        name="run",
    )
    assert run.wait(timeout=90) == 1, processes.log_of(run)[-3000:]
    assert f"attnload run: error: {message}" in processes.log_of(run)
    assert served(sim) == 0


def test_a_run_that_sends_nothing_exits_1(processes: Processes, tmp_path: Path) -> None:
    """0.05 req/s for 4 s rounds to no arrival at all: the run did nothing, and says so."""
    sim, config = fixed_sim(processes, tmp_path)
    results = tmp_path / "results"
    run = processes.start(
        attnload(
            "run",
            "-c",
            str(config),
            "--shape",
            "rate:0.05",
            "--stage-duration",
            "4s",
            "--results",
            str(results),
            "--metrics-port",
            "0",
        ),
        name="run",
    )
    assert run.wait(timeout=90) == 1, processes.log_of(run)[-3000:]
    assert "attnload run: error: nothing was sent" in processes.log_of(run)
    data = json.loads((results / (results / "latest.txt").read_text().strip()).read_text())
    assert data["interrupted"] is False and served(sim) == 0
