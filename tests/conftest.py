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
