"""A sending process's own freezes: when its event loop stood still (SIGSTOP, a frozen pod, a VM pause).

A frozen worker's requests go on at the server; when the worker wakes up their streams are read at
once, so each carries the freeze in its latency (ITL max, e2e) as if the server had been slow. A
greenlet ticks every ``TICK_S``; a tick that comes ``STALL_MIN_S`` late is a freeze. Each request that
was in flight across one is marked (``worker_stalled_s`` in ``--requests-out``), and the freezes ride
on the worker's reports so the master flags the stage ``worker_stalled``.

The request that completes first after a wake-up may run before the tick does, so :meth:`overlap`
also counts the freeze still in progress (from the last tick to now).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import gevent

TICK_S = 0.25
STALL_MIN_S = 2.0
"""A loop this late was frozen: far beyond any event-loop lag of a busy worker (tens of ms)."""
KEEP_STALLS = 64
"""Freezes remembered for marking requests (a request longer than that many freezes is rare)."""


class StallWatch:
    """The freezes of this process, in ``perf_counter`` seconds and (for the master) wall-clock time."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter, wall: Callable[[], float] = time.time) -> None:
        self.clock, self.wall = clock, wall
        self.last_tick = clock()
        self.stalls: list[tuple[float, float]] = []
        """(from, to) perf_counter seconds of each freeze seen."""
        self.unsent: list[dict[str, float]] = []
        """Freezes not yet shipped to the master: ``{"at": wall start, "s": duration}``."""
        self.requests = 0
        """Requests marked so far (cumulative)."""
        self.requests_sent = 0
        self.watching = False
        """True once :func:`watch` ticks: without ticks every request would look frozen."""

    def tick(self) -> None:
        now = self.clock()
        late = now - self.last_tick
        if late >= STALL_MIN_S:
            self.stalls = [*self.stalls[-(KEEP_STALLS - 1) :], (self.last_tick, now)]
            self.unsent.append({"at": self.wall() - late, "s": late})
        self.last_tick = now

    def overlap(self, start: float, end: float | None = None) -> float:
        """Seconds of freeze inside ``[start, end]`` (perf_counter; end: now), the one in progress included."""
        end = self.clock() if end is None else end
        spans = list(self.stalls)
        if self.watching and end - self.last_tick >= STALL_MIN_S:
            spans.append((self.last_tick, end))
        return sum(max(0.0, min(b, end) - max(a, start)) for a, b in spans)

    def take(self) -> dict[str, Any] | None:
        """Freezes and marked requests since the last report (None: nothing new)."""
        marked = self.requests - self.requests_sent
        if not self.unsent and not marked:
            return None
        out: dict[str, Any] = {"stalls": self.unsent, "requests": marked}
        self.unsent, self.requests_sent = [], self.requests
        return out


def watch(stall: StallWatch) -> None:
    """Greenlet: tick until the process ends."""
    stall.last_tick, stall.watching = stall.clock(), True
    while True:
        gevent.sleep(TICK_S)
        stall.tick()
