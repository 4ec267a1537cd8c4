"""Turn successive ``ServerSample``s of one model into per-stage results (``stages[].server``).

A ``ServerWindow`` covers one stage. Counters become deltas between consecutive samples,
with Prometheus' reset rule (a counter that went down restarted from zero, so the new
value is the delta): a server restart mid-stage loses only what it counted between the
last scrape and the restart. Gauges become mean and max over the stage's samples. TTFT
percentiles come from the delta of the server's histogram, interpolated within a bucket
as PromQL's ``histogram_quantile`` does, so they agree with a Grafana panel over the
same range. ``close()`` hands back the stage's summary and starts the next window with
the last sample as its baseline, so consecutive stages split the counters exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from attnload.scrape import specdecode
from attnload.scrape.parse import ServerSample
from attnload.scrape.source import Gauge, StageWindow, counter_delta
from attnload.scrape.summary import ServerSummary

_COUNTERS = (
    "preemptions",
    "prefix_cache_queries",
    "prefix_cache_hits",
    "prompt_tokens",
    "generation_tokens",
    "aborted",
    "spec_drafts",
    "spec_draft_tokens",
    "spec_accepted_tokens",
    "spec_accepted_all",
)
_GAUGES = ("kv_cache_usage", "running", "waiting", "prefix_cache_hit_rate", "spec_accept_length", "spec_accept_rate")


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """PromQL ``histogram_quantile`` over cumulative ``(upper_bound, count)`` buckets.

    Linear interpolation inside the bucket holding rank ``q·count``; the first bucket starts
    at 0; a rank in the ``+Inf`` bucket returns the largest finite bound. None without
    observations or without a ``+Inf`` bucket (not a complete histogram).
    """
    if len(buckets) < 2 or not math.isinf(buckets[-1][0]):
        return None
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    index = next(i for i, (_, count) in enumerate(buckets) if count >= rank or i == len(buckets) - 1)
    if index == len(buckets) - 1:
        return buckets[-2][0]
    end, count = buckets[index]
    if index == 0 and end <= 0:
        return end
    start, before = (0.0, 0.0) if index == 0 else buckets[index - 1]
    in_bucket = count - before
    if in_bucket <= 0:
        return end
    return start + (end - start) * (rank - before) / in_bucket


def histogram_bucket(q: float, buckets: Sequence[tuple[float, float]]) -> tuple[float, float | None] | None:
    """``(lower, upper)`` bounds in seconds of the bucket :func:`histogram_quantile` interpolates in
    for ``q`` (the first bucket starts at 0; the ``+Inf`` bucket's upper bound is None). A server's
    buckets are coarse (vLLM's TTFT: …0.1, 0.25, 0.5…): the quantile is only known to lie in here."""
    if len(buckets) < 2 or not math.isinf(buckets[-1][0]) or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    index = next(i for i, (_, count) in enumerate(buckets) if count >= rank or i == len(buckets) - 1)
    lower = 0.0 if index == 0 else buckets[index - 1][0]
    upper = buckets[index][0]
    return (lower, None if math.isinf(upper) else upper)


class ServerWindow(StageWindow[ServerSample, ServerSummary]):
    """One stage of one model's server metrics; ``add`` each scrape, ``close`` at the stage end."""

    def _start(self) -> None:
        self._deltas: dict[str, float] = {}
        self._gauges = {name: Gauge() for name in _GAUGES}
        self._ttft: dict[float, float] = {}
        self._queue = [0.0, 0.0]  # seconds waited, requests

    def _fold(self, sample: ServerSample) -> None:
        for name in _GAUGES:
            value = getattr(sample, name)
            if value is not None:
                self._gauges[name].add(value)

    def _difference(self, previous: ServerSample, sample: ServerSample) -> None:
        for name in _COUNTERS:
            before, now = getattr(previous, name), getattr(sample, name)
            if now is not None:  # absent before: created since (SGLang adds a labelled series at its first inc)
                self._deltas[name] = self._deltas.get(name, 0.0) + counter_delta(before or 0.0, now)
        if sample.ttft_buckets:
            before_buckets = dict(previous.ttft_buckets)
            now_total = sample.ttft_buckets[-1][1]
            reset = (
                set(before_buckets) != {b for b, _ in sample.ttft_buckets} or now_total < previous.ttft_buckets[-1][1]
            )
            for bound, count in sample.ttft_buckets:
                step = count if reset else max(0.0, count - before_buckets[bound])
                self._ttft[bound] = self._ttft.get(bound, 0.0) + step
        if sample.queue_time_sum_s is not None and sample.queue_time_count is not None:
            count_before = previous.queue_time_count or 0.0
            restarted = sample.queue_time_count < count_before
            self._queue[0] += sample.queue_time_sum_s - (0.0 if restarted else previous.queue_time_sum_s or 0.0)
            self._queue[1] += sample.queue_time_count - (0.0 if restarted else count_before)

    @property
    def queue_time_mean_s(self) -> float | None:
        """Mean time a request waited in the server's queue this stage (vLLM, SGLang), else None."""
        return self._queue[0] / self._queue[1] if self._queue[1] > 0 else None

    def summary(self) -> ServerSummary:
        """The results file's ``stages[].server`` object (null where the server has no such series)."""
        buckets = sorted(self._ttft.items())
        return ServerSummary(
            source=self.source,
            samples=self.samples,
            kv_cache_usage=self._gauges["kv_cache_usage"].summary(),
            requests_running=self._gauges["running"].summary(),
            requests_waiting=self._gauges["waiting"].summary(),
            preemptions=self._count("preemptions"),
            aborted=self._count("aborted") or None,  # only where the server aborted some (--abandon-rate)
            prefix_cache_hit_ratio=self._hit_ratio(),
            prompt_tokens=self._count("prompt_tokens"),
            generation_tokens=self._count("generation_tokens"),
            ttft_p50_s=histogram_quantile(0.50, buckets),
            ttft_p99_s=histogram_quantile(0.99, buckets),
            ttft_p50_bucket_s=histogram_bucket(0.50, buckets),
            ttft_p99_bucket_s=histogram_bucket(0.99, buckets),
            spec_decode=specdecode.from_counters(self._deltas)
            or specdecode.from_gauges(
                self._gauges["spec_accept_length"].mean(), self._gauges["spec_accept_rate"].mean()
            ),
        )

    def _count(self, name: str) -> int | float | None:
        if name not in self._deltas:
            return None if self._last is None or getattr(self._last, name) is None else 0
        value = self._deltas[name]
        return int(round(value)) if abs(value - round(value)) < 1e-9 else value

    def _hit_ratio(self) -> float | None:
        queries = self._deltas.get("prefix_cache_queries")
        hits = self._deltas.get("prefix_cache_hits")
        if queries and hits is not None:
            return hits / queries
        return self._gauges["prefix_cache_hit_rate"].mean()
