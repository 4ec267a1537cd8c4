"""Outputs checked for writability before any request: a run must not spend an hour of load and then
lose its results to a read-only volume.

``os.access`` is not enough (it says yes to root on an immutable or read-only mount), so each check
creates a file where the run will write and removes it again. A failure is one line and exit 2, like
every other bad input.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from attnload.errors import UsageError


def check_writable_dir(flag: str, directory: Path) -> None:
    """``directory`` (made if missing) takes a new file, or a one-line :class:`UsageError`."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(prefix=".attnload-write-check.", dir=directory)
        os.close(handle)
        os.unlink(name)
    except OSError as exc:
        raise UsageError(f"{flag} {directory}: not writable ({_why(exc)}); choose a writable directory") from None


def check_writable_file(flag: str, path: Path) -> None:
    """The file at ``path`` can be created (its directory takes a new file) and, if it exists, appended to."""
    check_writable_dir(flag, path.parent)
    if path.exists():
        try:
            with path.open("ab"):
                pass
        except OSError as exc:
            raise UsageError(f"{flag} {path}: not writable ({_why(exc)}); choose a writable file") from None


def check_outputs(results_dir: Path, requests_out: str | None, csv_prefix: str | None) -> None:
    """``--results``, ``--requests-out`` and ``--csv``: each one where the run will write."""
    check_writable_dir("--results", results_dir)
    if requests_out:
        check_writable_file("--requests-out", Path(requests_out))
    if csv_prefix:
        prefix = Path(csv_prefix).expanduser()
        check_writable_dir("--csv", prefix.parent if str(prefix.parent) else Path("."))


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)
