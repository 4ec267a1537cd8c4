"""When each closed-loop stage's new users sent their first request: the arrival phase, measured.

Why: two honest tools give different latencies for the same concurrency when their users start in
different phases (all at once and in lock-step, or spread over about one request's duration; see
``startspread.py``). Each stage records the ``--start-spread`` mode it ran with and the measured
spread of its new users' first requests (first to last), so numbers can be compared knowingly.

A sending process stamps each new user's first request (wall clock: workers' perf counters do not
compare) per (model, stage) and ships the running first/last/count with every report (cumulative,
so a lost report loses nothing); the collector keeps each worker's latest and combines them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from attnload.results.model import ModelSummary, Results, StageSummary, StartSpreadInfo

Stamps = dict[tuple[str, int], tuple[float, float, int]]
"""(model key, stage) -> (first, last first-request time in epoch seconds, users)."""


class FirstRequests:
    """This process's first-request times per (model, stage)."""

    def __init__(self) -> None:
        self.stamps: Stamps = {}

    def reset(self) -> None:
        self.stamps = {}

    def note(self, keys: Iterable[str], stage: int, at: float) -> None:
        """A new user of ``keys`` (several: ``--paired``) sends its first request of stage ``stage`` at ``at``."""
        if stage < 0:
            return
        for key in keys:
            first, last, n = self.stamps.get((key, stage), (at, at, 0))
            self.stamps[(key, stage)] = (min(first, at), max(last, at), n + 1)

    def payload(self) -> list[list[Any]]:
        """On the wire (msgpack has no tuple keys): ``[key, stage, first, last, users]`` rows."""
        return [[key, stage, first, last, n] for (key, stage), (first, last, n) in self.stamps.items()]


class FleetFirstRequests:
    """The collector's side: each sending process's latest stamps, combined on demand."""

    def __init__(self) -> None:
        self.by_process: dict[str, Stamps] = {}

    def reset(self) -> None:
        self.by_process.clear()

    def merge(self, process: str, rows: Any) -> None:
        if not isinstance(rows, list):
            return
        stamps: Stamps = {}
        for row in rows:
            if isinstance(row, list | tuple) and len(row) == 5:
                stamps[(str(row[0]), int(row[1]))] = (float(row[2]), float(row[3]), int(row[4]))
        self.by_process[process] = stamps

    def combined(self) -> Stamps:
        out: Stamps = {}
        for stamps in self.by_process.values():
            for where, (first, last, n) in stamps.items():
                if where in out:
                    f0, l0, n0 = out[where]
                    out[where] = (min(f0, first), max(l0, last), n0 + n)
                else:
                    out[where] = (first, last, n)
        return out


def spread_info(mode: str | float, stamps: Stamps, key: str, stage: int) -> StartSpreadInfo:
    """What ``stages[].start_spread`` says of one model's stage (``mode``: ``--start-spread`` as parsed)."""
    first, last, users = stamps.get((key, stage), (0.0, 0.0, 0))
    fixed = isinstance(mode, float)
    return StartSpreadInfo(
        mode="fixed" if fixed else str(mode),
        seconds=float(mode) if fixed else None,
        users=users,
        first_requests_spread_s=round(last - first, 3) if users >= 2 else None,
    )


def _stage(stage: StageSummary, mode: str | float, stamps: Stamps, key: str) -> StageSummary:
    if stage.rate is not None or stage.users is None:
        return stage  # open loop and replay: no users start
    return stage.model_copy(update={"start_spread": spread_info(mode, stamps, key, stage.index)})


def _model(model: ModelSummary, mode: str | float, stamps: Stamps) -> ModelSummary:
    if model.stages:
        return model.model_copy(update={"stages": [_stage(s, mode, stamps, model.key) for s in model.stages]})
    if (model.key, 0) not in stamps:
        return model
    return model.model_copy(update={"start_spread": spread_info(mode, stamps, model.key, 0)})


def with_start_spread(results: Results, mode: str | float, stamps: Stamps) -> Results:
    """Every closed-loop stage (an unstaged run: each model) says how its new users were started."""
    return results.model_copy(update={"models": [_model(m, mode, stamps) for m in results.models]})
