"""The paired A/B differences (``--paired``) as rows both the console and the HTML report render.

Each non-baseline model gets one row per metric: the median of its per-pair differences
against the baseline and the bootstrap confidence interval. A CI that contains 0 says the
run cannot tell the two apart on that metric; the table says so in words.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnload.report.fmt import series_name
from attnload.results.model import PairedDiff, Results

PAIRED_METRICS = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "end-to-end"))


@dataclass(frozen=True)
class PairedRow:
    model: str
    baseline: str
    metric: str
    pairs: int
    confidence: float
    diff: PairedDiff

    @property
    def verdict(self) -> str:
        low, high = self.diff.ci_low, self.diff.ci_high
        if low is None or high is None:
            return "no pairs"
        if low <= 0.0 <= high:
            return "no difference shown"
        return "slower" if low > 0 else "faster"


def paired_rows(results: Results) -> list[PairedRow]:
    """Every (model, metric) paired difference in the run; empty when the run was not paired."""
    rows = []
    for model in results.models:
        if model.paired is None:
            continue
        for field, title in PAIRED_METRICS:
            rows.append(
                PairedRow(
                    series_name(model),
                    model.paired.baseline,
                    title,
                    model.paired.pairs,
                    model.paired.confidence,
                    getattr(model.paired, field),
                )
            )
    return rows


def diff_ms(value: float | None) -> str:
    return "—" if value is None else f"{value * 1000.0:+.2f}"


def ci_ms(diff: PairedDiff) -> str:
    if diff.ci_low is None or diff.ci_high is None:
        return "—"
    return f"[{diff.ci_low * 1000.0:+.2f}, {diff.ci_high * 1000.0:+.2f}]"
