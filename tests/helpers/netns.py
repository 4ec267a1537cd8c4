"""A test host that is not loopback: a network namespace this test makes, joined to this one by a veth pair.

Clients bypass proxies for loopback targets (``NO_PROXY`` or not), so testing a proxy needs a target
at another address. The namespace's address is in 198.18.0.0/15 (RFC 2544's range for benchmark
tests, never routed): traffic to it goes over the veth pair and nowhere else. Needs root and ``ip``;
the namespace, the link and every process started in it are removed when the block ends.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

NETWORK = "198.18.{n}.{host}"
"""A /30 per test process (``n`` from its pid), so two test workers' namespaces never share a subnet."""


@dataclass(frozen=True)
class Namespace:
    name: str
    address: str
    """The namespace side's address."""
    here_address: str
    """This side's address: a server here that the namespace's processes reach (over the link)."""
    here_link: str
    """This side's end of the veth pair."""

    def command(self, args: list[str]) -> list[str]:
        """``args`` run inside the namespace."""
        return ["ip", "netns", "exec", self.name, *args]

    @contextmanager
    def cut_off(self) -> Iterator[None]:
        """A partition for the block: this side's end of the link down, then up again. Processes on both sides
        keep running; what they send meanwhile is lost, as on a cluster whose network fails."""
        _ip("link", "set", self.here_link, "down")
        try:
            yield
        finally:
            _ip("link", "set", self.here_link, "up")


def require_namespaces() -> None:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2's ip")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@contextmanager
def namespace_host() -> Iterator[Namespace]:
    """A namespace at its own address (198.18.N.2), reachable from here (198.18.N.1 on this side)."""
    require_namespaces()
    tag = f"{os.getpid() % 100000}"
    n = os.getpid() % 250
    here_address, there_address = NETWORK.format(n=n, host=1), NETWORK.format(n=n, host=2)
    name, here, there = f"al{tag}", f"alh{tag}", f"aln{tag}"  # interface names: at most 15 characters
    _ip("netns", "add", name)
    try:
        _ip("link", "add", here, "type", "veth", "peer", "name", there)
        _ip("link", "set", there, "netns", name)
        _ip("addr", "add", f"{here_address}/30", "dev", here)
        _ip("link", "set", here, "up")
        _ip("netns", "exec", name, "ip", "addr", "add", f"{there_address}/30", "dev", there)
        _ip("netns", "exec", name, "ip", "link", "set", there, "up")
        _ip("netns", "exec", name, "ip", "link", "set", "lo", "up")
        yield Namespace(name, there_address, here_address, here)
    finally:
        _end_processes(name)
        subprocess.run(["ip", "link", "del", here], capture_output=True, timeout=10)
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)


def _end_processes(name: str) -> None:
    """TERM, then KILL, what still runs in the namespace (only this test's processes run there)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        listed = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, timeout=10).stdout
        pids = [int(p) for p in listed.split()]
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 5
        while (
            time.monotonic() < deadline
            and subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, timeout=10).stdout.strip()
        ):
            time.sleep(0.1)
