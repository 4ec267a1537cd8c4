"""Locust's ``LoadTestShape`` adapters for a :mod:`attnload.workload.shapes` spec; the master tells
workers each new stage with a typed :class:`~attnload.runner.messages.StageMessage`."""

from __future__ import annotations

import logging

from locust import LoadTestShape
from locust.runners import MasterRunner

from attnload.errors import UsageError
from attnload.plan.options import env_value, exit_usage
from attnload.results.microscope.capacity import Bracket, knee, next_users
from attnload.runner.collector.fleet import stop_users
from attnload.runner.messages import StageMessage, send_stage
from attnload.runner.runtime import Runtime
from attnload.runner.stretch import RungStretch, stage_ttft_p50_s
from attnload.workload.shapes import (
    CAPACITY_MAX_STAGES,
    CAPACITY_MAX_USERS,
    ShapeSpec,
    parse_duration,
    parse_shape,
)
from attnload.workload.sweep import Slo, SweepPlan, SweepStage

log = logging.getLogger(__name__)

STOP_RATE_PER_WORKER = 100.0
"""Users stopped per second and worker when a rate stage follows a closed-loop one (Locust warns above 100)."""


def shape_spec_from_env() -> ShapeSpec | None:
    """The shape named by ``ATTNLOAD_SHAPE`` (read when the locustfile is imported)."""
    text = env_value("shape")
    if not text:
        return None
    try:
        stage_duration_s = parse_duration(env_value("stage-duration"), "stage duration")
        return parse_shape(text, stage_duration_s, env_value("replay-speed"))
    except UsageError as exc:
        exit_usage(exc)
        raise


class StagedShape(LoadTestShape):
    """Stages from a :class:`ShapeSpec`; tells the runtime (and workers) each new stage.

    A closed-loop stage asks Locust for its user count; an open-loop (rate) stage asks
    for none, and its message carries the per-model rates and the worker count so each
    worker schedules its share.
    """

    spec: ShapeSpec
    spawn_rate: float | None = None
    stretch: RungStretch | None = None
    """A context ladder's rungs lengthened when their TTFT is long (None: planned durations)."""

    def tick(self) -> tuple[int, float] | None:
        users = self._tick()
        if users is None:
            self._finish()
        return users

    def _finish(self) -> None:
        """The shape is over: stop the users and collect the workers' final counts before Locust quits."""
        stop_users(self.runner)

    def _tick(self) -> tuple[int, float] | None:
        runtime = self._runtime()
        if runtime is None:
            return None
        elapsed_s = self.get_run_time()
        stretch = self.stretch
        if stretch is None:
            stage = self.spec.stage_at(elapsed_s)
        else:
            stage = stretch.stage_at(elapsed_s, lambda index: stage_ttft_p50_s(runtime.state.recorder, index))
        if stage is None:
            return None
        replay = self.spec.replay
        if replay is not None and elapsed_s >= replay.replay_s and runtime.state.replay_done():
            return None  # every line answered by every model: no need to wait out the drain allowance
        if stage.index != runtime.state.stage.index:
            rates = {m.key: stage.rate for m in runtime.state.config.models} if stage.rate is not None else None
            self._enter(runtime, stage.index, stage.users, stage.rate, rates)
        return self._users(stage.users)

    def _users(self, users: int | None) -> tuple[int, float]:
        if not users:  # open loop: stop any closed-loop users at once, not at the spawn rate
            workers = self.runner.worker_count if isinstance(self.runner, MasterRunner) else 1
            return 0, STOP_RATE_PER_WORKER * max(workers, 1)
        return users, float(self.spawn_rate or max(users, 1))

    def _runtime(self) -> Runtime | None:
        runtime: Runtime | None = getattr(self.runner.environment, "attnload", None) if self.runner else None
        if runtime is None:
            return None
        if runtime.collector is not None:
            runtime.collector.note_stage_users()  # before any stage change: the last sample of a stage is its users
        if runtime.state.stop_requested:
            return None  # SIGTERM: end the test the way a finished shape does, so workers drain and report
        if not runtime.state.running:
            runtime.begin_test()
        return runtime

    def _enter(
        self, runtime: Runtime, index: int, users: int | None, rate: float | None, rates: dict[str, float] | None
    ) -> None:
        workers = self.runner.worker_count if isinstance(self.runner, MasterRunner) else 1
        runtime.enter_stage(index, users, rate, rates=rates, workers=workers)
        if isinstance(self.runner, MasterRunner):
            message = StageMessage(
                index=index, users=users, rate=rate, rates=rates, workers=workers, salt=runtime.state.run_salt
            )
            send_stage(self.runner, message)


class SweepShape(StagedShape):
    """``--shape sweep``: stages planned live by :class:`SweepPlan` from the master's merged stats."""

    def _tick(self) -> tuple[int, float] | None:
        runtime = self._runtime()
        if runtime is None or runtime.collector is None:
            return None
        collector = runtime.collector
        now_s = self.get_run_time()
        plan: SweepPlan | None = getattr(self, "_plan", None)
        if plan is None:
            slo = runtime.state.config.slo
            plan = SweepPlan(
                [m.key for m in runtime.state.config.models],
                int(self.spec.levels[0]),
                Slo(slo.ttft_p99_s, slo.itl_p99_s, slo.e2e_p99_s),
            )
            self._plan, self._index, self._started_s = plan, 0, now_s
            collector.sweep_final = lambda: plan.report({i: collector.stage_stats(i) for i in range(self._index + 1)})
            self._current = plan.first()
            self._start(runtime, self._current)
        elif now_s - self._started_s >= self.spec.stage_duration_s:
            following = plan.advance(collector.stage_stats(self._index), self._index)
            if following is None:
                return None
            self._index += 1
            self._started_s = now_s
            self._current = following
            self._start(runtime, following)
        return self._users(self._current.users)

    def _start(self, runtime: Runtime, stage: SweepStage) -> None:
        log.info("sweep stage %d: %s", self._index, stage)
        self._enter(runtime, self._index, stage.users, None, stage.rates_rps)


class LockstepShape(StagedShape):
    """A decode sweep's stages: each begins when the previous one's answers are all in (or its
    ``--stage-duration`` is spent), so every batch starts together and decodes in lockstep."""

    _index = -1
    _started_s = 0.0

    def _tick(self) -> tuple[int, float] | None:
        runtime = self._runtime()
        if runtime is None:
            return None
        now_s = self.get_run_time()
        stages = self.spec.stages
        index = self._index
        if index < 0 or now_s - self._started_s >= self.spec.stage_duration_s or self._answered(runtime, index):
            index += 1
            if index >= len(stages):
                return None
            self._index, self._started_s = index, now_s
            stage = stages[index]
            log.info("decode sweep stage %d: %s users", index, stage.users)
            self._enter(runtime, index, stage.users, None, None)
        return self._users(stages[index].users)

    def _answered(self, runtime: Runtime, index: int) -> bool:
        users = self.spec.stages[index].users or 0
        return runtime.state.stage_answered(index, users)


class CapacityShape(StagedShape):
    """``--shape capacity:8k``: users per model doubling, then bisecting, until every model shows its knee
    (``results.microscope.capacity``), decided at the end of each stage from the master's merged view."""

    _index = -1
    _started_s = 0.0
    _users_per_model = 1

    def _tick(self) -> tuple[int, float] | None:
        runtime = self._runtime()
        if runtime is None or runtime.collector is None:
            return None
        models = len(runtime.state.config.models)
        now_s = self.get_run_time()
        if self._index < 0:
            self._brackets = {m.key: Bracket() for m in runtime.state.config.models}
            self._bisect_left = CAPACITY_MAX_STAGES - 9
            self._start(runtime, 0, now_s, 1)
        elif now_s - self._started_s >= self.spec.stage_duration_s:
            for key, reason in self._knees(runtime).items():
                self._brackets[key].note(self._users_per_model, reason)
            users = next_users(self._brackets, self._users_per_model, CAPACITY_MAX_USERS, self._bisect_left)
            if users is None:
                return None
            if all(b.past is not None for b in self._brackets.values()):
                self._bisect_left -= 1  # every model has its knee: this stage bisects
            self._start(runtime, self._index + 1, now_s, users)
        return self._users(self._users_per_model * models)

    def _start(self, runtime: Runtime, index: int, now_s: float, users: int) -> None:
        self._index, self._started_s, self._users_per_model = index, now_s, users
        log.info("capacity probe stage %d: %d users per model", index, users)
        self._enter(runtime, index, users * len(runtime.state.config.models), None, None)

    def _knees(self, runtime: Runtime) -> dict[str, str | None]:
        """Per model: why this stage is past its capacity (None: it is not)."""
        collector = runtime.collector
        assert collector is not None
        view = collector.server_view.results(self._index) if collector.server_view is not None else None
        out = {}
        for target in runtime.state.config.models:
            recorder = runtime.state.recorder
            ttft = recorder.combined(model_key=target.key, stage=self._index).hists["ttft"].quantile(0.5)
            first = recorder.combined(model_key=target.key, stage=0).hists["ttft"].quantile(0.5)
            server = view.stages.get(target.key, {}).get(self._index) if view is not None else None
            out[target.key] = knee(server, ttft, first)
        return out


def shape_class() -> type[LoadTestShape] | None:
    """A ``LoadTestShape`` subclass for ``ATTNLOAD_SHAPE``, or None (Locust's own controls)."""
    spec = shape_spec_from_env()
    if spec is None:
        return None
    spawn_rate = env_value("spawn-rate")
    base: type[StagedShape] = StagedShape
    if spec.fixed_context is not None:
        base = CapacityShape
    elif spec.planned_live:
        base = SweepShape
    elif spec.lockstep:
        base = LockstepShape
    stretch = RungStretch(spec) if spec.stretches and env_value("ladder-stretch") != "off" else None
    attributes = {"spec": spec, "spawn_rate": float(spawn_rate) if spawn_rate else None, "stretch": stretch}
    return type("AttnloadShape", (base,), attributes)
