"""A sending process's own freezes and silences: when its event loop stood still (SIGSTOP, a frozen pod, a VM
pause), or when it kept running but heard nothing from its master (a network partition).

A frozen worker's requests go on at the server; when the worker wakes up their streams are read at
once, so each carries the freeze in its latency (ITL max, e2e) as if the server had been slow. A
greenlet ticks every ``TICK_S``; a tick that comes ``STALL_MIN_S`` late is a freeze. Each request that
was in flight across one is marked (``worker_stalled_s`` in ``--requests-out``), and the freezes ride
on the worker's reports so the master flags the stage ``worker_stalled``.

A partitioned worker's loop never stops, so no tick is late; but its link is down, and a request in flight
then waits on TCP retransmissions that can outlast the partition. The master answers each of the worker's
heartbeats (Locust's ``heartbeat_received``, about every second), so a gap of ``SILENCE_MIN_S`` between
two answers is a silence, handled like a freeze (:meth:`heard`).

The request that completes first after a wake-up may run before the tick does, so :meth:`overlap`
also counts the freeze (or silence) still in progress (from the last tick or answer to now).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import gevent

TICK_S = 0.25
STALL_MIN_S = 2.0
"""A loop this late was frozen: far beyond any event-loop lag of a busy worker (tens of ms)."""
SILENCE_MIN_S = 3.0
"""No answer from the master for this long (it answers every heartbeat, ~1 s apart) is a partition; the
master calls a worker missing after ~4 s."""
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
        self.last_heard: float | None = None
        """When the master last answered a heartbeat (None: no master, or none heard yet)."""
        self.freeze_end = -math.inf
        """When the last freeze of this process ended: a silence across it was the freeze's, not the network's."""

    def tick(self) -> None:
        now = self.clock()
        if now - self.last_tick >= STALL_MIN_S:
            self._span(self.last_tick, now)
            self.freeze_end = now
        self.last_tick = now

    def heard(self) -> None:
        """The master answered a heartbeat: a long wait since the last answer was a silence (partition), unless
        this process was frozen meanwhile (the freeze explains it; the first answer after a wake-up can take
        a second more, and requests sent in that second are not stalled)."""
        now = self.clock()
        if self._silent(now) and self.last_heard is not None:
            self._span(self.last_heard, now)
        self.last_heard = now

    def _silent(self, now: float) -> bool:
        """No answer from the master for ``SILENCE_MIN_S`` up to ``now``, and no freeze in that time."""
        heard = self.last_heard
        return heard is not None and now - heard >= SILENCE_MIN_S and self.freeze_end < heard

    def _span(self, start: float, end: float) -> None:
        """Remember a freeze or silence; one that overlaps the last (a frozen process is silent too) joins it."""
        if self.stalls and start <= self.stalls[-1][1]:
            start = min(start, self.stalls[-1][0])
            self.stalls = self.stalls[:-1]
            if self.unsent:
                self.unsent.pop()
        self.stalls = [*self.stalls[-(KEEP_STALLS - 1) :], (start, end)]
        self.unsent.append({"at": self.wall() - (self.clock() - start), "s": end - start})

    def overlap(self, start: float, end: float | None = None) -> float:
        """Seconds of freeze or silence inside ``[start, end]`` (perf_counter; end: now), the one in progress
        included."""
        end = self.clock() if end is None else end
        spans = list(self.stalls)
        if self.watching and end - self.last_tick >= STALL_MIN_S:
            spans.append((self.last_tick, end))
        if self.last_heard is not None and self._silent(end):
            spans.append((self.last_heard, end))
        return _covered(spans, start, end)

    def take(self) -> dict[str, Any] | None:
        """Freezes and marked requests since the last report (None: nothing new)."""
        marked = self.requests - self.requests_sent
        if not self.unsent and not marked:
            return None
        out: dict[str, Any] = {"stalls": self.unsent, "requests": marked}
        self.unsent, self.requests_sent = [], self.requests
        return out


def _covered(spans: list[tuple[float, float]], start: float, end: float) -> float:
    """Seconds of ``[start, end]`` inside the union of ``spans`` (a freeze is also a silence: counted once)."""
    total, reach = 0.0, start
    for a, b in sorted(spans):
        a, b = max(a, reach), min(b, end)
        if b > a:
            total += b - a
            reach = b
    return total


def watch(stall: StallWatch) -> None:
    """Greenlet: tick until the process ends."""
    stall.last_tick, stall.watching = stall.clock(), True
    while True:
        gevent.sleep(TICK_S)
        stall.tick()
