"""How late the gevent hub runs a timer in a sending process: the client's own health, measured directly.

Why: several SSE events arriving in one read is what a client that is behind sees (its loop came
back to the socket late, so the events queued), but it is also what a server that flushes several
tokens per write sends. CPU alone cannot tell them apart on every machine; the loop's lateness can:
a timer due every ``LOOP_TICK_S`` that fires late by ``L`` means every socket waited up to ``L``
too. A sending process runs :func:`watch_loop`; its :class:`LoopLagMeter` ships a histogram of the
lateness with each report (``runner/messages.py``), and the collector keeps each worker's
(:class:`FleetLoopLag`) for ``/metrics`` (``attnload_worker_loop_lag_seconds``) and
``results.client.loop_lag_s``.
"""

from __future__ import annotations

import time
from typing import Any

import gevent

from attnload.measure.histogram import LogHistogram

LOOP_TICK_S = 0.05
"""The timer's period: 20 samples a second cost nothing next to a stream's chunks."""
LOOP_LAG_BEHIND_P50_S = 0.005
"""A loop whose median lateness exceeds this is behind most of the time: its reads back up."""
LOOP_LAG_BEHIND_P99_S = 0.1
"""...or whose p99 exceeds this: stalls long enough to merge a fast server's events in one read."""


class LoopLagMeter:
    """Lateness samples of this process's hub: all of them, and those since the last report."""

    def __init__(self) -> None:
        self.run = LogHistogram()
        self._window = LogHistogram()

    def record(self, late_s: float) -> None:
        late = max(late_s, 0.0)
        self.run.record(late)
        self._window.record(late)

    def reset(self) -> None:
        """A new test: forget what the previous one saw."""
        self.run = LogHistogram()
        self._window = LogHistogram()

    def take_delta(self) -> dict[str, Any]:
        """The window since the previous call (then reset), on the wire."""
        window, self._window = self._window, LogHistogram()
        return window.to_wire()


def watch_loop(meter: LoopLagMeter, tick_s: float = LOOP_TICK_S) -> None:
    """Forever: sleep ``tick_s`` and record how much later than that the hub woke this greenlet."""
    while True:
        asked = time.perf_counter()
        gevent.sleep(tick_s)
        meter.record(time.perf_counter() - asked - tick_s)


class FleetLoopLag:
    """The collector's side: each worker's lateness over the test, and over its latest report."""

    def __init__(self) -> None:
        self.run: dict[str, LogHistogram] = {}
        self.latest: dict[str, LogHistogram] = {}

    def reset(self) -> None:
        self.run.clear()
        self.latest.clear()

    def merge(self, worker: str, wire: Any) -> None:
        """Fold one report's window in (a malformed one is ignored: lateness is advisory)."""
        if not isinstance(wire, dict) or not wire.get("n"):
            return
        window = LogHistogram.from_wire(wire)
        self.run.setdefault(worker, LogHistogram()).merge(window)
        self.latest[worker] = window

    def gauges(self) -> dict[str, tuple[float, float, int, float]]:
        """Worker -> (p50, p99 of its latest report, samples and their sum over the test), for ``/metrics``
        (a summary: quantiles over a recent window, count and sum cumulative, as Prometheus clients do)."""
        out = {}
        for worker, hist in self.latest.items():
            p50, p99 = hist.quantile(0.5), hist.quantile(0.99)
            run = self.run.get(worker, hist)
            if p50 is not None and p99 is not None:
                out[worker] = (p50, p99, run.count, run.total)
        return out


def behind_reason(loop_lag: dict[str, Any], p99: bool = True) -> str | None:
    """Why the loop counts as behind (``loop_lag``: worker -> a summary with ``p50``/``p99``), else None.

    A median lateness above ``LOOP_LAG_BEHIND_P50_S`` is a client behind most of the time, a reason to
    flag it saturated on its own; a p99 above ``LOOP_LAG_BEHIND_P99_S`` (``p99``) only says that some
    reads were late, which is evidence enough to own the many-chunks-per-read signature."""
    for worker, lag in sorted(loop_lag.items()):
        late50, late99 = getattr(lag, "p50", None), getattr(lag, "p99", None)
        if late50 is not None and late50 > LOOP_LAG_BEHIND_P50_S:
            return (
                f"event loop of {worker} late by {late50 * 1000:.1f} ms at p50 (> {LOOP_LAG_BEHIND_P50_S * 1000:g} ms)"
            )
        if p99 and late99 is not None and late99 > LOOP_LAG_BEHIND_P99_S:
            return (
                f"event loop of {worker} late by {late99 * 1000:.0f} ms at p99 (> {LOOP_LAG_BEHIND_P99_S * 1000:g} ms)"
            )
    return None
