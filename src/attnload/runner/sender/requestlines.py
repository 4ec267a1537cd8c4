"""``--requests-out`` where requests are sent: each request's line into a bounded buffer.

A worker ships what the buffer holds with each report to the master (at most
``LINES_PER_REPORT`` a report; all of it in its final one), beside the recorder's delta, so a
line reaches the master in the same message as the counts of its request. A single process
moves its buffer into the file itself (``collector/requestsfile.py``).
"""

from __future__ import annotations

from typing import Any

from attnload.config.model import TestConfig
from attnload.measure.recorder import RequestRecord
from attnload.measure.requestlog import NOBODY, LineBuffer, TargetFacts, Who, encode, request_line


class RequestLines:
    """This sending process's lines, not yet shipped or written."""

    def __init__(self, config: TestConfig) -> None:
        self.facts = {m.key: TargetFacts(m.key, m.id, m.attention) for m in config.models}
        self.buffer = LineBuffer()

    def observe(self, record: RequestRecord, worker: int, who: Who = NOBODY) -> None:
        facts = self.facts.get(record.model_key) or TargetFacts(record.model_key, record.model_key, "")
        line = request_line(record, facts, worker, who)
        if record.worker_stalled_s:  # the worker froze or was cut off meanwhile: its latency holds the silence
            line["worker_stalled"] = True
            line["worker_stalled_s"] = round(record.worker_stalled_s, 3)
        self.buffer.add(encode(line))

    def take(self, final: bool = False) -> dict[str, Any] | None:
        """A batch: one report's share, or everything (the final report, or a single process's file)."""
        return self.buffer.take_all() if final else self.buffer.take()
