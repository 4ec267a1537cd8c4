"""Headless Debian chromium for the browser tests (never a downloaded browser)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import require_binary

CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    require_binary("chromium")  # CI installs it; a missing browser fails there instead of skipping
    from playwright import sync_api

    with sync_api.sync_playwright() as pw:
        instance = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=LAUNCH_ARGS)
        try:
            yield instance
        finally:
            instance.close()
