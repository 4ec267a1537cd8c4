"""Where the master's ``/metrics`` listens: loopback unless asked, like Locust's web UI."""

from __future__ import annotations

import urllib.request
from pathlib import Path

from attnload.exporter.exposition import FleetState, serve_metrics
from attnload.measure.recorder import Recorder
from attnload.plan.options import OPTIONS, RunOptions
from helpers import free_port


def _listen_addresses(port: int) -> set[str]:
    """Local addresses of the LISTEN sockets on ``port``, read from the kernel's own table."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if int(hex_port, 16) == port and state == "0A":
            found.add(".".join(str(int(address[i : i + 2], 16)) for i in (6, 4, 2, 0)))
    return found


def test_metrics_bind_loopback_by_default() -> None:
    port = free_port()
    serve_metrics(Recorder(), FleetState(), port)
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert "attnload_workers" in body
    assert _listen_addresses(port) == {"127.0.0.1"}


def test_metrics_host_is_a_run_option_whose_default_is_loopback() -> None:
    option = next(o for o in OPTIONS if o.name == "metrics-host")
    assert option.locust_default == "127.0.0.1" and option.env == "ATTNLOAD_METRICS_HOST"
    assert RunOptions(config_path="c.json").metrics_host == "127.0.0.1"
