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
from attnload.config import load_config
from attnload.errors import UsageError, redact
from attnload.measure import RequestRecord
from attnload.metrics import serve_metrics
from attnload.runtime import RunOptions, Runtime
from attnload.shapes import ShapeSpec, parse_duration, parse_shape

log = logging.getLogger(__name__)

STAGE_MESSAGE = "attnload_stage"
FINAL_DELTA_MESSAGE = "attnload_final"
RESULTS_GRACE_S = 1.0


class ChatUser(User):
    """A closed-loop user: sends the next request as soon as the previous one finished."""

    abstract = True
    wait_time = constant(0)

    def on_start(self) -> None:
        runtime: Runtime = self.environment.attnload  # type: ignore[attr-defined]
        self.runtime = runtime
        self.target = runtime.assign_model()
        self.chat = ChatClient(self.target.chat_url, runtime.api_keys[self.target.key], runtime.timeouts)

    def on_stop(self) -> None:
        self.runtime.release(self.target)
        self.chat.close()

    @task
    def chat_completion(self) -> None:
        runtime, target = self.runtime, self.target
        plan = runtime.workload.next()
        request = runtime.config.request
        body = chat_body(target.id, plan.messages, max_tokens=plan.max_tokens, temperature=request.temperature,
                         stream=request.stream, ignore_eos=request.ignore_eos)
        stage = runtime.stage_for(time.perf_counter())
        try:
            record = self.chat.send(body, model_key=target.key, profile=plan.profile, stage=stage)
        except _Cancelled as cancelled:
            self._observe(cancelled.record)
            raise GreenletExit() from None
        self._observe(record)

    def _observe(self, record: RequestRecord) -> None:
        if record.outcome == "ok" and self.runtime.config.slo.is_set:
            record = replace(record, good=self.runtime.is_good(record.ttft_s, record.itl_samples, record.e2e_s))
        self.runtime.observe(record)
        if record.outcome == "cancelled":
            return  # not a server fault: kept out of Locust's failure table
        exception = None if record.outcome == "ok" else _LocustFailure(f"{record.error}")
        self.environment.events.request.fire(
            request_type="POST", name=record.model_key, response_time=record.e2e_s * 1000.0,
            response_length=record.completion_tokens, exception=exception, context={"profile": record.profile})


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


def options_from(parsed: Any) -> RunOptions:
    shape_text = (parsed.attnload_shape or "").strip()
    stage_s = parse_duration(parsed.attnload_stage_duration, "--stage-duration")
    warmup = str(parsed.attnload_warmup).strip()
    return RunOptions(
        config_path=parsed.attnload_config, metrics_port=int(parsed.attnload_metrics_port),
        results_dir=parsed.attnload_results, shape=parse_shape(shape_text, stage_s) if shape_text else None,
        profiles=tuple(p.strip() for p in (parsed.attnload_profile or "").split(",") if p.strip()),
        warmup_s=0.0 if warmup in ("", "0") else parse_duration(warmup, "--warmup"))


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
    """Closed-loop stages from a :class:`ShapeSpec`; tells the runtime (and workers) each new stage."""

    spec: ShapeSpec
    spawn_rate: float | None = None

    def tick(self) -> tuple[int, float] | None:
        runtime: Runtime | None = getattr(self.runner.environment, "attnload", None) if self.runner else None
        if runtime is None:
            return None
        if not runtime.running:
            runtime.begin_test()
        stage = self.spec.stage_at(self.get_run_time())
        if stage is None:
            return None
        if stage.index != runtime.stage.index:
            runtime.enter_stage(stage.index, stage.users, stage.rate)
            if isinstance(self.runner, MasterRunner):
                self.runner.send_message(STAGE_MESSAGE, {"index": stage.index, "users": stage.users,
                                                         "rate": stage.rate})
        users = stage.users or 0
        return users, float(self.spawn_rate or max(users, 1))


def shape_class() -> type[LoadTestShape] | None:
    """A ``LoadTestShape`` subclass for ``ATTNLOAD_SHAPE``, or None (Locust's own controls)."""
    spec = shape_spec_from_env()
    if spec is None:
        return None
    spawn_rate = os.environ.get("ATTNLOAD_SPAWN_RATE")
    return type("AttnloadShape", (StagedShape,), {"spec": spec,
                                                   "spawn_rate": float(spawn_rate) if spawn_rate else None})


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
    if isinstance(runner, WorkerRunner):
        runtime.worker_index = max(runner.worker_index, 0)
        events.report_to_master.add_listener(lambda client_id, data: data.update(attnload=runtime.worker_payload()))
        runner.register_message(STAGE_MESSAGE, lambda environment, msg: runtime.enter_stage(
            msg.data["index"], msg.data.get("users"), msg.data.get("rate")))

        def send_final(**_: Any) -> None:
            runner.send_message(FINAL_DELTA_MESSAGE, runtime.worker_payload())

        events.test_stop.add_listener(send_final)
        return
    _init_collector(environment, runtime)


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
        runner.register_message(FINAL_DELTA_MESSAGE, lambda environment, msg: runtime.merge_worker(
            msg.node_id, msg.data or {}))
    events.test_start.add_listener(lambda **_: runtime.test_started())

    def stopped(**_: Any) -> None:
        runtime.test_stopped()
        gevent.spawn_later(RESULTS_GRACE_S if isinstance(runner, MasterRunner) else 0.0, runtime.write_results)

    events.test_stop.add_listener(stopped)
    events.quitting.add_listener(lambda **_: runtime.write_results())
    gevent.spawn(_watch_fleet, environment, runtime)
    web_ui = environment.web_ui
    if web_ui is not None:
        try:
            from attnload.report import webui
        except ImportError:
            return
        webui.install(environment, runtime.results)


def _watch_fleet(environment: Environment, runtime: Runtime) -> None:
    """Every second: worker count, CPU per worker, workers that went missing."""
    runner = environment.runner
    while True:
        if isinstance(runner, MasterRunner):
            alive = 0
            for client in list(runner.clients.values()):
                if client.state == "missing":
                    runtime.workers_lost.add(client.id)
                    continue
                alive += 1
                runtime.note_cpu(client.id, float(client.cpu_usage or 0.0))
            runtime.fleet.workers = alive
        elif runner is not None:
            runtime.fleet.workers = 1
            runtime.fleet.users = dict(runtime.users_by_model)
            runtime.note_cpu("local", float(runner.current_cpu_usage or 0.0))
        gevent.sleep(1.0)
