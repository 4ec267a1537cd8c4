"""Fleet faults without processes: the unreported-traffic estimate, lost vs stalled, `partial`, the stage
flags, the admission of joining workers, a worker's own freeze detector and `--fail-on worker-lost`."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from attnload.config.model import Slo
from attnload.errors import UsageError
from attnload.results.exitcodes import make_policy, parse_fail_on, run_status
from attnload.results.fleet import WORKER_LOST_FLAG, WORKER_STALLED_FLAG, FleetFaults, LostWorker, StalledWorker
from attnload.results.model import ModelSummary, Results, StageSummary
from attnload.runner.admission import HELLO_WAIT_S, Admission, hello
from attnload.runner.collector.workerloss import (
    ModelTraffic,
    WorkerWatch,
    estimate_unreported,
    traffic_of,
    with_fleet_faults,
)
from attnload.runner.sender.stallwatch import STALL_MIN_S, StallWatch


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def delta(ok: int, tokens_each: int = 32, e2e_s: float = 0.4, model: str = "a") -> dict[str, Any]:
    """A recorder delta as a worker ships it: ``ok`` requests of ``tokens_each`` tokens, ``e2e_s`` each."""
    return {
        f"{model}|default|0": {
            "c": {"ok": ok, "completion_tokens": ok * tokens_each},
            "h": {"e2e": {"n": ok, "s": ok * e2e_s}},
            "e": {},
        }
    }


def test_traffic_of_sums_outcomes_tokens_and_e2e_per_model() -> None:
    wire = {**delta(5), "a|other|0": {"c": {"failed": 2, "cancelled": 1}, "h": {}, "e": {}}, **delta(3, model="b")}
    got = traffic_of(wire)
    assert got["a"] == ModelTraffic(requests=8, ok=5, tokens=160, e2e_n=5, e2e_sum_s=2.0)
    assert got["b"].requests == 3


def test_estimate_is_rate_times_gap_plus_littles_law_in_flight() -> None:
    reports = [(0.0, traffic_of(delta(30))), (3.0, traffic_of(delta(30))), (6.0, traffic_of(delta(30)))]
    (est,) = estimate_unreported(reports, gap_s=2.0).values()
    # 10 req/s over 2 s, plus 10 req/s × 0.4 s in flight; 320 tok/s × 2 s + 4 half-done 32-token answers
    assert (est.completed, est.in_flight, est.requests, est.output_tokens) == (20, 4, 24, 704)
    assert estimate_unreported([], 2.0) == {}


def test_missing_then_back_is_stalled_not_lost() -> None:
    clock = Clock()
    watch = WorkerWatch(clock)
    watch.started_at = 1000.0
    watch.hello("w1", {"pid": "77"})
    clock.now = 1003.0
    watch.report("w1", delta(30), {"a": 4}, None)
    clock.now = 1005.0
    watch.heartbeat("w1")
    clock.now = 1009.0
    line = watch.went_missing("w1", stage=0)
    assert line.startswith("worker w1 (pid 77) lost at 5.0 s with 4 users (a 4)")
    clock.now = 1013.0
    assert "back after 8.0 s: stalled, not lost" in watch.came_back("w1")
    faults = watch.faults(ended_at=1030.0)
    assert faults.lost == [] and faults.partial is None
    assert faults.stalled == [StalledWorker(worker="w1", from_s=5.0, duration_s=8.0, stage=0)]


def test_lost_worker_carries_its_gap_and_makes_results_partial() -> None:
    clock = Clock()
    watch = WorkerWatch(clock)
    watch.started_at = 1000.0
    for at in (1003.0, 1006.0):
        clock.now = at
        watch.report("w1", delta(30), {"a": 4}, None)
        watch.report("w2", delta(30), {"a": 4}, None)
    clock.now = 1008.0
    watch.heartbeat("w1")
    clock.now = 1012.0
    watch.went_missing("w1", stage=0)
    clock.now = 1015.0
    watch.report("w2", delta(30), {"a": 4}, None)
    faults = watch.faults(ended_at=1030.0, finished={"w2"})
    (lost,) = faults.lost
    assert (lost.worker, lost.lost_at_s, lost.detected_at_s, lost.last_report_s) == ("w1", 8.0, 12.0, 6.0)
    assert lost.users == {"a": 4} and lost.unreported["a"].completed == 20  # 10 req/s over the 2 s after its report
    assert faults.partial is not None and faults.partial.workers == ["w1"]
    assert (faults.partial.windows[0].from_s, faults.partial.windows[0].to_s) == (6.0, 30.0)


def test_missing_worker_whose_final_counts_arrived_lost_nothing() -> None:
    clock = Clock()
    watch = WorkerWatch(clock)
    watch.started_at = 1000.0
    watch.heartbeat("w1")
    clock.now = 1005.0
    watch.went_missing("w1", stage=0)
    clock.now = 1007.0
    watch.report("w1", delta(1), {"a": 0}, None)  # its final counts
    faults = watch.faults(ended_at=1008.0, finished={"w1"})
    assert faults.lost == [] and faults.partial is None and faults.stalled[0].duration_s == 7.0


def test_reported_freeze_replaces_the_masters_coarser_one() -> None:
    clock = Clock()
    watch = WorkerWatch(clock)
    watch.started_at = 1000.0
    watch.heartbeat("w1")
    clock.now = 1005.0
    watch.went_missing("w1", stage=0)
    clock.now = 1009.0
    watch.came_back("w1")
    watch.report("w1", {}, None, {"stalls": [{"at": 1000.4, "s": 8.2}], "requests": 3})
    assert watch.faults(1030.0).stalled == [StalledWorker(worker="w1", from_s=0.4, duration_s=8.2, stage=0, requests=3)]


def test_marked_requests_count_whatever_order_the_report_and_the_stall_arrive_in() -> None:
    """A partitioned worker marks requests while still silent: its report can reach the master before the
    heartbeat that makes it "back", and its own span of the silence can come after requests were counted
    on the master's coarser one. Every marked request lands on the stall (the partition e2e saw 8 of 10)."""
    clock = Clock()
    watch = WorkerWatch(clock)
    watch.started_at = 1000.0
    watch.heartbeat("w1")
    clock.now = 1005.0
    watch.went_missing("w1", stage=0)
    clock.now = 1020.0
    watch.report("w1", {}, None, {"stalls": [], "requests": 2})  # before the master knows it is back
    watch.came_back("w1")
    watch.report("w1", {}, None, {"stalls": [], "requests": 5})
    watch.report("w1", {}, None, {"stalls": [{"at": 1001.0, "s": 17.5}], "requests": 3})  # its own, exact span
    (stall,) = watch.faults(1030.0).stalled
    assert (stall.from_s, stall.duration_s, stall.requests) == (1.0, 17.5, 10)


def _results(faults: FleetFaults) -> Results:
    stages = [StageSummary(index=0, start_s=0.0, end_s=10.0), StageSummary(index=1, start_s=10.0, end_s=20.0)]
    model = ModelSummary(key="a", model="m", attention="GQA", stages=stages)
    base = Results(started_at="t0", ended_at="t1", duration_s=20.0, config_sha256="x", models=[model])
    return with_fleet_faults(base, faults)


def test_flags_land_on_the_stages_the_faults_touched() -> None:
    lost = LostWorker(worker="w1", lost_at_s=11.0, detected_at_s=15.0, stage=1, users={"a": 4})
    stall = StalledWorker(worker="w2", from_s=8.0, duration_s=4.0)  # 8-12 s: across the boundary
    results = _results(FleetFaults(lost=[lost], stalled=[stall]))
    first, second = results.models[0].stages
    assert first.flags == [WORKER_STALLED_FLAG]
    assert second.flags == [WORKER_LOST_FLAG, WORKER_STALLED_FLAG]
    assert results.client.workers_lost == 1 and results.client.lost_workers == [lost]
    assert results.client.workers_stalled == 1


def test_fail_on_worker_lost_exits_1_only_when_asked() -> None:
    lost = LostWorker(worker="w1", lost_at_s=11.0, detected_at_s=15.0, users={"a": 4})
    results = _results(FleetFaults(lost=[lost]))
    assert run_status(results, make_policy(None, None, Slo())) == (0, [])
    code, reasons = run_status(results, make_policy(None, "worker-lost", Slo()))
    assert code == 1 and reasons == ["worker lost: w1 at 11.0 s with 4 users"]
    assert run_status(_results(FleetFaults()), make_policy(None, "worker-lost", Slo())) == (0, [])
    assert "worker-lost" in parse_fail_on("slo,worker-lost")
    with pytest.raises(UsageError, match="worker-lost"):
        parse_fail_on("workers-lost")


class FakeMaster:
    def __init__(self, accept: bool = False) -> None:
        self.handled: list[tuple[str, str]] = []
        self.sent: list[tuple[str, str, Any]] = []
        self.refused: list[Any] = []
        self.gate = Admission(
            lambda client_id, msg: self.handled.append((msg.node_id, msg.type)),
            lambda msg_type, data=None, client_id=None: self.sent.append((msg_type, str(client_id), data)),
            lambda node: 7,
            "sha-master",
            accept_foreign=accept,
            on_refused=self.refused.append,
        )

    def receive(self, node: str, msg_type: str, data: Any = None) -> None:
        self.gate.handle(node, SimpleNamespace(node_id=node, type=msg_type, data=data))


def test_worker_with_the_masters_config_is_admitted_after_its_hello() -> None:
    master = FakeMaster()
    master.receive("w1", "client_ready", "2.47.0")
    assert master.handled == [] and master.sent == [("ack", "w1", {"index": 7})]  # its init can run
    master.receive("w1", "stats", {})
    master.receive("w1", "attnload_hello", hello("sha-master"))
    master.receive("w1", "stats", {})
    assert master.handled == [("w1", "client_ready"), ("w1", "stats")]
    master.receive("w1", "client_ready", "2.47.0")  # ready again after a stop: Locust's business
    assert master.handled[-1] == ("w1", "client_ready")


def test_foreign_worker_is_refused_and_never_merged(caplog: pytest.LogCaptureFixture) -> None:
    master = FakeMaster()
    master.receive("w9", "client_ready", "2.47.0")
    master.receive("w9", "attnload_hello", {"config_sha256": "sha-other-config", "version": "0.0.1", "pid": "4242"})
    for kind in ("stats", "attnload_final", "heartbeat", "client_ready"):
        master.receive("w9", kind, {})
    assert master.handled == []
    assert master.sent[-1] == ("quit", "w9", None)
    (line,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "w9 (pid 4242) refused" in line and "sha-other-config" in line and "sha-master" in line
    assert master.refused[0].config_sha256 == "sha-other-config" and not master.refused[0].admitted


def test_accept_foreign_workers_admits_with_a_warning() -> None:
    master = FakeMaster(accept=True)
    master.receive("w9", "client_ready", "2.47.0")
    master.receive("w9", "attnload_hello", {"config_sha256": "other", "version": "0.1.0"})
    assert master.handled == [("w9", "client_ready")] and master.refused[0].admitted


def test_a_worker_that_never_says_hello_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    master = FakeMaster()
    now = [100.0]
    monkeypatch.setattr("attnload.runner.admission.time.monotonic", lambda: now[0])
    master.receive("w5", "client_ready", "2.47.0")
    master.gate.expire()
    assert master.refused == []
    now[0] += HELLO_WAIT_S + 1
    master.gate.expire()
    assert master.refused[0].config_sha256 is None and master.handled == []


def test_stall_watch_sees_a_freeze_and_the_requests_across_it() -> None:
    clock, wall = Clock(50.0), Clock(1000.0)
    stall = StallWatch(clock, wall)
    clock.now = 60.0
    assert stall.overlap(49.0) == 0.0  # not watched (no ticks): nothing is a freeze
    clock.now = 50.0
    stall.watching = True
    clock.now, wall.now = 50.25, 1000.25
    stall.tick()
    assert stall.take() is None
    clock.now, wall.now = 58.25, 1008.25  # frozen 8 s: a request finishing before the next tick sees it
    assert stall.overlap(49.0) == pytest.approx(8.0)
    stall.tick()
    assert stall.overlap(49.0, 58.25) == pytest.approx(8.0)
    assert stall.overlap(58.3, 59.0) == 0.0  # started after it
    assert stall.overlap(54.0, 58.25) == pytest.approx(4.25)
    stall.requests += 2
    assert stall.take() == {"stalls": [{"at": pytest.approx(1000.25), "s": pytest.approx(8.0)}], "requests": 2}
    clock.now += STALL_MIN_S / 2
    stall.tick()
    assert stall.take() is None  # a late tick under 2 s is load, not a freeze


def test_console_summary_names_lost_and_stalled_workers_and_the_partial_window() -> None:
    from attnload.report.console import fleet_notes
    from attnload.results.fleet import MissingWindow, Partial, UnreportedTraffic

    lost = LostWorker(
        worker="w1",
        lost_at_s=11.0,
        detected_at_s=15.0,
        users={"a": 4},
        unreported={"a": UnreportedTraffic(requests=24)},
    )
    stall = StalledWorker(worker="w2", from_s=8.0, duration_s=4.0, requests=5)
    partial = Partial(workers=["w1"], windows=[MissingWindow(worker="w1", from_s=9.0, to_s=20.0)])
    results = _results(FleetFaults(lost=[lost], stalled=[stall], partial=partial))
    assert fleet_notes(results) == [
        "warning: lost worker w1 (11.0 s, 4 users): traffic it never reported, estimated: a ~24 requests",
        "warning: worker w2 stalled 4.0 s from 8.0 s; 5 requests across it carry the freeze in their latency",
        "warning: partial results: final counts missing from w1 9.0-20.0 s",
    ]
    from attnload.report.html import _run_section

    assert "<dt>fleet</dt><dd>partial results: final counts missing from w1 9.0-20.0 s</dd>" in _run_section(results)
