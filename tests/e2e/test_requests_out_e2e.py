"""``--requests-out`` against server-side truth, with real processes.

The reference server (bench/reference_server.py, ``--keep-requests``) keeps one entry per stream: when it
read the request, its own TTFT and the tokens it wrote. Each request gets its own TTFT (a base plus a
share per prompt token) and prompts vary in length, so a line is paired with its server request by
prompt tokens and the nearest arrival time, then compared.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from helpers import DIRECT, ROOT, Processes, attnload, free_port, http_json, latest_results, wait_http

REFERENCE = ROOT / "bench" / "reference_server.py"
STATUSES = {"ok", "failed", "cancelled", "abandoned"}
FIELDS = {
    "v",
    "target",
    "model",
    "attention",
    "stage",
    "profile",
    "worker",
    "user",
    "conversation",
    "turn",
    "intended_s",
    "start_s",
    "first_token_s",
    "end_s",
    "ttft_s",
    "ttfat_s",
    "tpot_s",
    "e2e_s",
    "itl_p50_s",
    "itl_max_s",
    "chunks",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "reasoning_tokens",
    "server_reasoning_tokens",
    "status",
    "error_class",
    "http_status",
}


def _server(processes: Processes) -> str:
    port = free_port()
    process = processes.start(
        [
            sys.executable,
            str(REFERENCE),
            "--port",
            str(port),
            "--ttft-ms",
            "15",
            "--itl-ms",
            "150",
            "--ttft-per-kprompt-ms",
            "25",
            "--keep-requests",
        ],
        name="ref",
    )
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/health", process)
    return url


def _config(tmp_path: Path, url: str) -> Path:
    config = {
        "base_url": url + "/v1",
        "models": {
            "gqa_model": {"id": "llama-3-70b", "attention_type": "GQA"},
            "mla_model": {"id": "deepseek-chat", "attention_type": "MLA"},
        },
        "workload": {
            "chat": {
                "prompt_tokens": {"dist": "uniform", "min": 64, "max": 2048},
                "max_tokens": {"dist": "uniform", "min": 3, "max": 8},
            }
        },
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def _lines(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:  # reads every member to EOF, or raises
        text = handle.read()
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def _pair(lines: list[dict[str, Any]], server: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    by_prompt: dict[int, list[dict[str, Any]]] = {}
    for entry in server:
        by_prompt.setdefault(entry["prompt_tokens"], []).append(entry)
    pairs = []
    for line in lines:
        candidates = by_prompt.get(line["prompt_tokens"], [])
        if candidates:
            pairs.append((line, min(candidates, key=lambda e: abs(e["t_recv"] - line["start_s"]))))
    return pairs


def test_one_line_per_request_matching_the_server(processes: Processes, tmp_path: Path) -> None:
    url = _server(processes)
    out = tmp_path / "requests.jsonl.gz"
    run = processes.start(
        attnload(
            "run",
            "-c",
            str(_config(tmp_path, url)),
            "--users",
            "64",
            "--spawn-rate",
            "64",
            "--duration",
            "20s",
            "--workers",
            "2",
            "--stop-timeout",
            "10",
            "--warmup",
            "3s",
            "--results",
            str(tmp_path / "results"),
            "--metrics-port",
            "0",
            "--requests-out",
            str(out),
        ),
        name="run",
    )
    assert run.wait(timeout=150) == 0, processes.log_of(run)[-3000:]
    results = latest_results(tmp_path / "results")
    lines = _lines(out)
    totals = sum(sum(m["requests"].get(k, 0) for k in STATUSES) for m in results["models"])
    assert len(lines) == totals > 300
    assert results["requests_out"] == {
        "path": str(out),
        "schema": "attnload.requests/v1",
        "records": totals,
        "dropped": 0,
    }
    assert all(FIELDS <= set(line) and line["v"] == "attnload.requests/v1" for line in lines)
    assert {line["status"] for line in lines} <= STATUSES
    assert {line["worker"] for line in lines} == {0, 1}
    stages = [line["stage"] for line in lines]  # warm-up requests have a line too, in no stage
    assert stages.count(None) > 30 and stages.count(0) > 300 and set(stages) == {None, 0}
    for model in results["models"]:
        mine = [line for line in lines if line["target"] == model["key"]]
        assert len(mine) == sum(model["requests"].get(k, 0) for k in STATUSES)
        assert sum(line["completion_tokens"] for line in mine) == model["completion_tokens"]
    truth = http_json(url + "/stats")
    server = http_json(url + "/requests")
    (tmp_path / "server_requests.json").write_text(json.dumps(server))  # kept for a failure's diagnosis
    assert (len(lines), sum(line["completion_tokens"] for line in lines)) == (
        truth["received"],
        truth["completion_tokens"],
    )
    ok = [line for line in lines if line["status"] == "ok"]
    for line in ok:  # closed loop: latencies count from the send, and the stamps agree with them
        assert line["intended_s"] is None and line["user"] is not None and line["http_status"] == 200
        assert line["first_token_s"] - line["start_s"] == pytest.approx(line["ttft_s"], abs=2e-6)
        assert line["end_s"] - line["start_s"] == pytest.approx(line["e2e_s"], abs=2e-6)
        assert line["chunks"] == line["completion_tokens"]  # the server sends one token a chunk
    pairs = _pair(ok, server)
    assert len(pairs) == len(ok)
    ttft_gap = statistics.median(abs(line["ttft_s"] - entry["ttft_s"]) for line, entry in pairs)
    arrival_gap = statistics.median(abs(entry["t_recv"] - line["start_s"]) for line, entry in pairs)
    # 3 ms on a machine with CPU to spare; on an oversubscribed one (the shared 2-core box under everyone's
    # tests) the kernel's own wake-up latency between the server's write and the client's read dominates.
    busy = os.getloadavg()[0] / (os.cpu_count() or 1) > 1.5
    assert ttft_gap < (0.010 if busy else 0.003), (ttft_gap, arrival_gap, os.getloadavg())
    assert arrival_gap < 0.01, arrival_gap
    same_tokens = sum(entry["tokens"] == line["completion_tokens"] for line, entry in pairs)
    assert same_tokens >= 0.95 * len(pairs)  # the pairing found the request itself


def test_sigterm_leaves_whole_lines_with_every_completed_request(processes: Processes, tmp_path: Path) -> None:
    url = _server(processes)
    out = tmp_path / "requests.jsonl.gz"
    run = processes.start(
        attnload(
            "run",
            "-c",
            str(_config(tmp_path, url)),
            "--users",
            "32",
            "--duration",
            "120s",
            "--workers",
            "2",
            "--results",
            str(tmp_path / "results"),
            "--metrics-port",
            "0",
            "--requests-out",
            str(out),
        ),
        name="run",
    )
    deadline = time.monotonic() + 60
    while not (out.exists() and out.stat().st_size > 0):  # the first worker report has arrived
        assert time.monotonic() < deadline and run.poll() is None, processes.log_of(run)[-3000:]
        time.sleep(0.2)
    time.sleep(4.0)
    signalled = time.time()
    run.send_signal(signal.SIGTERM)
    assert run.wait(timeout=60) == 128 + signal.SIGTERM, processes.log_of(run)[-3000:]
    lines = _lines(out)  # whole lines only, and gzip reads to the end
    results = latest_results(tmp_path / "results")
    assert results["interrupted"] is True
    totals = sum(sum(m["requests"].get(k, 0) for k in STATUSES) for m in results["models"])
    assert len(lines) == totals == results["requests_out"]["records"]
    server = http_json(url + "/requests")
    (tmp_path / "server_requests.json").write_text(json.dumps(server))  # kept for a failure's diagnosis
    done_before = [e for e in server if e["done"] and e["t_end"] < signalled]
    assert len(done_before) > 100
    by_prompt: dict[int, list[float]] = {}
    for line in lines:
        if line["status"] == "ok":
            by_prompt.setdefault(line["prompt_tokens"], []).append(line["end_s"])
    missing = [
        e
        for e in done_before  # each has a line that ended a moment after the server's last write
        if not any(-0.01 < end - e["t_end"] < 0.25 for end in by_prompt.get(e["prompt_tokens"], []))
    ]
    assert missing == [], (len(missing), signalled)


def test_the_environment_twin_in_a_single_process(processes: Processes, tmp_path: Path) -> None:
    """No workers: the process writes its own lines as it goes; plain JSONL for a name without .gz."""
    url = _server(processes)
    run = processes.start(
        attnload(
            "run",
            "-c",
            str(_config(tmp_path, url)),
            "--users",
            "8",
            "--duration",
            "6s",
            "--stop-timeout",
            "10",
            "--results",
            str(tmp_path / "results"),
            "--metrics-port",
            "0",
        ),
        env={"ATTNLOAD_REQUESTS_OUT": "lines.jsonl"},
        name="run",
        cwd=tmp_path,
    )
    assert run.wait(timeout=120) == 0, processes.log_of(run)[-3000:]
    results = latest_results(tmp_path / "results")
    text = (tmp_path / "lines.jsonl").read_text()  # relative to where the run was started
    lines = [json.loads(line) for line in text.splitlines()]
    totals = sum(sum(m["requests"].get(k, 0) for k in STATUSES) for m in results["models"])
    assert text.endswith("\n") and len(lines) == totals == results["requests_out"]["records"] > 20
    assert {line["worker"] for line in lines} == {0}
    assert sum(line["completion_tokens"] for line in lines) == http_json(url + "/stats")["completion_tokens"]
    html = next((tmp_path / "results").glob("*.html")).read_text()
    assert 'id="plot-ttft-scatter"' in html  # the run's own report draws the scatter


@pytest.mark.slow
def test_the_master_stays_small_at_10k_streams() -> None:
    """bench/requests_memory.py: 10,000 concurrent streams through 4 local workers, master RSS < 300 MB."""
    import subprocess

    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "requests_memory.py"),
            "--streams",
            "10000",
            "--workers",
            "4",
            "--duration-s",
            "30",
        ],
        capture_output=True,
        text=True,
        timeout=420,
        cwd=ROOT / "bench",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "master peak RSS" in done.stdout


def test_open_loop_conversations_carry_intended_start_and_turns(processes: Processes, tmp_path: Path) -> None:
    url = _server(processes)
    config = json.loads(_config(tmp_path, url).read_text())
    config["workload"] = {
        "dialog": {"conversation": {"turns": 3, "think_time_s": 0.1, "user_tokens": 64}, "max_tokens": 4}
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    out = tmp_path / "r.jsonl.gz"
    run = processes.start(
        attnload(
            "run",
            "-c",
            str(path),
            "--shape",
            "rate:4",
            "--stage-duration",
            "6s",
            "--stop-timeout",
            "10",
            "--results",
            str(tmp_path / "results"),
            "--metrics-port",
            "0",
            "--requests-out",
            str(out),
        ),
        name="run",
    )
    assert run.wait(timeout=120) == 0, processes.log_of(run)[-3000:]
    results = latest_results(tmp_path / "results")
    lines = _lines(out)
    assert len(lines) == sum(sum(m["requests"].get(k, 0) for k in STATUSES) for m in results["models"]) > 20
    conversations: dict[str, list[int]] = {}
    for line in lines:
        assert line["user"] is None and line["intended_s"] is not None  # open loop: no user, a schedule
        assert line["start_s"] >= line["intended_s"] - 1e-6
        assert line["dispatch_lag_s"] == pytest.approx(line["start_s"] - line["intended_s"], abs=2e-6)
        conversations.setdefault(line["conversation"], []).append(line["turn"])
    assert None not in conversations
    complete = [turns for turns in conversations.values() if len(turns) == 3]
    assert len(complete) >= 5 and all(sorted(turns) == [1, 2, 3] for turns in complete)
    assert all(sorted(turns) == list(range(1, len(turns) + 1)) for turns in conversations.values())


def test_swarm_asks_for_the_file_per_test_as_cluster_run_does(processes: Processes, tmp_path: Path) -> None:
    """Plain Locust master + 2 workers, a test started through /swarm with ``attnload_requests_out`` (what
    ``attnload cluster run --requests-out NAME`` posts): the workers get it from the master, the master
    writes it in its results directory, and a later test without it leaves that file alone."""
    import urllib.parse
    import urllib.request

    url = _server(processes)
    results_dir = tmp_path / "results"
    web, master_port = free_port(), free_port()
    env = {
        "ATTNLOAD_CONFIG": str(_config(tmp_path, url)),
        "ATTNLOAD_RESULTS": str(results_dir),
        "ATTNLOAD_METRICS_PORT": "0",
    }
    locust = [sys.executable, "-m", "locust", "-f", str(ROOT / "locustfiles" / "chat.py")]
    master = processes.start(
        [
            *locust,
            "--master",
            "--stop-timeout",
            "10",
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
    for _ in range(2):
        processes.start(
            [*locust, "--worker", "--master-host", "127.0.0.1", "--master-port", str(master_port)],
            env=env,
            name="worker",
        )
    base = f"http://127.0.0.1:{web}"
    wait_http(base + "/", master)

    def one_test(extra: dict[str, str]) -> None:
        deadline = time.monotonic() + 60  # both workers ready (after a test they report in again)
        while [w["state"] for w in http_json(base + "/stats/requests")["workers"]] != ["ready", "ready"]:
            assert time.monotonic() < deadline, "workers did not connect"
            time.sleep(0.3)
        marker = results_dir / "latest.txt"
        before = marker.stat().st_mtime if marker.exists() else 0.0
        form = {"user_count": "8", "spawn_rate": "8", "run_time": "5s", **extra}
        request = urllib.request.Request(
            base + "/swarm",
            data=urllib.parse.urlencode(form).encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        with DIRECT.open(request, timeout=10) as reply:
            assert json.loads(reply.read())["success"]
        deadline = time.monotonic() + 90
        while not (marker.exists() and marker.stat().st_mtime > before):
            assert time.monotonic() < deadline and master.poll() is None, processes.log_of(master)[-3000:]
            time.sleep(0.3)
        time.sleep(2.0)  # the master rewrites once more after the final worker reports

    one_test({"attnload_requests_out": "swarm.jsonl.gz"})
    results = latest_results(results_dir)
    lines = _lines(results_dir / "swarm.jsonl.gz")
    totals = sum(sum(m["requests"].get(k, 0) for k in STATUSES) for m in results["models"])
    assert len(lines) == totals == results["requests_out"]["records"] > 10
    assert {line["worker"] for line in lines} == {0, 1}  # both workers were told through the master
    kept = (results_dir / "swarm.jsonl.gz").read_bytes()
    one_test({})
    assert latest_results(results_dir).get("requests_out") is None
    assert (results_dir / "swarm.jsonl.gz").read_bytes() == kept
