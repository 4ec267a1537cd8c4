"""Runaway servers with real processes: `attnload run` and `attnload check` stay bounded.

Against each mode of tests/fakes/runaway_server.py (an endless SSE line, endless events with no
[DONE], an endless 200 HTML body, an endless header), `attnload run --duration 5s` with a
master and a worker must end within 20 s with results written and the failures under the
mode's class, every client process below 300 MB RSS the whole time; `attnload check` must
return within its total timeout + 5 s, also below 300 MB, and so must it against a server that
trickles one event a second for ever (only the wall-clock total timeout can end that one).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from helpers import FAKES, Processes, attnload, free_port, http_json, latest_results, wait_http
from runaway_server import EXPECTED, MODES

RSS_LIMIT_MB = 300.0
LEAK_GUARD_MB = 150.0
"""Each run process measured ~70 MB here; a per-request leak (failed requests' buffers kept alive by
traceback cycles until the 10-minute full GC) took the worker to ~180 MB in these 5 s and 780 MB in 30 s."""
TOTAL_TIMEOUT_S = 5.0


def start_runaway(processes: Processes) -> str:
    port = free_port()
    process = processes.start(
        [sys.executable, str(FAKES / "runaway_server.py"), "--port", str(port), "--limit-s", "60"],
        name="runaway",
    )
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/v1/models", process)
    return url


def runaway_config(directory: Path, base_url: str, mode: str) -> Path:
    data = {
        "base_url": base_url,
        "models": {"runaway": {"id": mode, "attention_type": "MLA"}},
        "test_prompts": {"short": "hello"},
        "request": {"max_tokens": 8, "ttft_timeout_s": 3.0, "idle_timeout_s": 3.0, "total_timeout_s": TOTAL_TIMEOUT_S},
    }
    path = directory / "config.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return 0.0


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants, from /proc (the master and workers are children of `attnload run`)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


class RssSampler:
    """Samples the RSS of a process tree every 0.2 s; ``peak`` is the largest one process reached."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process
        self.peak: dict[int, float] = {}
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while self.process.poll() is None:
            for pid in _tree(self.process.pid):
                self.peak[pid] = max(self.peak.get(pid, 0.0), _rss_mb(pid))
            time.sleep(0.2)

    def stop(self) -> dict[int, float]:
        self._thread.join(5)
        return self.peak


@pytest.mark.parametrize("mode", MODES)
def test_run_against_a_runaway_server_ends_with_results(processes: Processes, tmp_path: Path, mode: str) -> None:
    server = start_runaway(processes)
    config = runaway_config(tmp_path, server, mode)
    results = tmp_path / "results"
    started = time.monotonic()
    run = processes.start(
        attnload(
            "run",
            "-c",
            str(config),
            "--users",
            "4",
            "--spawn-rate",
            "4",
            "--duration",
            "5s",
            "--workers",
            "1",
            "--results",
            str(results),
            "--metrics-port",
            "0",
        ),
        name="run",
    )
    sampler = RssSampler(run)
    try:
        run.wait(timeout=20 + 40)  # startup of three Python processes on a busy machine is not the run's fault
    except subprocess.TimeoutExpired:
        pytest.fail(f"attnload run did not end: {processes.log_of(run)[-3000:]}")
    elapsed = time.monotonic() - started
    peak = sampler.stop()
    log = processes.log_of(run)
    assert "Traceback" not in log, log[-3000:]
    assert len(peak) >= 3, peak  # attnload run, its master and its worker were all sampled
    assert max(peak.values()) < min(RSS_LIMIT_MB, LEAK_GUARD_MB), peak
    data = latest_results(results)
    summary = data["models"][0]
    assert summary["errors"].get(EXPECTED[mode], 0) > 0, summary
    assert summary["requests"]["ok"] == 0 and summary["requests"]["failed"] > 0, summary
    assert set(summary["errors"]) <= {EXPECTED[mode], "cancelled"}, summary
    assert http_json(server + "/counts")["counts"][mode] >= summary["requests"]["failed"]
    print(f"{mode}: run ended in {elapsed:.1f} s, peak RSS MB per process {sorted(peak.values())}")
    assert elapsed < 20, (elapsed, log[-2000:])  # 5 s of load, start-up and the stop (measured ~11 s at load 10)


@pytest.mark.parametrize("mode", (*MODES, "trickle"))
def test_check_against_a_runaway_server_returns_in_time(processes: Processes, tmp_path: Path, mode: str) -> None:
    server = start_runaway(processes)
    config = runaway_config(tmp_path, server, mode)
    started = time.monotonic()
    check = processes.start(attnload("check", "-c", str(config)), name="check")
    sampler = RssSampler(check)
    try:
        code = check.wait(timeout=TOTAL_TIMEOUT_S + 5 + 10)  # + interpreter start-up (openai import) under load
    except subprocess.TimeoutExpired:
        pytest.fail(f"attnload check did not return: {processes.log_of(check)[-3000:]}")
    elapsed = time.monotonic() - started
    peak = sampler.stop()
    output = processes.log_of(check)
    assert code == 1, output
    assert "Traceback" not in output and "\x1b" not in output, output
    assert f"verdict: FAILED {EXPECTED[mode]}" in output, output
    assert max(peak.values()) < RSS_LIMIT_MB, peak
    print(f"{mode}: check returned in {elapsed:.1f} s, peak RSS MB {sorted(peak.values())}")
    assert elapsed < TOTAL_TIMEOUT_S + 5, (elapsed, output)  # start-up included (measured ~1.6 s)
