"""The roofline engine: :class:`Engine` (``sim/api.py``) over the §4 scheduler and a clock.

One asyncio task per served model runs the discrete-event loop of docs/cost-model.md
§4.1: admit and plan (``Scheduler.plan``), await the step's **absolute** deadline, then
emit (``Scheduler.complete``). On the wall clock a deadline missed by more than 50 ms
re-anchors the schedule to now and adds the gap to ``lag_seconds_total`` instead of
silently compressing time; the virtual clock jumps to each deadline (deterministic
tests). Each request is an async generator fed by a counter and a future, so the
per-token cost is a few attribute writes and one future.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator
from typing import Protocol

from attnload.measure.histogram import LogHistogram
from attnload.sim.api import EngineRejected, EngineSnapshot, GenerationRequest, GenerationState, ServedModel
from attnload.sim.costmodel import Deployment
from attnload.sim.decode.speculation import SpecCounts
from attnload.sim.gpu import GpuActivity
from attnload.sim.scheduler import Scheduler, SimSequence

log = logging.getLogger(__name__)

LAG_REANCHOR_S = 0.050
_MAX_STEP_RECORDS = 100_000  # step_seconds() normally drains far sooner (each /metrics scrape)
_FOLD_GAPS_AT = 4096  # scheduled per-token gaps kept as a list until this many, then folded into a histogram


class Clock(Protocol):
    """Time source of the engine loop."""

    def now(self) -> float: ...

    async def sleep_until(self, deadline_s: float) -> None: ...

    async def settle(self) -> None:
        """Called after each step's emissions, before the next plan."""
        ...


class WallClock:
    """asyncio's monotonic clock; sleeps to absolute deadlines."""

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def sleep_until(self, deadline_s: float) -> None:
        """Sleep to the deadline, and yield even when it has passed: the streams woken by the last step
        write its tokens before the next step emits more (a late loop must not merge steps into one event)."""
        await asyncio.sleep(max(0.0, deadline_s - asyncio.get_running_loop().time()))

    async def settle(self) -> None:
        """Nothing: consumers run while the engine sleeps through the next step."""


class VirtualClock:
    """Instant time: jumps to each deadline; after each step's emissions it yields a few loop
    turns so consumers read their tokens at the emission time.

    A consumer that answers a token with a new request within those turns (a closed-loop
    user) is admitted at the very next step, as in ``sim.virtual.run_closed_loop`` (the
    exact, asyncio-free driver for closed-loop studies).
    """

    def __init__(self, start_s: float = 0.0, settle_turns: int = 8) -> None:
        self.t = start_s
        self.settle_turns = settle_turns

    def now(self) -> float:
        return self.t

    async def sleep_until(self, deadline_s: float) -> None:
        self.t = max(self.t, deadline_s)

    async def settle(self) -> None:
        for _ in range(self.settle_turns):
            await asyncio.sleep(0)


class RooflineEngine:
    """Attention-aware continuous-batching engine for one served model (§3–§4)."""

    def __init__(
        self, model: ServedModel, dep: Deployment, *, clock: Clock | None = None, max_waiting: int | None = None
    ) -> None:
        self.model = model
        self.dep = dep
        self.max_waiting = max_waiting
        self._clock: Clock = clock if clock is not None else WallClock()
        self._sched = Scheduler(dep, self._deliver)
        self._scheduled_gaps: list[float] = []
        self._sched.scheduled_gaps = self._scheduled_gaps
        self._steps_s: list[float] = []
        self._itl_schedule = LogHistogram()
        self._lag_s = 0.0
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._failed: BaseException | None = None
        self.gpu = GpuActivity(dep, self._clock.now)
        """Virtual DCGM telemetry of this model's GPUs, fed once per step (``sim/gpu.py``)."""

    # ------------------------------------------------------------------ Engine protocol

    async def generate(self, request: GenerationRequest, state: GenerationState) -> AsyncIterator[int]:
        sched = self._sched
        if self._failed is not None:
            raise EngineRejected(500, "engine_failed", f"simulator engine for {self.model.id} failed: {self._failed!r}")
        sched.check(request.prompt_tokens, request.max_tokens)
        if self.max_waiting is not None and sched.waiting >= self.max_waiting:
            raise EngineRejected(
                429,
                "rate_limit_exceeded",
                f"{self.model.id}: {sched.waiting} requests waiting (max_waiting {self.max_waiting})",
                retry_after_s=1.0,
            )
        seq = SimSequence(request.request_id, request.prompt_tokens, request.max_tokens, request.prompt_blocks, state)
        loop = asyncio.get_running_loop()
        wake = self._ensure_running(loop)
        sched.submit(seq, self._clock.now())
        wake.set()
        try:
            yield 0  # accepted: the role-only chunk (not a token, not TTFT)
            emitted = 0
            while emitted < request.max_tokens:
                if not seq.ready:
                    if self._failed is not None:
                        raise RuntimeError(f"simulator engine for {self.model.id} failed: {self._failed!r}")
                    waiter = loop.create_future()
                    seq.waiter = waiter
                    await waiter
                    seq.waiter = None
                n, seq.ready = seq.ready, 0
                emitted += n
                yield n
        finally:
            if not seq.finished:
                sched.cancel(seq)

    def snapshot(self) -> EngineSnapshot:
        sched = self._sched
        return EngineSnapshot(
            running=sched.running,
            waiting=sched.waiting,
            kv_usage_ratio=sched.kv_usage_ratio(),
            preemptions_total=sched.preemptions_total,
            lag_seconds_total=self._lag_s,
        )

    def step_seconds(self) -> list[float]:
        steps, self._steps_s = self._steps_s, []
        return steps

    def scheduled_itl(self) -> LogHistogram:
        self._fold_scheduled_gaps()
        return self._itl_schedule

    def _fold_scheduled_gaps(self) -> None:
        gaps = self._scheduled_gaps
        if gaps:
            self._itl_schedule.record_pairs(zip(gaps, itertools.repeat(1)))
            gaps.clear()

    # ------------------------------------------------------------------ extras

    @property
    def cached_prompt_tokens_total(self) -> int:
        return self._sched.cached_prompt_tokens_total

    @property
    def lag_seconds_total(self) -> float:
        return self._lag_s

    @property
    def spec_counts(self) -> SpecCounts | None:
        """Speculative decoding's counters since start (vLLM's); None when the model does not speculate."""
        speculator = self._sched.speculator
        return speculator.counts if speculator is not None else None

    async def aclose(self) -> None:
        """Stop the engine task (tests, shutdown); requests in flight stop receiving tokens."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    # ------------------------------------------------------------------ loop

    @staticmethod
    def _deliver(seq: SimSequence, n: int) -> None:
        seq.ready += n
        waiter = seq.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _ensure_running(self, loop: asyncio.AbstractEventLoop) -> asyncio.Event:
        if self._task is None or self._task.done() or self._loop is not loop:
            self._loop = loop
            self._wake = asyncio.Event()
            self._task = loop.create_task(self._run(), name=f"attnload-sim-engine-{self.model.id}")
            self._task.add_done_callback(self._task_done)
        assert self._wake is not None
        return self._wake

    def _task_done(self, task: asyncio.Task[None]) -> None:
        """A crashed loop must not leave streams hanging: fail every request it holds."""
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        log.error("engine loop for %s failed", self.model.id, exc_info=exc)
        self._failed = exc
        for seq in self._sched.sequences():
            waiter = seq.waiter
            if waiter is not None and not waiter.done():
                waiter.set_exception(RuntimeError(f"simulator engine for {self.model.id} failed: {exc!r}"))

    async def _run(self) -> None:
        clock, sched = self._clock, self._sched
        assert self._wake is not None
        wake = self._wake
        t_prev = clock.now()
        while True:
            step_s = sched.plan(t_prev) if sched.has_work() else None
            if step_s is None:
                wake.clear()  # idle: sleep until a request arrives, then start from now
                await wake.wait()
                t_prev = clock.now()
                continue
            deadline = t_prev + step_s
            planned = sched.last_step
            await clock.sleep_until(deadline)
            late_s = clock.now() - deadline
            if late_s > LAG_REANCHOR_S:
                self._lag_s += late_s  # never compress simulated time: shift the schedule instead
                deadline += late_s
            if len(self._steps_s) < _MAX_STEP_RECORDS:
                self._steps_s.append(step_s)
            sched.complete(deadline)
            if planned is not None:
                self.gpu.step(planned, deadline)
            if len(self._scheduled_gaps) >= _FOLD_GAPS_AT:
                self._fold_scheduled_gaps()
            t_prev = deadline
            await clock.settle()
