"""``LogHistogram``: a mergeable log-bucketed latency sketch (bucket growth γ = 1.02, so any reported
quantile is within 1 % of a true sample value): O(1) to record, bounded memory whatever the
request count, and exact to merge, so percentiles merged across workers are percentiles of the
whole fleet — never averages of percentiles. Neutral: the simulator uses it too.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from attnload import native

GAMMA = 1.02
_LOG_GAMMA = math.log(GAMMA)
_MIN_VALUE_S = 1e-7  # anything faster is recorded in the lowest bucket


class LogHistogram:
    """Sparse log-bucket histogram of positive values (seconds) with exact count/sum/min/max."""

    __slots__ = ("buckets", "count", "total", "min", "max")

    def __init__(self) -> None:
        self.buckets: dict[int, int] = {}
        self.count = 0
        self.total = 0.0
        self.min = math.inf
        self.max = 0.0

    def record(self, value: float, n: int = 1) -> None:
        """Add ``n`` samples of ``value``; O(1)."""
        index = math.floor(math.log(value if value > _MIN_VALUE_S else _MIN_VALUE_S) / _LOG_GAMMA)
        buckets = self.buckets
        buckets[index] = buckets.get(index, 0) + n
        self.count += n
        self.total += value * n
        if value < self.min:
            self.min = value
        if value > self.max:
            self.max = value

    def record_pairs(self, samples: Iterable[tuple[float, int]]) -> None:
        """``record(value, n)`` for every pair, paying the per-call overhead once.

        Why: ITL arrives as one pair per content chunk, hundreds per request and two series
        per request (totals and the worker delta); the call overhead was most of the cost.
        With the C extension (``attnload.native``, native/histogram.c) a tuple or list of (float, int) pairs is
        recorded there, with the same float operations in the same order.
        """
        fast = native.active()
        if fast is not None and type(samples) in (tuple, list):
            done = fast.record_pairs(
                self.buckets, samples, self.count, self.total, self.min, self.max, _MIN_VALUE_S, _LOG_GAMMA
            )
            if done is not None:
                self.count, self.total, self.min, self.max = done
                return
        buckets = self.buckets
        get = buckets.get
        log, floor = math.log, math.floor
        count, total, low, high = self.count, self.total, self.min, self.max
        for value, n in samples:
            index = floor(log(value if value > _MIN_VALUE_S else _MIN_VALUE_S) / _LOG_GAMMA)
            buckets[index] = get(index, 0) + n
            count += n
            total += value * n
            if value < low:
                low = value
            if value > high:
                high = value
        self.count, self.total, self.min, self.max = count, total, low, high

    def merge(self, other: LogHistogram) -> None:
        for index, n in other.buckets.items():
            self.buckets[index] = self.buckets.get(index, 0) + n
        self.count += other.count
        self.total += other.total
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)

    def quantile(self, q: float) -> float | None:
        """Value at quantile ``q`` in [0, 1]: the bucket's midpoint, clamped to [min, max]."""
        if self.count == 0:
            return None
        if q >= 1.0:
            return self.max
        rank = q * (self.count - 1)
        seen = 0
        for index in sorted(self.buckets):
            seen += self.buckets[index]
            if seen > rank:
                mid = 2.0 * GAMMA**index * GAMMA / (GAMMA + 1.0)
                return min(max(mid, self.min), self.max)
        return self.max

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count else None

    def cumulative_counts(self, upper_bounds_s: Iterable[float]) -> list[int]:
        """Counts of samples ≤ each bound, for Prometheus buckets (a bucket straddling a bound
        is assigned by its upper edge, an error below 2 % of the bound)."""
        bounds = list(upper_bounds_s)
        counts = [0] * len(bounds)
        for index, n in self.buckets.items():
            upper = GAMMA ** (index + 1)
            for position, bound in enumerate(bounds):
                if upper <= bound * GAMMA:
                    counts[position] += n
                    break
        running = 0
        for position, n in enumerate(counts):
            running += n
            counts[position] = running
        return counts

    def to_wire(self) -> dict[str, Any]:
        return {"b": self.buckets, "n": self.count, "s": self.total, "lo": self.min, "hi": self.max}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> LogHistogram:
        hist = cls()
        hist.buckets = {int(k): int(v) for k, v in data["b"].items()}
        hist.count = int(data["n"])
        hist.total = float(data["s"])
        hist.min = float(data["lo"])
        hist.max = float(data["hi"])
        return hist

    def summary(self) -> dict[str, float | int | None]:
        """The results-file summary: count, mean, p50, p90, p95, p99, max (seconds)."""
        return {
            "count": self.count,
            "mean": self.mean,
            "p50": self.quantile(0.50),
            "p90": self.quantile(0.90),
            "p95": self.quantile(0.95),
            "p99": self.quantile(0.99),
            "max": self.max if self.count else None,
        }
