"""Locust glue: the chat user, the load shape, and the event wiring behind ``register(events)``.

A locustfile stays thin::

    from locust import events
    from attnload.users import ChatUser, register, shape_class
    register(events)
    class Chat(ChatUser): ...
    Shape = shape_class()

``register`` adds attnload's options to Locust's parser (each mirrored by an
``ATTNLOAD_*`` environment variable for containers), validates the config at init
(one line, exit 2), serves ``/metrics`` on the master, ships deltas from workers,
tells workers the current stage and writes results when a test stops.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from dataclasses import replace
from typing import Any

import gevent
from gevent import GreenletExit
from locust import LoadTestShape, User, constant, task
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from attnload.client import ChatClient, _Cancelled, chat_body
from attnload.config import ModelTarget, load_config
from attnload.errors import UsageError, redact
from attnload.gcpolicy import quiet_full_collections
from attnload.measure import RequestRecord
from attnload.metrics import serve_metrics
from attnload.openloop import DEFAULT_MAX_IN_FLIGHT, ClientPool, OpenLoop
from attnload.paired import send_together
from attnload.report import webui
from attnload.report.console import progress_line
from attnload.runtime import RunOptions, Runtime
from attnload.shapes import ShapeSpec, parse_duration, parse_shape
from attnload.sweep import Slo, SweepPlan, SweepStage
from attnload.workload import PlannedRequest

log = logging.getLogger(__name__)

STAGE_MESSAGE = "attnload_stage"
FINAL_DELTA_MESSAGE = "attnload_final"
FINAL_COUNTS_WAIT_S = 30.0
"""After the users stop: how long the master waits for every worker's final counts (beyond
``--stop-timeout``). Cancelling thousands of in-flight streams takes a worker seconds."""
SPAWN_SPREAD_S = 1.0
GOLDEN_RATIO = 0.6180339887498949
PROGRESS_INTERVAL_S = 5.0
OPEN_LOOP_IDLE_S = 0.2
STOP_RATE_PER_WORKER = 100.0
"""Users stopped per second and worker when a rate stage follows a closed-loop one (Locust warns above 100)."""


class ChatUser(User):
    """A closed-loop user: sends the next request as soon as the previous one finished.

    With ``--paired`` one user sends each prompt to every model at once and waits for
    all answers. Open-loop stages (``rate:``) run no users: a scheduler per process
    sends instead (``openloop.py``).
    """

    abstract = True
    wait_time = constant(0)

    def on_start(self) -> None:
        runtime: Runtime = self.environment.attnload  # type: ignore[attr-defined]
        self.runtime = runtime
        # Locust dispatches users in one-second batches (floor(spawn rate) at a time). Spreading each
        # user's first request over that second makes the spawn rate an arrival rate; otherwise a batch
        # of identical requests prefills together and stays in lockstep, inflating TTFT for the run.
        # A golden-ratio sequence spreads them evenly without knowing the batch size.
        runtime.spawned += 1
        gevent.sleep(SPAWN_SPREAD_S * ((runtime.spawned * GOLDEN_RATIO) % 1.0))
        if runtime.paired is not None:
            self.targets = runtime.assign_all()
            self.chats = {t.key: _client(runtime, t) for t in self.targets}
            return
        self.target = runtime.assign_model()
        self.chat = _client(runtime, self.target)

    def on_stop(self) -> None:
        if self.runtime.paired is not None:
            for target in self.targets:
                self.runtime.release(target)
                self.chats[target.key].close()
            return
        self.runtime.release(self.target)
        self.chat.close()

    @task
    def chat_completion(self) -> None:
        runtime = self.runtime
        if runtime.stage.rates is not None:
            gevent.sleep(OPEN_LOOP_IDLE_S)  # an open-loop stage: the scheduler sends, users being stopped idle
            return
        plan = runtime.workload.next()
        stage = runtime.stage_for(time.perf_counter())
        if runtime.paired is not None:
            send_pair(self.environment, runtime, self.chats, plan, stage, None)
            return
        send_plan(self.environment, runtime, self.chat, self.target, plan, stage, None)


def _client(runtime: Runtime, target: ModelTarget) -> ChatClient:
    return ChatClient(target.chat_url, runtime.api_keys[target.key], runtime.timeouts,
                      retry_after_max_s=runtime.config.request.retry_after_max_s)


def send_plan(environment: Environment, runtime: Runtime, client: ChatClient, target: ModelTarget,
              plan: PlannedRequest, stage: int, intended_start: float | None) -> RequestRecord:
    """Send one planned request and report it; a stop mid-request is recorded, then ends the greenlet."""
    request = runtime.config.request
    body = chat_body(target.id, plan.messages, max_tokens=plan.max_tokens, temperature=request.temperature,
                     stream=request.stream, ignore_eos=plan.ignore_eos)
    try:
        record = client.send(body, model_key=target.key, profile=plan.profile, stage=stage,
                             intended_start=intended_start)
    except _Cancelled as cancelled:
        _report(environment, runtime, cancelled.record)
        raise GreenletExit() from None
    return _report(environment, runtime, record)


def send_pair(environment: Environment, runtime: Runtime, clients: dict[str, ChatClient], plan: PlannedRequest,
              stage: int, intended_start: float | None) -> None:
    """The same prompt to every model at once; the pair's differences go to the paired recorder."""
    targets = {t.key: t for t in runtime.config.models}
    records = send_together(list(clients), lambda key: send_plan(
        environment, runtime, clients[key], targets[key], plan, stage, intended_start))
    if runtime.paired is not None:
        runtime.paired.add(stage, {k: r for k, r in records.items() if isinstance(r, RequestRecord)})


def _report(environment: Environment, runtime: Runtime, record: RequestRecord) -> RequestRecord:
    if record.outcome == "ok" and runtime.config.slo.is_set:
        record = replace(record, good=runtime.is_good(record.ttft_s, record.itl_samples, record.e2e_s))
    runtime.observe(record)
    if record.outcome == "cancelled":
        return record  # not a server fault: kept out of Locust's failure table
    exception = None if record.outcome == "ok" else _LocustFailure(f"{record.error}")
    environment.events.request.fire(
        request_type="POST", name=record.model_key, response_time=record.e2e_s * 1000.0,
        response_length=record.completion_tokens, exception=exception, context={"profile": record.profile})
    return record


class _LocustFailure(Exception):
    """How a classified failure shows in Locust's failures table (the class name only)."""


# ---------------------------------------------------------------------------- options


def add_arguments(parser: Any) -> None:
    group = parser.add_argument_group("attnload")
    group.add_argument("--attnload-config", env_var="ATTNLOAD_CONFIG", default="examples/benchmark_config.json",
                       help="test config (.json or .toml)")
    group.add_argument("--attnload-metrics-port", env_var="ATTNLOAD_METRICS_PORT", type=int, default=9646,
                       help="port of the master's Prometheus /metrics (0 = off)")
    group.add_argument("--attnload-results", env_var="ATTNLOAD_RESULTS", default="results",
                       help="directory for results JSON + HTML")
    group.add_argument("--attnload-shape", env_var="ATTNLOAD_SHAPE", default="",
                       help="concurrency:1,8,64 or rate:0.5,1,2")
    group.add_argument("--attnload-stage-duration", env_var="ATTNLOAD_STAGE_DURATION", default="60s",
                       help="length of each shape stage")
    group.add_argument("--attnload-profile", env_var="ATTNLOAD_PROFILE", default="",
                       help="comma-separated workload profiles (default: all)")
    group.add_argument("--attnload-warmup", env_var="ATTNLOAD_WARMUP", default="0",
                       help="seconds at the start of each stage excluded from stage summaries")
    group.add_argument("--attnload-paired", env_var="ATTNLOAD_PAIRED", default="0",
                       help="1: send each prompt to every model at once (paired A/B)")
    group.add_argument("--attnload-arrivals", env_var="ATTNLOAD_ARRIVALS", default="",
                       help="open-loop arrivals: poisson or constant (default: the config's)")
    group.add_argument("--attnload-max-in-flight", env_var="ATTNLOAD_MAX_IN_FLIGHT", type=int,
                       default=DEFAULT_MAX_IN_FLIGHT, help="open loop: connections per model and worker")


def options_from(parsed: Any) -> RunOptions:
    shape_text = (parsed.attnload_shape or "").strip()
    stage_s = parse_duration(parsed.attnload_stage_duration, "--stage-duration")
    warmup = str(parsed.attnload_warmup).strip()
    return RunOptions(
        config_path=parsed.attnload_config, metrics_port=int(parsed.attnload_metrics_port),
        results_dir=parsed.attnload_results, shape=parse_shape(shape_text, stage_s) if shape_text else None,
        profiles=tuple(p.strip() for p in (parsed.attnload_profile or "").split(",") if p.strip()),
        warmup_s=0.0 if warmup in ("", "0") else parse_duration(warmup, "--warmup"),
        paired=str(parsed.attnload_paired).strip().lower() in ("1", "true", "yes"),
        arrivals=_arrivals(parsed.attnload_arrivals), max_in_flight=max(1, int(parsed.attnload_max_in_flight)))


def _arrivals(text: str | None) -> str | None:
    value = (text or "").strip().lower()
    if value and value not in ("poisson", "constant"):
        raise UsageError(f"--arrivals {text!r}: use poisson or constant")
    return value or None


def shape_spec_from_env() -> ShapeSpec | None:
    """The shape named by ``ATTNLOAD_SHAPE`` (read when the locustfile is imported)."""
    text = os.environ.get("ATTNLOAD_SHAPE", "").strip()
    if not text:
        return None
    try:
        return parse_shape(text, parse_duration(os.environ.get("ATTNLOAD_STAGE_DURATION", "60s"), "stage duration"))
    except UsageError as exc:
        _fail(exc)
        raise


class StagedShape(LoadTestShape):
    """Stages from a :class:`ShapeSpec`; tells the runtime (and workers) each new stage.

    A closed-loop stage asks Locust for its user count; an open-loop (rate) stage asks
    for none, and its message carries the per-model rates and the worker count so each
    worker schedules its share.
    """

    spec: ShapeSpec
    spawn_rate: float | None = None

    def tick(self) -> tuple[int, float] | None:
        users = self._tick()
        if users is None:
            self._finish()
        return users

    def _finish(self) -> None:
        """The shape is over: stop the users and collect the workers' final counts before Locust quits."""
        _stop_users(self.runner)

    def _tick(self) -> tuple[int, float] | None:
        runtime = self._runtime()
        if runtime is None:
            return None
        stage = self.spec.stage_at(self.get_run_time())
        if stage is None:
            return None
        if stage.index != runtime.stage.index:
            rates = {m.key: stage.rate for m in runtime.config.models} if stage.rate is not None else None
            self._enter(runtime, stage.index, stage.users, stage.rate, rates)
        return self._users(stage.users)

    def _users(self, users: int | None) -> tuple[int, float]:
        if not users:  # open loop: stop any closed-loop users at once, not at the spawn rate
            workers = self.runner.worker_count if isinstance(self.runner, MasterRunner) else 1
            return 0, STOP_RATE_PER_WORKER * max(workers, 1)
        return users, float(self.spawn_rate or max(users, 1))

    def _runtime(self) -> Runtime | None:
        runtime: Runtime | None = getattr(self.runner.environment, "attnload", None) if self.runner else None
        if runtime is not None and runtime.stop_requested:
            return None  # SIGTERM: end the test the way a finished shape does, so workers drain and report
        if runtime is not None and not runtime.running:
            runtime.begin_test()
        return runtime

    def _enter(self, runtime: Runtime, index: int, users: int | None, rate: float | None,
               rates: dict[str, float] | None) -> None:
        workers = self.runner.worker_count if isinstance(self.runner, MasterRunner) else 1
        runtime.enter_stage(index, users, rate, rates=rates, workers=workers)
        if isinstance(self.runner, MasterRunner):
            self.runner.send_message(STAGE_MESSAGE, {"index": index, "users": users, "rate": rate, "rates": rates,
                                                     "workers": workers})


class SweepShape(StagedShape):
    """``--shape sweep``: stages planned live by :class:`SweepPlan` from the master's merged stats."""

    def _tick(self) -> tuple[int, float] | None:
        runtime = self._runtime()
        if runtime is None:
            return None
        now_s = self.get_run_time()
        plan: SweepPlan | None = getattr(self, "_plan", None)
        if plan is None:
            slo = runtime.config.slo
            plan = SweepPlan([m.key for m in runtime.config.models], int(self.spec.levels[0]),
                             Slo(slo.ttft_p99_s, slo.itl_p99_s, slo.e2e_p99_s))
            self._plan, self._index, self._started_s = plan, 0, now_s
            runtime.sweep_final = lambda: plan.report({i: runtime.stage_stats(i) for i in range(self._index + 1)})
            self._current = plan.first()
            self._start(runtime, self._current)
        elif now_s - self._started_s >= self.spec.stage_duration_s:
            following = plan.advance(runtime.stage_stats(self._index), self._index)
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


def shape_class() -> type[LoadTestShape] | None:
    """A ``LoadTestShape`` subclass for ``ATTNLOAD_SHAPE``, or None (Locust's own controls)."""
    spec = shape_spec_from_env()
    if spec is None:
        return None
    spawn_rate = os.environ.get("ATTNLOAD_SPAWN_RATE")
    base = SweepShape if spec.kind == "sweep" else StagedShape
    return type("AttnloadShape", (base,), {"spec": spec, "spawn_rate": float(spawn_rate) if spawn_rate else None})


# ---------------------------------------------------------------------------- events


def register(events: Any) -> None:
    """Wire attnload into Locust's event hooks (call once, from the locustfile)."""
    events.init_command_line_parser.add_listener(add_arguments)
    events.init.add_listener(_on_init)


def _fail(exc: UsageError) -> None:
    print(f"attnload: error: {redact(str(exc))}", file=sys.stderr)
    sys.stderr.flush()
    os._exit(2)  # Locust's init hooks run under gevent: exit now, one line, no traceback


def _on_init(environment: Environment, **_: Any) -> None:
    runner = environment.runner
    role = "master" if isinstance(runner, MasterRunner) else "worker" if isinstance(runner, WorkerRunner) else "local"
    try:
        options = options_from(environment.parsed_options)
        runtime = Runtime(load_config(options.config_path), options, role)
    except UsageError as exc:
        _fail(exc)
        return
    environment.attnload = runtime  # type: ignore[attr-defined]
    events = environment.events
    if not isinstance(runner, MasterRunner):
        runtime.open_loop = _open_loop(environment, runtime)
        quiet_full_collections()
    if isinstance(runner, WorkerRunner):
        runtime.worker_index = max(runner.worker_index, 0)
        events.report_to_master.add_listener(lambda client_id, data: data.update(attnload=runtime.worker_payload()))
        gevent.spawn(_sample_cpu, runtime)

        def on_stage(environment: Environment, msg: Any) -> None:
            runtime.worker_index = max(runner.worker_index, 0)
            data = msg.data
            runtime.enter_stage(data["index"], data.get("users"), data.get("rate"), rates=data.get("rates"),
                                workers=data.get("workers"))

        runner.register_message(STAGE_MESSAGE, on_stage)

        def send_final(**_: Any) -> None:
            if runtime.open_loop is not None:
                runtime.open_loop.stop()  # in-flight open-loop requests are recorded as cancelled first
            runner.send_message(FINAL_DELTA_MESSAGE, runtime.worker_payload())

        events.test_stop.add_listener(send_final)
        return
    _init_collector(environment, runtime)


def _open_loop(environment: Environment, runtime: Runtime) -> OpenLoop:
    """This process's open-loop scheduler (idle until a rate stage begins)."""
    pool = ClientPool(list(runtime.config.models), lambda target: _client(runtime, target),
                      runtime.options.max_in_flight)

    def send(client: ChatClient, target: ModelTarget, plan: PlannedRequest, stage: int, intended: float) -> None:
        send_plan(environment, runtime, client, target, plan, stage, intended)

    def pair(clients: dict[str, ChatClient], plan: PlannedRequest, stage: int, intended: float) -> None:
        send_pair(environment, runtime, clients, plan, stage, intended)

    return OpenLoop(list(runtime.config.models), pool, runtime.workload.next, send,
                    pair if runtime.paired is not None else None, runtime.arrivals, runtime.config.seed)


def _init_collector(environment: Environment, runtime: Runtime) -> None:
    """Master or single process: merge deltas, serve /metrics, track workers, write results."""
    runner = environment.runner
    events = environment.events
    if runtime.options.metrics_port:
        try:
            serve_metrics(runtime.recorder, runtime.fleet, runtime.options.metrics_port)
        except OSError as exc:
            _fail(UsageError(f"cannot serve /metrics on port {runtime.options.metrics_port} ({exc.strerror}): "
                             "pass another --metrics-port or stop the process holding it"))
    if isinstance(runner, MasterRunner):
        events.worker_report.add_listener(
            lambda client_id, data: runtime.merge_worker(client_id, data.get("attnload") or {}))
        def final_counts(environment: Environment, msg: Any) -> None:
            runtime.merge_worker(msg.node_id, msg.data or {})
            runtime.final_counts_from.add(msg.node_id)

        runner.register_message(FINAL_DELTA_MESSAGE, final_counts)
    events.test_start.add_listener(lambda **_: runtime.test_started())

    def stopped(**_: Any) -> None:
        runtime.test_stopped()
        if isinstance(runner, MasterRunner):
            gevent.spawn(_write_after_final_counts, runner, runtime)
        else:
            gevent.spawn(runtime.write_results)

    events.test_stop.add_listener(stopped)
    events.quitting.add_listener(lambda **_: runtime.write_results())
    events.quitting.add_listener(lambda **_: _stop_users(runner))  # fires before the write: reverse order
    if environment.shape_class is not None and getattr(environment.parsed_options, "headless", False):
        # Locust installs its SIGTERM handler only after a headless shape test ends; until then SIGTERM
        # (Ctrl-C in `attnload run`, a pod being deleted) would kill the master without results.
        gevent.signal_handler(signal.SIGTERM, lambda: setattr(runtime, "stop_requested", True))
    gevent.spawn(_watch_fleet, environment, runtime)
    web_ui = environment.web_ui
    if web_ui is not None:
        webui.install(environment, runtime.results)


def _stop_users(runner: Any) -> None:
    """End of a shape, SIGTERM or Ctrl-C: stop the users before Locust quits, so in-flight requests are counted
    (cancelled, or finished under ``--stop-timeout``) before results are written.

    A headless Locust master quits by telling workers to quit, waiting 0.5 s and closing its
    socket; a worker cancelling thousands of in-flight streams takes longer than that, so a
    master stops them itself and waits for every worker's final counts.
    """
    if runner is None or runner.state not in ("spawning", "running"):
        return
    runtime: Runtime | None = getattr(runner.environment, "attnload", None)
    if isinstance(runner, MasterRunner) and runtime is not None:
        stop_and_collect(runner, runtime)
    else:
        runner.stop()


def stop_and_collect(runner: MasterRunner, runtime: Runtime) -> None:
    """Stop every worker's users and wait until each worker still connected has sent its final counts."""
    expected = _connected_workers(runner)
    runner.stop()  # sends stop to the workers and waits until their users are gone (up to --stop-timeout + 60 s)
    _await_final_counts(runtime, expected)


def _write_after_final_counts(runner: MasterRunner, runtime: Runtime) -> None:
    """A stop from the web UI: write results once the workers' final counts are in."""
    _await_final_counts(runtime, _connected_workers(runner))
    runtime.write_results()


def _connected_workers(runner: MasterRunner) -> set[str]:
    return {client.id for client in runner.clients.all if client.state != "missing"}


def _await_final_counts(runtime: Runtime, expected: set[str]) -> None:
    deadline = time.monotonic() + FINAL_COUNTS_WAIT_S
    while (missing := expected - runtime.final_counts_from - runtime.workers_lost) and time.monotonic() < deadline:
        gevent.sleep(0.05)
    if missing:
        log.warning("%d worker(s) sent no final counts within %.0f s; their last requests are missing from the "
                    "results", len(missing), FINAL_COUNTS_WAIT_S)


def _sample_cpu(runtime: Runtime) -> None:
    """A worker's one-second CPU samples; their peak rides on each report to the master."""
    while True:
        gevent.sleep(1.0)
        runtime.cpu.sample()


def _watch_fleet(environment: Environment, runtime: Runtime) -> None:
    """Every second: worker count, CPU per worker, workers that went missing; headless progress lines."""
    runner = environment.runner
    headless = bool(getattr(environment.parsed_options, "headless", False))
    last_progress = time.monotonic()
    while True:
        if headless and runtime.running and time.monotonic() - last_progress >= PROGRESS_INTERVAL_S:
            last_progress = time.monotonic()
            sys.stderr.write(progress_line(runtime.results()) + "\n")  # the console's own output
            sys.stderr.flush()
        if isinstance(runner, MasterRunner):
            connected = set()
            for client in list(runner.clients.values()):
                if client.state == "missing":
                    runtime.workers_lost.add(client.id)
                else:
                    connected.add(client.id)
            # Locust forgets a worker between "stopped" and "ready" (up to --stop-timeout); its reports go on.
            runtime.fleet.workers = len(connected | runtime.reporting_workers())
        elif runner is not None:
            runtime.fleet.workers = 1
            runtime.fleet.users = dict(runtime.users_by_model)
            runtime.note_cpu("local", runtime.cpu.sample())
        gevent.sleep(1.0)
