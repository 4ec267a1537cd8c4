"""The sample and 95 % interval behind each verdict figure.

A median from 7 requests and one from 7,000 read the same in a table; the verdict must not treat them
alike. Each stage's TTFT and TPOT medians get a distribution-free interval from the order statistics of
its requests (one TPOT and one TTFT per request, read from the mergeable histograms: exact ranks, bounded
memory, nothing kept per request): the ranks ``l`` and ``u`` around ``n/2`` with ``P(l ≤ B < u) ≥ c`` for
``B ~ Binomial(n, ½)``. Below six requests no rank pair reaches 95 %: the interval is unknown, and said so.
A ladder's decode change is a ratio of two rungs' TPOT medians; taking each at 97.5 % makes the ratio's
interval (the extremes over both) hold at 95 %.
"""

from __future__ import annotations

import math
from statistics import NormalDist

from attnload.measure.histogram import GAMMA, LogHistogram
from attnload.measure.recorder import Series
from attnload.results.truth.fields import Evidence, Interval

CONFIDENCE = 0.95
PER_RUNG = 0.975
"""Each of two medians at this level: the ratio of the two holds at ``CONFIDENCE`` (0.975² > 0.95)."""
_EXACT_UP_TO = 400
"""Exact binomial sums up to this many requests; a normal approximation above."""


def median_ranks(n: int, confidence: float) -> tuple[int, int] | None:
    """1-based order-statistic ranks ``(l, u)`` bracketing the median at ``confidence`` (None: n too small)."""
    if n < 2:
        return None
    if n > _EXACT_UP_TO:
        z = NormalDist().inv_cdf(0.5 + confidence / 2)
        half = z * math.sqrt(n) / 2
        return max(1, math.floor(n / 2 - half)), min(n, math.ceil(n / 2 + half) + 1)
    weights = [math.comb(n, k) / 2.0**n for k in range(n + 1)]
    low, high = n // 2, n // 2 + 1  # B in [low, high): one rank each side of the middle
    while sum(weights[low:high]) < confidence:
        if low == 1 and high == n:
            return None
        low, high = max(1, low - 1), min(n, high + 1)
    return low, high


def rank_value(hist: LogHistogram, rank: int) -> float | None:
    """The ``rank``-th smallest sample (1-based), read as its bucket's midpoint within [min, max]."""
    seen = 0
    for index in sorted(hist.buckets):
        seen += hist.buckets[index]
        if seen >= rank:
            mid = 2.0 * GAMMA**index * GAMMA / (GAMMA + 1.0)
            return min(max(mid, hist.min), hist.max)
    return None


def median_interval(hist: LogHistogram, confidence: float = CONFIDENCE, itl_samples: int = 0) -> Interval:
    ranks = median_ranks(hist.count, confidence)
    low, high = (rank_value(hist, ranks[0]), rank_value(hist, ranks[1])) if ranks else (None, None)
    return Interval(value=hist.quantile(0.5), low=low, high=high, requests=hist.count, itl_samples=itl_samples)


def stage_evidence(series: Series) -> Evidence:
    itl = series.hists["itl"].count
    return Evidence(
        ttft_p50_s=median_interval(series.hists["ttft"]),
        tpot_p50_s=median_interval(series.hists["tpot"], PER_RUNG, itl_samples=itl),
    )


def change_interval(base: Interval, this: Interval) -> Interval:
    """Per-user decode speed at ``this`` rung over ``base``'s, minus one (−0.3: fell 30 %), with its interval
    (speed is 1/TPOT, so the ratio is base TPOT over this TPOT)."""
    value = base.value / this.value - 1.0 if base.value and this.value else None
    known = base.low and base.high and this.low and this.high
    return Interval(
        value=value,
        low=base.low / this.high - 1.0 if known and base.low and this.high else None,
        high=base.high / this.low - 1.0 if known and base.high and this.low else None,
        requests=min(base.requests, this.requests),
        itl_samples=min(base.itl_samples, this.itl_samples),
    )


def overlap(a: Interval, b: Interval) -> bool:
    """Two figures whose intervals overlap (or either is unknown): no clear difference at this sample."""
    if a.low is None or a.high is None or b.low is None or b.high is None:
        return True
    return a.low <= b.high and b.low <= a.high


def sample_text(interval: Interval, unit: str = "%") -> str:
    """``95 % interval −45 … −30 %, 17 requests, 3,400 ITL samples``; ``interval unknown`` below six requests."""
    sample = f"{interval.requests:,} request{'s' if interval.requests != 1 else ''}"
    if interval.itl_samples:
        sample += f", {interval.itl_samples:,} ITL samples"
    if interval.low is None or interval.high is None:
        return f"{sample}: too few for a 95 % interval"
    if unit == "%":
        return f"95 % interval {interval.low:+.0%} … {interval.high:+.0%}; {sample}"
    return f"95 % interval {interval.low:.2f} … {interval.high:.2f} {unit}; {sample}"
