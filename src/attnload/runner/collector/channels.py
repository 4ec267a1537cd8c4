"""Every feature that travels from the workers to the master or into the results: one :class:`Channel` each.

A channel is registered once, in :data:`CHANNELS`, with all its halves: what a worker takes for each report
(under its ``key``), how the master merges it, what a new test resets, and its part of the results
(``results.summarize.ResultsPart``). ``runner/messages.py`` ships and merges whatever is registered; the
collector resets and asks each one for its part. Channels without a key are gathered by the master itself
(the server and GPU views, the sweep, the fleet's faults). The order is the order parts apply in.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from attnload.measure.context import ContextRecorder
from attnload.measure.paired import PairedRecorder
from attnload.measure.recorder import Series
from attnload.results.bursts import client_behind, with_server_bursts
from attnload.results.context import context_fields, with_replay_rates
from attnload.results.decode.interference import prefill_interference
from attnload.results.fleet import FleetFaults
from attnload.results.gpu import GpuResults, per_token, with_gpu
from attnload.results.microscope.apply import with_microscope
from attnload.results.model import PairedSummary, Results, StageSummary
from attnload.results.server import ServerResults, with_server
from attnload.results.summarize import ResultsPart
from attnload.runner.collector.collector import Channel, Collector, MasterCollector, with_server_gap
from attnload.runner.collector.workerloss import with_fleet_faults
from attnload.runner.sender.arrivalphase import with_start_spread
from attnload.runner.sender.sender import Sender
from attnload.workload.ladder import pinned_max_tokens

# ---------------------------------------------------------------------- parts of the results


class ModelFields(ResultsPart):
    """Fields of each model's summary, by model key."""

    def __init__(self, by_key: dict[str, dict[str, Any]]) -> None:
        self.by_key = by_key

    def fields(self, key: str, whole: Series) -> dict[str, Any]:
        return self.by_key.get(key, {})


class Finish(ResultsPart):
    """A change to the whole document, once every model is summarised."""

    def __init__(self, change: Callable[[Results], Results]) -> None:
        self.change = change

    def finish(self, results: Results) -> Results:
        return self.change(results)


class ContextPart(ResultsPart):
    """Turns, steps, sessions and TTFT by prompt length; a replay's arrival rates per stage."""

    def __init__(self, context: ContextRecorder, trace_rate_per_s: float | None) -> None:
        self.context, self.trace_rate_per_s = context, trace_rate_per_s

    def stage(self, key: str, stage: StageSummary) -> StageSummary:
        return with_replay_rates(stage, self.context, key, self.trace_rate_per_s)

    def fields(self, key: str, whole: Series) -> dict[str, Any]:
        return context_fields(self.context, key)


class PairedPart(ResultsPart):
    """``--paired``: each model against the baseline, per stage and over the run."""

    def __init__(self, paired: PairedRecorder) -> None:
        self.paired = paired

    def stage(self, key: str, stage: StageSummary) -> StageSummary:
        diff = self.paired.summary(key, stage.index)
        return stage.model_copy(update={"paired": PairedSummary.model_validate(diff) if diff else None})

    def fields(self, key: str, whole: Series) -> dict[str, Any]:
        return {"paired": self.paired.summary(key)}


class ServerPart(ResultsPart):
    """The model servers' /metrics per stage and over the run."""

    def __init__(self, server: ServerResults) -> None:
        self.server = server

    def stage(self, key: str, stage: StageSummary) -> StageSummary:
        return with_server(stage, self.server.stage(key, stage.index))

    def fields(self, key: str, whole: Series) -> dict[str, Any]:
        return {"server": self.server.total(key)}


class GpuPart(ResultsPart):
    """The models' GPUs per stage and over the run (per output token where tokens were counted)."""

    def __init__(self, gpu: GpuResults) -> None:
        self.gpu = gpu

    def stage(self, key: str, stage: StageSummary) -> StageSummary:
        return with_gpu(stage, self.gpu.stage(key, stage.index))

    def fields(self, key: str, whole: Series) -> dict[str, Any]:
        return {"gpu": per_token(self.gpu.total(key), whole.counts.get("completion_tokens", 0))}


def running_stage(collector: Collector) -> int | None:
    state = collector.state
    return state.stage.index if state.running else None


# ---------------------------------------------------------------------- worker -> master


class Histograms(Channel):
    """The recorder's histograms and counters (the core of the results: ``results.summarize``)."""

    key = "delta"

    def take(self, sender: Sender, final: bool) -> Any:
        return sender.state.recorder.take_delta()

    def merge(self, master: MasterCollector, worker: str, payload: Any) -> None:
        master.state.recorder.merge_delta(payload)

    def part(self, collector: Collector) -> ResultsPart:
        """The server's bursts, told apart from a client that fell behind."""
        behind = client_behind(collector.cpu_max_ratio, collector.throttled_max_ratio, collector.loop_lag_summaries())
        return Finish(lambda results: with_server_bursts(results, collector.state.recorder, behind))


class Users(Channel):
    """Each model's users on a worker now; the results' ``in_flight`` while the test runs."""

    key = "users"

    def take(self, sender: Sender, final: bool) -> Any:
        return dict(sender.users_by_model)

    def merge(self, master: MasterCollector, worker: str, payload: Any) -> None:
        if worker not in master.workers_lost:
            master.note_worker_users(worker, payload)

    def part(self, collector: Collector) -> ResultsPart | None:
        if not collector.state.running:
            return None
        return ModelFields({key: {"in_flight": n} for key, n in collector.fleet.users.items()})


class Cpu(Channel):
    """Peak sustained CPU ratio since the last report (``results.client``: saturation)."""

    key = "cpu"

    def take(self, sender: Sender, final: bool) -> Any:
        return sender.cpu.peak()

    def merge(self, master: MasterCollector, worker: str, payload: Any) -> None:
        master.note_cpu(worker, float(payload))


class Throttled(Channel):
    """Peak cgroup CPU throttling since the last report (``measure.cgroup``)."""

    key = "throttled"

    def take(self, sender: Sender, final: bool) -> Any:
        return sender.throttle.peak()

    def merge(self, master: MasterCollector, worker: str, payload: Any) -> None:
        master.note_throttled(float(payload))


class LoopLag(Channel):
    """The event loop's lateness since the last report (a histogram, ``measure.looplag``)."""

    key = "loop_lag"

    def take(self, sender: Sender, final: bool) -> Any:
        return sender.loop_lag.take_delta()

    def merge(self, master: MasterCollector, worker: str, payload: Any) -> None:
        master.note_loop_lag(worker, payload)

    def reset(self, collector: Collector) -> None:
        collector.loop_lag.reset()
        collector.fleet.worker_loop_lag.clear()


class Context(Channel):
    """Turns, agent steps and sessions, prompt-length buckets, a replay's sends (``measure.context``)."""

    key = "context"

    def take(self, sender: Sender, final: bool) -> Any:
        return sender.state.context.take_delta()

    def merge(self, master: MasterCollector, worker: str, payload: Any) -> None:
        master.state.context.merge_delta(payload)

    def part(self, collector: Collector) -> ResultsPart:
        state = collector.state
        return ContextPart(state.context, state.trace_rate_per_s)


class Interference(Channel):
    """``--shape interference:L``: injected prefill windows and the decode gaps classified around them
    (``measure.interference``): each model's ``prefill_interference``."""

    key = "interference"

    def take(self, sender: Sender, final: bool) -> Any:
        return sender.state.interference.take_delta()

    def merge(self, master: MasterCollector, worker: str, payload: Any) -> None:
        master.state.interference.merge_delta(payload)

    def part(self, collector: Collector) -> ResultsPart | None:
        recorder = collector.state.interference
        if not recorder.series:
            return None
        return ModelFields(
            {key: {"prefill_interference": prefill_interference(recorder, key)} for key in recorder.series}
        )


class Paired(Channel):
    """``--paired``: per-prompt differences against the baseline (``measure.paired``)."""

    key = "paired"

    def take(self, sender: Sender, final: bool) -> Any:
        paired = sender.state.paired
        return paired.take_delta() if paired is not None else None

    def merge(self, master: MasterCollector, worker: str, payload: Any) -> None:
        if master.state.paired is not None and payload:
            master.state.paired.merge_delta(payload)

    def part(self, collector: Collector) -> ResultsPart | None:
        paired = collector.state.paired
        return PairedPart(paired) if paired is not None else None


class Stall(Channel):
    """A worker's freezes since the last report and its requests marked across them. The master's
    worker watch reads it with the rest of the report (``workerloss.py``): nothing to merge here."""

    key = "stall"

    def take(self, sender: Sender, final: bool) -> Any:
        return sender.stall.take()


class FirstRequests(Channel):
    """First-request stamps per (model, stage) (cumulative, ``sender.arrivalphase``): ``start_spread``."""

    key = "first_requests"

    def take(self, sender: Sender, final: bool) -> Any:
        return sender.first_requests.payload()

    def merge(self, master: MasterCollector, worker: str, payload: Any) -> None:
        master.first_requests.merge(worker, payload)

    def reset(self, collector: Collector) -> None:
        collector.first_requests.reset()

    def part(self, collector: Collector) -> ResultsPart:
        stamps = collector.first_requests.combined()
        mode = collector.state.options.start_spread
        return Finish(lambda results: with_start_spread(results, mode, stamps))


class Health(Channel):
    """Crash counts (cumulative: a lost report loses nothing): ``client.users_started``, ``users_crashed``."""

    key = "health"

    def take(self, sender: Sender, final: bool) -> Any:
        return sender.health.payload(sender.spawned)

    def merge(self, master: MasterCollector, worker: str, payload: Any) -> None:
        master.health.merge(worker, payload)

    def part(self, collector: Collector) -> ResultsPart:
        fields = collector.health.client_fields(collector.own_health())
        return Finish(lambda results: results.model_copy(update={"client": results.client.model_copy(update=fields)}))


class Requests(Channel):
    """``--requests-out`` lines: one report's share, everything in the final one; ``results.requests_out``."""

    key = "requests"

    def take(self, sender: Sender, final: bool) -> Any:
        return sender.lines.take(final) if sender.lines is not None else None

    def merge(self, master: MasterCollector, worker: str, payload: Any) -> None:
        if master.requests is not None:
            master.requests.write(payload)

    def reset(self, collector: Collector) -> None:
        if collector.requests is not None:
            collector.requests.restart()

    def part(self, collector: Collector) -> ResultsPart | None:
        requests = collector.requests
        if requests is None:
            return None
        collector.drain_requests()
        out = requests.summary(final=not collector.state.running)
        return Finish(lambda results: results.model_copy(update={"requests_out": out}))


# ---------------------------------------------------------------------- gathered by the master


class Attention(Channel):
    """What the simulator's presets say of each model's attention (KV bytes per token, capacity)."""

    def part(self, collector: Collector) -> ResultsPart:
        state = collector.state
        facts = {m.key: facts for m in state.config.models if (facts := state.attention_facts(m.id))}
        return ModelFields({key: {"attention_info": f} for key, f in facts.items()})


class Sweep(Channel):
    """A sweep shape's report, from the final stats."""

    def part(self, collector: Collector) -> ResultsPart | None:
        if collector.sweep_final is None:
            return None
        return ModelFields({key: {"sweep": sweep} for key, sweep in collector.sweep_final().items()})


class Microscope(Channel):
    """The decode fit of every stage (its sums ride in the recorder's delta), a decode sweep's ``kv_read`` and a
    capacity probe's ``kv_capacity`` (docs/microscope.md); after the attention facts and the server view."""

    def part(self, collector: Collector) -> ResultsPart:
        state, shape = collector.state, collector.state.options.shape
        probe = None
        if shape is not None and shape.fixed_context is not None:
            workload = state.workload
            output = max(pinned_max_tokens(p, workload.default_max_tokens) for p in workload.profiles)
            probe = (shape.fixed_context, output)
        lockstep = shape is not None and shape.lockstep
        return Finish(
            lambda results: with_microscope(
                results,
                state.config,
                state.recorder,
                lockstep=lockstep,
                gpu_bandwidth=state.gpu_bandwidth,
                capacity_probe=probe,
            )
        )


class ServerMetrics(Channel):
    """The model servers' /metrics, scraped by the collecting process (``serverview.py``)."""

    def reset(self, collector: Collector) -> None:
        if collector.server_view is not None:
            collector.server_view.start()

    def part(self, collector: Collector) -> ResultsPart | None:
        view = collector.server_view
        return ServerPart(view.results(running_stage(collector))) if view is not None else None


class GpuMetrics(Channel):
    """dcgm-exporter's (or the simulator's) per-GPU gauges, scraped by the collecting process."""

    def reset(self, collector: Collector) -> None:
        if collector.gpu_view is not None:
            collector.gpu_view.start()

    def part(self, collector: Collector) -> ResultsPart | None:
        view = collector.gpu_view
        return GpuPart(view.results(running_stage(collector))) if view is not None else None


class WorkerFaults(Channel):
    """Workers lost, stalled and refused (a master's ``workerloss.WorkerWatch``): ``client``, ``partial``
    and the flags of the stages they touched; a lost worker beside its servers' own token count."""

    def part(self, collector: Collector) -> ResultsPart | None:
        if not isinstance(collector, MasterCollector):
            return None
        faults = collector.watch.faults(collector.state.ended_at or time.time(), collector.final_counts_from)
        if faults == FleetFaults():
            return None
        return Finish(lambda results: with_fleet_faults(results, _with_server_gaps(faults, results)))


def _with_server_gaps(faults: FleetFaults, results: Results) -> FleetFaults:
    if not faults.lost:
        return faults
    return faults.model_copy(update={"lost": [with_server_gap(w, results) for w in faults.lost]})


CHANNELS: tuple[Channel, ...] = (
    Histograms(),
    Users(),
    Cpu(),
    Throttled(),
    LoopLag(),
    Context(),
    Interference(),
    Paired(),
    Stall(),
    Attention(),
    Sweep(),
    ServerMetrics(),
    GpuMetrics(),
    Microscope(),
    FirstRequests(),
    Health(),
    Requests(),
    WorkerFaults(),
)
"""Every channel, in the order their parts apply to the results (a part may read what an earlier one added)."""
