"""Fixtures shared by every test directory, and what pytest-xdist workers need (helpers: ``tests/helpers/``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import Processes

KEEPALIVE_S = 0.05  # how often the hub wakes while a worker waits for its next test


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    """Real processes started by the test; all stopped (then killed) at teardown."""
    group = Processes(tmp_path)
    try:
        yield group
    finally:
        group.stop_all()


@pytest.fixture(params=["compiled", "python"])
def client_impl(request: pytest.FixtureRequest) -> Iterator[str]:
    """Runs a test on the compiled per-chunk path and on the pure-Python one (attnload.native).

    The compiled case skips where the extension was not built or ATTNLOAD_PURE_PYTHON=1 turns it off
    (the CI's pure-Python step), so the same tests check whichever paths this install has.
    """
    from attnload import native

    if request.param == "compiled" and (native.extension() is None or native.forced_pure()):
        pytest.skip("the compiled path is not built or ATTNLOAD_PURE_PYTHON=1")
    native.use(request.param == "compiled")
    try:
        yield request.param
    finally:
        native.reset()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """In the xdist controller: hand each worker the environment's own ``COLUMNS`` (or its absence).

    The controller imports GNU readline, which writes ``COLUMNS=80`` into the C environment that the
    workers inherit; a serial run never sees it, and the live progress line truncates at it.
    """
    node.workerinput["columns"] = os.environ.get("COLUMNS")


def pytest_configure(config: pytest.Config) -> None:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        _restore_columns(workerinput.get("columns"))
        _cooperate_with_execnet()


def _restore_columns(columns: str | None) -> None:
    if columns is None:
        os.environ.pop("COLUMNS", None)
    else:
        os.environ["COLUMNS"] = columns


def _cooperate_with_execnet() -> None:
    """Let an xdist worker survive Locust's gevent monkey-patching.

    Importing Locust (as most test modules do) patches ``threading`` after execnet's reader thread has
    started; the worker's main thread then waits for its next test on a gevent lock that the reader
    thread releases. With nothing scheduled on the hub, gevent ends that wait with ``LoopExit`` (seen as
    xdist's ``INTERNALERROR ... KeyError: <WorkerController gw1>``). Patching now, before any test
    module, as a serial run's collection would, and keeping one greenlet asleep on a timer gives the
    hub something to run, so the cross-thread release wakes the main thread.
    """
    import gevent
    import locust  # noqa: F401  (monkey-patches the process, as collecting the first test module would)

    def keep_hub_alive() -> None:
        while True:
            gevent.sleep(KEEPALIVE_S)

    gevent.spawn(keep_hub_alive)
