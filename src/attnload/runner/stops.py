"""Stops that always work: signals end a run with results marked ``interrupted``, a periodic
snapshot survives a SIGKILL, and the death of ``attnload run`` ends the Locust processes it started.

- SIGTERM/SIGINT on a master (or single process) mark the run interrupted, end the test the way a
  finished shape does (users stop, workers send their final counts, results are written) and make
  Locust exit 143/130. If that takes longer than ``--stop-timeout`` + :data:`INTERRUPT_GRACE_S`
  (a wedged worker, a server that never lets go), the master writes what it has and exits anyway.
- Every ``--snapshot-interval`` seconds the master rewrites ``STAMP.json`` atomically, marked
  ``interrupted``; the final write replaces it. A SIGKILL (OOM killer, ``kubectl delete --force``)
  therefore loses at most one interval.
- A child of ``attnload run`` gets SIGTERM when its parent dies (``PR_SET_PDEATHSIG``, armed by the
  parent: ``plan/children.py``) and also polls
  ``os.getppid()`` (the death signal is lost if the parent dies before it is set): load never
  outlives the command that started it. A worker gets SIGHUP instead and waits for the master, which
  stops it and takes its final counts before writing (bounded: it ends on its own past the master's
  deadline).
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable
from typing import Any

import gevent

from attnload.plan.children import INTERRUPT_GRACE_S, PARENT_PID_ENV, WORKER_DEATH_SIGNAL
from attnload.results.write import write_snapshot
from attnload.runner.collector.collector import Collector

log = logging.getLogger(__name__)

DEFAULT_SNAPSHOT_INTERVAL_S = 30.0
PARENT_POLL_S = 0.5
WORKER_LINGER_S = 5.0
"""Beyond the master's own stop deadline: how long an orphaned worker waits to be stopped by the master."""


def signal_exit_code(signum: int) -> int:
    """The shell's convention: 128 + the signal number (130 for SIGINT, 143 for SIGTERM)."""
    return 128 + signum


def install_stop_handlers(environment: Any, collector: Collector) -> None:
    """SIGTERM/SIGINT on a master or single process: an interrupted run that still writes results.

    With a shape (every ``attnload run``) the shape ends the test at its next tick. Without one
    (plain ``locust --headless -u N``) Locust's own SIGTERM handler shuts down; a SIGINT is turned
    into that SIGTERM. Either way the exit code is set before Locust computes its own.
    """

    state = collector.state

    def on_signal(signum: int) -> None:
        first = not state.interrupted
        state.interrupted = True
        state.stop_requested = True
        if getattr(environment, "process_exit_code", None) is None:
            environment.process_exit_code = signal_exit_code(signum)
        if not first:
            return
        log.warning("%s: stopping the run; results will be marked interrupted", signal.Signals(signum).name)
        deadline_s = float(getattr(environment, "stop_timeout", 0) or 0) + INTERRUPT_GRACE_S
        gevent.spawn_later(deadline_s, _write_and_exit, environment, collector)
        if signum == signal.SIGINT and not _shape_ends_it(environment):
            os.kill(os.getpid(), signal.SIGTERM)  # Locust's own shutdown (quitting writes the results)

    gevent.signal_handler(signal.SIGTERM, on_signal, signal.SIGTERM)
    gevent.signal_handler(signal.SIGINT, on_signal, signal.SIGINT)


def _shape_ends_it(environment: Any) -> bool:
    """A headless shape test ends on ``stop_requested``; anything else needs Locust's shutdown."""
    return environment.shape_class is not None and bool(getattr(environment.parsed_options, "headless", False))


def _write_and_exit(environment: Any, collector: Collector) -> None:
    """The interrupted stop overran its deadline: keep what the master has merged, and exit."""
    log.warning(
        "the stop did not finish within --stop-timeout + %.0f s: writing the counts merged so far", INTERRUPT_GRACE_S
    )
    try:
        collector.write_results()
    finally:
        code = getattr(environment, "process_exit_code", None)
        os._exit(code if code is not None else signal_exit_code(signal.SIGTERM))


def snapshot_loop(collector: Collector, interval_s: float) -> None:
    """Every ``interval_s``: the results so far, atomically, marked interrupted (replaced at the end)."""
    if interval_s <= 0:
        return
    state = collector.state
    while True:
        gevent.sleep(interval_s)
        if not state.running or state.started_at is None:
            continue
        try:
            write_snapshot(collector.results(), state.options.results_dir, state.started_at)
        except OSError as exc:
            log.warning("could not write a results snapshot: %s", exc)


def snapshot_interval(parsed_options: Any) -> float:
    """``--attnload-snapshot-interval`` (env ``ATTNLOAD_SNAPSHOT_INTERVAL``); a bad value keeps the default."""
    raw = getattr(parsed_options, "attnload_snapshot_interval", "") or ""
    try:
        value = float(raw) if str(raw).strip() else DEFAULT_SNAPSHOT_INTERVAL_S
    except ValueError:
        return DEFAULT_SNAPSHOT_INTERVAL_S
    return value if value == value and value >= 0 and value != float("inf") else DEFAULT_SNAPSHOT_INTERVAL_S


def watch_parent_from_env() -> None:
    """In a child of ``attnload run``: SIGTERM ourselves once that parent is gone (our normal stop path)."""
    expected = os.environ.get(PARENT_PID_ENV, "").strip()
    if expected.isdigit():
        gevent.spawn(_watch_parent, int(expected), lambda: _stop_orphaned(int(expected)))


def _stop_orphaned(parent_pid: int) -> None:
    log.warning("attnload run (pid %d) is gone: stopping", parent_pid)
    os.kill(os.getpid(), signal.SIGTERM)


def worker_exit_code_on_signal(environment: Any) -> None:
    """A worker that Locust stops at a SIGTERM (its final counts sent first) exits 143, not 0, so that
    ``attnload run`` can say which of its processes a signal stopped."""

    def on_signal() -> None:
        if getattr(environment, "process_exit_code", None) is None:
            environment.process_exit_code = signal_exit_code(signal.SIGTERM)

    gevent.signal_handler(signal.SIGTERM, on_signal)


def worker_watch_parent_from_env(environment: Any) -> None:
    """In a worker of ``attnload run``: once that parent is gone, wait for the master (which heard of it
    by SIGTERM) to stop this worker's users and take its final counts; end on our own only if it does not.

    Locust would end a worker at its SIGTERM at once, its last counts unsent: so the death signal of a
    worker is :data:`WORKER_DEATH_SIGNAL` (SIGHUP), and the getppid poll calls the same handler.
    """
    expected = os.environ.get(PARENT_PID_ENV, "").strip()
    if not expected.isdigit():
        return
    orphaned = False

    def on_orphaned() -> None:
        nonlocal orphaned
        if orphaned:
            return
        orphaned = True
        limit_s = float(getattr(environment, "stop_timeout", 0) or 0) + INTERRUPT_GRACE_S + WORKER_LINGER_S
        log.warning(
            "attnload run is gone: waiting up to %.0f s for the master to collect this worker's counts", limit_s
        )
        gevent.spawn_later(limit_s, os.kill, os.getpid(), signal.SIGTERM)  # the master never came: Locust's stop

    gevent.signal_handler(WORKER_DEATH_SIGNAL, on_orphaned)
    gevent.spawn(_watch_parent, int(expected), on_orphaned)


def _watch_parent(parent_pid: int, on_orphaned: Callable[[], None]) -> None:
    while os.getppid() == parent_pid:
        gevent.sleep(PARENT_POLL_S)
    on_orphaned()
