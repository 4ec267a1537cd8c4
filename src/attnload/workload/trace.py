"""Trace replay: production arrival times and lengths (Mooncake JSONL, Azure CSV) as a request list.

Every model receives the whole trace at the same offsets, so the comparison is paired.
A trace gives lengths, not text; the prompt text is built here so the trace's prefix
sharing reaches the server: Mooncake's ``hash_ids`` name 512-token blocks, and a block
id always becomes the same text, so requests that share leading ids share their leading
text (and a prefix cache can serve it). One salt per *run* leads every prompt: it keeps
a run from meeting another run's cache without breaking sharing inside the run.

Formats:

- Mooncake JSONL: ``{"timestamp": ms, "input_length": n, "output_length": n, "hash_ids": [...]}``.
- Azure LLM inference CSV: ``TIMESTAMP`` (a datetime), ``ContextTokens``, ``GeneratedTokens``.
"""

from __future__ import annotations

import csv
import os
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from attnload.errors import UsageError
from attnload.measure.tokens import MESSAGE_OVERHEAD_TOKENS
from attnload.workload.jsonscan import iter_json_lines
from attnload.workload.tokenizer import EstimatorTokens, TextTokens

BLOCK_TOKENS = 512
"""Mooncake's hash block: each ``hash_ids`` entry covers 512 prompt tokens."""
TraceFormat = Literal["mooncake", "azure"]
_AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


@dataclass(frozen=True)
class TraceRequest:
    """One trace line: when (seconds from the trace start, replay speed applied) and how long."""

    offset_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()
    line: int = 0


@dataclass(frozen=True)
class Trace:
    """A parsed trace, sorted by offset; ``requests[i].offset_s`` is the intended send time."""

    path: Path
    format: TraceFormat
    requests: tuple[TraceRequest, ...]
    replay_speed: float = 1.0

    @property
    def duration_s(self) -> float:
        return self.requests[-1].offset_s if self.requests else 0.0

    @property
    def arrival_rate_per_s(self) -> float:
        """The trace's own arrival rate at this replay speed, to set beside the achieved rate."""
        return arrival_rate_per_s([request.offset_s for request in self.requests])


def arrival_rate_per_s(offsets_s: Sequence[float]) -> float:
    """Arrivals per second over a set of send times: ``(n - 1) / span``; 0 with fewer than 2 or no span.

    The same function measures the trace and what the client achieved, so the two agree
    by construction when every request is sent on time.
    """
    if len(offsets_s) < 2:
        return 0.0
    span = max(offsets_s) - min(offsets_s)
    return (len(offsets_s) - 1) / span if span > 0 else 0.0


def load_trace(
    path: str | os.PathLike[str], replay_speed: float = 1.0, fmt: TraceFormat | Literal["auto"] = "auto"
) -> Trace:
    """Read a whole trace (streamed, checked line by line), offsets relative to its first arrival."""
    if not replay_speed > 0:
        raise UsageError(f"--replay-speed {replay_speed}: must be above 0 (2 replays twice as fast)")
    file = Path(path).expanduser()
    if not file.is_file():
        raise UsageError(f"trace {file}: no such file; give the local path of a Mooncake .jsonl or Azure .csv trace")
    resolved = detect_trace_format(file) if fmt == "auto" else fmt
    rows = list(_mooncake_rows(file) if resolved == "mooncake" else _azure_rows(file))
    if not rows:
        raise UsageError(f"trace {file}: no requests in it; give a trace with at least one line")
    start = min(row.offset_s for row in rows)
    requests = sorted(
        (
            TraceRequest(
                round((row.offset_s - start) / replay_speed, 6),
                row.input_tokens,
                row.output_tokens,
                row.hash_ids,
                row.line,
            )
            for row in rows
        ),
        key=lambda request: (request.offset_s, request.line),
    )
    return Trace(file, resolved, tuple(requests), replay_speed)


def detect_trace_format(path: Path) -> TraceFormat:
    """``{`` first means Mooncake JSONL, a ``TIMESTAMP`` header (or ``.csv``) means Azure."""
    with open(path, "rb") as handle:
        head = handle.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    if not head:
        raise UsageError(f"trace {path}: the file is empty; give a trace with at least one line")
    if head[:1] == b"{":
        return "mooncake"
    if head.startswith(b"TIMESTAMP") or path.suffix.lower() == ".csv":
        return "azure"
    raise UsageError(
        f"trace {path} line 1: neither Mooncake JSONL nor an Azure CSV with a TIMESTAMP header; "
        "convert it to one of them"
    )


def _mooncake_rows(path: Path) -> Iterator[TraceRequest]:
    for span, value in iter_json_lines(path, "trace"):
        where = f"trace {path} line {span.line}"
        if not isinstance(value, dict):
            raise UsageError(f"{where}: each line must be an object with timestamp, input_length, output_length")
        timestamp = value.get("timestamp")
        if isinstance(timestamp, bool) or not isinstance(timestamp, int | float) or timestamp < 0:
            raise UsageError(f"{where}: timestamp must be milliseconds (a number >= 0), not {timestamp!r}")
        hash_ids = value.get("hash_ids", [])
        if not isinstance(hash_ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in hash_ids):
            raise UsageError(f"{where}: hash_ids must be a list of integers (one per 512-token block)")
        yield TraceRequest(
            timestamp / 1000.0,
            _positive(value, "input_length", where),
            _positive(value, "output_length", where),
            tuple(hash_ids),
            span.line,
        )


def _positive(value: dict[str, Any], key: str, where: str) -> int:
    number = value.get(key)
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise UsageError(f"{where}: {key} must be a positive integer, not {number!r}")
    return number


def _azure_rows(path: Path) -> Iterator[TraceRequest]:
    with open(path, newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        missing = [column for column in _AZURE_COLUMNS if column not in (reader.fieldnames or [])]
        if missing:
            raise UsageError(
                f"trace {path} line 1: the header lacks {', '.join(missing)}; an Azure LLM trace "
                "has TIMESTAMP,ContextTokens,GeneratedTokens"
            )
        epoch: datetime | None = None
        for row in reader:
            where = f"trace {path} line {reader.line_num}"
            stamp = _azure_time(row.get("TIMESTAMP"), where)
            if epoch is None:
                epoch = stamp
            try:
                offset_s = (stamp - epoch).total_seconds()
            except TypeError:
                raise UsageError(f"{where}: TIMESTAMP mixes times with and without a time zone; use one kind") from None
            yield TraceRequest(
                offset_s,
                _azure_count(row, "ContextTokens", where),
                _azure_count(row, "GeneratedTokens", where),
                (),
                reader.line_num,
            )


def _azure_time(text: str | None, where: str) -> datetime:
    """Azure writes 7 fractional digits (``2023-11-16 18:15:46.6805900``); keep microseconds."""
    raw = (text or "").strip()
    date, dot, fraction = raw.partition(".")
    if dot:
        digits = len(fraction) - len(fraction.lstrip("0123456789"))
        raw = f"{date}.{fraction[: min(digits, 6)].ljust(6, '0')}{fraction[digits:]}"
    try:
        return datetime.fromisoformat(raw)
    except ValueError:
        raise UsageError(
            f"{where}: TIMESTAMP {text!r} is not a date and time (e.g. 2023-11-16 18:15:46.6805900)"
        ) from None


def _azure_count(row: dict[str, str], key: str, where: str) -> int:
    text = (row.get(key) or "").strip()
    if not text.isdigit() or int(text) < 1:
        raise UsageError(f"{where}: {key} must be a positive integer, not {text!r}")
    return int(text)


class TracePrompts:
    """Prompt text for trace requests: run salt, then one fixed text per hash id, then unique filler.

    ``input_tokens`` counts the chat overhead too, so the content is ``input_tokens - 4``
    tokens by the counter. Block ``h`` is always ``build_text(512, seed(h))``; the last
    block is cut to length, which keeps it a prefix of the whole block (the counter's
    prefix property), so two requests agree on text exactly as far as their ids agree.
    """

    def __init__(self, run_salt: str, tokens: TextTokens | None = None, block_tokens: int = BLOCK_TOKENS) -> None:
        self.run_salt = run_salt
        self.tokens = tokens or EstimatorTokens()
        self.block_tokens = block_tokens
        self._salt_tokens = self.tokens.count(run_salt)
        self._block = lru_cache(maxsize=4096)(self._block_text)

    def _block_text(self, hash_id: int, n_tokens: int) -> str:
        return self.tokens.build_text(n_tokens, seed=zlib.crc32(f"attnload.trace.block:{hash_id}".encode()))

    def content(self, request: TraceRequest, unique_seed: int) -> str:
        """The user message of ``request``; ``unique_seed`` (e.g. its index) seeds text past the hash blocks."""
        left = max(0, request.input_tokens - MESSAGE_OVERHEAD_TOKENS - self._salt_tokens)
        parts = [self.run_salt]
        for hash_id in request.hash_ids:
            if left <= 0:
                break
            size = min(self.block_tokens, left)
            full = self._block(hash_id, self.block_tokens)
            parts.append(full if size == self.block_tokens else self._block(hash_id, size))
            left -= size
        if left > 0:
            parts.append(self.tokens.build_text(left, seed=zlib.crc32(f"attnload.trace.tail:{unique_seed}".encode())))
        return "".join(parts)

    def messages(self, request: TraceRequest, unique_seed: int) -> list[dict[str, str]]:
        return [{"role": "user", "content": self.content(request, unique_seed)}]
