"""A stage's ``decode_fit`` from the recorder's mergeable sums (``measure.decodefit``)."""

from __future__ import annotations

from attnload.measure.decodefit import DecodeFit
from attnload.results.microscope.schema import DecodeFitSummary

TOKENS_PER_1K = 1024
"""The slope's unit: per 1K tokens of context, 1K being 1024 like ``context:1k``."""
STALL_TILT = 0.25
"""The note names the mean line's slope when it differs from the medians' by more than this share."""


def fit_summary(fit: DecodeFit, cut: str | None = None) -> DecodeFitSummary | None:
    """The stage's line (None: no ITL sample at all); ``cut`` says what a decode sweep's stage left out."""
    if not fit.n:
        return None
    bins = [[round(p), round(itl * 1e3, 4), n] for p, itl, n in fit.binned_medians()]
    positions = [int(fit.lo), int(fit.hi)]
    line, mean_line = fit.median_line(), fit.line()
    base = DecodeFitSummary(samples=fit.n, positions=positions, sequences=fit.sequences, bins=bins)
    if line is None:
        short = f"{fit.n} samples over positions {positions[0]:,}–{positions[1]:,}: too few or too narrow for a line"
        return base.model_copy(update={"note": _join(short, cut)})
    slope, intercept, r2 = line
    mean_slope = round(mean_line[0] * 1e3 * TOKENS_PER_1K, 6) if mean_line is not None else None
    slope_ms = round(slope * 1e3 * TOKENS_PER_1K, 6)
    note: str | None = cut
    if mean_slope is not None and abs(mean_slope - slope_ms) > STALL_TILT * max(abs(slope_ms), 1e-9):
        tilt = (
            f"the mean line's slope ({mean_slope:.3f} ms per 1K) is {mean_slope / slope_ms:.1f}× the medians' "
            "(stalls of the client or server came more at some positions than at others)"
            if slope_ms
            else f"the mean line's slope is {mean_slope:.3f} ms per 1K"
        )
        note = _join(tilt, cut)
    return base.model_copy(
        update={
            "slope_ms_per_1k": slope_ms,
            "intercept_ms": round(intercept * 1e3, 4),
            "r2": round(r2, 4) if r2 is not None else None,
            "mean_slope_ms_per_1k": mean_slope,
            "note": note,
        }
    )


def lockstep_cut(users: int | None, answered: int) -> str | None:
    """A decode sweep's stage where fewer answers finished than users started: what the fit lacks."""
    if not users or answered >= users:
        return None
    return (
        f"{users - answered} of {users} answers did not finish inside the stage (cut by --stage-duration or failed): "
        "the fit holds only the tokens that came"
    )


def _join(first: str, second: str | None) -> str:
    return f"{first}; {second}" if second else first
