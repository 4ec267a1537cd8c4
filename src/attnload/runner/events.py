"""The event wiring behind ``register(events)``: validate at init, then give the process the parts its
Locust runner class calls for (Locust's habit, one runner class per role): a worker a sender, a master a
collector, a single local process both. The messages between them are ``messages.py``'s."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import gevent
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from attnload.attention import BandwidthLookup, FactsLookup, no_bandwidth, no_facts
from attnload.config.load import load_config
from attnload.config.model import TestConfig
from attnload.errors import UsageError
from attnload.exporter.exposition import serve_metrics
from attnload.measure.looplag import watch_loop
from attnload.plan.children import PARENT_PID_ENV
from attnload.plan.options import RunOptions, add_arguments, exit_usage, options_from, requests_out_option
from attnload.plan.writable import check_writable_dir
from attnload.report.live import webui
from attnload.runner.collector.collector import Collector, LocalCollector, MasterCollector
from attnload.runner.collector.fleet import stop_users, watch_fleet, write_after_final_counts
from attnload.runner.collector.progress import feed_progress, silence_locust_tables
from attnload.runner.collector.requestsfile import pump
from attnload.runner.gcpolicy import quiet_full_collections
from attnload.runner.messages import setup_distributed_messages
from attnload.runner.runtime import Runtime
from attnload.runner.sender.injector import Injector
from attnload.runner.sender.sender import Sender
from attnload.runner.sender.stallwatch import watch as watch_stalls
from attnload.runner.sender.users import open_loop
from attnload.runner.stops import (
    install_stop_handlers,
    snapshot_interval,
    snapshot_loop,
    watch_parent_from_env,
    worker_exit_code_on_signal,
    worker_watch_parent_from_env,
)

log = logging.getLogger(__name__)


def register(
    events: Any, attention_facts: FactsLookup = no_facts, gpu_bandwidth: BandwidthLookup = no_bandwidth
) -> None:
    """Wire attnload into Locust's event hooks (call once, from the locustfile).

    ``attention_facts`` gives each model's preset KV facts for the results and ``gpu_bandwidth`` a GPU preset's
    memory bandwidth (a model's ``gpu_type``, for ``kv_read``); the packaged locustfile passes the simulator's,
    by default a run reports measurements only.
    """
    events.init_command_line_parser.add_listener(add_arguments)
    events.init.add_listener(lambda environment, **kw: _on_init(environment, attention_facts, gpu_bandwidth, **kw))


def _runtime_for(runner: Any, config: TestConfig, options: RunOptions, attention_facts: FactsLookup) -> Runtime:
    """The parts this Locust runner's class calls for."""
    if isinstance(runner, MasterRunner):
        return Runtime.master(config, options, attention_facts)
    if isinstance(runner, WorkerRunner):
        return Runtime.worker(config, options, attention_facts)
    return Runtime.local(config, options, attention_facts)


def _on_init(environment: Environment, attention_facts: FactsLookup, gpu_bandwidth: BandwidthLookup, **_: Any) -> None:
    runner = environment.runner
    try:
        options = options_from(environment.parsed_options)
        runtime = _runtime_for(runner, load_config(options.config_path), options, attention_facts)
    except UsageError as exc:
        exit_usage(exc)
        return
    runtime.state.gpu_bandwidth = gpu_bandwidth
    environment.attnload = runtime  # type: ignore[attr-defined]
    if not options.locust_stats:
        silence_locust_tables()
    setup_distributed_messages(
        runner,
        runtime if isinstance(runner, WorkerRunner) else None,
        runtime.collector
        if isinstance(runner, MasterRunner) and isinstance(runtime.collector, MasterCollector)
        else None,
    )
    events = environment.events
    if isinstance(runner, WorkerRunner):  # started by `attnload run`: stop when it is gone (a worker: when the
        worker_watch_parent_from_env(environment)  # master has its final counts)
        worker_exit_code_on_signal(environment)
    else:
        watch_parent_from_env()
    # `attnload cluster run --requests-out` sets it per test through /swarm (Locust copies it to workers);
    # when that test stops the master forgets it, so a later test without it cannot truncate its file
    events.test_start.add_listener(lambda **_: _follow_requests_out(environment, runtime))
    if not isinstance(runner, WorkerRunner) and environment.parsed_options is not None:
        configured = getattr(environment.parsed_options, "attnload_requests_out", "")
        events.test_stop.add_listener(
            lambda **_: setattr(environment.parsed_options, "attnload_requests_out", configured)
        )
    if runtime.sender is not None:
        _init_sender(environment, runtime.sender)
    if runtime.collector is not None:
        _init_collector(environment, runtime, runtime.collector)


def _follow_requests_out(environment: Environment, runtime: Runtime) -> None:
    try:
        runtime.use_requests_out(requests_out_option(environment.parsed_options))
    except UsageError as exc:  # a test started through /swarm with a path this master cannot write
        log.error("%s: this test runs without it", exc)
        runtime.stop_requests_out()


def _init_sender(environment: Environment, sender: Sender) -> None:
    """Worker or single process: the open loop, crash counts and the GC policy of a load generator."""
    loop = open_loop(environment, sender)
    loop.on_error = sender.health.scheduler_died
    sender.open_loop = loop
    shape = sender.state.options.shape
    if shape is not None and (tokens := shape.injected_prefill_tokens) is not None:
        sender.injector = Injector(sender, tokens)
    gevent.spawn(watch_stalls, sender.stall)  # a frozen process's requests carry the freeze: mark them
    # a worker cut off from its master keeps running: the master's answers to its heartbeats stop instead
    environment.events.heartbeat_received.add_listener(lambda **_: sender.stall.heard())
    environment.events.user_error.add_listener(lambda user_instance, **_: sender.health.user_error(user_instance))
    quiet_full_collections()
    gevent.spawn(watch_loop, sender.loop_lag)


def _init_collector(environment: Environment, runtime: Runtime, collector: Collector) -> None:
    """Master or single process: serve /metrics, track the test and the fleet, write results."""
    runner = environment.runner
    events = environment.events
    options = runtime.state.options
    if not os.environ.get(PARENT_PID_ENV):  # plain `locust -f` (`attnload run` checked it already): the results
        try:  # directory must take files before the first request, not after the whole load
            check_writable_dir("--attnload-results", Path(options.results_dir))
        except UsageError as exc:
            exit_usage(exc)
    collector.open_views()
    if options.metrics_port:
        try:
            serve_metrics(runtime.state.recorder, collector.fleet, options.metrics_port, options.metrics_host)
        except OSError as exc:
            exit_usage(
                UsageError(
                    f"cannot serve /metrics on port {options.metrics_port} ({exc.strerror}): "
                    "pass another --metrics-port or stop the process holding it"
                )
            )
    events.test_start.add_listener(lambda **_: runtime.test_started())

    def stopped(**_: Any) -> None:
        runtime.test_stopped()
        if isinstance(runner, MasterRunner) and isinstance(collector, MasterCollector):
            gevent.spawn(write_after_final_counts, runner, collector)
        else:
            gevent.spawn(collector.write_results)

    events.test_stop.add_listener(stopped)
    events.quitting.add_listener(lambda **_: collector.write_results())
    events.quitting.add_listener(lambda **_: stop_users(runner))  # fires before the write: reverse order
    # Locust installs its SIGTERM handler only after a headless shape test ends; until then SIGTERM
    # (Ctrl-C in `attnload run`, a pod being deleted) would kill the master without results.
    install_stop_handlers(environment, collector)
    gevent.spawn(snapshot_loop, collector, snapshot_interval(environment.parsed_options))
    if isinstance(collector, LocalCollector):
        gevent.spawn(pump, collector.drain_requests)  # a single process writes its lines as it goes
    gevent.spawn(watch_fleet, environment, collector)
    gevent.spawn(feed_progress, environment, collector)
    web_ui = environment.web_ui
    if web_ui is not None:
        webui.install(environment, collector.results)
