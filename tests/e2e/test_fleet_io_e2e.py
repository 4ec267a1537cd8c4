"""A cluster's faults around the run, with real processes against the fixed-mode simulator: a model server
that dies and comes back (users back off, then resume), results that cannot be lost to an unwritable disk,
and true words at the end when a Locust process is stopped by a signal."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from attnload.results.model import load_results
from attnload.results.write import fallback_dir
from helpers import ROOT, Processes, attnload, free_port, http_json, latest_results, wait_http, write_config

LOCUST = [sys.executable, "-m", "locust", "-f", str(ROOT / "locustfiles" / "chat.py")]
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


@pytest.mark.scenario
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


def one_model_sim(processes: Processes, tmp_path: Path) -> tuple[str, Path]:
    _, url = sim_on(processes, free_port())
    config = write_config(
        tmp_path, url, models={"m": ("llama-3-70b", "GQA")}, benchmark={"max_tokens": 10, "temperature": 0}
    )
    return url, config


def served(url: str) -> int:
    return int(http_json(url + "/stats")["models"].get("llama-3-70b", {}).get("received", 0))


def read_only(directory: Path) -> Callable[[], None]:
    """Make ``directory`` refuse new files, for any user: chmod for others, ``chattr +i`` for root (whom
    permission bits do not stop). Returns the undo; skips when neither is possible here."""
    directory.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        directory.chmod(0o555)
        return lambda: directory.chmod(0o755)
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(directory)], capture_output=True).returncode != 0:
        pytest.skip("running as root without a working `chattr +i`: no way to make a directory read-only here")
    return lambda: subprocess.run([chattr, "-i", str(directory)], check=False)


def test_results_in_a_read_only_directory_exit_2_before_any_request(processes: Processes, tmp_path: Path) -> None:
    url, config = one_model_sim(processes, tmp_path)
    results = tmp_path / "results"
    undo = read_only(results)
    try:
        done = subprocess.run(
            run_args(config, results, "--users", "2", "--duration", "5s"), capture_output=True, text=True, timeout=60
        )
    finally:
        undo()
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"--results {results}: not writable" in lines[0], done.stderr
    assert "choose a writable directory" in lines[0] and "Traceback" not in done.stderr
    assert served(url) == 0


@pytest.mark.scenario
@pytest.mark.parametrize("how", ["read-only", "replaced by a file"])
def test_results_directory_unwritable_mid_run_go_to_a_named_fallback(
    processes: Processes, tmp_path: Path, how: str
) -> None:
    url, config = one_model_sim(processes, tmp_path)
    results = tmp_path / "results"
    fallback = fallback_dir(results)
    shutil.rmtree(fallback, ignore_errors=True)
    run = processes.start(
        run_args(config, results, "--users", "2", "--duration", "12s", "--snapshot-interval", "1"), name="run"
    )
    wait_until(lambda: served(url) > 5 and any(results.glob("*.json")), 60, "load running and a snapshot")
    undo: Callable[[], None] = lambda: None  # noqa: E731
    if how == "read-only":
        undo = read_only(results)
    else:
        results.rename(tmp_path / "results.moved")
        results.write_text("not a directory")
    try:
        code = run.wait(timeout=60)
    finally:
        undo()
    log = processes.log_of(run)
    assert code == 0, log[-3000:]
    assert "TTFT ms" in log  # the final table
    path = fallback / (fallback / "latest.txt").read_text().strip()
    assert f"results: {path}" in log and f"written to {fallback} instead" in log, log[-3000:]
    data = load_results(path)
    assert data.snapshot is False and data.interrupted is False
    assert data.models[0].requests.ok + data.models[0].requests.cancelled == served(url)
    shutil.rmtree(fallback, ignore_errors=True)


def locust_processes(run_pid: int) -> tuple[int, list[int]]:
    """The Locust master and workers ``attnload run`` started (from /proc)."""
    master, workers = 0, []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == run_pid and b"locust" in argv:
            if b"--worker" in argv:
                workers.append(int(entry.name))
            else:
                master = int(entry.name)
    return master, workers


@pytest.mark.scenario
@pytest.mark.parametrize("which", ["master", "worker"])
def test_sigterm_to_a_locust_process_exits_143_with_complete_results(
    processes: Processes, tmp_path: Path, which: str
) -> None:
    url, config = one_model_sim(processes, tmp_path)
    results = tmp_path / "results"
    duration = "60s" if which == "master" else "12s"
    run = processes.start(
        run_args(config, results, "--users", "4", "--duration", duration, "--workers", "2"), name="run"
    )
    wait_until(lambda: served(url) > 20, 60, "load running")
    master, workers = locust_processes(run.pid)
    assert master and len(workers) == 2
    os.kill(master if which == "master" else workers[0], signal.SIGTERM)
    code = run.wait(timeout=60)
    log = processes.log_of(run)
    assert code == 143, log[-3000:]
    data = latest_results(results)
    assert data["interrupted"] is (which == "master") and data["snapshot"] is False
    requests = data["models"][0]["requests"]
    assert requests["ok"] + requests["failed"] + requests["cancelled"] == served(url), requests
    said = "of the Locust master: results so far written" if which == "master" else "of Locust worker"
    assert "killed" not in log and f"interrupted by SIGTERM {said}" in log, log[-3000:]


@pytest.mark.scenario
def test_sigkill_of_attnload_run_still_collects_the_workers_final_counts(processes: Processes, tmp_path: Path) -> None:
    url, config = one_model_sim(processes, tmp_path)
    results = tmp_path / "results"
    run = processes.start(run_args(config, results, "--users", "4", "--duration", "60s", "--workers", "2"), name="run")
    wait_until(lambda: served(url) > 20, 60, "load running")
    _, workers = locust_processes(run.pid)
    run.kill()
    run.wait()
    wait_until(lambda: (results / "latest.txt").exists(), 30, "the master's final write")
    wait_until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in workers), 30, "the workers' end")
    data = latest_results(results)
    requests = data["models"][0]["requests"]
    assert data["snapshot"] is False and data["client"]["workers"] == 2
    assert requests["ok"] + requests["failed"] + requests["cancelled"] == served(url), requests


@pytest.mark.scenario
def test_open_loop_arrivals_inside_the_backoff_are_counted_dropped(processes: Processes, tmp_path: Path) -> None:
    """rate:20 for 14 s (280 arrivals); the server is gone for 5 s of it. Without a backoff each of its ~100
    arrivals would fail at once; with it a few probe, the rest are dropped, and none vanishes."""
    port = free_port()
    sim, url = sim_on(processes, port)
    config = write_config(
        tmp_path, url, models={"m": ("llama-3-70b", "GQA")}, benchmark={"max_tokens": 10, "temperature": 0}
    )
    results = tmp_path / "results"
    extra = ("--shape", "rate:20", "--stage-duration", "14s", "--arrivals", "constant")
    run = processes.start(run_args(config, results, *extra), name="run")
    wait_until(lambda: served(url) > 20, 60, "load running")
    sim.kill()
    sim.wait()
    time.sleep(5.0)
    sim_on(processes, port)
    assert run.wait(timeout=90) == 1, processes.log_of(run)[-3000:]  # the probes failed
    requests = latest_results(results)["models"][0]["requests"]
    errors = latest_results(results)["models"][0]["errors"]
    assert requests["dropped"] >= 50 and errors.get("connection", 0) <= 30, (requests, errors)
    arrivals = requests["ok"] + requests["failed"] + requests["cancelled"] + requests["dropped"]
    assert arrivals == pytest.approx(280, abs=8), requests


def test_plain_locust_with_an_unwritable_results_directory_exits_2_at_start(
    processes: Processes, tmp_path: Path
) -> None:
    url, config = one_model_sim(processes, tmp_path)
    blocker = tmp_path / "results"
    blocker.write_text("a file, not a directory")
    env = {**os.environ, "ATTNLOAD_CONFIG": str(config), "ATTNLOAD_RESULTS": str(blocker), "ATTNLOAD_METRICS_PORT": "0"}
    env.pop("ATTNLOAD_PARENT_PID", None)
    done = subprocess.run(
        [*LOCUST, "--headless", "-u", "2", "-r", "2", "-t", "5s"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"--attnload-results {blocker}: not writable" in done.stderr and "Traceback" not in done.stderr
    assert served(url) == 0
