"""Per-process run state shared by users and Locust event handlers.

One :class:`Runtime` lives on ``environment.attnload`` in every Locust process. On a
worker it records requests and ships deltas; on the master (or a single process) it
merges deltas, tracks stages and workers, serves ``/metrics`` and writes results.
"""

from __future__ import annotations

import logging
import os
import resource
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from attnload.attention import FactsLookup, no_facts
from attnload.client.transport import Timeouts
from attnload.config.model import ModelTarget, TestConfig
from attnload.exporter.exposition import FleetState
from attnload.measure.cgroup import ThrottleMeter, throttled_reason
from attnload.measure.context import ContextRecorder
from attnload.measure.paired import PairedRecorder
from attnload.measure.recorder import Recorder, RequestRecord
from attnload.measure.requestlog import NOBODY, Who
from attnload.plan.options import RunOptions
from attnload.report.csvout import write_llm_csv
from attnload.report.html import write_html
from attnload.results.model import Results
from attnload.results.summarize import StageWindow, build_results, client_info
from attnload.results.write import write_results
from attnload.runner.dialogs import Traffic
from attnload.runner.gpuview import GpuView
from attnload.runner.health import RunHealth
from attnload.runner.openloop import PAIR_STREAM, OpenLoop, OpenStage
from attnload.runner.requestsink import RequestSink
from attnload.runner.serverview import ServerView
from attnload.runner.startspread import StartSpread
from attnload.workload.abandon import Abandoner
from attnload.workload.arrivals import stage_arrivals
from attnload.workload.conversation import new_salt
from attnload.workload.prompts import Workload
from attnload.workload.shapes import ReplaySpec
from attnload.workload.sweep import ModelStageStats

log = logging.getLogger(__name__)

WARMUP_STAGE = -1
"""Stage tag of requests that started before the test or inside a stage's warm-up window."""
USERS_REPORT_LAG_S = 3.5
"""Workers report their users every 3 s: a master's count is current this long after a stage starts."""


class CpuMeter:
    """This process's CPU use (1.0 = one core) from getrusage, sampled every second.

    Locust samples worker CPU only every few seconds, too slowly for short stages; a client
    that saturates does so for seconds on end, so what decides ``client_saturated`` is the
    *sustained* use: the lower of two consecutive one-second samples. A single busy second
    (process start, a spawn burst, a GC pass) does not flag a run; two do.
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


@dataclass
class StageClock:
    """The current stage, as this process knows it (the master tells workers)."""

    index: int = WARMUP_STAGE
    started: float = 0.0  # perf_counter seconds
    windows: list[StageWindow] = field(default_factory=list)
    rates: dict[str, float] | None = None
    """Open-loop rates per model key of the current stage; None in a closed-loop stage."""
    model_users: dict[int, dict[str, int]] = field(default_factory=dict)
    """Per stage, the users each model had at the last sample of the stage (``note_stage_users``)."""


class Runtime:
    """Config, recorder, workload and fleet state for one Locust process."""

    def __init__(
        self, config: TestConfig, options: RunOptions, role: str, attention_facts: FactsLookup = no_facts
    ) -> None:
        self.config = config
        self.attention_facts = attention_facts
        """Preset KV facts per model id, handed in by the entry point (the runner never imports the simulator)."""
        self.options = options
        self.role = role  # "local" | "master" | "worker"
        self.recorder = Recorder()
        self.workload = Workload(config, list(options.profiles) or None)
        self.traffic = Traffic(config, self.workload, lambda: (self.worker_index, self.worker_count))
        """Conversations and dataset prompts (datasets are opened and checked here, before any load)."""
        self.context = ContextRecorder()
        """Latency by turn and by prompt length, and open-loop send times (merged like the recorder)."""
        self.run_salt = new_salt()
        """One salt for the whole run (replayed prefixes are shared inside it); the master's wins."""
        self.fleet = FleetState(model_labels={m.key: (m.id, m.attention) for m in config.models})
        self.api_keys = {m.key: m.api_key() for m in config.models}
        request = config.request
        self.timeouts = Timeouts(
            connect_s=request.connect_timeout_s,
            ttft_s=request.ttft_timeout_s,
            idle_s=request.idle_timeout_s,
            total_s=request.total_timeout_s,
        )
        self.stage = StageClock()
        self.worker_index = 0
        self.users_by_model: Counter[str] = Counter()
        self.worker_users: dict[str, dict[str, int]] = {}
        self.workers_seen: set[str] = set()
        self.workers_lost: set[str] = set()
        self.final_counts_from: set[str] = set()
        """Workers whose final counts (sent when their users stopped) reached this master."""
        self.cpu_max_ratio = 0.0
        self.started_at: float | None = None
        self.started_perf = 0.0
        self.ended_at: float | None = None
        self.running = False
        self.spawned = 0
        self.cpu = CpuMeter()
        self.throttle = ThrottleMeter()
        self.throttled_max_ratio = 0.0
        self.stop_requested = False  # SIGTERM on a headless shape run: the shape ends the test at its next tick
        self._assigned = 0
        self.paired = PairedRecorder(config.models[0].key, seed=config.seed) if options.paired else None
        self.open_loop: OpenLoop | None = None
        """Set on processes that send (workers, or a single process); the master only directs."""
        self.worker_count = 1
        self._merged_at: dict[str, float] = {}
        self.sweep_report: dict[str, dict[str, Any]] | None = None
        self.sweep_final: Any = None
        """Callable giving the sweep report from final stats (set by the sweep shape)."""
        self.server_view: ServerView | None = None
        """The model servers' /metrics, scraped by the master (or single process) unless --server-metrics off."""
        self.gpu_view: GpuView | None = None
        """dcgm-exporter's (or the simulator's) per-GPU gauges per model, unless --gpu-metrics off."""
        self.interrupted = False
        """SIGTERM/SIGINT (or the death of ``attnload run``) ended the run early: results say so."""
        self.health = RunHealth()
        self.requests = RequestSink(config, options.requests_out, role) if options.requests_out else None
        """``--requests-out``: one line per request (buffered here on a worker, written by the master)."""
        self.abandoner = Abandoner(options.abandon, config.seed) if options.abandon is not None else None
        """``--abandon-rate``: draws which requests close their stream early (None: none do)."""
        self.start_spread = StartSpread(
            options.start_spread,
            stage_duration_s=options.shape.stage_duration_s if options.shape else None,
            seed=config.seed,
            role=role,
            recorder=self.recorder,
            placement=lambda: (self.worker_index, self.worker_count),
        )
        """When each new closed-loop user sends its first request (``--start-spread``)."""

    # ------------------------------------------------------------------ users

    def assign_model(self) -> ModelTarget:
        """Round-robin over models (by weight), offset by worker index so workers stay balanced."""
        models = self.config.models
        slots = [m for m in models for _ in range(max(1, round(m.weight)))]
        target = slots[(self._assigned + self.worker_index) % len(slots)]
        self._assigned += 1
        self.users_by_model[target.key] += 1
        return target

    def assign_all(self) -> list[ModelTarget]:
        """Paired mode: a user drives every model (each one counts a user per model)."""
        for target in self.config.models:
            self.users_by_model[target.key] += 1
        return list(self.config.models)

    def release(self, target: ModelTarget) -> None:
        self.users_by_model[target.key] -= 1

    def note_stage_users(self) -> None:
        """Sample each model's users for the current stage (every shape tick; the last sample of a
        stage is what ``stages[].users`` reports). A master's counts come from worker reports (every
        ~3 s): a sample closer than that to the stage start may still show the previous stage."""
        clock = self.stage
        if clock.index < 0 or not self.running:
            return
        if self.role == "master":
            if time.perf_counter() - clock.started < USERS_REPORT_LAG_S:
                return
            users = dict(self.fleet.users)
        else:
            users = dict(self.users_by_model)
        clock.model_users[clock.index] = {key: int(n) for key, n in users.items()}

    def stage_for(self, start_perf: float) -> int:
        """Stage tag of a request starting now; warm-up requests are tagged ``WARMUP_STAGE``."""
        stage = self.stage
        if stage.index < 0 or start_perf - stage.started < self.options.warmup_s:
            return WARMUP_STAGE
        return stage.index

    def observe(self, record: RequestRecord, who: Who = NOBODY) -> None:
        self.recorder.add(record)
        self.context.add(record)
        if self.requests is not None:
            self.requests.observe(record, self.worker_index, who)

    def is_good(self, ttft_s: float | None, itl_gaps: tuple[tuple[float, int], ...], e2e_s: float) -> bool:
        """Whether one successful request met every configured SLO (goodput)."""
        slo = self.config.slo
        if slo.ttft_p99_s is not None and (ttft_s is None or ttft_s > slo.ttft_p99_s):
            return False
        if slo.e2e_p99_s is not None and e2e_s > slo.e2e_p99_s:
            return False
        if slo.itl_p99_s is not None and itl_gaps:
            ordered = sorted(itl_gaps)
            total = sum(n for _, n in ordered)
            seen = 0
            for gap, n in ordered:
                seen += n
                if seen >= 0.99 * total:
                    return gap <= slo.itl_p99_s
        return True

    # ------------------------------------------------------------------ stages and lifecycle

    def begin_test(self) -> None:
        """A new test: fresh recorder, clock and stages (shape start, or test_start without a shape)."""
        self.recorder.reset()
        self.context.reset()
        if self.paired is not None:
            self.paired.reset()
        if self.requests is not None:
            self.requests.restart()
        self.started_at = time.time()
        self.started_perf = time.perf_counter()
        self.ended_at = None
        self.stage = StageClock()
        self.final_counts_from.clear()
        self.start_spread.reset()
        self.running = True
        for view in self._views():
            view.start()

    def test_started(self) -> None:
        """Locust's test_start; with a shape it fires after the first tick, which already began the test."""
        if not self.running:
            self.begin_test()
            if self.options.shape is None:
                self.enter_stage(0, users=None, rate=None)

    def enter_stage(
        self,
        index: int,
        users: int | None,
        rate: float | None,
        rates: dict[str, float] | None = None,
        workers: int | None = None,
        salt: str | None = None,
    ) -> None:
        """A new stage begins (master: from the shape; workers: from its message).

        ``rates`` (per model key) makes it an open-loop stage: a sending process starts
        its share of the schedule (``workers`` shares in all, this one ``worker_index``).
        """
        for view in self._views():
            view.stage_ended(self.stage.index)  # scrapes once: counter deltas end at the boundary
        now = time.perf_counter()
        if salt:
            self.run_salt = salt
        clock = self.stage
        if clock.windows and clock.windows[-1].end_s < 0:
            last = clock.windows[-1]
            clock.windows[-1] = replace(last, end_s=now - self.started_perf)
        if rates is None and rate is not None:
            rates = {m.key: rate for m in self.config.models}
        clock.index, clock.started, clock.rates = index, now, rates
        start_s = now - self.started_perf + self.options.warmup_s
        clock.windows.append(StageWindow(index, start_s, -1.0, users, rate, rates=dict(rates) if rates else None))
        self.fleet.stage = index
        self.fleet.target_users = users or 0
        self.fleet.target_rate = rate if rate is not None else (sum(rates.values()) / len(rates) if rates else 0.0)
        if workers:
            self.worker_count = workers
        if self.open_loop is not None:
            if rates:
                self.open_loop.start_stage(self._open_stage(index, rates, now))
            else:
                self.open_loop.stop_schedule()

    def _open_stage(self, index: int, rates: dict[str, float], started_perf: float) -> OpenStage:
        shape = self.options.shape
        duration_s = shape.stage_duration_s if shape else 60.0
        if self.paired is not None:
            # Paired arrivals are prompts, each sent to every model: one stream at the per-model rate.
            rates = {PAIR_STREAM: min(rates.values())}
        return OpenStage(
            index=index,
            rates_rps=rates,
            started_perf=started_perf,
            duration_s=duration_s,
            warmup_s=self.options.warmup_s,
            share_index=self.worker_index,
            share_count=max(self.worker_count, 1),
        )

    def stage_stats(self, index: int) -> dict[str, ModelStageStats]:
        """Per model, what stage ``index`` has done so far (the sweep decides on it).

        Rates divide by the time the merged data covers: on a master that is up to the
        oldest worker's last delta (workers report every ~3 s), not up to now.
        """
        window = next((w for w in reversed(self.stage.windows) if w.index == index), None)
        if window is None:
            return {}
        end_s = window.end_s if window.end_s >= 0 else time.perf_counter() - self.started_perf
        if self.role == "master" and self._merged_at and window.end_s < 0:
            covered_s = min(self._merged_at.values()) - self.started_perf
            if covered_s > window.start_s + 1.0:
                end_s = min(end_s, covered_s)
        duration_s = max(end_s - window.start_s, 1e-9)
        out = {}
        for target in self.config.models:
            series = self.recorder.combined(model_key=target.key, stage=index)
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

    def test_stopped(self) -> None:
        self.running = False
        if self.started_at is None:
            return
        now = time.perf_counter()
        self.ended_at = self.started_at + (now - self.started_perf)
        windows = self.stage.windows
        if windows and windows[-1].end_s < 0:
            windows[-1] = replace(windows[-1], end_s=now - self.started_perf)
        if self.open_loop is not None:
            self.open_loop.stop()
        for view in self._views():
            view.stage_ended(self.stage.index)
            view.stop()

    def _views(self) -> list[ServerView | GpuView]:
        """The scrapers of this run: the server view and the GPU view, where on."""
        return [v for v in (self.server_view, self.gpu_view) if v is not None]

    def use_requests_out(self, path: str | None) -> None:
        """The ``--requests-out`` a test asked for (``/swarm`` may set it per test): reopen when it changed."""
        if path == (self.requests.path if self.requests is not None else None):
            return
        if self.requests is not None:
            self.requests.close()
        self.requests = RequestSink(self.config, path, self.role) if path else None

    # ------------------------------------------------------------------ distribution

    def worker_payload(self, final: bool = False) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "delta": self.recorder.take_delta(),
            "users": dict(self.users_by_model),
            "cpu": self.cpu.peak(),
            "context": self.context.take_delta(),
            "health": self.health.payload(self.spawned),
            "throttled": self.throttle.peak(),
        }
        if self.paired is not None:
            payload["paired"] = self.paired.take_delta()
        if self.requests is not None:
            payload["requests"] = self.requests.payload(final)
        return payload

    def merge_worker(self, worker_id: str, payload: dict[str, Any]) -> None:
        self.workers_seen.add(worker_id)
        self._merged_at[worker_id] = time.perf_counter()
        self.recorder.merge_delta(payload.get("delta") or {})
        self.context.merge_delta(payload.get("context") or {})
        if self.requests is not None:
            self.requests.merge(payload.get("requests"))
        if self.paired is not None and payload.get("paired"):
            self.paired.merge_delta(payload["paired"])
        if "health" in payload:
            self.health.merge(worker_id, payload["health"])
        if "cpu" in payload:
            self.note_cpu(worker_id, float(payload["cpu"]))
        if "throttled" in payload:
            self.note_throttled(float(payload["throttled"]))
        if "users" in payload:
            self.worker_users[worker_id] = payload["users"]
            self.fleet.users = dict(sum((Counter(u) for u in self.worker_users.values()), Counter()))

    def reporting_workers(self, within_s: float = 7.0) -> set[str]:
        """Workers whose report arrived recently (they report every 3 s, even between tests)."""
        now = time.perf_counter()
        return {w for w, at in self._merged_at.items() if now - at < within_s and w not in self.workers_lost}

    def note_cpu(self, worker: str, ratio: float) -> None:
        self.fleet.worker_cpu_ratio[worker] = ratio
        self.cpu_max_ratio = max(self.cpu_max_ratio, ratio)
        self.fleet.client_saturated = self.cpu_max_ratio > 0.9 or throttled_reason(self.throttled_max_ratio) is not None

    def note_throttled(self, ratio: float) -> None:
        """cgroup CPU throttling (share of wall time) of a worker or this process; see ``measure.cgroup``."""
        self.throttled_max_ratio = max(self.throttled_max_ratio, ratio)
        self.fleet.client_saturated = self.cpu_max_ratio > 0.9 or throttled_reason(self.throttled_max_ratio) is not None

    # ------------------------------------------------------------------ results

    def results(self) -> Results:
        started = self.started_at or time.time()
        ended = self.ended_at or time.time()
        windows = (
            [
                replace(w, model_users=self.stage.model_users.get(w.index))
                for w in self.stage.windows
                if w.end_s > w.start_s
            ]
            if self.options.shape
            else []
        )
        info = {m.key: details for m in self.config.models if (details := self.attention_facts(m.id))}
        shape = self.options.shape
        run_info = {
            "source": os.path.basename(self.config.source),
            "shape": shape.to_text() if shape else None,
            "stage_duration_s": shape.stage_duration_s if shape else None,
            "warmup_s": self.options.warmup_s,
            "profiles": [p.name for p in self.workload.profiles],
            "max_tokens": self.config.request.max_tokens,
            "temperature": self.config.request.temperature,
            "role": self.role,
            "paired": self.options.paired,
            "arrivals": self.arrivals,
            "burstiness": self.burstiness,
            "models": {m.key: {"id": m.id, "attention": m.attention, "url": m.chat_url} for m in self.config.models},
        }
        workers = max(len(self.workers_seen), 1 if self.role == "local" else 0)
        sweep = self.sweep_final() if callable(self.sweep_final) else self.sweep_report
        results = build_results(
            self.config,
            self.recorder,
            started_at=started,
            ended_at=ended,
            stages=windows,
            client=client_info(
                workers,
                len(self.workers_lost),
                self.cpu_max_ratio,
                self.recorder,
                throttled_ratio=self.throttled_max_ratio,
            ),
            run_info=run_info,
            attention_info=info,
            paired=self.paired,
            sweep=sweep,
            in_flight=dict(self.fleet.users) if self.running else None,
            context=self.context,
            trace_rate_per_s=self.trace_rate_per_s,
            server=self.server_view.results(self.stage.index if self.running else None)
            if self.server_view is not None
            else None,
            gpu=self.gpu_view.results(self.stage.index if self.running else None)
            if self.gpu_view is not None
            else None,
        )
        client = results.client.model_copy(update=self.health.client_fields(self.spawned))
        update = {"client": client, "interrupted": self.interrupted}
        if self.requests is not None:
            update["requests_out"] = self.requests.summary(final=not self.running)
        return results.model_copy(update=update)

    @property
    def trace_rate_per_s(self) -> float | None:
        """A replay's own arrival rate at its speed (None for other shapes)."""
        shape = self.options.shape
        return shape.arrival_rate_per_s * shape.speed if isinstance(shape, ReplaySpec) else None

    def replay_done(self) -> bool:
        """Replay: every trace line has an outcome for every model (the stage may end before its allowance)."""
        shape = self.options.shape
        if not isinstance(shape, ReplaySpec):
            return False
        counts = self.recorder.combined().counts
        finished = (
            counts.get("ok", 0) + counts.get("failed", 0) + counts.get("cancelled", 0) + counts.get("abandoned", 0)
        )
        return finished >= shape.requests * len(self.config.models)

    @property
    def arrivals(self) -> str:
        """``poisson``, ``constant`` or (``--burstiness``) ``gamma``."""
        return stage_arrivals(self.options.arrivals or self.config.arrivals, self.options.burstiness)[0]

    @property
    def burstiness(self) -> float | None:
        """The gamma shape of the arrivals (Poisson is 1; None: constant)."""
        return stage_arrivals(self.options.arrivals or self.config.arrivals, self.options.burstiness)[1]

    def write_results(self) -> Path | None:
        if self.started_at is None:
            return None
        results = self.results()
        path = write_results(results, self.options.results_dir, self.started_at, render_html=write_html)
        if self.options.csv_prefix:  # beside the CSVs Locust writes for its own --csv
            write_llm_csv(results, self.options.csv_prefix)
        return path
