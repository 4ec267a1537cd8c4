"""The ``--requests-out`` file: the master appends each batch of request lines, flushed at once.

One file for the whole fleet, written only by the master (or a single process). Each batch is
written whole and flushed before the next, so a run stopped by SIGTERM (or killed) leaves a file
ending on a whole line with every request whose batch arrived. A ``.gz`` name gets one gzip
*member* per batch: concatenated members are one valid gzip stream (``gzip.open``, ``zcat`` and
``pandas.read_json(..., lines=True)`` read them all), so even a killed master's file is readable
to its last whole batch, with no trailer to wait for.
"""

from __future__ import annotations

import gzip
import os
import sys
from pathlib import Path
from typing import Any, BinaryIO

from attnload.errors import UsageError
from attnload.measure.requestlog import SCHEMA
from attnload.results.model import RequestsOut

GZIP_LEVEL = 6


def requests_out_path(text: str | None) -> str | None:
    """``--requests-out PATH`` checked before any process starts, as an absolute path (None: not asked)."""
    if text is None or not str(text).strip():
        return None
    path = Path(str(text).strip()).expanduser()
    if path.is_dir():
        raise UsageError(
            f"--requests-out {text}: is a directory; give a file name such as {path / 'requests.jsonl.gz'}"
        )
    parent = path.parent if path.parent != Path("") else Path(".")
    existing = next((p for p in (parent, *parent.parents) if p.exists()), Path("."))
    if not existing.is_dir() or not os.access(existing, os.W_OK):
        raise UsageError(f"--requests-out {text}: {existing} is not a writable directory; give a path you can write")
    return str(path.resolve())


class RequestsFile:
    """Appends request lines; counts those written and those the workers had to drop."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.gzip = self.path.name.endswith(".gz")
        self.records = 0
        self.dropped = 0
        self._warned = False
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._handle: BinaryIO | None = self.path.open("wb")
        except OSError as exc:
            raise UsageError(
                f"--requests-out {path}: cannot write it ({exc.strerror}); give a file in a writable directory"
            ) from None

    def write(self, batch: dict[str, Any] | None) -> None:
        """One batch ``{"lines": [...], "dropped": n}`` (a worker's report, or this process's buffer)."""
        if not batch:
            return
        lines = batch.get("lines") or []
        dropped = int(batch.get("dropped") or 0)
        if lines and self._handle is None:
            dropped += len(lines)  # the file failed earlier: counted, never silently lost
        elif lines and self._handle is not None:
            data = ("\n".join(lines) + "\n").encode("utf-8")
            if self.gzip:
                data = gzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0)
            try:
                self._handle.write(data)
                self._handle.flush()
                self.records += len(lines)
            except OSError as exc:
                self._failed(exc)
                dropped += len(lines)
        if dropped:
            self.dropped += dropped
            if not self._warned:
                self._warned = True
                print(
                    f"attnload: warning: --requests-out: {dropped} request records dropped (a worker's buffer "
                    "was full: the master is reading reports too slowly); the results count them "
                    "(requests_out.dropped)",
                    file=sys.stderr,
                )

    def sync(self) -> None:
        """Flush to the disk itself (the final write): the file survives the machine as well."""
        if self._handle is not None:
            try:
                self._handle.flush()
                os.fsync(self._handle.fileno())
            except OSError as exc:
                self._failed(exc)

    def _failed(self, exc: OSError) -> None:
        """The disk refused a write (full, gone read-only): say so once; later lines are counted dropped, and
        the results, which do not depend on this file, are still written."""
        print(
            f"attnload: warning: --requests-out {self.path}: writing failed ({exc.strerror or exc}); "
            "later request lines are counted in requests_out.dropped",
            file=sys.stderr,
        )
        self.close()

    def close(self) -> None:
        if self._handle is not None:
            try:
                self._handle.close()
            except OSError:
                pass  # _failed already said why; what was flushed stays
            self._handle = None

    def summary(self) -> RequestsOut:
        return RequestsOut(path=str(self.path), schema=SCHEMA, records=self.records, dropped=self.dropped)
