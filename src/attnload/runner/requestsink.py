"""``--requests-out`` in one process: lines into a bounded buffer where requests are sent, into the
file where results are written.

A worker turns each request into its line (``measure.requestlog``) and ships what it holds with
each ``report_to_master`` (at most ``LINES_PER_REPORT`` a report; all of it in its final one),
beside the recorder's delta, so a line reaches the master in the same message as the counts of
its request. The master appends every batch to the one file. A single process (no workers) does
both ends, moving its buffer to the file every :data:`LOCAL_FLUSH_S`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gevent

from attnload.config.model import TestConfig
from attnload.measure.recorder import RequestRecord
from attnload.measure.requestlog import NOBODY, LineBuffer, TargetFacts, Who, encode, request_line
from attnload.results.model import RequestsOut
from attnload.results.requests_file import RequestsFile

LOCAL_FLUSH_S = 1.0


class RequestSink:
    """This process's part of ``--requests-out`` (``role``: "worker", "master" or "local")."""

    def __init__(self, config: TestConfig, path: str, role: str) -> None:
        self.role = role
        self.path = path
        self.facts = {m.key: TargetFacts(m.key, m.id, m.attention) for m in config.models}
        self.buffer = LineBuffer()
        self.file = RequestsFile(path) if role != "worker" else None

    def observe(self, record: RequestRecord, worker: int, who: Who = NOBODY) -> None:
        facts = self.facts.get(record.model_key) or TargetFacts(record.model_key, record.model_key, "")
        self.buffer.add(encode(request_line(record, facts, worker, who)))

    def payload(self, final: bool = False) -> dict[str, Any] | None:
        """A worker's batch for its report to the master (everything at the end)."""
        return self.buffer.take_all() if final else self.buffer.take()

    def merge(self, batch: dict[str, Any] | None) -> None:
        """Master: a worker's batch, appended and flushed at once."""
        if self.file is not None:
            self.file.write(batch)

    def drain(self) -> None:
        """Single process: what this process's own requests produced, into the file."""
        if self.file is not None:
            self.file.write(self.buffer.take_all())

    def restart(self) -> None:
        """A new test in the same process (web UI, ``cluster run``): a fresh file, as the results start afresh."""
        if self.file is not None:
            self.file.close()
            self.file = RequestsFile(self.path)

    def close(self) -> None:
        if self.file is not None:
            self.drain()
            self.file.close()

    def summary(self, final: bool = False) -> RequestsOut | None:
        if self.file is None:
            return None
        if self.role == "local":
            self.drain()
        if final:
            self.file.sync()
        return self.file.summary()


def pump(current: Callable[[], RequestSink | None]) -> None:
    """Single process: move the buffer to the file every :data:`LOCAL_FLUSH_S`, for the process's life
    (``current`` gives the sink of the moment: a new test may have opened another file)."""
    while True:
        gevent.sleep(LOCAL_FLUSH_S)
        sink = current()
        if sink is not None:
            sink.drain()
