"""TTFT percentiles that count the requests a stop cut before their first token (Kaplan–Meier).

A request still waiting for its first token when its stage ends did not have a TTFT of "nothing": its
TTFT is at least the time it waited — right-censored, the survival-analysis case. Dropping it keeps only
the lucky requests; counting its wait as a TTFT makes it look fast. The Kaplan–Meier estimate uses both:
at each time, the share of requests still waiting that got their first token then.

Both inputs are :class:`LogHistogram` s with the same buckets (first tokens, and the waits of the cut
requests), so the estimate merges across workers by adding buckets, like every other percentile here.
Within a bucket, first tokens are taken before cuts (the usual convention for ties). A percentile the
estimate never reaches — too many requests were still waiting — is only known to lie beyond the longest
wait: it is reported as that wait and named a lower bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from attnload.measure.histogram import GAMMA, LogHistogram

PERCENTILES = (("p50", 0.50), ("p90", 0.90), ("p95", 0.95), ("p99", 0.99))


@dataclass(frozen=True)
class Estimate:
    """Percentile values (seconds) by name, and the names that are lower bounds only."""

    values: dict[str, float | None]
    lower_bound: tuple[str, ...] = ()


def km_percentiles(
    events: LogHistogram, censored: LogHistogram, percentiles: Sequence[tuple[str, float]] = PERCENTILES
) -> Estimate:
    """The Kaplan–Meier percentiles of ``events`` (first tokens) with ``censored`` (waits cut by a stop).

    With nothing censored this is the histogram's own quantile, unchanged."""
    if censored.count == 0:
        return Estimate({name: events.quantile(q) for name, q in percentiles})
    at_risk = events.count + censored.count
    surviving = 1.0
    pending = sorted(percentiles, key=lambda item: item[1])
    values: dict[str, float | None] = {}
    for index in sorted(set(events.buckets) | set(censored.buckets)):
        died = events.buckets.get(index, 0)
        if died:
            surviving *= 1.0 - died / at_risk
            while pending and 1.0 - surviving >= pending[0][1] - 1e-12:
                values[pending.pop(0)[0]] = _midpoint(index, events)
        at_risk -= died + censored.buckets.get(index, 0)
        if not pending:
            break
    longest = max(censored.max, events.max)
    for name, _ in pending:
        values[name] = longest
    return Estimate(values, tuple(name for name, _ in pending))


def _midpoint(index: int, hist: LogHistogram) -> float:
    """The bucket's midpoint clamped to the observed first tokens, as ``LogHistogram.quantile`` reads it."""
    mid = 2.0 * GAMMA**index * GAMMA / (GAMMA + 1.0)
    return min(max(mid, hist.min), hist.max)
