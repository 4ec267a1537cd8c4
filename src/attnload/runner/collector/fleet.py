"""The fleet seen from the collector: stopping users, collecting final counts, and the one-second watch
of workers and CPU (progress: ``progress.py``)."""

from __future__ import annotations

import logging
import time
from typing import Any

import gevent
from locust.env import Environment
from locust.runners import MasterRunner

from attnload.runner.collector.collector import Collector, LocalCollector, MasterCollector

log = logging.getLogger(__name__)

FINAL_COUNTS_WAIT_S = 30.0
"""After the users stop: how long the master waits for every worker's final counts (beyond
``--stop-timeout``). Cancelling thousands of in-flight streams takes a worker seconds."""


def stop_users(runner: Any) -> None:
    """End of a shape, SIGTERM or Ctrl-C: stop the users before Locust quits, so in-flight requests are counted
    (cancelled, or finished under ``--stop-timeout``) before results are written.

    A headless Locust master quits by telling workers to quit, waiting 0.5 s and closing its
    socket; a worker cancelling thousands of in-flight streams takes longer than that, so a
    master stops them itself and waits for every worker's final counts.
    """
    if runner is None or runner.state not in ("spawning", "running"):
        return
    runtime = getattr(runner.environment, "attnload", None)
    collector = runtime.collector if runtime is not None else None
    if isinstance(runner, MasterRunner) and isinstance(collector, MasterCollector):
        stop_and_collect(runner, collector)
    else:
        runner.stop()


def stop_and_collect(runner: MasterRunner, collector: MasterCollector) -> None:
    """Stop every worker's users and wait until each worker still connected has sent its final counts."""
    expected = _connected_workers(runner)
    runner.stop()  # sends stop to the workers and waits until their users are gone (up to --stop-timeout + 60 s)
    _await_final_counts(collector, expected)


def write_after_final_counts(runner: MasterRunner, collector: MasterCollector) -> None:
    """A stop from the web UI: write results once the workers' final counts are in."""
    _await_final_counts(collector, _connected_workers(runner))
    collector.write_results()


def _connected_workers(runner: MasterRunner) -> set[str]:
    return {client.id for client in runner.clients.all if client.state != "missing"}


def _await_final_counts(collector: MasterCollector, expected: set[str]) -> None:
    deadline = time.monotonic() + FINAL_COUNTS_WAIT_S
    while (missing := expected - collector.final_counts_from - collector.workers_lost) and time.monotonic() < deadline:
        gevent.sleep(0.05)
    collector.watch.silent_at_end = set(missing)
    if missing:
        log.warning(
            "%d worker(s) sent no final counts within %.0f s; their last requests are missing from the results",
            len(missing),
            FINAL_COUNTS_WAIT_S,
        )


def watch_workers(runner: MasterRunner, collector: MasterCollector) -> None:
    """A master's second: worker count, workers that went missing (said at once, one line) and those
    that came back (stalled, not lost)."""
    connected = set()
    for client in list(runner.clients.values()):
        if client.state == "missing":
            if client.id not in collector.workers_lost:
                log.warning(collector.worker_missing(client.id))
                _restart_lost_users(runner, collector)
        else:
            if client.id in collector.workers_lost:
                log.warning(collector.worker_back(client.id))
            connected.add(client.id)
    # Locust forgets a worker between "stopped" and "ready" (up to --stop-timeout); its reports go on.
    collector.fleet.workers = len(connected | collector.reporting_workers())


def _restart_lost_users(runner: MasterRunner, collector: MasterCollector) -> None:
    """``--restart-lost-users``: dispatch the stage's users again over the workers left (Locust has
    already taken the missing one out of its dispatcher). Off by default: a benchmark should not change
    its load per worker behind the reader's back."""
    if not collector.state.options.restart_lost_users or runner.state not in ("spawning", "running"):
        return
    log.warning("restarting the lost users on the %d workers left (--restart-lost-users)", runner.worker_count)
    runner.start(runner.target_user_count, runner.spawn_rate)


def watch_fleet(environment: Environment, collector: Collector) -> None:
    """Every second: worker count, CPU per worker, workers that went missing, models that do not answer."""
    runner = environment.runner
    while True:
        if isinstance(runner, MasterRunner) and isinstance(collector, MasterCollector):
            watch_workers(runner, collector)
        elif runner is not None and isinstance(collector, LocalCollector):
            collector.tick()
        if collector.state.running:
            collector.reach.tick(collector.state.recorder)
        gevent.sleep(1.0)
