"""Paired A/B (``--paired``): one prompt, same salt, sent to every model at the same moment.

Comparing two models by their separate latency distributions mixes prompt-to-prompt
variation into the difference. Paired mode sends each prompt to all models at once, so
each pair's difference (model − baseline, the baseline being the config's first model)
isolates the model. Workers keep those per-pair differences in a bounded reservoir and
ship them to the master, which reports the median difference with a bootstrap
confidence interval (:func:`balanced_median_ci`). Memory stays bounded: at most
:data:`RESERVOIR_PAIRS` differences per (stage, model, metric, send order).

The model sent first reaches the socket first, a head start of tens of µs. Shuffling the
order spreads it over the models, but leaves the differences two-humped (±head start), and
the median of a two-humped sample jumps between the humps with the share of each order: on
two targets of one server the CI missed 0 by 60 µs in about one run of ten. So differences
are kept apart by whether the model went ahead of the baseline, and the estimate is the
mean of the two orders' medians: the head start cancels exactly, whatever the shares.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable, Mapping
from typing import Any

import gevent
from gevent import GreenletExit

from attnload.measure.recorder import RequestRecord

RESERVOIR_PAIRS = 2000
"""Differences kept per (stage, model, metric); a uniform sample beyond that (reservoir sampling)."""
BOOTSTRAP_RESAMPLES = 400
CONFIDENCE = 0.95
METRICS = ("ttft_s", "e2e_s", "tpot_s")


def _value(record: RequestRecord, metric: str) -> float | None:
    if metric == "ttft_s":
        return record.ttft_s
    if metric == "e2e_s":
        return record.e2e_s
    return record.tpot_s


class _Reservoir:
    """A uniform sample of at most ``capacity`` values from a stream of ``seen`` values."""

    __slots__ = ("values", "seen")

    def __init__(self) -> None:
        self.values: list[float] = []
        self.seen = 0

    def add(self, value: float, rng: random.Random) -> None:
        self.seen += 1
        if len(self.values) < RESERVOIR_PAIRS:
            self.values.append(value)
            return
        slot = rng.randrange(self.seen)
        if slot < RESERVOIR_PAIRS:
            self.values[slot] = value

    def merge(self, values: list[float], seen: int, rng: random.Random) -> None:
        """Fold in another sample drawn from ``seen`` values, each kept value standing for seen/len."""
        if seen <= len(values):
            for value in values:
                self.add(value, rng)
            return
        # A subsample: weight it by what it stands for (approximate, fine for a CI).
        total = self.seen + seen
        keep_other = round(RESERVOIR_PAIRS * seen / total)
        mine = rng.sample(self.values, min(len(self.values), RESERVOIR_PAIRS - keep_other))
        theirs = rng.sample(values, min(len(values), keep_other))
        self.values = mine + theirs
        self.seen = total


PairKey = tuple[int, str, str, bool]  # (stage, model key, metric, sent ahead of the baseline)


class PairedRecorder:
    """Per-pair differences against the baseline model, with ``take_delta``/``merge_delta`` like ``Recorder``."""

    def __init__(self, baseline: str, seed: int = 0) -> None:
        self.baseline = baseline
        self.rng = random.Random(seed)
        self._order_rng = random.Random(f"order|{seed}")
        self.samples: dict[PairKey, _Reservoir] = {}
        self.pairs: dict[int, int] = {}
        self._delta: dict[PairKey, list[float]] = {}
        self._delta_pairs: dict[int, int] = {}

    def send_order(self, keys: list[str]) -> list[str]:
        """A seeded random order for one pair's sends.

        ``send_together`` starts greenlets in list order and the first one reaches the socket
        first; a fixed order (baseline first) showed as a ~0.15 ms TTFT "difference" between two
        identical servers. A shuffled order spreads that head start evenly over the models.
        """
        order = list(keys)
        self._order_rng.shuffle(order)
        return order

    def reset(self) -> None:
        self.samples.clear()
        self.pairs.clear()
        self._delta.clear()
        self._delta_pairs.clear()

    def add(self, stage: int, records: Mapping[str, RequestRecord], order: list[str]) -> None:
        """One finished pair, sent in ``order``; counted only when every model answered ``ok``."""
        base = records.get(self.baseline)
        if base is None or any(r.outcome != "ok" for r in records.values()):
            return
        self.pairs[stage] = self.pairs.get(stage, 0) + 1
        self._delta_pairs[stage] = self._delta_pairs.get(stage, 0) + 1
        baseline_at = order.index(self.baseline)
        for key, record in records.items():
            if key == self.baseline:
                continue
            ahead = order.index(key) < baseline_at
            for metric in METRICS:
                value, reference = _value(record, metric), _value(base, metric)
                if value is None or reference is None:
                    continue
                diff = value - reference
                self.samples.setdefault((stage, key, metric, ahead), _Reservoir()).add(diff, self.rng)
                pending = self._delta.setdefault((stage, key, metric, ahead), [])
                if len(pending) < RESERVOIR_PAIRS:
                    pending.append(diff)

    def take_delta(self) -> dict[str, Any]:
        delta, self._delta = self._delta, {}
        pairs, self._delta_pairs = self._delta_pairs, {}
        return {
            "d": {f"{s}|{k}|{m}|{int(a)}": v for (s, k, m, a), v in delta.items()},
            "p": {str(s): n for s, n in pairs.items()},
        }

    def merge_delta(self, data: Mapping[str, Any]) -> None:
        for stage, n in (data.get("p") or {}).items():
            self.pairs[int(stage)] = self.pairs.get(int(stage), 0) + int(n)
        for key_text, values in (data.get("d") or {}).items():
            stage, rest = key_text.split("|", 1)
            key, metric, ahead = rest.rsplit("|", 2)
            reservoir = self.samples.setdefault((int(stage), key, metric, ahead == "1"), _Reservoir())
            reservoir.merge([float(v) for v in values], len(values), self.rng)

    def summary(self, model_key: str, stage: int | None = None) -> dict[str, Any] | None:
        """``{"baseline", "pairs", metric: {median_diff, ci_low, ci_high, n}}``; None for the baseline."""
        if model_key == self.baseline:
            return None
        stages = [s for s in self.pairs if s >= 0] if stage is None else [stage]
        pairs = sum(self.pairs.get(s, 0) for s in stages)
        out: dict[str, Any] = {"baseline": self.baseline, "pairs": pairs, "confidence": CONFIDENCE}
        for metric in METRICS:
            by_order = [
                [v for s in stages for v in (self.samples.get((s, model_key, metric, ahead)) or _Reservoir()).values]
                for ahead in (True, False)
            ]
            seed = zlib.crc32(f"{model_key}|{metric}|{stage}".encode())
            median, low, high = balanced_median_ci(by_order, seed=seed)
            out[metric] = {"median_diff": median, "ci_low": low, "ci_high": high, "n": sum(map(len, by_order))}
        return out


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


def balanced_median_ci(
    groups: list[list[float]], *, resamples: int = BOOTSTRAP_RESAMPLES, confidence: float = CONFIDENCE, seed: int = 0
) -> tuple[float | None, float | None, float | None]:
    """The mean of the groups' medians and its stratified percentile-bootstrap CI (each group resampled alone).

    Empty groups are left out, so with one group this is :func:`bootstrap_median_ci`.
    """
    present = [g for g in groups if g]
    if len(present) < 2:
        return bootstrap_median_ci(present[0] if present else [], resamples=resamples, confidence=confidence, seed=seed)
    estimate = sum(_median(g) for g in present) / len(present)
    rng = random.Random(seed)
    estimates = sorted(sum(_median(rng.choices(g, k=len(g))) for g in present) / len(present) for _ in range(resamples))
    tail = (1.0 - confidence) / 2.0
    return estimate, estimates[int(tail * (resamples - 1))], estimates[int(round((1.0 - tail) * (resamples - 1)))]


def bootstrap_median_ci(
    values: list[float], *, resamples: int = BOOTSTRAP_RESAMPLES, confidence: float = CONFIDENCE, seed: int = 0
) -> tuple[float | None, float | None, float | None]:
    """Median of ``values`` and its percentile-bootstrap confidence interval (seeded, so reproducible)."""
    if not values:
        return None, None, None
    median = _median(values)
    if len(values) < 2:
        return median, median, median
    rng = random.Random(seed)
    n = len(values)
    medians = sorted(_median(rng.choices(values, k=n)) for _ in range(resamples))
    tail = (1.0 - confidence) / 2.0
    low = medians[int(tail * (resamples - 1))]
    high = medians[int(round((1.0 - tail) * (resamples - 1)))]
    return median, low, high


def send_together(keys: list[str], send_one: Callable[[str], RequestRecord]) -> dict[str, RequestRecord]:
    """Run ``send_one(key)`` for every model at once; if this greenlet is killed, so are they."""
    greenlets = {key: gevent.spawn(send_one, key) for key in keys}
    try:
        gevent.joinall(list(greenlets.values()))
    except GreenletExit:
        gevent.killall(list(greenlets.values()), block=True, timeout=10)
        raise
    return {key: g.value for key, g in greenlets.items() if g.successful() and g.value is not None}
