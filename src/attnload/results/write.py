"""Writing a run's results: ``STAMP.json``, the HTML report beside it, and ``latest.txt``.

Every file is written atomically (a temporary file in the same directory, then ``os.replace``):
a reader, or a master killed mid-write, never sees half a file. The same ``STAMP.json`` is first
written as a periodic snapshot during the run (marked ``interrupted``) and at the end replaced by
the final results, so a SIGKILL loses at most one snapshot interval; only the final write (or the
write at a signal) updates ``latest.txt``.

A results directory that stops taking files mid-run (a volume gone read-only, a directory replaced)
must not lose the run: :func:`write_final` then writes to :func:`fallback_dir`, a directory in the
system's temporary directory named after the results directory, where ``attnload run`` looks next.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from attnload.results.model import Results

log = logging.getLogger(__name__)


def write_results(
    results: Results,
    directory: str | Path,
    started_at: float,
    render_html: Callable[[Results, Path], object] | None = None,
) -> Path:
    """Write the JSON (named by the start time, UTC), then the HTML (``render_html``), then the marker
    ``latest.txt`` that ``attnload run`` reads: a marker only ever names a complete file."""
    path = results_path(directory, started_at)
    atomic_write_text(path, results.to_json())
    if render_html is not None:
        html = path.with_suffix(".html")
        temporary = _temporary_beside(html)
        try:
            render_html(results, temporary)
            os.replace(temporary, html)
        finally:
            temporary.unlink(missing_ok=True)
    atomic_write_text(path.parent / "latest.txt", path.name + "\n")
    log.info("results written to %s", path)
    return path


def write_snapshot(results: Results, directory: str | Path, started_at: float) -> Path:
    """A mid-run snapshot: the JSON only (no HTML, so it is cheap enough to repeat), marked ``interrupted``
    until the final write replaces it. ``latest.txt`` is left alone: it means "a run ended" (tests and
    scripts wait for it), and ``attnload run`` finds a killed master's snapshot by its start time."""
    path = results_path(directory, started_at)
    atomic_write_text(path, results.model_copy(update={"interrupted": True, "snapshot": True}).to_json())
    return path


def fallback_dir(directory: str | Path) -> Path:
    """Where results go when ``directory`` cannot take them: in the system's temporary directory, named by
    ``directory``'s absolute path, so the writer and ``attnload run`` find the same one."""
    digest = hashlib.sha256(str(Path(directory).resolve()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"attnload-results-{digest}"


def write_final(
    results: Results,
    directory: str | Path,
    started_at: float,
    render_html: Callable[[Results, Path], object] | None = None,
) -> Path | None:
    """:func:`write_results` into ``directory``, else into :func:`fallback_dir` (saying so); None: neither
    took them (the caller still has ``results`` in memory)."""
    try:
        return write_results(results, directory, started_at, render_html)
    except OSError as exc:
        fallback = fallback_dir(directory)
        log.warning("results: %s is not writable (%s): writing them to %s instead", directory, _why(exc), fallback)
    try:
        return write_results(results, fallback, started_at, render_html)
    except OSError as exc:
        log.error("results: %s is not writable either (%s): the results are not saved", fallback, _why(exc))
        return None


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def results_path(directory: str | Path, started_at: float) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    return directory / f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime(started_at))}.json"


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that ``path`` holds either the old or the new content, never a part."""
    temporary = _temporary_beside(path)
    try:
        with temporary.open("w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def _temporary_beside(path: Path) -> Path:
    """A fresh name in the same directory (``os.replace`` is atomic only within one file system)."""
    handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(handle)
    os.chmod(name, 0o644)  # mkstemp's 0600 would make results unreadable to the other users of a shared volume
    return Path(name)
