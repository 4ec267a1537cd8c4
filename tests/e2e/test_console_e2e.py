"""The console of ``attnload run``, with real processes against the fixed-mode simulator.

Piped (as in CI): no Locust request table from the master or the workers, and one progress line per
stage (the 30 s cadence between stage changes is checked with a fake clock in
``tests/test_report_progress.py``); ``--locust-stats`` brings Locust's tables back. On a terminal (a
pty): the progress line is redrawn in place with carriage returns, and the final tables follow.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import termios
import time
from pathlib import Path

from helpers import Processes, attnload, free_port, latest_results, start_sim, write_config

LOCUST_TABLE_MARKS = ("Aggregated", "Response time percentiles", "# reqs", "# fails")
"""Headers and rows of Locust's stats, percentile and error tables."""
PROGRESS = re.compile(r"^stage (\d+)/(\d+) · .* elapsed, .* left · ok \d+ failed \d+ · gqa_model .* · mla_model .*$")


def sim_config(processes: Processes, tmp_path: Path) -> Path:
    sim = start_sim(processes, "--mode", "fixed", "--ttft-ms", "50", "--itl-ms", "10")
    return write_config(tmp_path, sim + "/api", benchmark={"max_tokens": 16, "repeat": 1})


def run_piped(processes: Processes, config: Path, results: Path, *extra: str) -> str:
    process = processes.start(
        attnload(
            "run",
            "-c",
            str(config),
            "--shape",
            "concurrency:2,4",
            "--stage-duration",
            "4s",
            "--workers",
            "1",
            "--metrics-port",
            str(free_port()),
            "--results",
            str(results),
            *extra,
        ),
        env={"CI": ""},
        name="run",
    )
    assert process.wait(timeout=120) == 0, processes.log_of(process)
    return processes.log_of(process)


def test_piped_run_prints_no_locust_table_and_one_progress_line_per_stage(processes: Processes, tmp_path: Path) -> None:
    config = sim_config(processes, tmp_path)
    log = run_piped(processes, config, tmp_path / "results")
    for mark in LOCUST_TABLE_MARKS:
        assert mark not in log, log
    progress = [line for line in log.splitlines() if line.startswith("stage ")]
    assert [PROGRESS.match(line) is not None for line in progress] == [True] * len(progress), progress
    assert [line.split(" · ")[0] for line in progress] == ["stage 1/2", "stage 2/2"], log  # 8 s: no 30 s line
    assert "\r" not in log and "\x1b[K" not in log
    assert "attnload results (medians first)" in log  # attnload's own tables stay
    models = latest_results(tmp_path / "results")["models"]
    assert all(m["requests"]["ok"] > 0 and m["requests"]["failed"] == 0 for m in models)


def test_locust_stats_brings_locust_tables_back(processes: Processes, tmp_path: Path) -> None:
    config = sim_config(processes, tmp_path)
    log = run_piped(processes, config, tmp_path / "results", "--locust-stats")
    assert "Response time percentiles" in log and "Aggregated" in log, log
    assert "attnload results (medians first)" in log


def test_env_variable_brings_locust_tables_back(processes: Processes, tmp_path: Path) -> None:
    config = sim_config(processes, tmp_path)
    process = processes.start(
        attnload(
            "run",
            "-c",
            str(config),
            "-u",
            "2",
            "-t",
            "3s",
            "--metrics-port",
            str(free_port()),
            "--results",
            str(tmp_path / "results"),
        ),
        env={"ATTNLOAD_LOCUST_STATS": "1"},
        name="run",
    )
    assert process.wait(timeout=120) == 0
    assert "Response time percentiles" in processes.log_of(process)


def read_pty(fd: int, pid: int, timeout_s: float) -> bytes:
    """Everything the child writes to its terminal until it exits (or ``timeout_s``, then it is killed)."""
    out = b""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
    else:
        os.killpg(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return out


def test_terminal_gets_one_line_redrawn_in_place(processes: Processes, tmp_path: Path) -> None:
    config = sim_config(processes, tmp_path)
    command = attnload(
        "run",
        "-c",
        str(config),
        "--shape",
        "concurrency:2,4",
        "--stage-duration",
        "3s",
        "--metrics-port",
        str(free_port()),
        "--results",
        str(tmp_path / "results"),
    )
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {"TERM": "xterm"}
    pid, fd = pty.fork()
    if pid == 0:  # the child (pty.fork made it a session leader: its group is killable as one)
        try:
            os.execvpe(command[0], command, env)
        finally:
            os._exit(127)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    try:
        text = read_pty(fd, pid, timeout_s=90).decode(errors="replace")
    finally:
        os.close(fd)
    assert text.index("verdict") < text.index("attnload results")  # the answer first, then the tables
    before_tables = text.split("verdict")[0]
    draws = [part.split("\x1b[K")[0] for part in before_tables.split("\r") if part.startswith("stage ")]
    assert len(draws) >= 4, text[:2000]  # redrawn every second over ~6 s
    assert {d.split(" · ")[0] for d in draws} == {"stage 1/2", "stage 2/2"}
    assert all(PROGRESS.match(d.strip()) for d in draws), draws
    assert before_tables.count("\n") <= 2, before_tables  # one line on screen, not one per update
    assert "Aggregated" not in text and "attnload results" in text
