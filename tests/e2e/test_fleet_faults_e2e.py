"""A fleet that fails like a cluster, with real processes against `attnload sim --mode fixed`: a worker
SIGKILLed (lost, with its unreported traffic estimated), a worker SIGSTOPped and resumed (stalled, not
lost, its requests across the freeze marked), and a worker with another config joining (refused).

The simulator's own counters are the truth every count is held to.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from helpers import ROOT, Processes, attnload, free_port, http_json, latest_results, start_sim, write_config

pytestmark = pytest.mark.scenario  # minutes of wall clock: `make test-scenarios`, a CI step of its own

LOCUST = [sys.executable, "-m", "locust", "-f", str(ROOT / "locustfiles" / "chat.py")]
MODEL_IDS = {"gqa_model": "llama-3-70b", "mla_model": "deepseek-v3"}
"""The simulator's /stats keys (it serves deepseek-chat, the config's id, as the deepseek-v3 preset)."""


def _sim_and_config(processes: Processes, tmp_path: Path, *sim_args: str) -> tuple[str, Path]:
    sim = start_sim(processes, "--mode", "fixed", "--ttft-ms", "50", "--itl-ms", "10", *sim_args)
    config = write_config(
        tmp_path,
        sim + "/api",
        test_prompts={"short": "hello"},
        benchmark={"max_tokens": 32, "repeat": 1, "temperature": 0},
    )
    return sim, config


def _workers(run_pid: int) -> list[Any]:
    psutil = pytest.importorskip("psutil")
    children = psutil.Process(run_pid).children(recursive=True)
    return sorted((p for p in children if "--worker" in p.cmdline()), key=lambda p: p.pid)


def _wait_for(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"{what} within {timeout_s} s"
        time.sleep(0.2)


def _received(sim: str) -> dict[str, dict[str, int]]:
    stats = http_json(sim + "/stats")["models"]
    return {key: stats.get(MODEL_IDS[key], {}) for key in MODEL_IDS}


def _start_run(processes: Processes, tmp_path: Path, config: Path, *extra: str) -> tuple[Any, Path]:
    results = tmp_path / "results"
    run = processes.start(
        attnload(
            "run",
            "-c",
            str(config),
            "--users",
            "16",
            "--duration",
            "30s",
            "--workers",
            "2",
            "--results",
            str(results),
            "--metrics-port",
            str(free_port()),
            *extra,
        ),
        name="run",
    )
    _wait_for(lambda: len(_workers(run.pid)) == 2, 60, "two workers started")
    return run, results


def test_sigkill_one_worker_states_the_loss_and_its_gap(processes: Processes, tmp_path: Path) -> None:
    """Killed 10 s into 30 s: a console line, `worker_lost`, the unreported estimate closes the count."""
    sim, config = _sim_and_config(processes, tmp_path)
    run, results = _start_run(processes, tmp_path, config, "--fail-on", "worker-lost")
    _wait_for(lambda: sum(m.get("received", 0) for m in _received(sim).values()) > 0, 60, "first request")
    time.sleep(10.0)
    victim = _workers(run.pid)[0]
    os.kill(victim.pid, signal.SIGKILL)
    code = run.wait(timeout=120)
    log = processes.log_of(run)
    assert code == 1, log[-3000:]  # --fail-on worker-lost; without it the run exits 0 (tests/test_fleet_faults.py)
    assert "Traceback" not in log
    lost_lines = [
        line for line in log.splitlines() if re.search(r"worker \S+ \(pid \d+\) lost at [\d.]+ s with \d+ users", line)
    ]
    assert len(lost_lines) == 1, log[-3000:]
    assert "worker lost:" in log  # the --fail-on reason

    data = latest_results(results)
    client = data["client"]
    assert client["workers"] == 2 and client["workers_lost"] == 1, client
    (lost,) = client["lost_workers"]
    assert lost["worker"] in lost_lines[0] and f"(pid {victim.pid})" in lost_lines[0]
    assert lost["pid"] == victim.pid
    assert sum(lost["users"].values()) == 8, lost
    assert 8.0 <= lost["lost_at_s"] <= 14.0, lost
    assert data["partial"]["workers"] == [lost["worker"]]
    truth = _received(sim)
    for model in data["models"]:
        stage = model["stages"][0]
        assert "worker_lost" in stage["flags"], stage
        assert stage["users"] == 4, stage  # what was left: 8 users per model less the 4 the lost worker had
        unreported = lost["unreported"][model["key"]]
        assert unreported["requests"] > 0, unreported
        requests = model["requests"]
        counted = requests["ok"] + requests["failed"] + requests["cancelled"]
        received = truth[model["key"]]["received"]
        assert counted < received  # the gap is real
        assert abs(counted + unreported["requests"] - received) <= 0.2 * received, (counted, unreported, received)
        assert unreported["server_minus_client_output_tokens"] > 0, unreported


def test_sigstop_worker_is_stalled_not_lost_and_counts_stay_exact(processes: Processes, tmp_path: Path) -> None:
    """Frozen 8 s then resumed: `workers_lost` 0, `worker_stalled`, every request counted, marked lines."""
    sim, config = _sim_and_config(processes, tmp_path)
    out = tmp_path / "requests.jsonl.gz"
    run, results = _start_run(processes, tmp_path, config, "--stop-timeout", "10", "--requests-out", str(out))
    _wait_for(lambda: sum(m.get("received", 0) for m in _received(sim).values()) > 0, 60, "first request")
    time.sleep(6.0)
    victim = _workers(run.pid)[0]
    os.kill(victim.pid, signal.SIGSTOP)
    time.sleep(8.0)
    os.kill(victim.pid, signal.SIGCONT)
    code = run.wait(timeout=120)
    log = processes.log_of(run)
    assert code == 0, log[-3000:]
    assert "Traceback" not in log
    assert re.search(rf"worker \S+ \(pid {victim.pid}\) is back after [\d.]+ s: stalled, not lost", log), log[-3000:]

    data = latest_results(results)
    client = data["client"]
    assert client["workers"] == 2 and client["workers_lost"] == 0, client
    assert client["lost_workers"] == [] and data["partial"] is None
    stalls = client["stalled_workers"]
    assert stalls and all(s["worker"] == stalls[0]["worker"] for s in stalls), stalls
    assert 7.0 <= max(s["duration_s"] for s in stalls) <= 10.0, stalls
    truth = _received(sim)
    for model in data["models"]:
        assert "worker_stalled" in model["stages"][0]["flags"], model["stages"][0]
        requests = model["requests"]
        assert requests["ok"] + requests["failed"] + requests["cancelled"] == truth[model["key"]]["received"]
        assert requests["ok"] == truth[model["key"]]["completed"]
    with gzip.open(out, "rt", encoding="utf-8") as lines:
        marked = [json.loads(line) for line in lines if "worker_stalled_s" in line]
    assert marked, "no request line carries the freeze"
    assert all(line["worker_stalled"] and 5.0 <= line["worker_stalled_s"] <= 10.0 for line in marked), marked[:3]
    assert client["workers_stalled"] == 1
    assert sum(s["requests"] for s in stalls) == len(marked)


def test_worker_with_another_config_is_refused(processes: Processes, tmp_path: Path) -> None:
    """A plain Locust worker on another config joins mid-run: one warning line, results untouched."""
    sim, config = _sim_and_config(processes, tmp_path, "--models", "llama-3-70b,deepseek-v3,llama-3-8b")
    other = tmp_path / "other"
    other.mkdir()
    foreign_config = write_config(
        other,
        sim + "/api",
        models={"foreign": ("llama-3-8b", "GQA")},
        test_prompts={"short": "hello"},
        benchmark={"max_tokens": 32, "repeat": 1},
    )
    results = tmp_path / "results"
    run = processes.start(
        attnload(
            "run", "-c", str(config), "--users", "8", "--duration", "20s", "--workers", "2",
            "--results", str(results), "--metrics-port", str(free_port()),
        ),
        name="run",
    )  # fmt: skip
    _wait_for(lambda: sum(m.get("received", 0) for m in _received(sim).values()) > 0, 60, "first request")
    psutil = pytest.importorskip("psutil")
    master = next(p for p in psutil.Process(run.pid).children(recursive=True) if "--master" in p.cmdline())
    cmd = master.cmdline()
    port = cmd[cmd.index("--master-bind-port") + 1]
    foreign = processes.start(
        [*LOCUST, "--worker", "--master-host", "127.0.0.1", "--master-port", port],
        env={"ATTNLOAD_CONFIG": str(foreign_config), "ATTNLOAD_RESULTS": str(other / "results")},
        name="foreign",
    )
    assert foreign.wait(timeout=60) is not None  # told to quit
    assert run.wait(timeout=90) == 0, processes.log_of(run)[-3000:]
    log = processes.log_of(run)
    refused = [line for line in log.splitlines() if "refused:" in line]
    assert len(refused) == 1, log[-3000:]
    assert re.search(r"config sha256 [0-9a-f]{64} .* vs the master's [0-9a-f]{64}", refused[0]), refused[0]
    assert f"(pid {foreign.pid})" in refused[0]

    data = latest_results(results)
    assert data["config_sha256"] in refused[0]
    assert data["client"]["workers"] == 2, data["client"]
    (entry,) = data["client"]["refused_workers"]
    assert entry["worker"] in refused[0] and entry["admitted"] is False
    assert {m["key"] for m in data["models"]} == set(MODEL_IDS)
    for model in data["models"]:
        assert [s["users"] for s in model["stages"]] == [4], model["stages"]
    stats = http_json(sim + "/stats")["models"]
    assert set(stats) >= {"llama-3-8b", *MODEL_IDS.values()}, stats  # the foreign model is served...
    assert stats["llama-3-8b"]["received"] == 0, stats  # ...and never asked


def test_restart_lost_users_puts_them_back_on_the_worker_left(processes: Processes, tmp_path: Path) -> None:
    """`--restart-lost-users`: after the loss the stage ends with all 16 users again, on one worker."""
    sim, config = _sim_and_config(processes, tmp_path)
    run, results = _start_run(processes, tmp_path, config, "--restart-lost-users")
    _wait_for(lambda: sum(m.get("received", 0) for m in _received(sim).values()) > 0, 60, "first request")
    time.sleep(4.0)
    os.kill(_workers(run.pid)[0].pid, signal.SIGKILL)
    assert run.wait(timeout=120) == 0, processes.log_of(run)[-3000:]
    log = processes.log_of(run)
    assert "restarting the lost users on the 1 workers left" in log, log[-3000:]
    data = latest_results(results)
    assert data["client"]["workers_lost"] == 1
    for model in data["models"]:
        stage = model["stages"][0]
        assert "worker_lost" in stage["flags"] and stage["users"] == 8, stage
