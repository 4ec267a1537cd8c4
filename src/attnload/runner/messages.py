"""Every message between the master and its workers, its payload, and both sides of each exchange.

Shaped like Locust's ``stats.setup_distributed_stats_event_listeners``: each exchange registers the
worker's half (what it sends, or how it handles what the master sends) next to the master's half, beside
the type of the data they carry. Workers ship deltas, never snapshots, so the master's totals are exact.
What a report carries is not listed here: each feature registers its channel (take, merge, reset, its part
of the results) once in ``runner/collector/channels.py``.

=====================  ==================  ==========================================================
message                direction           payload
=====================  ==================  ==========================================================
``report_to_master``   worker -> master    :class:`WorkerReport` under ``data["attnload"]`` (every 3 s)
``attnload_final``     worker -> master    :class:`WorkerReport`, everything left, when its users stop
``attnload_stage``     master -> workers   :class:`StageMessage` at each new stage
``attnload_pace_*``    both ways           :class:`PaceClaim`, :class:`PaceClaimed`, :class:`PaceLearned`
``attnload_hello``     worker -> master    config sha256 and attnload version, at init (``admission.py``)
=====================  ==================  ==========================================================
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, TypedDict

import gevent

from attnload.runner import admission
from attnload.runner.collector.channels import CHANNELS
from attnload.runner.collector.collector import MasterCollector
from attnload.runner.runtime import Runtime
from attnload.runner.sender.sender import Sender, sample_cpu
from attnload.runner.sender.startspread import PilotBoard, StartSpread

REPORT_KEY = "attnload"
"""Where a worker's :class:`WorkerReport` rides in Locust's own ``report_to_master`` data."""
FINAL_DELTA_MESSAGE = "attnload_final"
STAGE_MESSAGE = "attnload_stage"
CLAIM_MESSAGE = "attnload_pace_claim"
"""worker -> master: may this worker's user be the model's pilot?"""
CLAIMED_MESSAGE = "attnload_pace_claimed"
"""master -> one worker: the answer to its claim."""
LEARNED_MESSAGE = "attnload_pace_learned"
"""worker -> master -> every worker: how long a pilot's first answer took."""


# ---------------------------------------------------------------------- the report and the final counts


WorkerReport = dict[str, Any]
"""What a worker recorded since its previous report (deltas), and its state now: each registered
channel's payload under its key (``runner/collector/channels.py``; a channel with nothing to send is absent)."""


def worker_report(sender: Sender, final: bool = False) -> WorkerReport:
    """Worker: take every channel's delta (they restart from zero) for one report."""
    report: WorkerReport = {}
    for channel in CHANNELS:
        if channel.key and (payload := channel.take(sender, final)) is not None:
            report[channel.key] = payload
    return report


def merge_report(collector: MasterCollector, worker_id: str, report: WorkerReport) -> None:
    """Master: fold one worker's report into the fleet's totals, channel by channel; the worker watch
    reads the report whole (a report is a sign of life, its users and stalls say how the worker fares)."""
    collector.workers_seen.add(worker_id)
    collector.merged_at[worker_id] = time.perf_counter()
    for channel in collector.channels:
        if channel.key and (payload := report.get(channel.key)) is not None:
            channel.merge(collector, worker_id, payload)
    collector.watch.report(worker_id, report.get("delta") or {}, report.get("users"), report.get("stall"))


def report_exchange(runner: Any, sender: Sender | None, collector: MasterCollector | None) -> None:
    """Deltas every report and a final one when a worker's users stop; the master merges both."""
    events = runner.environment.events
    if sender is not None:
        events.report_to_master.add_listener(lambda client_id, data: data.update({REPORT_KEY: worker_report(sender)}))
        gevent.spawn(sample_cpu, sender)

        def send_final(**_: Any) -> None:
            sender.stop()  # in-flight open-loop requests are recorded as cancelled first
            runner.send_message(FINAL_DELTA_MESSAGE, worker_report(sender, final=True))

        events.test_stop.add_listener(send_final)
    if collector is not None:
        events.heartbeat_sent.add_listener(lambda client_id, **_: collector.watch.heartbeat(client_id))
        events.worker_report.add_listener(
            lambda client_id, data: merge_report(collector, client_id, data.get(REPORT_KEY) or {})
        )

        def final_counts(environment: Any, msg: Any, **_: Any) -> None:
            merge_report(collector, msg.node_id, msg.data or {})
            collector.final_counts_from.add(msg.node_id)

        runner.register_message(FINAL_DELTA_MESSAGE, final_counts)


# ---------------------------------------------------------------------- stages


@dataclass(frozen=True)
class StageMessage:
    """Master -> workers at each new stage: closed-loop users, or open-loop rates per model key and the
    worker count (each worker sends its share). Sent as ``asdict`` (Locust messages are msgpack)."""

    index: int
    users: int | None = None
    rate: float | None = None
    rates: dict[str, float] | None = None
    workers: int | None = None
    salt: str | None = None
    """The master's run salt: replayed prefixes must be identical text on every worker."""

    def to_data(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> StageMessage:
        return cls(
            index=data["index"],
            users=data.get("users"),
            rate=data.get("rate"),
            rates=data.get("rates"),
            workers=data.get("workers"),
            salt=data.get("salt"),
        )

    def enter(self, runtime: Runtime) -> None:
        runtime.enter_stage(self.index, self.users, self.rate, rates=self.rates, workers=self.workers, salt=self.salt)


def send_stage(runner: Any, message: StageMessage) -> None:
    """Master: tell every worker the new stage (the shape calls it)."""
    runner.send_message(STAGE_MESSAGE, message.to_data())


def stage_exchange(runner: Any, worker: Runtime | None) -> None:
    """A worker enters each stage the master's shape enters (the master's half is :func:`send_stage`)."""
    if worker is None:
        return

    def on_stage(environment: Any, msg: Any, **_: Any) -> None:
        worker.state.worker_index = max(runner.worker_index, 0)
        StageMessage.from_data(msg.data).enter(worker)

    runner.register_message(STAGE_MESSAGE, on_stage)


# ---------------------------------------------------------------------- the first stage's pace (--start-spread)


class PaceClaim(TypedDict):
    key: str


class PaceClaimed(TypedDict):
    key: str
    pilot: bool
    d: float | None


class PaceLearned(TypedDict):
    key: str
    d: float


def pace_exchange(runner: Any, spread: StartSpread | None, pilots: PilotBoard | None) -> None:
    """Workers claim a model's pilot from the master, which answers one worker and relays what a pilot learned."""
    if spread is not None:

        def ask(key: str) -> None:
            runner.send_message(CLAIM_MESSAGE, PaceClaim(key=key))

        def tell(key: str, duration_s: float) -> None:
            runner.send_message(LEARNED_MESSAGE, PaceLearned(key=key, d=duration_s))

        spread.ask_master, spread.tell_master = ask, tell
        runner.register_message(CLAIMED_MESSAGE, lambda environment, msg, **_: spread.on_claimed(msg.data or {}))
        runner.register_message(
            LEARNED_MESSAGE, lambda environment, msg, **_: spread.learn(str(msg.data["key"]), float(msg.data["d"]))
        )
    if pilots is not None:

        def claim(environment: Any, msg: Any, **_: Any) -> None:
            key = str(msg.data["key"])
            pilot, duration_s = pilots.on_claim(key, msg.node_id)
            runner.send_message(CLAIMED_MESSAGE, PaceClaimed(key=key, pilot=pilot, d=duration_s), client_id=msg.node_id)

        def learned(environment: Any, msg: Any, **_: Any) -> None:
            pilots.learn(str(msg.data["key"]), float(msg.data["d"]))
            runner.send_message(LEARNED_MESSAGE, msg.data)

        runner.register_message(CLAIM_MESSAGE, claim)
        runner.register_message(LEARNED_MESSAGE, learned)


# ---------------------------------------------------------------------- all of them


def setup_distributed_messages(runner: Any, worker: Runtime | None, master: MasterCollector | None) -> None:
    """Register this process's half of every exchange: a worker's (its sender's), a master's (its collector's);
    a single process needs none."""
    sender = worker.sender if worker is not None else None
    if worker is not None:
        worker.state.worker_index = max(runner.worker_index, 0)
    if worker is not None:
        admission.say_hello(runner, worker.state.config.sha256)
    if master is not None:
        options = master.state.options
        admission.install(
            runner,
            master.state.config.sha256,
            options.accept_foreign_workers,
            master.watch.refused.append,
            master.watch.hello,
        )
    report_exchange(runner, sender, master)
    stage_exchange(runner, worker)
    pace_exchange(runner, sender.start_spread if sender else None, master.pilots if master else None)
