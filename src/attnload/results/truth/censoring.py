"""TTFT over finished and cut requests, the cut requests' count, and a stage too short for its TTFT.

A request a stage's end cut is ``cancelled``; what it saw still counts (``measure.recorder``): a first
token that came is a TTFT, one that had not is censored at the wait, and the percentiles come from the
Kaplan–Meier estimate (``measure.survival``). When the median first token takes more than a third of
the stage, most requests the stage started never answered in it: the stage says so, with the fix.
"""

from __future__ import annotations

from attnload.measure.recorder import Series
from attnload.measure.survival import km_percentiles
from attnload.results.model import Summary
from attnload.results.truth.fields import Censored

TTFT_SHARE_OF_STAGE = 1 / 3
"""A TTFT p50 above this share of the stage's duration flags it ``ttft_long``."""


def ttft_summary(series: Series) -> Summary:
    """TTFT of finished and cut requests; percentiles beyond the longest wait are marked ``lower_bound``."""
    events, cut = series.hists["ttft"], series.hists["ttft_censored"]
    estimate = km_percentiles(events, cut)
    return Summary(
        count=events.count,
        mean=events.mean,
        max=events.max if events.count else None,
        **estimate.values,
        lower_bound=list(estimate.lower_bound),
    )


def censored_of(series: Series) -> Censored:
    counts = series.counts
    return Censored(
        waiting_first_token=counts.get("censored_waiting", 0), streaming=counts.get("censored_streaming", 0)
    )


def ttft_long_note(ttft: Summary, duration_s: float) -> str | None:
    """Why a stage is too short for its TTFT, with the fix (None: it is not)."""
    p50 = ttft.p50
    if p50 is None or duration_s <= 0 or p50 <= TTFT_SHARE_OF_STAGE * duration_s:
        return None
    bound = "≥ " if "p50" in ttft.lower_bound else ""
    return (
        f"TTFT p50 {bound}{p50:.1f} s is over a third of the {duration_s:.0f} s stage: most requests it began were "
        f"cut before they finished; run it longer (--stage-duration {_suggest(p50)}s or more)"
    )


def _suggest(p50_s: float) -> int:
    """A stage long enough for its TTFT: ten medians, rounded up to 10 s."""
    return int(-(-10 * p50_s // 10) * 10)
