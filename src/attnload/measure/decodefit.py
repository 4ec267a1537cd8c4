"""``DecodeFit``: the step time against context, fitted from the inter-token gaps a run already measures.

Why: token *k* of an answer is decoded with prompt + *k* tokens of context, so one long answer traces
the decode step against context (a whole ladder, no prefill per rung). Each ITL sample is placed at its
position (prompt tokens + the token's index in the answer) and a least-squares line through
(position, ITL) is kept as six sums (n, Σx, Σy, Σxx, Σxy, Σyy): exact to merge across workers, like the
histograms, and a handful of numbers whatever the token count. A chunk of k tokens after one gap gives
k samples at its k positions, as ITL does (``recorder.split_gaps``).

Each token's ITL is the mean over its window of ``WINDOW_TOKENS`` consecutive tokens (the gaps of the
window's chunks ÷ its tokens). Why: a read that comes late makes one gap long and the next short, so
single gaps carry the client's and server's timer jitter (milliseconds, on a busy machine more than the
whole rise a decode step shows over thousands of tokens) while their sum is exact; a window's mean keeps
the line unbiased and cuts that noise by the window's length. An answer's windows are left out until two
in a row agree (it has settled): its first gaps hold the steps that ran the other requests' prefills (a
batch that starts together prefills together), which is prefill interference, not the step's growth
with context. A window whose mean strays by more than 5 % from the last one's grows until it is back (at
most four windows): a read that came late and the burst that caught up then fall in one window, whose
mean is the server's again.

Beside the sums, a bounded sketch of the windows' ITL per position bin (8 bins per octave of position,
ITL in 0.2 % buckets) gives the binned medians: the report plots them, and the line through them is the
slope ``decode_fit`` reports (:meth:`DecodeFit.median_line`), since a stall the server never caught up
(a busy machine) moves a mean and not a median.

With the C extension (native/decodefit.c) one request's sums and bins are made there, with the same
float operations as :func:`request_fit`'s Python loop.
"""

from __future__ import annotations

import math
from typing import Any

from attnload import native

BINS_PER_OCTAVE = 8
"""Position bins per doubling of context: 1K–5K spans about 19 bins; 2^21 tokens at most ~170."""
ITL_GAMMA = 1.002
"""ITL bucket growth in the position sketch: a binned median is within 0.1 % of a window's mean (MLA's whole
rise from 1K to 5K tokens of context is 1.5 %)."""
STRAY_RATIO = 1.05
"""A window whose mean ITL is over this many times the last added window's, or under it by as much, strays."""
STRAY_WINDOWS = 4
"""A straying window grows to at most this many windows' tokens, then is added whatever its mean."""
SETTLE_WINDOWS = 8
"""An answer's windows are left out until two in a row agree, or this many were: its start holds the batch's
prefills."""
WINDOW_TOKENS = 32
"""Each token's ITL in the fit is the mean over its window of this many tokens (consecutive chunks)."""
_LOG_ITL_GAMMA = math.log(ITL_GAMMA)
_MIN_ITL_S = 1e-6
_MAX_ITL_S = 1e3
_KEY_SPAN = 16384
"""key = position bin × span + (ITL bucket + offset): one flat dict of counts per series (the offset and
span hold every bucket from ``_MIN_ITL_S`` to ``_MAX_ITL_S``)."""
_ITL_OFFSET = 7168
MIN_FIT_SAMPLES = 30
"""Fewer samples than this give no line (``DecodeFit.line`` returns None)."""


class DecodeFit:
    """The least-squares sums over (position, ITL) samples, their position range, sequences and bins."""

    __slots__ = ("n", "sx", "sy", "sxx", "sxy", "syy", "lo", "hi", "sequences", "bins")

    def __init__(self) -> None:
        self.n = 0
        self.sx = self.sy = self.sxx = self.sxy = self.syy = 0.0
        self.lo = math.inf
        self.hi = 0.0
        self.sequences = 0
        self.bins: dict[int, int] = {}

    def merge(self, other: DecodeFit) -> None:
        if not other.n:
            return
        self.n += other.n
        self.sx += other.sx
        self.sy += other.sy
        self.sxx += other.sxx
        self.sxy += other.sxy
        self.syy += other.syy
        self.lo = min(self.lo, other.lo)
        self.hi = max(self.hi, other.hi)
        self.sequences += other.sequences
        bins = self.bins
        for key, count in other.bins.items():
            bins[key] = bins.get(key, 0) + count

    def line(self) -> tuple[float, float, float | None] | None:
        """(slope in s per token of context, intercept in s, r²) or None with too few samples or one position.

        r² is None when every ITL is the same (nothing to explain)."""
        n = self.n
        if n < MIN_FIT_SAMPLES:
            return None
        sxx = self.sxx - self.sx * self.sx / n
        if sxx <= 0:
            return None
        sxy = self.sxy - self.sx * self.sy / n
        syy = self.syy - self.sy * self.sy / n
        slope = sxy / sxx
        intercept = (self.sy - slope * self.sx) / n
        r2 = max(0.0, min(1.0, sxy * sxy / (sxx * syy))) if syy > 0 else None
        return slope, intercept, r2

    def binned_medians(self) -> list[tuple[float, float, int]]:
        """(bin's middle position, median window ITL in s, samples) per position bin, in position order."""
        by_bin: dict[int, dict[int, int]] = {}
        for key, count in self.bins.items():
            by_bin.setdefault(key // _KEY_SPAN, {})[key % _KEY_SPAN - _ITL_OFFSET] = count
        points = []
        for position_bin in sorted(by_bin):
            buckets = by_bin[position_bin]
            total = sum(buckets.values())
            rank, seen = (total - 1) / 2, 0
            for index in sorted(buckets):
                seen += buckets[index]
                if seen > rank:
                    median = 2.0 * ITL_GAMMA**index * ITL_GAMMA / (ITL_GAMMA + 1.0)
                    break
            middle = 2.0 ** ((position_bin + 0.5) / BINS_PER_OCTAVE)
            points.append((middle, median, total))
        return points

    def median_line(self) -> tuple[float, float, float | None] | None:
        """(slope in s per token, intercept in s, r²) of the least-squares line through the binned medians,
        each weighted by its samples; None with fewer than three bins or samples than ``MIN_FIT_SAMPLES``.

        Why beside :meth:`line`: a mean takes every stall the machine adds to the ITL, and a stall that
        comes more often late in a run than early (a neighbour's load, the other model finishing) tilts
        it; a median per position does not move with them."""
        points = self.binned_medians()
        total = sum(n for _x, _y, n in points)
        if len(points) < 3 or total < MIN_FIT_SAMPLES:
            return None
        mx = sum(x * n for x, _y, n in points) / total
        my = sum(y * n for _x, y, n in points) / total
        sxx = sum(n * (x - mx) ** 2 for x, _y, n in points)
        sxy = sum(n * (x - mx) * (y - my) for x, y, n in points)
        syy = sum(n * (y - my) ** 2 for _x, y, n in points)
        slope = sxy / sxx
        r2 = max(0.0, min(1.0, sxy * sxy / (sxx * syy))) if syy > 0 else None
        return slope, my - slope * mx, r2

    @property
    def slope_ms_per_1k(self) -> float | None:
        """The medians' line's slope in ms per 1K (1024) tokens of context (None: no line yet)."""
        line = self.median_line()
        return line[0] * 1e3 * 1024 if line is not None else None

    def to_wire(self) -> dict[str, Any]:
        return {
            "s": [self.n, self.sx, self.sy, self.sxx, self.sxy, self.syy, self.lo, self.hi, self.sequences],
            "b": self.bins,
        }

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> DecodeFit:
        fit = cls()
        n, fit.sx, fit.sy, fit.sxx, fit.sxy, fit.syy, fit.lo, fit.hi, sequences = data["s"]
        fit.n, fit.sequences = int(n), int(sequences)
        fit.bins = {int(k): int(v) for k, v in data["b"].items()}
        return fit


def request_fit(prompt_tokens: int, completion_tokens: int, samples: tuple[tuple[float, int], ...]) -> DecodeFit:
    """One answer's contribution: its tokens at positions prompt + index, each with its window's mean ITL.

    The first chunk (timed by TTFT, no gap) holds the tokens the server counted beyond the samples (at
    least one); the first sample's token follows it. The windows before the answer settles are left out and
    a straying window grows (the module's docstring says why)."""
    fit = DecodeFit()
    fit.sequences = 1
    fast = native.active()
    if fast is not None and type(samples) is tuple:
        done = fast.fit_pairs(
            samples, prompt_tokens, completion_tokens, fit.bins, WINDOW_TOKENS, _MIN_ITL_S, _LOG_ITL_GAMMA
        )
        if done is not None:
            fit.n, fit.sx, fit.sy, fit.sxx, fit.sxy, fit.syy, fit.lo, fit.hi = done
            return fit
    total = 0
    for _gap, k in samples:
        total += k
    position = prompt_tokens + max(completion_tokens - total, 1)
    sums: list[Any] = [0, 0.0, 0.0, 0.0, 0.0, 0.0]
    kept: list[float] = [0.0, math.inf, 0]  # the last window's mean, the first added position, windows settling
    window = [0, 0.0, 0.0, 0.0, position]  # tokens, gap, Σx, Σxx, first position
    for value, k in samples:
        window[0] += k
        window[1] += value * k
        window[2] += k * position + k * (k - 1) / 2.0
        window[3] += k * position * position + position * k * (k - 1) + (k - 1) * k * (2 * k - 1) / 6.0
        position += k
        if window[0] >= WINDOW_TOKENS and _offer(sums, window, kept, fit.bins, False):
            window = [0, 0.0, 0.0, 0.0, position]
    if window[0]:
        _offer(sums, window, kept, fit.bins, True)
    fit.n, fit.sx, fit.sy, fit.sxx, fit.sxy, fit.syy = sums
    fit.lo, fit.hi = float(kept[1]), float(position - 1)
    return fit


def _offer(sums: list[Any], window: list[Any], kept: list[float], bins: dict[int, int], last_one: bool) -> bool:
    """Add one window's tokens to the sums, each at its position with the window's mean ITL; True when the
    window is done with (added, or left out while the answer settles), False when it grows.

    Until two windows in a row agree within ``STRAY_RATIO`` (at most ``SETTLE_WINDOWS``) the answer has not
    settled and its windows are left out. After that, a window whose mean strays from the last added one's
    grows, up to ``STRAY_WINDOWS`` windows or the answer's end: a late read and the burst that catches up
    then fall in one window, whose mean is the server's again."""
    tokens, gap, sx, sxx, start = window
    mean = gap / tokens
    last = kept[0]
    strays = mean > last * STRAY_RATIO or mean * STRAY_RATIO < last
    if kept[2] >= 0:  # settling
        if (last <= 0.0 or strays) and (last_one or kept[2] < SETTLE_WINDOWS):
            kept[0], kept[2] = mean, kept[2] + 1
            return True
        kept[2] = -1
    elif not last_one and tokens < STRAY_WINDOWS * WINDOW_TOKENS and strays:
        return False
    kept[0] = mean
    if start < kept[1]:
        kept[1] = start
    sums[0] += tokens
    sums[1] += sx
    sums[2] += mean * tokens
    sums[3] += sxx
    sums[4] += mean * sx
    sums[5] += mean * mean * tokens
    key = math.floor(math.log2(start) * BINS_PER_OCTAVE) * _KEY_SPAN + _ITL_OFFSET
    key += math.floor(math.log(min(max(mean, _MIN_ITL_S), _MAX_ITL_S)) / _LOG_ITL_GAMMA)
    bins[key] = bins.get(key, 0) + tokens
    return True
