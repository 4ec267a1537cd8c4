"""CPU throttling by a cgroup limit, read from ``cpu.stat``: saturation that getrusage cannot see.

A worker under a Kubernetes CPU limit (deploy/ sets one CPU) is stopped by the kernel once
it has used its quota in a period; its own CPU use then reads as at most 100 % of the
limit, never "above 90 % of a core" when the limit is fractional, and the time it spent
frozen shows only in the cgroup's ``cpu.stat``. Requests in flight during those pauses
get late timestamps, so the latencies include load-generator delay just as with a busy CPU.

cgroup v2 (``/sys/fs/cgroup/cpu.stat``): ``nr_throttled`` and ``throttled_usec``.
cgroup v1 (``/sys/fs/cgroup/cpu,cpuacct/cpu.stat``): ``nr_throttled`` and ``throttled_time`` (ns).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

V2_CPU_STAT = Path("/sys/fs/cgroup/cpu.stat")
V1_CPU_STAT = Path("/sys/fs/cgroup/cpu,cpuacct/cpu.stat")
THROTTLED_RATIO_LIMIT = 0.10
"""Throttled share of wall time above which a run is flagged ``client_saturated``."""
THROTTLED_REASON = "cpu throttled by cgroup limit"


@dataclass(frozen=True)
class Throttling:
    """Cumulative counters of one ``cpu.stat`` read."""

    nr_throttled: int
    throttled_s: float


def read_cpu_stat(path: Path) -> Throttling | None:
    """Parse one ``cpu.stat`` (v2 ``throttled_usec`` or v1 ``throttled_time``); None when absent or foreign."""
    try:
        text = path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError):
        return None
    fields: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            fields[parts[0]] = int(parts[1])
    if "throttled_usec" in fields:
        seconds = fields["throttled_usec"] / 1e6
    elif "throttled_time" in fields:
        seconds = fields["throttled_time"] / 1e9
    else:
        return None
    return Throttling(nr_throttled=fields.get("nr_throttled", 0), throttled_s=seconds)


def find_cpu_stat(candidates: tuple[Path, ...] = (V2_CPU_STAT, V1_CPU_STAT)) -> Path | None:
    """The first ``cpu.stat`` with throttling counters (v2 first), or None outside a CPU cgroup."""
    return next((path for path in candidates if read_cpu_stat(path) is not None), None)


class ThrottleMeter:
    """Share of wall time this cgroup spent throttled between samples; 0.0 where there is no ``cpu.stat``."""

    def __init__(self, path: Path | None = None, clock: Callable[[], float] | None = None) -> None:
        self.path = path if path is not None else find_cpu_stat()
        self._clock = clock or time.perf_counter
        self._last = self._read()
        self._peak = 0.0

    def _read(self) -> tuple[float, float] | None:
        stat = read_cpu_stat(self.path) if self.path is not None else None
        return None if stat is None else (self._clock(), stat.throttled_s)

    def sample(self) -> float:
        """Throttled seconds per wall second since the previous sample."""
        now = self._read()
        last, self._last = self._last, now
        if now is None or last is None or now[0] <= last[0]:
            return 0.0
        ratio = max(0.0, now[1] - last[1]) / (now[0] - last[0])
        self._peak = max(self._peak, ratio)
        return ratio

    def peak(self) -> float:
        """Highest ratio since the previous call (then reset), as ``runner.runtime.CpuMeter.peak``."""
        peak, self._peak = self._peak, 0.0
        return peak


def throttled_reason(ratio: float, limit: float = THROTTLED_RATIO_LIMIT) -> str | None:
    """The saturation reason when ``ratio`` of wall time was throttled, else None."""
    if ratio > limit:
        return f"{THROTTLED_REASON} ({ratio:.0%} of wall time > {limit:.0%})"
    return None
