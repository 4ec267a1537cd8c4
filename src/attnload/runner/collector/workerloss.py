"""The master's account of workers that go missing: lost (never back) or stalled (back), with their gap.

Locust's master counts down each worker's heartbeat liveness every second (``HEARTBEAT_LIVENESS`` = 3,
reset by each heartbeat) and marks a worker ``missing`` when it runs out, ~4 s after the last heartbeat;
a heartbeat that arrives later heals it (``runners.py`` ``heartbeat_worker`` and ``handle_message``).
Locust cannot tell a dead worker from a frozen one at that moment, and neither can we: a missing worker
is announced at once as lost, and called ``stalled`` instead if it comes back. What a lost worker did
after its last report never reaches the master; it is estimated from the worker's last reported
rates, so the results say how much traffic the server saw that they lack.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from attnload.results.fleet import (
    WORKER_STALLED_FLAG,
    FleetFaults,
    LostWorker,
    MissingWindow,
    Partial,
    RefusedWorker,
    StalledWorker,
    UnreportedTraffic,
    stage_flags,
)
from attnload.results.model import Results

REPORTS_KEPT = 4
"""Reports a worker's rates are taken over (~9 s at Locust's 3 s report interval)."""
REPORT_INTERVAL_S = 3.0
"""Locust's ``WORKER_REPORT_INTERVAL``: a single report's span."""
_FINISHED = ("ok", "failed", "cancelled", "abandoned")


@dataclass
class ModelTraffic:
    """One model's traffic in one report (or summed over several)."""

    requests: int = 0
    ok: int = 0
    tokens: int = 0
    e2e_n: int = 0
    e2e_sum_s: float = 0.0

    def add(self, other: ModelTraffic) -> None:
        self.requests += other.requests
        self.ok += other.ok
        self.tokens += other.tokens
        self.e2e_n += other.e2e_n
        self.e2e_sum_s += other.e2e_sum_s


def traffic_of(delta: dict[str, Any]) -> dict[str, ModelTraffic]:
    """Per model key, the requests, tokens and e2e sum of a recorder delta (``Recorder.take_delta``)."""
    out: dict[str, ModelTraffic] = {}
    for key_text, wire in delta.items():
        model_key = key_text.rsplit("|", 2)[0]
        counts = wire.get("c") or {}
        e2e = (wire.get("h") or {}).get("e2e") or {}
        part = ModelTraffic(
            requests=sum(int(counts.get(k, 0)) for k in _FINISHED),
            ok=int(counts.get("ok", 0)),
            tokens=int(counts.get("completion_tokens", 0)),
            e2e_n=int(e2e.get("n", 0)),
            e2e_sum_s=float(e2e.get("s", 0.0)),
        )
        out.setdefault(model_key, ModelTraffic()).add(part)
    return out


def estimate_unreported(
    reports: list[tuple[float, dict[str, ModelTraffic]]], gap_s: float
) -> dict[str, UnreportedTraffic]:
    """What a worker sent after its last report, per model: its last rates over ``gap_s`` seconds plus,
    by Little's law, what it had in flight (request rate × mean e2e); output tokens at the token rate,
    the in-flight ones half done."""
    if not reports:
        return {}
    span_s = reports[-1][0] - reports[0][0] if len(reports) > 1 else REPORT_INTERVAL_S
    counted = reports[1:] if len(reports) > 1 else reports
    totals: dict[str, ModelTraffic] = {}
    for _, traffic in counted:
        for key, part in traffic.items():
            totals.setdefault(key, ModelTraffic()).add(part)
    out = {}
    for key, total in totals.items():
        rate = total.requests / max(span_s, 1e-9)
        e2e_mean = total.e2e_sum_s / total.e2e_n if total.e2e_n else 0.0
        in_flight = round(total.ok / max(span_s, 1e-9) * e2e_mean)
        completed = round(rate * max(gap_s, 0.0))
        per_request = total.tokens / total.ok if total.ok else 0.0
        tokens = round(total.tokens / max(span_s, 1e-9) * max(gap_s, 0.0) + in_flight * per_request / 2)
        out[key] = UnreportedTraffic(
            requests=completed + in_flight, completed=completed, in_flight=in_flight, output_tokens=tokens
        )
    return out


@dataclass
class _Worker:
    reports: deque[tuple[float, dict[str, ModelTraffic]]] = field(default_factory=lambda: deque(maxlen=REPORTS_KEPT))
    heard_at: float | None = None
    """Wall time of its last heartbeat (or report)."""
    users: dict[str, int] = field(default_factory=dict)


@dataclass
class _Missing:
    heard_at: float
    detected_at: float
    stage: int | None
    users: dict[str, int]
    last_report: float | None
    unreported: dict[str, UnreportedTraffic]


class WorkerWatch:
    """Every worker's recent reports and heartbeats; who went missing, who came back, who was refused."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.workers: dict[str, _Worker] = {}
        self.missing: dict[str, _Missing] = {}
        """Workers missing now (lost unless they come back)."""
        self.stalled: list[StalledWorker] = []
        self.refused: list[RefusedWorker] = []
        self.silent_at_end: set[str] = set()
        """Connected workers whose final counts did not arrive in time."""
        self.started_at = 0.0
        """Wall time the test began (run times are relative to it)."""
        self.pids: dict[str, int] = {}
        """Each worker's process id, from its hello: what names it on its host."""
        self._unplaced: dict[str, int] = {}
        """Requests a worker marked stalled before the master knew of its stall (:meth:`_place_marked`)."""

    def reset(self) -> None:
        """A new test: forget the previous test's faults (refused workers stay refused)."""
        self.workers.clear()
        self.missing.clear()
        self.stalled.clear()
        self.silent_at_end.clear()
        self._unplaced.clear()

    def _worker(self, worker_id: str) -> _Worker:
        return self.workers.setdefault(worker_id, _Worker())

    def hello(self, worker_id: str, data: dict[str, Any]) -> None:
        pid = str(data.get("pid") or "")
        if pid.isdigit():
            self.pids[worker_id] = int(pid)

    def label(self, worker_id: str) -> str:
        """``ID (pid N)``, or the id alone when the worker never said its pid."""
        pid = self.pids.get(worker_id)
        return f"{worker_id} (pid {pid})" if pid is not None else worker_id

    def heartbeat(self, worker_id: str) -> None:
        self._worker(worker_id).heard_at = self.clock()

    def report(
        self, worker_id: str, delta: dict[str, Any], users: dict[str, int] | None, stall: dict[str, Any] | None
    ) -> None:
        now = self.clock()
        worker = self._worker(worker_id)
        worker.reports.append((now, traffic_of(delta)))
        worker.heard_at = now
        if users is not None:
            worker.users = dict(users)
        if stall:
            self._stalls_reported(worker_id, stall)

    def _stalls_reported(self, worker_id: str, stall: dict[str, Any]) -> None:
        started = self.started_at
        for item in stall.get("stalls") or []:
            own = StalledWorker(
                worker=worker_id, from_s=round(float(item["at"]) - started, 3), duration_s=round(float(item["s"]), 3)
            )
            seen = [i for i, s in enumerate(self.stalled) if s.worker == worker_id and _overlaps(s, own)]
            if seen:  # the master saw it first (missing, then back): the worker's own clock is the exact one
                first = self.stalled[seen[0]]
                self.stalled[seen[0]] = own.model_copy(update={"stage": first.stage, "requests": first.requests})
            else:
                self.stalled.append(own)
        self._unplaced[worker_id] = self._unplaced.get(worker_id, 0) + int(stall.get("requests") or 0)
        self._place_marked(worker_id)

    def _place_marked(self, worker_id: str) -> None:
        """Count the worker's marked requests on its latest stall. A report can carry them before the stall
        itself is known (a partitioned worker marks requests while still silent, and its report can reach
        the master before the heartbeat that makes it "back"): they wait here for it."""
        marked = self._unplaced.pop(worker_id, 0)
        mine = [i for i, s in enumerate(self.stalled) if s.worker == worker_id]
        if not mine:
            if marked:
                self._unplaced[worker_id] = marked
            return
        last = self.stalled[mine[-1]]
        self.stalled[mine[-1]] = last.model_copy(update={"requests": last.requests + marked})

    def went_missing(self, worker_id: str, stage: int | None) -> str:
        """A worker was marked missing: remember it and say so, in one line."""
        now = self.clock()
        worker = self._worker(worker_id)
        heard = worker.heard_at if worker.heard_at is not None else now
        reports = list(worker.reports)
        last_report = reports[-1][0] if reports else None
        gap_s = heard - last_report if last_report is not None else 0.0
        self.missing[worker_id] = _Missing(
            heard, now, stage, dict(worker.users), last_report, estimate_unreported(reports, gap_s)
        )
        users = sum(worker.users.values())
        return (
            f"worker {self.label(worker_id)} lost at {heard - self.started_at:.1f} s with {users} users "
            f"({_by_model(worker.users)}): no heartbeat since; the run goes on with the workers left"
        )

    def came_back(self, worker_id: str) -> str:
        """A missing worker's heartbeat is back: it was frozen, not lost."""
        gone = self.missing.pop(worker_id)
        duration_s = self.clock() - gone.heard_at
        seen = StalledWorker(
            worker=worker_id,
            from_s=round(gone.heard_at - self.started_at, 3),
            duration_s=round(duration_s, 3),
            stage=gone.stage,
        )
        if not any(s.worker == worker_id and _overlaps(s, seen) for s in self.stalled):
            self.stalled.append(seen)
        self._place_marked(worker_id)
        return (
            f"worker {self.label(worker_id)} is back after {duration_s:.1f} s: stalled, not lost "
            "(requests across it are marked)"
        )

    def faults(self, ended_at: float, finished: set[str] | frozenset[str] = frozenset()) -> FleetFaults:
        """The account for the results (``ended_at``: wall time the test ended). A missing worker whose
        final counts arrived (``finished``) lost nothing: it was stalled up to them."""
        started = self.started_at
        for worker_id in sorted(set(self.missing) & set(finished)):
            gone = self.missing.pop(worker_id)
            reports = self.workers[worker_id].reports
            back_at = reports[-1][0] if reports else gone.heard_at
            self.stalled.append(
                StalledWorker(
                    worker=worker_id,
                    from_s=round(gone.heard_at - started, 3),
                    duration_s=round(max(back_at - gone.heard_at, 0.0), 3),
                    stage=gone.stage,
                )
            )
            self._place_marked(worker_id)
        lost = [
            LostWorker(
                worker=worker_id,
                pid=self.pids.get(worker_id),
                lost_at_s=round(m.heard_at - started, 3),
                detected_at_s=round(m.detected_at - started, 3),
                last_report_s=round(m.last_report - started, 3) if m.last_report is not None else None,
                stage=m.stage,
                users=m.users,
                unreported=m.unreported,
            )
            for worker_id, m in sorted(self.missing.items())
        ]
        partial = None
        absent = sorted(set(self.missing) | self.silent_at_end)
        if absent:
            windows = []
            for worker_id in absent:
                reports = self.workers.get(worker_id, _Worker()).reports
                from_s = reports[-1][0] - started if reports else 0.0
                windows.append(
                    MissingWindow(worker=worker_id, from_s=round(from_s, 3), to_s=round(ended_at - started, 3))
                )
            partial = Partial(workers=absent, windows=windows)
        stalled = [s for s in self.stalled if s.worker not in self.missing]
        return FleetFaults(lost=lost, stalled=stalled, refused=list(self.refused), partial=partial)


def _overlaps(a: StalledWorker, b: StalledWorker) -> bool:
    return a.from_s < b.from_s + b.duration_s + 1.0 and b.from_s < a.from_s + a.duration_s + 1.0


def _by_model(users: dict[str, int]) -> str:
    return ", ".join(f"{key} {n}" for key, n in sorted(users.items())) or "none reported"


def with_fleet_faults(results: Results, faults: FleetFaults) -> Results:
    """``results`` with the faults in ``client``, ``partial`` and the flags of the stages they touched (and of
    the model: ``worker_stalled`` where a stall touched one of its stages, or the run had no stages)."""
    models = []
    for model in results.models:
        stages = [
            stage.model_copy(
                update={
                    "flags": stage_flags(
                        stage.flags, stage.start_s, stage.end_s, stage.index, faults, i == len(model.stages) - 1
                    )
                }
            )
            for i, stage in enumerate(model.stages)
        ]
        stalled = faults.stalled and (not stages or any(WORKER_STALLED_FLAG in s.flags for s in stages))
        flags = list(model.flags)
        if stalled and WORKER_STALLED_FLAG not in flags:
            flags.append(WORKER_STALLED_FLAG)
        models.append(model.model_copy(update={"stages": stages, "flags": flags}))
    client = results.client.model_copy(
        update={
            "workers_lost": len(faults.lost),
            "lost_workers": faults.lost,
            "stalled_workers": faults.stalled,
            "workers_stalled": len({s.worker for s in faults.stalled}),
            "refused_workers": faults.refused,
        }
    )
    return results.model_copy(update={"models": models, "client": client, "partial": faults.partial})
