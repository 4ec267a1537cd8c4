"""The sender of a Locust process (a worker, or a single local process): what its users and its
open loop share.

It assigns models to users, records each request (recorder, context, ``--requests-out`` lines),
judges goodput, counts crashes and CPU, and runs the open-loop schedule of rate stages. What it
records leaves as deltas: a worker ships them to the master (``runner/messages.py``), a single
process's collector reads the same recorders.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import replace
from typing import Protocol

import gevent

from attnload.client.transport import Timeouts
from attnload.config.model import ModelTarget
from attnload.measure.cgroup import ThrottleMeter
from attnload.measure.looplag import LoopLagMeter
from attnload.measure.recorder import RequestRecord
from attnload.measure.requestlog import NOBODY, Who
from attnload.runner.sender.arrivalphase import FirstRequests
from attnload.runner.sender.cpumeter import CpuMeter
from attnload.runner.sender.dialogs import Traffic
from attnload.runner.sender.giveup import GiveUp
from attnload.runner.sender.health import RunHealth
from attnload.runner.sender.openloop import PAIR_STREAM, OpenLoop, OpenStage
from attnload.runner.sender.requestlines import RequestLines
from attnload.runner.sender.stallwatch import StallWatch
from attnload.runner.sender.startspread import StartSpread
from attnload.runner.state import RunState
from attnload.workload.abandon import Abandoner

log = logging.getLogger(__name__)


class StageTask(Protocol):
    """Something a sending process runs from a stage's start until the test stops (the injector)."""

    def start(self, started_perf: float) -> None: ...

    def stop(self) -> None: ...


class Sender:
    """Users, open loop and record buffers of one sending process."""

    def __init__(self, state: RunState) -> None:
        self.state = state
        config, options = state.config, state.options
        self.traffic = Traffic(config, state.workload, lambda: state.placement)
        """Conversations and dataset prompts (datasets are opened and checked here, before any load)."""
        self.traffic.session_ended = lambda key, tally: state.context.sessions.add(
            key, tally.ended, tally.steps, tally.duration_s, tally.prompt_tokens, tally.completion_tokens
        )
        self.api_keys = {m.key: m.api_key() for m in config.models}
        request = config.request
        self.timeouts = Timeouts(
            connect_s=request.connect_timeout_s,
            ttft_s=request.ttft_timeout_s,
            idle_s=request.idle_timeout_s,
            total_s=request.total_timeout_s,
        )
        self.users_by_model: Counter[str] = Counter()
        self.spawned = 0
        self._assigned = 0
        self.cpu = CpuMeter()
        self.throttle = ThrottleMeter()
        self.loop_lag = LoopLagMeter()
        """How late this process's event loop runs a timer (``watch_loop`` feeds it)."""
        self.first_requests = FirstRequests()
        """When each closed-loop stage's new users sent their first request."""
        self.health = RunHealth()
        self.open_loop: OpenLoop | None = None
        """The rate stages' scheduler (set by the event wiring; idle until a rate stage begins)."""
        self.lines: RequestLines | None = None
        """``--requests-out``: one line per request, until shipped (worker) or written (single process)."""
        self.abandoner = Abandoner(options.abandon, config.seed) if options.abandon is not None else None
        """``--abandon-rate``: draws which requests close their stream early (None: none do)."""
        lockstep = options.shape is not None and options.shape.lockstep
        self.start_spread = StartSpread(
            "off" if lockstep else options.start_spread,
            stage_duration_s=options.shape.stage_duration_s if options.shape else None,
            seed=config.seed,
            recorder=state.recorder,
            placement=lambda: state.placement,
        )
        """When each new closed-loop user sends its first request (``--start-spread``)."""
        self.stall = StallWatch()
        """This process's freezes (ticked on workers): requests in flight across one are marked."""
        self.injector: StageTask | None = None
        """``--shape interference:L``: the prefill injector (set by the event wiring; worker 0 runs it)."""
        self.giveup = GiveUp(options.keep_going)
        """Models stopped after failing one deterministic way again and again (giveup.py)."""

    # ------------------------------------------------------------------ users

    def assign_model(self) -> ModelTarget:
        """Round-robin over models (by weight), offset by worker index so workers stay balanced."""
        models = self.state.config.models
        slots = [m for m in models for _ in range(max(1, round(m.weight)))]
        target = slots[(self._assigned + self.state.worker_index) % len(slots)]
        self._assigned += 1
        self.users_by_model[target.key] += 1
        return target

    def assign_all(self) -> list[ModelTarget]:
        """Paired mode: a user drives every model (each one counts a user per model)."""
        for target in self.state.config.models:
            self.users_by_model[target.key] += 1
        return list(self.state.config.models)

    def release(self, target: ModelTarget) -> None:
        self.users_by_model[target.key] -= 1

    def observe(self, record: RequestRecord, who: Who = NOBODY) -> None:
        state = self.state
        now = time.perf_counter()
        state.interference.observe(record, now)
        start = record.started_perf if record.started_perf is not None else now - record.e2e_s
        stalled_s = self.stall.overlap(start, now)
        if stalled_s:  # its latency holds the freeze or silence: kept apart as well (``results/truth/stalls.py``)
            self.stall.requests += 1
            record = replace(record, worker_stalled_s=stalled_s)
        state.recorder.add(record)
        state.context.add(record)
        if self.lines is not None:
            self.lines.observe(record, state.worker_index, who)
        said = self.giveup.observe(record)
        if said is not None:
            log.error(said)
            if self.giveup.stopped >= {m.key for m in state.config.models}:
                state.stop_requested = True  # nothing left to send: the shape ends the test at its next tick

    def is_good(self, ttft_s: float | None, itl_gaps: tuple[tuple[float, int], ...], e2e_s: float) -> bool:
        """Whether one successful request met every configured SLO (goodput)."""
        slo = self.state.config.slo
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

    # ------------------------------------------------------------------ stages

    def begin_test(self) -> None:
        self.start_spread.reset()
        self.loop_lag.reset()
        self.first_requests.reset()

    def enter_stage(self, index: int, rates: dict[str, float] | None, started_perf: float) -> None:
        """A rate stage starts this process's share of its schedule; a closed-loop stage stops the schedule."""
        if self.injector is not None and self.state.worker_index == 0:
            self.injector.start(started_perf)
        if self.open_loop is None:
            return
        if rates:
            self.open_loop.start_stage(self._open_stage(index, rates, started_perf))
        else:
            self.open_loop.stop_schedule()

    def _open_stage(self, index: int, rates: dict[str, float], started_perf: float) -> OpenStage:
        state = self.state
        shape = state.options.shape
        duration_s = shape.stage_duration_s if shape else 60.0
        if state.paired is not None:
            # Paired arrivals are prompts, each sent to every model: one stream at the per-model rate.
            rates = {PAIR_STREAM: min(rates.values())}
        return OpenStage(
            index=index,
            rates_rps=rates,
            started_perf=started_perf,
            duration_s=duration_s,
            warmup_s=state.options.warmup_s,
            share_index=state.worker_index,
            share_count=max(state.worker_count, 1),
        )

    def stop(self) -> None:
        """The test stopped: no more arrivals; open-loop requests in flight end as ``cancelled``."""
        if self.open_loop is not None:
            self.open_loop.stop()
        if self.injector is not None:
            self.injector.stop()


def sample_cpu(sender: Sender) -> None:
    """A worker's one-second CPU samples; their peak rides on each report to the master."""
    while True:
        gevent.sleep(1.0)
        sender.cpu.sample()
        sender.throttle.sample()
