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
from attnload.measure.histogram import LogHistogram

HISTOGRAMS = (
    "ttft",
    "itl",
    "tpot",
    "e2e",
    "lag",
    "prompt",
    "ttfat",
    "read_tokens",
    "ttft_censored",
    "stalled_ttft",
    "stalled_itl",
    "stalled_e2e",
)
"""``prompt``: prompt tokens of each successful request (a context ladder's measured size per stage);
``read_tokens``: tokens per read of a stream (one sample per read, :func:`read_sizes`);
``ttft_censored``: how long each request cut by a stop had waited for a first token that never came
(its TTFT is at least that: ``measure.survival``); ``stalled_*``: the part of ``ttft``, ``itl`` and ``e2e``
from requests whose worker was frozen or cut off while they ran, so the results can give each latency
without them (a network fault is not the server's latency)."""
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
a freeze or partition of their worker."""

EXAMPLES_PER_CLASS = 3
"""Error examples kept per error class (the first ones; a run of a million failures keeps three)."""


@dataclass
class Series:
    """Everything recorded for one (model, profile, stage)."""

    hists: dict[str, LogHistogram] = field(default_factory=lambda: {name: LogHistogram() for name in HISTOGRAMS})
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))
    errors: dict[str, int] = field(default_factory=dict)
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
        for name, items in other.examples.items():
            merged = sorted([*self.examples.get(name, ()), *items], key=lambda e: e["time"])
            self.examples[name] = merged[:EXAMPLES_PER_CLASS]

    def to_wire(self) -> dict[str, Any]:
        wire = {
            "h": {k: v.to_wire() for k, v in self.hists.items() if v.count},
            "c": {k: v for k, v in self.counts.items() if v},
            "e": self.errors,
        }
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
        series.examples.update(data.get("x") or {})
        return series


@dataclass(frozen=True)
class RequestRecord:
    """The outcome of one request, as the client measured it."""

    model_key: str
    profile: str
    stage: int
    outcome: str  # "ok" | "failed" | "cancelled" | "abandoned" (closed mid-stream on purpose)
    error: str | None
    ttft_s: float | None
    itl_samples: tuple[tuple[float, int], ...]
    """(gap per token, tokens in the chunk) pairs: one ITL sample per token."""
    e2e_s: float
    prompt_tokens: int
    completion_tokens: int
    cached_prompt_tokens: int | None
    """``usage.prompt_tokens_details.cached_tokens``; None when the server did not report it."""
    tokens_estimated: bool
    dispatch_lag_s: float | None = None
    good: bool = False
    prompt_calibrated: bool = False
    """The prompt was sized by a ratio learned from the server's usage (no tokenizer; ``workload.calibration``)."""
    reply_text: str | None = None
    """The assistant content exactly as streamed, kept only when a conversation resends it."""
    turn: int | None = None
    """1-based turn of a conversation request (None: a single-turn request)."""
    step: int | None = None
    """1-based step of an agent session's request (None: not an agent step)."""
    sent_at: float | None = None
    """Wall-clock send time (epoch s) of open-loop requests: the achieved arrival rate is measured on it."""
    started_perf: float | None = None
    """``perf_counter`` when the request went on the wire (the per-request log's ``start_s``)."""
    http_status: int | None = None
    """The response's HTTP status (None: no response head arrived)."""
    ttfat_s: float | None = None
    """Time to the first answer (content/text) token after any reasoning; None when the answer never began."""
    reasoning_tokens: int = 0
    """Output tokens that arrived as reasoning deltas (counted by the client)."""
    server_reasoning_tokens: int | None = None
    """The server's own reasoning count from usage (None: not reported)."""
    error_detail: str | None = None
    """A failure's one-line reading (redacted), for ``--requests-out`` and the error examples."""
    error_body: str | None = None
    """A failure's response body, redacted and cut to 300 bytes (None: no body)."""

    @property
    def tpot_s(self) -> float | None:
        if self.ttft_s is None or self.completion_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.completion_tokens - 1)


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

    def add(self, record: RequestRecord, stalled: bool = False) -> None:
        """Record one request; ``stalled``: its worker was frozen or cut off while it ran."""
        key = (record.model_key, record.profile, record.stage)
        streamed = record.ttft_s is not None and record.outcome in ("ok", "abandoned")
        reads = read_sizes(record.itl_samples) if streamed else ()
        for series in self._both(key):
            _apply(series, record)
            if reads:
                series.hists["read_tokens"].record_pairs(reads)
            if stalled:
                _apply_stalled(series, record)

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


def _apply(series: Series, record: RequestRecord) -> None:
    counts = series.counts
    counts[record.outcome] += 1
    if record.error is not None:
        series.errors[record.error] = series.errors.get(record.error, 0) + 1
        if (
            record.outcome == "failed"
            and len(kept := series.examples.setdefault(record.error, [])) < EXAMPLES_PER_CLASS
        ):
            kept.append(error_example(record))
    counts["prompt_tokens"] += record.prompt_tokens
    counts["completion_tokens"] += record.completion_tokens
    if record.cached_prompt_tokens is not None:
        counts["cached_prompt_tokens"] += record.cached_prompt_tokens
        counts["cached_reported"] += 1
    counts["estimated"] += record.tokens_estimated and record.outcome == "ok"  # unfinished requests never have usage
    counts["good"] += record.good
    counts["calibrated"] += record.prompt_calibrated and record.outcome == "ok"
    _apply_reasoning(counts, record)
    hists = series.hists
    if record.dispatch_lag_s is not None:
        hists["lag"].record(max(record.dispatch_lag_s, 0.0))
    if record.outcome == "cancelled":
        _apply_cut(series, record)
    if record.outcome == "abandoned":  # what it saw is real: TTFT and ITL count, e2e/TPOT (whole answers) do not
        if record.ttft_s is not None:
            hists["ttft"].record(record.ttft_s)
        if (ttfat := answer_latency(record)) is not None:
            hists["ttfat"].record(ttfat)
        hists["itl"].record_pairs(record.itl_samples)
    if record.outcome != "ok":
        return  # e2e and TPOT describe successful requests only
    hists["e2e"].record(record.e2e_s)
    if record.prompt_tokens > 0:
        hists["prompt"].record(float(record.prompt_tokens))
    if record.ttft_s is not None:
        hists["ttft"].record(record.ttft_s)
    if (ttfat := answer_latency(record)) is not None:
        hists["ttfat"].record(ttfat)
    hists["itl"].record_pairs(record.itl_samples)
    tpot = record.tpot_s
    if tpot is not None:
        hists["tpot"].record(tpot)


def _apply_stalled(series: Series, record: RequestRecord) -> None:
    """The stalled request's share of ``ttft``, ``itl`` and ``e2e``, recorded exactly where ``_apply``
    recorded it, so subtracting it leaves the latencies without it."""
    series.counts["stalled"] += 1
    hists = series.hists
    if record.outcome == "failed" or (record.outcome == "cancelled" and record.ttft_s is None):
        return
    if record.ttft_s is not None:
        hists["stalled_ttft"].record(record.ttft_s)
    hists["stalled_itl"].record_pairs(record.itl_samples)
    if record.outcome == "ok":
        hists["stalled_e2e"].record(record.e2e_s)


def error_example(record: RequestRecord) -> dict[str, Any]:
    """A failed request as the results' error examples show it (``time``: when it was recorded)."""
    return {
        "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
        "http_status": record.http_status,
        "body": record.error_body,
        "detail": record.error_detail or "",
    }


def _apply_cut(series: Series, record: RequestRecord) -> None:
    """A request a stop cut keeps what it saw: a first token that came is a TTFT like any other (and its
    gaps are ITL); one that had not come is right-censored at the wait (``measure.survival``)."""
    if record.ttft_s is None:
        series.counts["censored_waiting"] += 1
        series.hists["ttft_censored"].record(record.e2e_s)
        return
    series.counts["censored_streaming"] += 1
    series.hists["ttft"].record(record.ttft_s)
    if (ttfat := answer_latency(record)) is not None:
        series.hists["ttfat"].record(ttfat)
    series.hists["itl"].record_pairs(record.itl_samples)


def answer_latency(record: RequestRecord) -> float | None:
    """TTFAT of a record: ``ttfat_s`` when the client set it; else, when no token arrived as reasoning,
    the first token was an answer token, so TTFAT is TTFT (a path that does not tell reasoning apart
    still gives TTFAT for plain answers); None when reasoning came and the answer never began."""
    if record.ttfat_s is not None:
        return record.ttfat_s
    return record.ttft_s if record.reasoning_tokens == 0 else None


def _apply_reasoning(counts: dict[str, int], record: RequestRecord) -> None:
    """Reasoning tokens count like completion tokens (every outcome); the server's own count only where
    it sent one, beside the client's count over the same requests."""
    counts["reasoning_tokens"] += record.reasoning_tokens
    if record.server_reasoning_tokens is not None:
        counts["server_reasoning_tokens"] += record.server_reasoning_tokens
        counts["reasoning_reported"] += 1
        counts["reasoning_tokens_reported"] += record.reasoning_tokens


def read_sizes(itl_samples: tuple[tuple[float, int], ...]) -> tuple[tuple[float, int], ...]:
    """(tokens in one read, reads of that size) of a stream, from its ITL samples.

    Chunks parsed from one ``recv`` share its time stamp, so a chunk after a zero gap came in the
    read before it; a positive gap starts a new read. The first read holds the first chunk (the
    one TTFT times, counted as one token) and any zero-gap chunks after it.
    """
    sizes: dict[int, int] = {}
    tokens = 1
    for gap, n in itl_samples:
        if gap > 0.0:
            sizes[tokens] = sizes.get(tokens, 0) + 1
            tokens = 0
        tokens += n
    sizes[tokens] = sizes.get(tokens, 0) + 1
    return tuple((float(size), count) for size, count in sizes.items())


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
