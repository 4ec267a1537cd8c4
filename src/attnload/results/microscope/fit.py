"""A stage's ``decode_fit`` from the recorder's mergeable sums (``measure.decodefit``)."""

from __future__ import annotations

from attnload.measure.decodefit import MIN_FIT_SAMPLES, DecodeFit
from attnload.results.microscope.schema import DecodeFitSummary

TOKENS_PER_1K = 1024
"""The slope's unit: per 1K tokens of context, 1K being 1024 like ``context:1k``."""


def fit_summary(fit: DecodeFit, cut: str | None = None) -> DecodeFitSummary | None:
    """The stage's line (None: no ITL sample at all); ``cut`` says what a decode sweep's stage left out."""
    if not fit.n:
        return None
    line = fit.line()
    bins = [[round(p), round(itl * 1e3, 4), n] for p, itl, n in fit.binned_medians()]
    positions = [int(fit.lo), int(fit.hi)]
    if line is None:
        note = f"{fit.n} samples over positions {positions[0]:,}–{positions[1]:,}: too few or one position for a line"
        if fit.n >= MIN_FIT_SAMPLES:
            note = f"every sample at position {positions[0]:,}: no spread of context to fit against"
        return DecodeFitSummary(
            samples=fit.n, positions=positions, sequences=fit.sequences, bins=bins, note=_join(note, cut)
        )
    slope, intercept, r2 = line
    return DecodeFitSummary(
        samples=fit.n,
        slope_ms_per_1k=round(slope * 1e3 * TOKENS_PER_1K, 6),
        intercept_ms=round(intercept * 1e3, 4),
        r2=round(r2, 4) if r2 is not None else None,
        positions=positions,
        sequences=fit.sequences,
        bins=bins,
        note=cut,
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
