"""A sending process's own CPU use, sampled every second: what decides ``client_saturated``.

Locust samples worker CPU only every few seconds, too slowly for short stages; a client that
saturates does so for seconds on end, so what counts is the *sustained* use.
"""

from __future__ import annotations

import resource
import time


class CpuMeter:
    """This process's CPU use (1.0 = one core) from getrusage, sampled every second.

    The sustained use is the lower of two consecutive one-second samples: a single busy
    second (process start, a spawn burst, a GC pass) does not flag a run; two do.
    """

    def __init__(self) -> None:
        self._last = (time.perf_counter(), _cpu_seconds())
        self._previous: float | None = None
        self._peak = 0.0

    def sample(self) -> float:
        """The sustained ratio: min(this second, the one before); 0.0 on the first call."""
        now, cpu = time.perf_counter(), _cpu_seconds()
        wall = now - self._last[0]
        ratio = (cpu - self._last[1]) / wall if wall > 0 else 0.0
        self._last = (now, cpu)
        sustained = min(ratio, self._previous) if self._previous is not None else 0.0
        self._previous = ratio
        self._peak = max(self._peak, sustained)
        return sustained

    def peak(self) -> float:
        """Highest sustained ratio since the previous call (then reset)."""
        peak, self._peak = self._peak, 0.0
        return peak


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
