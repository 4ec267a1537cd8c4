"""Two runs side by side: per-model (and per-stage) deltas with regressions flagged.

``current`` is the run being reported, ``baseline`` the ``--compare`` file. A regression
is a latency (p50 or p99) more than ``threshold`` higher, or a throughput/goodput more
than ``threshold`` lower, or a failure ratio up by more than one percentage point.
Models pair by key; stages pair by their load (users or rate), so a sweep that added a
stage still compares the stages both runs share.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from attnload.report.fmt import Metric, stage_label, stage_x, summary_metrics
from attnload.results.model import ModelSummary, Results, StageSummary, Totals

DEFAULT_THRESHOLD = 0.10
FAILURE_RATIO_STEP = 0.01


@dataclass(frozen=True)
class Delta:
    """One metric in both runs; ``change`` is relative (+0.25 = 25% higher than baseline)."""

    metric: Metric
    baseline: float | None
    current: float | None
    change: float | None
    regression: bool
    improvement: bool


@dataclass(frozen=True)
class Row:
    """A model (``stage`` is None) or one stage of it, compared."""

    key: str
    stage: str | None
    deltas: list[Delta]
    failure_ratio: tuple[float | None, float | None] = (None, None)
    failure_regression: bool = False

    @property
    def regressions(self) -> list[str]:
        names = [d.metric.title for d in self.deltas if d.regression]
        if self.failure_regression:
            names.append("failure ratio")
        return names


@dataclass(frozen=True)
class Comparison:
    rows: list[Row]
    only_current: list[str] = field(default_factory=list)
    only_baseline: list[str] = field(default_factory=list)
    threshold: float = DEFAULT_THRESHOLD

    @property
    def regressions(self) -> list[str]:
        """Human-readable list, e.g. ``llama-3-70b @64 users: TTFT p99``."""
        out = []
        for row in self.rows:
            if row.regressions:
                where = row.key + (f" @{row.stage}" if row.stage else "")
                out.append(f"{where}: {', '.join(row.regressions)}")
        return out


def _failure_ratio(totals: Totals) -> float | None:
    total = totals.requests.total
    return totals.requests.failed / total if total else None


def _delta(metric: Metric, base: Totals, cur: Totals, threshold: float) -> Delta:
    b, c = metric.get(base), metric.get(cur)
    change = (c - b) / b if b is not None and c is not None and b != 0 else None
    worse = better = False
    if change is not None:
        if metric.higher_is_better:
            worse, better = change < -threshold, change > threshold
        else:
            worse, better = change > threshold, change < -threshold
    elif b is not None and c is None and base.requests.ok > 0:
        worse = True  # a metric that vanished (e.g. no successful request) is a regression
    return Delta(metric, b, c, change, worse, better)


def _row(key: str, stage: str | None, base: Totals, cur: Totals, threshold: float) -> Row:
    fb, fc = _failure_ratio(base), _failure_ratio(cur)
    failure_regression = fc is not None and (fc - (fb or 0.0)) > FAILURE_RATIO_STEP
    return Row(key, stage, [_delta(m, base, cur, threshold) for m in summary_metrics()], (fb, fc), failure_regression)


def _load_key(stage: StageSummary) -> float | None:
    """The stage's load as the shape named it: ``users_total`` where recorded (older files carry the
    stage total in ``users``), so runs written before and after per-model users still pair."""
    return float(stage.users_total) if stage.users_total is not None else stage_x(stage)


def _stage_rows(base: ModelSummary, cur: ModelSummary, threshold: float) -> list[Row]:
    by_load = {_load_key(s): s for s in base.stages}
    rows = []
    for stage in cur.stages:
        match = by_load.get(_load_key(stage))
        if match is not None:
            rows.append(_row(cur.key, stage_label(stage), match, stage, threshold))
    return rows


def compare_results(current: Results, baseline: Results, threshold: float = DEFAULT_THRESHOLD) -> Comparison:
    """Deltas of ``current`` against ``baseline``; see the module docstring for the flags."""
    base_by_key = {m.key: m for m in baseline.models}
    rows: list[Row] = []
    for model in current.models:
        base = base_by_key.get(model.key)
        if base is None:
            continue
        rows.append(_row(model.key, None, base, model, threshold))
        rows.extend(_stage_rows(base, model, threshold))
    current_keys = {m.key for m in current.models}
    return Comparison(
        rows=rows,
        only_current=[m.key for m in current.models if m.key not in base_by_key],
        only_baseline=[m.key for m in baseline.models if m.key not in current_keys],
        threshold=threshold,
    )


def regression_status(comparison: Comparison) -> tuple[int, list[str]]:
    """``report --fail-on-regression``: 1 with one line per regressed row, each metric with its change
    (the comparison was built with the PCT as its threshold), else 0."""
    lines = []
    for row in comparison.rows:
        parts = [
            f"{d.metric.title} {d.metric.show(d.baseline)} → {d.metric.show(d.current)}"
            + (f" ({d.change * 100:+.1f}%)" if d.change is not None else "")
            for d in row.deltas
            if d.regression
        ]
        if row.failure_regression:
            before, after = (f"{(r or 0.0) * 100:.1f}%" for r in row.failure_ratio)
            parts.append(f"failure ratio {before} → {after}")
        if parts:
            where = row.key + (f" @{row.stage}" if row.stage else "")
            lines.append(f"regression: {where}: {'; '.join(parts)}")
    return (1 if lines else 0), lines
