"""One JSON line per request (``--requests-out``): the record, built from what the client measured.

Histograms answer "how slow was the run"; the per-request record answers "which requests were
slow, and were they the long ones?" after the run, in pandas. A sending process turns each
:class:`RequestRecord` into one line here (no per-chunk work: the ITL p50/max come from the
request's own per-token gaps, already kept for the histograms) and holds the lines in a bounded
:class:`LineBuffer` until its next report to the master. The master appends them to one file
(``results/requests_file.py``). The schema is docs/requests.md; ``v`` names its version on
every line (there is no header line: every line is a request).
"""

from __future__ import annotations

import json
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from attnload.measure.metrics import METRICS, RequestRecord

SCHEMA = "attnload.requests/v1"
STATUSES = ("ok", "failed", "cancelled", "abandoned")
"""A record's ``status``: every outcome the runner gives a request (``abandoned``: the client closed
the stream on purpose)."""

BUFFER_LINES = 60_000
"""Lines a sending process holds between reports (~600 bytes each: ~36 MB at most); beyond, counted dropped."""
LINES_PER_REPORT = 20_000
"""Lines one report to the master carries (reports go every 3 s: ~6,600 requests/s per worker)."""


def status_of(record: RequestRecord) -> str:
    """The record's ``status``: the runner's outcome for the request, the one mapping of the two.

    Outcomes are already the statuses (``ok``/``failed``/``cancelled``/``abandoned``); one this
    version does not know is reported as ``failed`` rather than hidden.
    """
    return record.outcome if record.outcome in STATUSES else "failed"


@dataclass(frozen=True)
class Who:
    """Where a request came from, besides its record: the sender's identity in this run."""

    user: int | None = None
    """Closed-loop user number within its worker (1-based); None in open loop."""
    conversation: str | None = None
    """A multi-turn conversation's id, unique in the run; None for single-turn requests."""


NOBODY = Who()


@dataclass(frozen=True)
class TargetFacts:
    """What a line says about the model a request went to (config key, model id, attention)."""

    target: str
    model: str
    attention: str


def itl_p50_max(samples: tuple[tuple[float, int], ...]) -> tuple[float | None, float | None]:
    """Median and max of one request's per-token gaps (``(gap per token, tokens)`` pairs), token-weighted."""
    if not samples:
        return None, None
    ordered = sorted(samples)
    half = sum(n for _, n in ordered) / 2.0
    seen = 0
    median = ordered[-1][0]
    for gap, n in ordered:
        seen += n
        if seen >= half:
            median = gap
            break
    return median, ordered[-1][0]


def _us(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _latencies(record: RequestRecord) -> dict[str, float | None]:
    """Each metric's ``line_field``: the record's own value, whatever its outcome (``ttft_s``, ``e2e_s``, …)."""
    return {m.line_field: _us(m.take(record)) for m in METRICS if m.line_field is not None and m.take is not None}


def request_line(
    record: RequestRecord,
    facts: TargetFacts,
    worker: int,
    who: Who = NOBODY,
    now_perf: float | None = None,
    now_epoch: float | None = None,
) -> dict[str, Any]:
    """The record as a dict of the documented fields (epoch seconds at microsecond resolution).

    Times in the record are ``perf_counter`` seconds; ``now_perf``/``now_epoch`` (default: now) map
    them to the wall clock. Latencies count from the intended start in open loop, as the
    histograms do (coordinated omission), so ``first_token_s - ttft_s`` is ``intended_s`` there.
    """
    now_perf = time.perf_counter() if now_perf is None else now_perf
    now_epoch = time.time() if now_epoch is None else now_epoch
    offset = now_epoch - now_perf
    lag = record.dispatch_lag_s
    if record.started_perf is not None:
        started = record.started_perf + offset
    else:  # a record built elsewhere: it ended (about) now
        started = now_epoch - record.e2e_s + (lag or 0.0)
    origin = started - (lag or 0.0)
    p50, peak = itl_p50_max(record.itl_samples)
    line = {
        "v": SCHEMA,
        "target": facts.target,
        "model": facts.model,
        "attention": facts.attention,
        "stage": record.stage if record.stage >= 0 else None,
        "profile": record.profile,
        "worker": worker,
        "user": who.user,
        "conversation": who.conversation if record.turn is not None else None,
        "turn": record.turn,
        "session": who.conversation if record.step is not None else None,
        "step": record.step,
        "intended_s": _us(origin) if lag is not None else None,
        "start_s": _us(started),
        "first_token_s": _us(origin + record.ttft_s) if record.ttft_s is not None else None,
        "end_s": _us(origin + record.e2e_s),
        **_latencies(record),
        "itl_p50_s": _us(p50),
        "itl_max_s": _us(peak),
        "chunks": len(record.itl_samples) + (record.ttft_s is not None),
        "prompt_tokens": record.prompt_tokens,
        "completion_tokens": record.completion_tokens,
        "cached_tokens": record.cached_prompt_tokens,
        "reasoning_tokens": record.reasoning_tokens,
        "server_reasoning_tokens": record.server_reasoning_tokens,
        "tokens_estimated": record.tokens_estimated,
        "dispatch_lag_s": _us(lag),
        "status": status_of(record),
        "error_class": record.error,
        "http_status": record.http_status,
    }
    if record.error_detail is not None:  # a failed request says what went wrong, not only its class
        line["error_detail"] = record.error_detail
    return line


def encode(line: dict[str, Any]) -> str:
    return json.dumps(line, separators=(",", ":"), ensure_ascii=False)


class LineBuffer:
    """A sending process's lines waiting for the next report: bounded, and what did not fit is counted.

    At 10k streams a master that falls behind, or a slow network, must not grow a worker without
    limit: past ``capacity`` a line is dropped and counted (``dropped``), and the count travels to
    the master with the next report, so the file's shortfall is always stated, never silent.
    """

    def __init__(self, capacity: int = BUFFER_LINES, per_report: int = LINES_PER_REPORT) -> None:
        self.capacity = capacity
        self.per_report = per_report
        self._lines: deque[str] = deque()
        self._dropped = 0

    def __len__(self) -> int:
        return len(self._lines)

    def add(self, line: str) -> None:
        if len(self._lines) >= self.capacity:
            self._dropped += 1
            return
        self._lines.append(line)

    def take(self, limit: int | None = None) -> dict[str, Any] | None:
        """Up to ``limit`` (default ``per_report``) lines and the drops since last time, for a payload."""
        limit = self.per_report if limit is None else limit
        count = min(limit, len(self._lines))
        lines = [self._lines.popleft() for _ in range(count)]
        dropped, self._dropped = self._dropped, 0
        if not lines and not dropped:
            return None
        return {"lines": lines, "dropped": dropped}

    def take_all(self) -> dict[str, Any] | None:
        """Everything held (a worker's final report, a single process's write)."""
        return self.take(len(self._lines))
