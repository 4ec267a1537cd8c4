"""The per-(model, profile, stage) recorder and its deltas.

``Recorder`` holds one ``Series`` per (model key, profile, stage) and hands out the
*delta* since the last call (``take_delta``), which workers ship to the master and the
master folds in with ``merge_delta`` — Locust's ``report_to_master`` pattern.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from attnload import native
from attnload.measure.decodefit import DecodeFit, request_fit
from attnload.measure.histogram import LogHistogram
from attnload.measure.metrics import METRICS, Pairs, RequestRecord

COUNTERS = (
    "ok",
    "failed",
    "cancelled",
    "abandoned",
    "prompt_tokens",
    "completion_tokens",
    "cached_prompt_tokens",
    "estimated",
    "good",
    "cached_reported",
    "dropped",
    "calibrated",
    "reasoning_tokens",
    "server_reasoning_tokens",
    "reasoning_reported",
    "reasoning_tokens_reported",
    "censored_waiting",
    "censored_streaming",
    "stalled",
)
"""``cached_reported``: requests whose server reported cached tokens (the sum counts only those);
``dropped``: open-loop arrivals not sent because their model's connection backoff was running;
``calibrated``: successful requests whose prompt was sized by a calibration learned from the server;
``reasoning_reported``: requests whose server reported its own reasoning count (summed in
``server_reasoning_tokens``); ``reasoning_tokens_reported`` is the client's streamed count over those
same requests, so the two are compared like for like; ``censored_waiting`` / ``censored_streaming``: requests
a stop cut before their first token / while their answer streamed; ``stalled``: requests in flight across
a freeze or partition of their worker (``RequestRecord.worker_stalled_s``)."""
EXAMPLES_PER_CLASS = 3
"""Error examples kept per error class (the first ones; a run of a million failures keeps three)."""


@dataclass
class Series:
    """Everything recorded for one (model, profile, stage)."""

    hists: dict[str, LogHistogram] = field(default_factory=lambda: {m.key: LogHistogram() for m in METRICS})
    """One histogram per metric of the table (``measure.metrics``)."""
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))
    errors: dict[str, int] = field(default_factory=dict)
    fit: DecodeFit = field(default_factory=DecodeFit)
    """Least-squares sums and position bins of ITL against position (prompt + token index): the decode step
    against context (``measure.decodefit``; not a histogram, so not in the metrics table)."""
    examples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Per error class, its first ``EXAMPLES_PER_CLASS`` failures (``error_example``): bounded whatever
    the failure count."""

    def merge(self, other: Series) -> None:
        for name, hist in other.hists.items():
            # setdefault: a histogram this process does not know yet (a newer worker) still merges
            self.hists.setdefault(name, LogHistogram()).merge(hist)
        for name, n in other.counts.items():
            self.counts[name] = self.counts.get(name, 0) + n
        for name, n in other.errors.items():
            self.errors[name] = self.errors.get(name, 0) + n
        self.fit.merge(other.fit)
        for name, items in other.examples.items():
            merged = sorted([*self.examples.get(name, ()), *items], key=lambda e: e["time"])
            self.examples[name] = merged[:EXAMPLES_PER_CLASS]

    def to_wire(self) -> dict[str, Any]:
        wire = {
            "h": {k: v.to_wire() for k, v in self.hists.items() if v.count},
            "c": {k: v for k, v in self.counts.items() if v},
            "e": self.errors,
        }
        if self.fit.n:
            wire["f"] = self.fit.to_wire()
        if self.examples:
            wire["x"] = self.examples
        return wire

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Series:
        series = cls()
        for name, hist in data["h"].items():
            series.hists[name] = LogHistogram.from_wire(hist)
        series.counts.update(data["c"])
        series.errors.update(data["e"])
        if "f" in data:
            series.fit = DecodeFit.from_wire(data["f"])
        series.examples.update(data.get("x") or {})
        return series


SeriesKey = tuple[str, str, int]


class Recorder:
    """Per-(model, profile, stage) series; ``take_delta`` ships what changed since last time."""

    def __init__(self) -> None:
        self.series: dict[SeriesKey, Series] = {}
        self._delta: dict[SeriesKey, Series] = {}

    def reset(self) -> None:
        """Forget everything (a new test starts); collectors keep their reference to this object."""
        self.series.clear()
        self._delta.clear()

    def _both(self, key: SeriesKey) -> Iterator[Series]:
        for store in (self.series, self._delta):
            series = store.get(key)
            if series is None:
                series = store[key] = Series()
            yield series

    def add(self, record: RequestRecord) -> None:
        key = (record.model_key, record.profile, record.stage)
        samples = _samples(record)
        fit = (
            request_fit(record.prompt_tokens, record.completion_tokens, record.itl_samples)
            if record.outcome == "ok" and record.itl_samples
            else None
        )
        for series in self._both(key):
            _apply(series, record)
            if fit is not None:
                series.fit.merge(fit)
            hists = series.hists
            for name, value, pairs in samples:
                if pairs is None:
                    hists[name].record(value)
                else:
                    hists[name].record_pairs(pairs)

    def count(self, model_key: str, profile: str, stage: int, counter: str, n: int = 1) -> None:
        """Add to one counter without a request (an open-loop arrival ``dropped`` during a backoff)."""
        for series in self._both((model_key, profile, stage)):
            series.counts[counter] = series.counts.get(counter, 0) + n

    def take_delta(self) -> dict[str, Any]:
        """Serialisable changes since the previous call (then reset), for ``report_to_master``."""
        delta, self._delta = self._delta, {}
        return {"|".join((k[0], k[1], str(k[2]))): s.to_wire() for k, s in delta.items()}

    def merge_delta(self, delta: dict[str, Any]) -> None:
        """Fold a worker's delta in (the master side of ``take_delta``)."""
        for key_text, wire in delta.items():
            model_key, profile, stage = key_text.rsplit("|", 2)
            key = (model_key, profile, int(stage))
            incoming = Series.from_wire(wire)
            for series in self._both(key):
                series.merge(incoming)

    def combined(self, model_key: str | None = None, profile: str | None = None, stage: int | None = None) -> Series:
        """One merged series over every key matching the given parts."""
        total = Series()
        for (m, p, s), series in self.series.items():
            if (
                (model_key is None or m == model_key)
                and (profile is None or p == profile)
                and (stage is None or s == stage)
            ):
                total.merge(series)
        return total


def _samples(record: RequestRecord) -> list[tuple[str, float, Pairs | None]]:
    """Every metric's sample of one record, taken once for both the series and the delta."""
    samples: list[tuple[str, float, Pairs | None]] = []
    outcome = record.outcome
    for entry in METRICS:
        if outcome not in entry.outcomes:
            continue
        if entry.take_pairs is not None:
            if pairs := entry.take_pairs(record):
                samples.append((entry.key, 0.0, pairs))
        elif entry.take is not None and (value := entry.take(record)) is not None:
            samples.append((entry.key, value, None))
    return samples


def _apply(series: Series, record: RequestRecord) -> None:
    """The counters of one record (the histograms come from the table, :func:`_samples`)."""
    counts = series.counts
    counts[record.outcome] += 1
    if record.error is not None:
        series.errors[record.error] = series.errors.get(record.error, 0) + 1
        if (
            record.outcome == "failed"
            and len(kept := series.examples.setdefault(record.error, [])) < EXAMPLES_PER_CLASS
        ):
            kept.append(error_example(record))
    if record.outcome == "cancelled":  # cut by a stop: its TTFT counts, or is censored (measure.metrics)
        counts["censored_waiting" if record.ttft_s is None else "censored_streaming"] += 1
    counts["stalled"] += record.worker_stalled_s > 0
    counts["prompt_tokens"] += record.prompt_tokens
    counts["completion_tokens"] += record.completion_tokens
    if record.cached_prompt_tokens is not None:
        counts["cached_prompt_tokens"] += record.cached_prompt_tokens
        counts["cached_reported"] += 1
    counts["estimated"] += record.tokens_estimated and record.outcome == "ok"  # unfinished requests never have usage
    counts["good"] += record.good
    counts["calibrated"] += record.prompt_calibrated and record.outcome == "ok"
    _apply_reasoning(counts, record)


def error_example(record: RequestRecord) -> dict[str, Any]:
    """A failed request as the results' error examples show it (``time``: when it was recorded)."""
    return {
        "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
        "http_status": record.http_status,
        "body": record.error_body,
        "detail": record.error_detail or "",
    }


def _apply_reasoning(counts: dict[str, int], record: RequestRecord) -> None:
    """Reasoning tokens count like completion tokens (every outcome); the server's own count only where
    it sent one, beside the client's count over the same requests."""
    counts["reasoning_tokens"] += record.reasoning_tokens
    if record.server_reasoning_tokens is not None:
        counts["server_reasoning_tokens"] += record.server_reasoning_tokens
        counts["reasoning_reported"] += 1
        counts["reasoning_tokens_reported"] += record.reasoning_tokens


def split_gaps(
    gaps_s: list[float], chunk_tokens: list[int], completion_tokens: int | None
) -> tuple[tuple[float, int], ...]:
    """Per-token ITL samples: a chunk of k tokens after a gap g gives k samples of g/k.

    ``chunk_tokens`` are local estimates for every content chunk, the first included
    (one more than ``gaps_s``). When the server reported ``completion_tokens`` the later
    chunks are re-scaled to sum to it minus the first chunk's estimate (largest
    remainder, every chunk keeps ≥ 1 token), so the server's count decides how many
    ITL samples there are.
    """
    later = chunk_tokens[1:]
    if completion_tokens is not None and later:
        wanted = completion_tokens - chunk_tokens[0]
        if wanted >= len(later) and wanted != sum(later):
            later = _rescale(later, wanted)
    fast = native.active()
    if fast is not None and type(gaps_s) is list and type(later) is list:
        return fast.gap_pairs(gaps_s, later)
    return tuple((gap / n, n) for gap, n in zip(gaps_s, later, strict=False))


def _rescale(estimates: list[int], total: int) -> list[int]:
    """Integers ≥ 1 summing to ``total``, proportional to ``estimates`` beyond their first token."""
    weights = [e - 1 for e in estimates]
    if not any(weights):
        weights = [1] * len(estimates)
    spare = total - len(estimates)
    weight_total = sum(weights)
    raw = [spare * w / weight_total for w in weights]
    shares = [1 + math.floor(r) for r in raw]
    by_remainder = sorted(range(len(raw)), key=lambda i: raw[i] - math.floor(raw[i]), reverse=True)
    for i in by_remainder[: total - sum(shares)]:
        shares[i] += 1
    return shares
