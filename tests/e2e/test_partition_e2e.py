"""A worker cut off from the network (a partition, not a freeze) is a stall: its requests are marked.

A plain Locust master with attnload's locustfile, one worker beside it and one in a network namespace
whose veth link to the master and the simulator goes down for 15 s. The cut-off worker keeps running,
so no tick of its loop is late; it hears no answer to its heartbeats instead, and every request it had
in flight across the silence is marked and left out of the latencies given beside the whole.
Needs root (``ip netns``); the namespace and its link are removed whatever happens.
"""

from __future__ import annotations

import gzip
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import ROOT, Processes, free_port, latest_results, wait_http, write_config
from helpers.netns import Namespace, namespace_host

pytestmark = pytest.mark.scenario  # a minute of wall clock: `make test-scenarios`

LOCUST = [sys.executable, "-m", "locust", "-f", str(ROOT / "locustfiles" / "chat.py")]
DOWN_AT_S, DOWN_FOR_S, RUN_S = 12.0, 15.0, 45


@pytest.fixture
def netns() -> Iterator[Namespace]:
    with namespace_host() as ns:
        yield ns


def test_a_partitioned_worker_is_stalled_and_its_requests_are_marked(
    processes: Processes, tmp_path: Path, netns: Namespace
) -> None:
    address = netns.here_address
    port, master_port = free_port(), free_port()
    sim = processes.start(
        [sys.executable, "-m", "attnload", "sim", "--host", address, "--port", str(port)]
        + ["--mode", "fixed", "--ttft-ms", "50", "--itl-ms", "20"],
        name="sim",
    )
    url = f"http://{address}:{port}"
    wait_http(url + "/health", sim)
    config = write_config(tmp_path, url, {"m": ("llama-3-70b", "GQA")}, benchmark={"max_tokens": 64})
    results, lines = tmp_path / "results", tmp_path / "requests.jsonl.gz"
    env = {
        "ATTNLOAD_CONFIG": str(config),
        "ATTNLOAD_RESULTS": str(results),
        "ATTNLOAD_METRICS_PORT": "0",
        "ATTNLOAD_REQUESTS_OUT": str(lines),
    }
    master = processes.start(
        [*LOCUST, "--headless", "--master", "--master-bind-port", str(master_port), "--expect-workers", "2"]
        + ["-u", "16", "-r", "16", "-t", f"{RUN_S}s", "--stop-timeout", "30"],
        env=env,
        name="master",
    )
    worker = [*LOCUST, "--worker", "--master-port", str(master_port)]
    processes.start([*worker, "--master-host", "127.0.0.1"], env=env, name="near")
    processes.start(netns.command([*worker, "--master-host", address]), env=env, name="far")
    time.sleep(DOWN_AT_S + 3.0)  # the workers join and the load starts within ~3 s
    down_at = time.time()
    with netns.cut_off():
        time.sleep(DOWN_FOR_S)
    assert master.wait(timeout=RUN_S + 90) is not None
    log = processes.log_of(master)
    assert "Traceback" not in log, log[-3000:]

    data = latest_results(results)
    stalls = data["client"]["stalled_workers"]
    assert data["client"]["workers_lost"] == 0 and stalls, (data["client"], log[-3000:])
    with gzip.open(lines, "rt", encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle]
    far_worker = {r["worker"] for r in records if r.get("worker_stalled")}
    assert len(far_worker) == 1, far_worker
    # in flight when the link went down, and not ending in the instant `ip link` took to act
    in_flight = [r for r in records if r["worker"] in far_worker and r["start_s"] < down_at < r["end_s"] - 1.0]
    marked = [r for r in records if r.get("worker_stalled")]
    assert in_flight and all(r.get("worker_stalled") for r in in_flight), in_flight[:3]
    assert sum(s["requests"] for s in stalls) >= len(in_flight)
    assert sum(s["requests"] for s in stalls) == len(marked)
    model = data["models"][0]
    assert "worker_stalled" in model["flags"] or any("worker_stalled" in s["flags"] for s in model["stages"])
    rest = model["without_stalled"]
    assert rest["requests"] == len(marked) and rest["e2e_p99_s"] < 2.0, (rest, model["e2e_s"])
