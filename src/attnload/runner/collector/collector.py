"""The collector of a Locust process: what the run did, for ``/metrics``, the live views and the results.

Locust's habit, one class per role: a :class:`MasterCollector` merges the deltas its workers send
(``runner/messages.py``) and watches them come and go; a :class:`LocalCollector` reads the sender of
its own process. Both scrape the model servers and GPUs, keep the fleet's gauges, and build and
write the results. What each feature adds (its merge, its reset, its part of the results) is its
:class:`Channel`, registered once in ``channels.py``; the collector only runs them in order.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from attnload.exporter.exposition import FleetState
from attnload.measure.cgroup import throttled_reason
from attnload.measure.looplag import FleetLoopLag
from attnload.report.csvout import write_llm_csv
from attnload.report.html import write_html
from attnload.results.fleet import LostWorker, UnreportedTraffic
from attnload.results.model import Results, Summary
from attnload.results.summarize import ResultsPart, RunFacts, StageWindow, build_results, client_info, summary
from attnload.results.write import write_final
from attnload.runner.collector.gpuview import GpuView, gpu_targets
from attnload.runner.collector.health import FleetHealth
from attnload.runner.collector.reach import Reachability
from attnload.runner.collector.requestsfile import RequestsWriter
from attnload.runner.collector.serverview import ServerView, scrape_targets
from attnload.runner.collector.workerloss import WorkerWatch
from attnload.runner.sender.arrivalphase import FleetFirstRequests
from attnload.runner.sender.sender import Sender
from attnload.runner.sender.startspread import PilotBoard
from attnload.runner.state import RunState
from attnload.workload.sweep import ModelStageStats

log = logging.getLogger(__name__)

USERS_REPORT_LAG_S = 3.5
"""Workers report their users every 3 s: a master's count is current this long after a stage starts."""
SATURATED_CPU_RATIO = 0.9


class StageView(Protocol):
    """A scraped source summarised per stage (the server view, the GPU view)."""

    def start(self) -> None: ...
    def stage_ended(self, index: int) -> None: ...
    def stop(self) -> None: ...


class Channel:
    """One feature a collector gathers, registered once in ``channels.CHANNELS`` with all its hooks.

    Shaped like Locust's per-feature listeners (``stats.setup_distributed_stats_event_listeners``): a
    worker takes its delta under :attr:`key` for each report, the master merges it, a new test resets it,
    and the results get the feature's :class:`ResultsPart`. Every hook does nothing unless overridden."""

    key = ""
    """Where a worker's payload rides in its report ("": workers send none; the master gathers it)."""

    def take(self, sender: Sender, final: bool) -> Any:
        """Worker: what to send since the last report (None: nothing this time)."""
        return None

    def merge(self, master: MasterCollector, worker: str, payload: Any) -> None:
        """Master: fold one worker's payload into the fleet's totals."""

    def reset(self, collector: Collector) -> None:
        """A new test starts: what the previous one gathered goes."""

    def part(self, collector: Collector) -> ResultsPart | None:
        """The feature's share of the results (None: it adds nothing to this document)."""
        return None


class Collector:
    """Fleet gauges, scrapers and results of one collecting process (see the subclasses)."""

    process_role = ""
    """What ``results.config.role`` says of the process that wrote them."""
    own_workers = 0
    """Sending processes counted beside the workers that reported (a single process sends itself)."""

    def __init__(self, state: RunState, channels: Sequence[Channel] = ()) -> None:
        self.state = state
        self.channels = tuple(channels)
        """Every feature this collector gathers and puts in the results (``channels.CHANNELS``)."""
        config = state.config
        self.fleet = FleetState(
            model_labels={m.key: (m.id, m.attention) for m in config.models}, interference=state.interference
        )
        self.health = FleetHealth()
        self.cpu_max_ratio = 0.0
        self.throttled_max_ratio = 0.0
        self.requests: RequestsWriter | None = None
        """``--requests-out``: the file this process writes."""
        self.sweep_final: Callable[[], dict[str, dict[str, Any]]] | None = None
        """Gives the sweep report from final stats (set by the sweep shape)."""
        self.server_view: ServerView | None = None
        """The model servers' /metrics, unless --server-metrics off."""
        self.gpu_view: GpuView | None = None
        """dcgm-exporter's (or the simulator's) per-GPU gauges per model, unless --gpu-metrics off."""
        self.reach = Reachability()
        """Models whose server refuses connections now (the console says so while it lasts)."""
        self.loop_lag = FleetLoopLag()
        """Each sending process's event-loop lateness (``measure.looplag``)."""
        self.first_requests = FleetFirstRequests()
        """Each sending process's first-request stamps per (model, stage) (``sender.arrivalphase``)."""

    def open_views(self) -> None:
        """Scrape the model servers and GPUs the options ask for (from the next test on)."""
        state = self.state
        config, options = state.config, state.options
        if options.server_metrics == "auto":
            self.server_view = ServerView(
                scrape_targets(config, state.attention_facts), options.server_metrics_interval_s
            )
        if options.gpu_metrics == "auto":
            guess = options.server_metrics == "auto"  # off: the servers' /metrics are not read at all
            self.gpu_view = GpuView(
                gpu_targets(config, state.attention_facts, guess),
                options.server_metrics_interval_s,
                on_sample=self.fleet.gpu.record,
            )

    # ------------------------------------------------------------------ stages

    def begin_test(self) -> None:
        self.reach.reset()
        for channel in self.channels:
            channel.reset(self)

    def enter_stage(self, users: int | None, rate: float | None, rates: dict[str, float] | None) -> None:
        fleet = self.fleet
        fleet.stage = self.state.stage.index
        fleet.target_users = users or 0
        fleet.context = self.state.stage_context(fleet.stage)
        fleet.target_rate = rate if rate is not None else (sum(rates.values()) / len(rates) if rates else 0.0)

    def close_stage(self) -> None:
        """The running stage ends: each view scrapes once, so counter deltas end at the boundary."""
        for view in self._views():
            view.stage_ended(self.state.stage.index)

    def test_stopped(self) -> None:
        for view in self._views():
            view.stage_ended(self.state.stage.index)
            view.stop()

    def _views(self) -> list[StageView]:
        """The scrapers of this run: the server view and the GPU view, where on."""
        return [v for v in (self.server_view, self.gpu_view) if v is not None]

    def users_now(self) -> dict[str, int] | None:
        """Each model's users now (None: not known yet this stage)."""
        return dict(self.fleet.users)

    def note_stage_users(self) -> None:
        """Sample each model's users for the current stage (every shape tick; the last sample of a
        stage is what ``stages[].users`` reports)."""
        clock = self.state.stage
        if clock.index < 0 or not self.state.running:
            return
        users = self.users_now()
        if users is not None:
            clock.model_users[clock.index] = {key: int(n) for key, n in users.items()}

    def covered_until(self) -> float | None:
        """perf_counter time up to which the merged data is complete (None: now)."""
        return None

    def stage_stats(self, index: int) -> dict[str, ModelStageStats]:
        """Per model, what stage ``index`` has done so far (the sweep decides on it).

        Rates divide by the time the merged data covers: on a master that is up to the
        oldest worker's last delta (workers report every ~3 s), not up to now.
        """
        state = self.state
        window = next((w for w in reversed(state.stage.windows) if w.index == index), None)
        if window is None:
            return {}
        end_s = window.end_s if window.end_s >= 0 else time.perf_counter() - state.started_perf
        covered = self.covered_until()
        if covered is not None and window.end_s < 0:
            covered_s = covered - state.started_perf
            if covered_s > window.start_s + 1.0:
                end_s = min(end_s, covered_s)
        duration_s = max(end_s - window.start_s, 1e-9)
        out = {}
        for target in state.config.models:
            series = state.recorder.combined(model_key=target.key, stage=index)
            hists = series.hists
            out[target.key] = ModelStageStats(
                output_tokens_per_s=series.counts.get("completion_tokens", 0) / duration_s,
                requests_per_s=series.counts.get("ok", 0) / duration_s,
                ttft_p99_s=hists["ttft"].quantile(0.99),
                itl_p99_s=hists["itl"].quantile(0.99),
                e2e_p99_s=hists["e2e"].quantile(0.99),
                failed=series.counts.get("failed", 0),
            )
        return out

    # ------------------------------------------------------------------ client saturation

    def note_cpu(self, worker: str, ratio: float) -> None:
        self.fleet.worker_cpu_ratio[worker] = ratio
        self.cpu_max_ratio = max(self.cpu_max_ratio, ratio)
        self._flag_saturation()

    def note_throttled(self, ratio: float) -> None:
        """cgroup CPU throttling (share of wall time) of a worker or this process; see ``measure.cgroup``."""
        self.throttled_max_ratio = max(self.throttled_max_ratio, ratio)
        self._flag_saturation()

    def note_loop_lag(self, worker: str, wire: Any) -> None:
        """One report's event-loop lateness of ``worker`` (a histogram on the wire)."""
        self.loop_lag.merge(worker, wire)
        self.fleet.worker_loop_lag = self.loop_lag.gauges()

    def _flag_saturation(self) -> None:
        saturated = self.cpu_max_ratio > SATURATED_CPU_RATIO
        self.fleet.client_saturated = saturated or throttled_reason(self.throttled_max_ratio) is not None

    # ------------------------------------------------------------------ --requests-out

    def drain_requests(self) -> None:
        """Move lines this process holds into the file (only a single process holds any)."""

    def close_requests(self) -> None:
        if self.requests is not None:
            self.drain_requests()
            self.requests.close()

    # ------------------------------------------------------------------ results

    def workers_counted(self) -> tuple[int, int]:
        """(workers, workers lost) for ``results.client``."""
        return self.own_workers, 0

    def own_health(self) -> dict[str, Any] | None:
        """This process's own crash counts (a single process's users), beside the workers'."""
        return None

    def pull_own(self) -> None:
        """A single process: take its own sender's loop lateness and first-request stamps."""

    def results(self) -> Results:
        """The results now: the run's facts, and each channel's part in registry order."""
        state = self.state
        workers, lost = self.workers_counted()
        self.pull_own()
        run = RunFacts(
            config=state.config,
            recorder=state.recorder,
            started_at=state.started_at or time.time(),
            ended_at=state.ended_at or time.time(),
            stages=self._windows(),
            client=client_info(
                workers,
                lost,
                self.cpu_max_ratio,
                state.recorder,
                throttled_ratio=self.throttled_max_ratio,
                loop_lag=self.loop_lag_summaries(),
            ),
            run_info=self._run_info(),
            paired=state.paired is not None,
            replay=state.trace_rate_per_s is not None,
            interrupted=state.interrupted,
        )
        return build_results(run, [part for channel in self.channels if (part := channel.part(self)) is not None])

    def loop_lag_summaries(self) -> dict[str, Summary]:
        """Each sending process's event-loop lateness over the run."""
        return {worker: summary(hist) for worker, hist in self.loop_lag.run.items()}

    def _windows(self) -> list[StageWindow]:
        state = self.state
        if not state.options.shape:
            return []
        clock = state.stage
        return [replace(w, model_users=clock.model_users.get(w.index)) for w in clock.windows if w.end_s > w.start_s]

    def _run_info(self) -> dict[str, Any]:
        state = self.state
        config, options, shape = state.config, state.options, state.options.shape
        return {
            "source": os.path.basename(config.source),
            "shape": shape.to_text() if shape else None,
            "stage_duration_s": shape.stage_duration_s if shape else None,
            "warmup_s": options.warmup_s,
            "profiles": [p.name for p in state.workload.profiles],
            "max_tokens": config.request.max_tokens,
            "temperature": config.request.temperature,
            "role": self.process_role,
            "paired": options.paired,
            "arrivals": state.arrivals,
            "start_spread": options.start_spread,
            "burstiness": state.burstiness,
            "slo": config.slo.model_dump(),
            "models": {m.key: {"id": m.id, "attention": m.attention, "url": m.url} for m in config.models},
        }

    def write_results(self) -> Path | None:
        state = self.state
        if state.started_at is None:
            return None
        results = self.results()
        path = write_final(results, state.options.results_dir, state.started_at, render_html=write_html)
        if path is None:  # nowhere to write: the table at least reaches the console
            from attnload.report.console import print_summary

            print_summary(results)
        if state.options.csv_prefix:  # beside the CSVs Locust writes for its own --csv
            try:
                write_llm_csv(results, state.options.csv_prefix)
            except OSError as exc:
                log.warning("--csv %s: not written (%s)", state.options.csv_prefix, exc.strerror or exc)
        return path


class LocalCollector(Collector):
    """A single process: it collects what its own sender records."""

    process_role = "local"
    own_workers = 1

    def __init__(self, state: RunState, sender: Sender, channels: Sequence[Channel] = ()) -> None:
        super().__init__(state, channels)
        self.sender = sender

    def users_now(self) -> dict[str, int] | None:
        return dict(self.sender.users_by_model)

    def tick(self) -> None:
        """Every second: this process is the fleet (its users, its CPU)."""
        self.fleet.workers = 1
        self.fleet.users = dict(self.sender.users_by_model)
        self.note_cpu("local", self.sender.cpu.sample())
        self.note_throttled(self.sender.throttle.sample())
        self.pull_own()

    def pull_own(self) -> None:
        self.note_loop_lag("local", self.sender.loop_lag.take_delta())
        self.first_requests.merge("local", self.sender.first_requests.payload())

    def drain_requests(self) -> None:
        lines = self.sender.lines
        if self.requests is not None and lines is not None:
            self.requests.write(lines.take(final=True))

    def own_health(self) -> dict[str, Any] | None:
        return self.sender.health.payload(self.sender.spawned)


class MasterCollector(Collector):
    """A Locust master: it merges its workers' deltas and tracks them."""

    process_role = "master"

    def __init__(self, state: RunState, channels: Sequence[Channel] = ()) -> None:
        super().__init__(state, channels)
        self.pilots = PilotBoard()
        """Which worker runs each model's first-stage pilot (``--start-spread auto``)."""
        self.worker_users: dict[str, dict[str, int]] = {}
        self.workers_seen: set[str] = set()
        self.workers_lost: set[str] = set()
        self.final_counts_from: set[str] = set()
        """Workers whose final counts (sent when their users stopped) reached this master."""
        self.merged_at: dict[str, float] = {}
        """perf_counter time of each worker's last merged report."""
        self.watch = WorkerWatch()
        """Workers lost, stalled and refused (``workerloss.py``)."""

    def begin_test(self) -> None:
        self.final_counts_from.clear()
        self.pilots.reset()
        self.watch.reset()
        self.watch.started_at = self.state.started_at or time.time()
        super().begin_test()

    def worker_missing(self, worker_id: str) -> str:
        """A worker was marked missing: its users leave the fleet's count; the line to print."""
        state = self.state
        line = self.watch.went_missing(worker_id, state.stage.index if state.running else None)
        self.workers_lost.add(worker_id)
        self.worker_users.pop(worker_id, None)
        self.fleet.users = dict(sum((Counter(u) for u in self.worker_users.values()), Counter()))
        return line

    def worker_back(self, worker_id: str) -> str:
        self.workers_lost.discard(worker_id)
        return self.watch.came_back(worker_id)

    def users_now(self) -> dict[str, int] | None:
        """The workers' report (every ~3 s): a sample closer than that to the stage start may still show
        the previous stage, so none is taken."""
        if time.perf_counter() - self.state.stage.started < USERS_REPORT_LAG_S:
            return None
        return dict(self.fleet.users)

    def covered_until(self) -> float | None:
        return min(self.merged_at.values()) if self.merged_at else None

    def note_worker_users(self, worker_id: str, users: dict[str, int]) -> None:
        self.worker_users[worker_id] = users
        self.fleet.users = dict(sum((Counter(u) for u in self.worker_users.values()), Counter()))

    def reporting_workers(self, within_s: float = 7.0) -> set[str]:
        """Workers whose report arrived recently (they report every 3 s, even between tests)."""
        now = time.perf_counter()
        return {w for w, at in self.merged_at.items() if now - at < within_s and w not in self.workers_lost}

    def workers_counted(self) -> tuple[int, int]:
        return len(self.workers_seen), len(self.watch.missing)


def with_server_gap(worker: LostWorker, results: Results) -> LostWorker:
    """A lost worker's estimate beside the servers' own count over its stage: server generation tokens
    minus the client's, per model (where the server view read them)."""
    unreported = dict(worker.unreported)
    for model in results.models:
        stage = next((s for s in model.stages if s.index == worker.stage), None)
        server = stage.server if stage is not None else model.server
        client_tokens = stage.completion_tokens if stage is not None else model.completion_tokens
        if server is None or server.generation_tokens is None:
            continue
        entry = unreported.get(model.key, UnreportedTraffic())
        gap = round(server.generation_tokens - client_tokens)
        unreported[model.key] = entry.model_copy(update={"server_minus_client_output_tokens": gap})
    return worker.model_copy(update={"unreported": unreported})
