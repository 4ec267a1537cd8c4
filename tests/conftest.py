"""Fixtures shared by every test directory (helpers live in ``tests/helpers.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import Processes


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
