"""Per-process run state shared by users and Locust event handlers.

One :class:`Runtime` lives on ``environment.attnload`` in every Locust process. On a
worker it records requests and ships deltas; on the master (or a single process) it
merges deltas, tracks stages and workers, serves ``/metrics`` and writes results.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnload.client import Timeouts
from attnload.config import ModelTarget, TestConfig
from attnload.measure import Recorder, RequestRecord
from attnload.metrics import FleetState
from attnload.results import Results
from attnload.shapes import ShapeSpec
from attnload.summarize import StageWindow, build_results, client_info
from attnload.workload import Workload

log = logging.getLogger(__name__)

WARMUP_STAGE = -1
"""Stage tag of requests that started before the test or inside a stage's warm-up window."""


@dataclass(frozen=True)
class RunOptions:
    """What the Locust command line / environment asked for (see ``users.add_arguments``)."""

    config_path: str
    metrics_port: int = 9646
    results_dir: str = "results"
    shape: ShapeSpec | None = None
    profiles: tuple[str, ...] = ()
    warmup_s: float = 0.0


@dataclass
class StageClock:
    """The current stage, as this process knows it (the master tells workers)."""

    index: int = WARMUP_STAGE
    started: float = 0.0  # perf_counter seconds
    windows: list[StageWindow] = field(default_factory=list)


class Runtime:
    """Config, recorder, workload and fleet state for one Locust process."""

    def __init__(self, config: TestConfig, options: RunOptions, role: str) -> None:
        self.config = config
        self.options = options
        self.role = role  # "local" | "master" | "worker"
        self.recorder = Recorder()
        self.workload = Workload(config, list(options.profiles) or None)
        self.fleet = FleetState(model_labels={m.key: (m.id, m.attention) for m in config.models})
        self.api_keys = {m.key: m.api_key() for m in config.models}
        request = config.request
        self.timeouts = Timeouts(connect_s=request.connect_timeout_s, ttft_s=request.ttft_timeout_s,
                                 idle_s=request.idle_timeout_s, total_s=request.total_timeout_s)
        self.stage = StageClock()
        self.worker_index = 0
        self.users_by_model: Counter[str] = Counter()
        self.worker_users: dict[str, dict[str, int]] = {}
        self.workers_seen: set[str] = set()
        self.workers_lost: set[str] = set()
        self.cpu_max_ratio = 0.0
        self.started_at: float | None = None
        self.started_perf = 0.0
        self.ended_at: float | None = None
        self.running = False
        self._assigned = 0

    # ------------------------------------------------------------------ users

    def assign_model(self) -> ModelTarget:
        """Round-robin over models (by weight), offset by worker index so workers stay balanced."""
        models = self.config.models
        slots = [m for m in models for _ in range(max(1, round(m.weight)))]
        target = slots[(self._assigned + self.worker_index) % len(slots)]
        self._assigned += 1
        self.users_by_model[target.key] += 1
        return target

    def release(self, target: ModelTarget) -> None:
        self.users_by_model[target.key] -= 1

    def stage_for(self, start_perf: float) -> int:
        """Stage tag of a request starting now; warm-up requests are tagged ``WARMUP_STAGE``."""
        stage = self.stage
        if stage.index < 0 or start_perf - stage.started < self.options.warmup_s:
            return WARMUP_STAGE
        return stage.index

    def observe(self, record: RequestRecord) -> None:
        self.recorder.add(record)

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
        self.started_at = time.time()
        self.started_perf = time.perf_counter()
        self.ended_at = None
        self.stage = StageClock()
        self.running = True

    def test_started(self) -> None:
        """Locust's test_start; with a shape it fires after the first tick, which already began the test."""
        if not self.running:
            self.begin_test()
            if self.options.shape is None:
                self.enter_stage(0, users=None, rate=None)

    def enter_stage(self, index: int, users: int | None, rate: float | None) -> None:
        now = time.perf_counter()
        clock = self.stage
        if clock.windows and clock.windows[-1].end_s < 0:
            last = clock.windows[-1]
            clock.windows[-1] = StageWindow(last.index, last.start_s, now - self.started_perf, last.users, last.rate)
        clock.index, clock.started = index, now
        start_s = now - self.started_perf + self.options.warmup_s
        clock.windows.append(StageWindow(index, start_s, -1.0, users, rate))
        self.fleet.stage = index
        self.fleet.target_users = users or 0
        self.fleet.target_rate = rate or 0.0

    def test_stopped(self) -> None:
        self.running = False
        if self.started_at is None:
            return
        now = time.perf_counter()
        self.ended_at = self.started_at + (now - self.started_perf)
        windows = self.stage.windows
        if windows and windows[-1].end_s < 0:
            last = windows[-1]
            windows[-1] = StageWindow(last.index, last.start_s, now - self.started_perf, last.users, last.rate)

    # ------------------------------------------------------------------ distribution

    def worker_payload(self) -> dict[str, Any]:
        return {"delta": self.recorder.take_delta(), "users": dict(self.users_by_model)}

    def merge_worker(self, worker_id: str, payload: dict[str, Any]) -> None:
        self.workers_seen.add(worker_id)
        self.recorder.merge_delta(payload.get("delta") or {})
        if "users" in payload:
            self.worker_users[worker_id] = payload["users"]
            self.fleet.users = dict(sum((Counter(u) for u in self.worker_users.values()), Counter()))

    def note_cpu(self, worker: str, percent: float) -> None:
        ratio = percent / 100.0
        self.fleet.worker_cpu_ratio[worker] = ratio
        self.cpu_max_ratio = max(self.cpu_max_ratio, ratio)
        self.fleet.client_saturated = self.cpu_max_ratio > 0.9

    # ------------------------------------------------------------------ results

    def results(self) -> Results:
        started = self.started_at or time.time()
        ended = self.ended_at or time.time()
        windows = [w for w in self.stage.windows if w.end_s > w.start_s] if self.options.shape else []
        info = {m.key: details for m in self.config.models if (details := _attention_info(m.id))}
        shape = self.options.shape
        run_info = {"source": os.path.basename(self.config.source), "shape": shape.to_text() if shape else None,
                    "stage_duration_s": shape.stage_duration_s if shape else None, "warmup_s": self.options.warmup_s,
                    "profiles": [p.name for p in self.workload.profiles], "max_tokens": self.config.request.max_tokens,
                    "temperature": self.config.request.temperature, "role": self.role,
                    "models": {m.key: {"id": m.id, "attention": m.attention, "url": m.chat_url}
                               for m in self.config.models}}
        workers = max(len(self.workers_seen), 1 if self.role == "local" else 0)
        return build_results(self.config, self.recorder, started_at=started, ended_at=ended, stages=windows,
                             client=client_info(workers, len(self.workers_lost), self.cpu_max_ratio, self.recorder),
                             run_info=run_info, attention_info=info)

    def write_results(self) -> Path | None:
        if self.started_at is None:
            return None
        results = self.results()
        directory = Path(self.options.results_dir)
        directory.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(self.started_at))
        path = directory / f"{stamp}.json"
        path.write_text(results.to_json(), encoding="utf-8")
        try:
            from attnload.report.html import write_html

            write_html(results, path.with_suffix(".html"))
        except ImportError:
            log.debug("HTML report module not available; wrote JSON only")
        (directory / "latest.txt").write_text(path.name + "\n", encoding="utf-8")
        log.info("results written to %s", path)
        return path


def _attention_info(model_id: str) -> dict[str, Any] | None:
    """KV bytes/token/GPU and capacity when ``model_id`` matches a simulator preset."""
    try:
        from attnload.sim.presets import attention_info  # pure data: no server import
    except ImportError:
        return None
    return attention_info(model_id)
