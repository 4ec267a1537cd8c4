"""The event wiring behind ``register(events)``: validate at init, serve ``/metrics`` on the
master, ship deltas from workers, tell workers each stage, write results when a test stops."""

from __future__ import annotations

import logging
from typing import Any

import gevent
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from attnload.attention import FactsLookup, no_facts
from attnload.client.chat import ChatClient
from attnload.config.load import load_config
from attnload.config.model import ModelTarget
from attnload.errors import UsageError
from attnload.exporter.exposition import serve_metrics
from attnload.plan.options import add_arguments, exit_usage, options_from, requests_out_option
from attnload.report import webui
from attnload.runner import requestsink
from attnload.runner.fleet import (
    FINAL_DELTA_MESSAGE,
    sample_cpu,
    stop_users,
    watch_fleet,
    write_after_final_counts,
)
from attnload.runner.gcpolicy import quiet_full_collections
from attnload.runner.gpuview import GpuView, gpu_targets
from attnload.runner.openloop import PAIR_STREAM, ClientPool, OpenLoop
from attnload.runner.progress import feed_progress, silence_locust_tables
from attnload.runner.replay import ReplaySchedule
from attnload.runner.runtime import Runtime
from attnload.runner.serverview import ServerView, scrape_targets
from attnload.runner.shape import STAGE_MESSAGE, StageMessage
from attnload.runner.startspread import wire as wire_start_spread
from attnload.runner.stops import (
    install_stop_handlers,
    snapshot_interval,
    snapshot_loop,
    watch_parent_from_env,
)
from attnload.runner.users import chat_client, converse_open, send_pair, send_plan
from attnload.workload.prompts import PlannedRequest
from attnload.workload.shapes import ReplaySpec

log = logging.getLogger(__name__)


def register(events: Any, attention_facts: FactsLookup = no_facts) -> None:
    """Wire attnload into Locust's event hooks (call once, from the locustfile).

    ``attention_facts`` gives each model's preset KV facts for the results (the packaged
    locustfile passes the simulator's; by default a run reports measurements only).
    """
    events.init_command_line_parser.add_listener(add_arguments)
    events.init.add_listener(lambda environment, **kw: _on_init(environment, attention_facts, **kw))


def _on_init(environment: Environment, attention_facts: FactsLookup, **_: Any) -> None:
    runner = environment.runner
    role = "master" if isinstance(runner, MasterRunner) else "worker" if isinstance(runner, WorkerRunner) else "local"
    try:
        options = options_from(environment.parsed_options)
        runtime = Runtime(load_config(options.config_path), options, role, attention_facts)
    except UsageError as exc:
        exit_usage(exc)
        return
    environment.attnload = runtime  # type: ignore[attr-defined]
    if not options.locust_stats:
        silence_locust_tables()
    wire_start_spread(runner, runtime.start_spread, role)  # workers ask the master which user is a model's pilot
    events = environment.events
    watch_parent_from_env()  # started by `attnload run`: stop when it is gone
    # `attnload cluster run --requests-out` sets it per test through /swarm (Locust copies it to workers);
    # when that test stops the master forgets it, so a later test without it cannot truncate its file
    events.test_start.add_listener(lambda **_: _follow_requests_out(environment, runtime))
    if not isinstance(runner, WorkerRunner) and environment.parsed_options is not None:
        configured = getattr(environment.parsed_options, "attnload_requests_out", "")
        events.test_stop.add_listener(
            lambda **_: setattr(environment.parsed_options, "attnload_requests_out", configured)
        )
    if not isinstance(runner, MasterRunner):
        runtime.open_loop = _open_loop(environment, runtime)
        runtime.open_loop.on_error = runtime.health.scheduler_died
        events.user_error.add_listener(lambda user_instance, **_: runtime.health.user_error(user_instance))
        quiet_full_collections()
    if isinstance(runner, WorkerRunner):
        runtime.worker_index = max(runner.worker_index, 0)
        events.report_to_master.add_listener(lambda client_id, data: data.update(attnload=runtime.worker_payload()))
        gevent.spawn(sample_cpu, runtime)

        def on_stage(environment: Environment, msg: Any) -> None:
            runtime.worker_index = max(runner.worker_index, 0)
            StageMessage.from_data(msg.data).enter(runtime)

        runner.register_message(STAGE_MESSAGE, on_stage)

        def send_final(**_: Any) -> None:
            if runtime.open_loop is not None:
                runtime.open_loop.stop()  # in-flight open-loop requests are recorded as cancelled first
            runner.send_message(FINAL_DELTA_MESSAGE, runtime.worker_payload(final=True))

        events.test_stop.add_listener(send_final)
        return
    _init_collector(environment, runtime)


def _follow_requests_out(environment: Environment, runtime: Runtime) -> None:
    try:
        runtime.use_requests_out(requests_out_option(environment.parsed_options))
    except UsageError as exc:  # a test started through /swarm with a path this master cannot write
        log.error("%s: this test runs without it", exc)
        runtime.requests = None


def _open_loop(environment: Environment, runtime: Runtime) -> OpenLoop:
    """This process's open-loop scheduler (idle until a rate stage begins)."""
    pool = ClientPool(
        list(runtime.config.models), lambda target: chat_client(runtime, target), runtime.options.max_in_flight
    )

    def send(client: ChatClient, target: ModelTarget, plan: PlannedRequest, stage: int, intended: float) -> None:
        send_plan(environment, runtime, client, target, plan, stage, intended)

    def pair(clients: dict[str, ChatClient], plan: PlannedRequest, stage: int, intended: float) -> None:
        send_pair(environment, runtime, clients, plan, stage, intended)

    keys = [m.key for m in runtime.config.models]

    def next_plan(stream: str) -> PlannedRequest:
        """A rate stage's next request, sized by the stream's model (paired: the first model's tokenizer)."""
        return runtime.workload.next(runtime.traffic.sizer(keys if stream == PAIR_STREAM else [stream]))

    loop = OpenLoop(
        list(runtime.config.models),
        pool,
        next_plan,
        send,
        pair if runtime.paired is not None else None,
        runtime.arrivals,
        runtime.config.seed,
    )
    loop.burstiness = runtime.options.burstiness
    shape = runtime.options.shape
    if isinstance(shape, ReplaySpec):
        first = runtime.config.models[0]
        loop.planned = ReplaySchedule(
            shape,
            [m.key for m in runtime.config.models],
            runtime.paired is not None,
            lambda: runtime.run_salt,
            runtime.traffic.tokens[first.key],
        )
    elif runtime.traffic.conversational:
        loop.arrival = lambda stream, intended, stage: converse_open(
            environment, runtime, pool, stream, intended, stage
        )
    return loop


def _init_collector(environment: Environment, runtime: Runtime) -> None:
    """Master or single process: merge deltas, serve /metrics, track workers, write results."""
    runner = environment.runner
    events = environment.events
    if runtime.options.server_metrics == "auto":
        runtime.server_view = ServerView(
            scrape_targets(runtime.config, runtime.attention_facts), runtime.options.server_metrics_interval_s
        )
    if runtime.options.gpu_metrics == "auto":
        guess = runtime.options.server_metrics == "auto"  # off: the servers' /metrics are not read at all
        runtime.gpu_view = GpuView(
            gpu_targets(runtime.config, runtime.attention_facts, guess),
            runtime.options.server_metrics_interval_s,
            on_sample=runtime.fleet.gpu.record,
        )
    if runtime.options.metrics_port:
        try:
            serve_metrics(runtime.recorder, runtime.fleet, runtime.options.metrics_port, runtime.options.metrics_host)
        except OSError as exc:
            exit_usage(
                UsageError(
                    f"cannot serve /metrics on port {runtime.options.metrics_port} ({exc.strerror}): "
                    "pass another --metrics-port or stop the process holding it"
                )
            )
    if isinstance(runner, MasterRunner):
        events.worker_report.add_listener(
            lambda client_id, data: runtime.merge_worker(client_id, data.get("attnload") or {})
        )

        def final_counts(environment: Environment, msg: Any) -> None:
            runtime.merge_worker(msg.node_id, msg.data or {})
            runtime.final_counts_from.add(msg.node_id)

        runner.register_message(FINAL_DELTA_MESSAGE, final_counts)
    events.test_start.add_listener(lambda **_: runtime.test_started())

    def stopped(**_: Any) -> None:
        runtime.test_stopped()
        if isinstance(runner, MasterRunner):
            gevent.spawn(write_after_final_counts, runner, runtime)
        else:
            gevent.spawn(runtime.write_results)

    events.test_stop.add_listener(stopped)
    events.quitting.add_listener(lambda **_: runtime.write_results())
    events.quitting.add_listener(lambda **_: stop_users(runner))  # fires before the write: reverse order
    # Locust installs its SIGTERM handler only after a headless shape test ends; until then SIGTERM
    # (Ctrl-C in `attnload run`, a pod being deleted) would kill the master without results.
    install_stop_handlers(environment, runtime)
    gevent.spawn(snapshot_loop, runtime, snapshot_interval(environment.parsed_options))
    if not isinstance(runner, MasterRunner):
        gevent.spawn(requestsink.pump, lambda: runtime.requests)  # a single process writes its lines as it goes
    gevent.spawn(watch_fleet, environment, runtime)
    gevent.spawn(feed_progress, environment, runtime)
    web_ui = environment.web_ui
    if web_ui is not None:
        webui.install(environment, runtime.results)
