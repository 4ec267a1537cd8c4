"""What every Locust process of a run knows, whatever it does in the run: the config and options,
the recorders, the workload, the stage clock and where this process sits in the fleet.

A sender (``runner/sender/``) and a collector (``runner/collector/``) each hold the one
:class:`RunState` of their process; a single local process holds both around the same state,
so what its users record is what its results read.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from attnload.attention import BandwidthLookup, FactsLookup, no_bandwidth, no_facts
from attnload.config.model import TestConfig
from attnload.measure.context import ContextRecorder
from attnload.measure.interference import InterferenceRecorder
from attnload.measure.paired import PairedRecorder
from attnload.measure.recorder import Recorder
from attnload.plan.options import RunOptions
from attnload.results.summarize import StageWindow
from attnload.workload.arrivals import stage_arrivals
from attnload.workload.conversation import new_salt
from attnload.workload.prompts import Workload
from attnload.workload.shapes import Stage

WARMUP_STAGE = -1
"""Stage tag of requests that started before the test or inside a stage's warm-up window."""


@dataclass
class StageClock:
    """The current stage, as this process knows it (the master tells workers)."""

    index: int = WARMUP_STAGE
    started: float = 0.0  # perf_counter seconds
    windows: list[StageWindow] = field(default_factory=list)
    rates: dict[str, float] | None = None
    """Open-loop rates per model key of the current stage; None in a closed-loop stage."""
    model_users: dict[int, dict[str, int]] = field(default_factory=dict)
    """Per stage, the users each model had at the last sample of the stage (``Collector.note_stage_users``)."""


class RunState:
    """Config, options, recorders, workload and stage clock of one Locust process."""

    def __init__(self, config: TestConfig, options: RunOptions, attention_facts: FactsLookup = no_facts) -> None:
        self.config = config
        self.options = options
        self.attention_facts = attention_facts
        """Preset KV facts per model id, handed in by the entry point (the runner never imports the simulator)."""
        self.gpu_bandwidth: BandwidthLookup = no_bandwidth
        """A GPU preset's memory bandwidth (a model's ``gpu_type``), handed in by the entry point like the facts."""
        self.recorder = Recorder()
        self.context = ContextRecorder()
        """Latency by turn and by prompt length, and open-loop send times (merged like the recorder)."""
        self.interference = InterferenceRecorder()
        """``--shape interference:L``: injected prefill windows and the decode gaps around them."""
        self.paired = PairedRecorder(config.models[0].key, seed=config.seed) if options.paired else None
        sized = options.shape is not None and options.shape.sizes_prompts
        self.workload = Workload(config, list(options.profiles) or None, shape_sizes_prompts=sized)
        self.run_salt = new_salt()
        """One salt for the whole run (replayed prefixes are shared inside it); the master's wins."""
        self.stage = StageClock()
        self.worker_index = 0
        self.worker_count = 1
        self.started_at: float | None = None
        self.started_perf = 0.0
        self.ended_at: float | None = None
        self.running = False
        self.stop_requested = False  # SIGTERM on a headless shape run: the shape ends the test at its next tick
        self.interrupted = False
        """SIGTERM/SIGINT (or the death of ``attnload run``) ended the run early: results say so."""

    @property
    def placement(self) -> tuple[int, int]:
        """(worker index, worker count) of this process: its share of schedules and datasets."""
        return self.worker_index, self.worker_count

    def stage_for(self, start_perf: float) -> int:
        """Stage tag of a request starting now; warm-up requests are tagged ``WARMUP_STAGE``."""
        stage = self.stage
        if stage.index < 0 or start_perf - stage.started < self.options.warmup_s:
            return WARMUP_STAGE
        return stage.index

    def begin(self) -> None:
        """A new test: fresh recorders, clock and stages."""
        self.recorder.reset()
        self.context.reset()
        if self.paired is not None:
            self.paired.reset()
        self.started_at = time.time()
        self.started_perf = time.perf_counter()
        self.interference.reset(self.started_perf)
        self.ended_at = None
        self.stage = StageClock()
        self.running = True

    def open_stage(
        self, index: int, users: int | None, rate: float | None, rates: dict[str, float] | None, now: float
    ) -> dict[str, float] | None:
        """Close the running stage's window at ``now`` and open stage ``index``; its rates per model key."""
        clock = self.stage
        if clock.windows and clock.windows[-1].end_s < 0:
            last = clock.windows[-1]
            clock.windows[-1] = replace(last, end_s=now - self.started_perf)
        if rates is None and rate is not None:
            rates = {m.key: rate for m in self.config.models}
        clock.index, clock.started, clock.rates = index, now, rates
        start_s = now - self.started_perf + self.options.warmup_s
        context = self.stage_context(index)
        planned = self.planned_stage(index)
        shape = self.options.shape
        fixed = shape.fixed_context if shape is not None else None
        decode = planned.decode if planned is not None else None
        self.workload.context = decode[0] if decode else planned.context if planned is not None else fixed
        self.workload.output = decode[1] - decode[0] if decode else None
        clock.windows.append(
            StageWindow(index, start_s, -1.0, users, rate, rates=dict(rates) if rates else None, context=context)
        )
        return rates

    def planned_stage(self, index: int) -> Stage | None:
        """The shape's fixed stage ``index`` (None: a shape planned live, or past its end)."""
        stages = self.options.shape.stages if self.options.shape is not None else ()
        return stages[index] if 0 <= index < len(stages) else None

    def stage_answered(self, index: int, users: int) -> bool:
        """A lockstep stage (decode sweep): each of its ``users`` has an outcome for each model it drives."""
        counts = self.recorder.combined(stage=index).counts
        finished = sum(counts.get(k, 0) for k in ("ok", "failed", "cancelled", "abandoned"))
        return finished >= users * (len(self.config.models) if self.paired is not None else 1)

    def stage_context(self, index: int) -> int | None:
        """A context ladder's rung at stage ``index`` (None for other shapes, whose stages set no context)."""
        shape = self.options.shape
        stages = shape.stages if shape is not None else ()
        return stages[index].context if 0 <= index < len(stages) else None

    def end(self) -> bool:
        """The test stopped: close the last stage's window; False when no test had begun."""
        self.running = False
        if self.started_at is None:
            return False
        now = time.perf_counter()
        self.ended_at = self.started_at + (now - self.started_perf)
        windows = self.stage.windows
        if windows and windows[-1].end_s < 0:
            windows[-1] = replace(windows[-1], end_s=now - self.started_perf)
        return True

    @property
    def trace_rate_per_s(self) -> float | None:
        """A replay's own arrival rate at its speed (None for other shapes)."""
        replay = self.options.shape.replay if self.options.shape is not None else None
        return replay.arrival_rate_per_s * replay.speed if replay is not None else None

    def replay_done(self) -> bool:
        """Replay: every trace line has an outcome for every model (the stage may end before its allowance)."""
        replay = self.options.shape.replay if self.options.shape is not None else None
        if replay is None:
            return False
        counts = self.recorder.combined().counts
        finished = (
            counts.get("ok", 0) + counts.get("failed", 0) + counts.get("cancelled", 0) + counts.get("abandoned", 0)
        )
        return finished >= replay.requests * len(self.config.models)

    @property
    def arrivals(self) -> str:
        """``poisson``, ``constant`` or (``--burstiness``) ``gamma``."""
        return stage_arrivals(self.options.arrivals or self.config.arrivals, self.options.burstiness)[0]

    @property
    def burstiness(self) -> float | None:
        """The gamma shape of the arrivals (Poisson is 1; None: constant)."""
        return stage_arrivals(self.options.arrivals or self.config.arrivals, self.options.burstiness)[1]
