"""``--requests-out`` where results are written: every batch of lines appended to the one file.

The master appends each worker's batch as its report arrives; a single process moves its own
sender's lines here every :data:`LOCAL_FLUSH_S` (``pump``) and before each summary.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gevent

from attnload.results.model import RequestsOut
from attnload.results.requests_file import RequestsFile

LOCAL_FLUSH_S = 1.0


class RequestsWriter:
    """This collecting process's ``--requests-out`` file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.file = RequestsFile(path)

    def write(self, batch: dict[str, Any] | None) -> None:
        """A batch of lines, appended and flushed at once."""
        self.file.write(batch)

    def restart(self) -> None:
        """A new test in the same process (web UI, ``cluster run``): a fresh file, as the results start afresh."""
        self.file.close()
        self.file = RequestsFile(self.path)

    def close(self) -> None:
        self.file.close()

    def summary(self, final: bool = False) -> RequestsOut:
        if final:
            self.file.sync()
        return self.file.summary()


def pump(drain: Callable[[], None]) -> None:
    """Single process: move its lines to the file every :data:`LOCAL_FLUSH_S`, for the process's life."""
    while True:
        gevent.sleep(LOCAL_FLUSH_S)
        drain()
