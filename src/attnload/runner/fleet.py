"""The fleet seen from the master: stopping users, collecting final counts and CPU (progress: ``progress.py``)."""

from __future__ import annotations

import logging
import time
from typing import Any

import gevent
from locust.env import Environment
from locust.runners import MasterRunner

from attnload.runner.runtime import Runtime

log = logging.getLogger(__name__)

FINAL_DELTA_MESSAGE = "attnload_final"
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


def write_after_final_counts(runner: MasterRunner, runtime: Runtime) -> None:
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
        log.warning(
            "%d worker(s) sent no final counts within %.0f s; their last requests are missing from the results",
            len(missing),
            FINAL_COUNTS_WAIT_S,
        )


def sample_cpu(runtime: Runtime) -> None:
    """A worker's one-second CPU samples; their peak rides on each report to the master."""
    while True:
        gevent.sleep(1.0)
        runtime.cpu.sample()
        runtime.throttle.sample()


def watch_fleet(environment: Environment, runtime: Runtime) -> None:
    """Every second: worker count, CPU per worker, workers that went missing."""
    runner = environment.runner
    while True:
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
            runtime.note_throttled(runtime.throttle.sample())
        gevent.sleep(1.0)
