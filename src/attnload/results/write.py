"""Writing a run's results at its end: ``STAMP.json``, the HTML report beside it, and ``latest.txt``."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from attnload.results.model import Results

log = logging.getLogger(__name__)


def write_results(results: Results, directory: str | Path, started_at: float,
                  render_html: Callable[[Results, Path], object] | None = None) -> Path:
    """Write the JSON (named by the start time, UTC), then the HTML (``render_html``), then the marker
    ``latest.txt`` that ``attnload run`` reads: a marker only ever names a complete pair."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(started_at))
    path = directory / f"{stamp}.json"
    path.write_text(results.to_json(), encoding="utf-8")
    if render_html is not None:
        render_html(results, path.with_suffix(".html"))
    (directory / "latest.txt").write_text(path.name + "\n", encoding="utf-8")
    log.info("results written to %s", path)
    return path
