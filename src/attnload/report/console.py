"""Terminal rendering: the summary table ``attnload report``/``run``/``demo`` print, and progress lines.

Medians come first (the seed's advice); per-stage rows follow when the run had stages.
Attention columns appear only when some model carries simulator preset info.
"""

from __future__ import annotations

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from attnload.measure.metrics import METRICS, Metric
from attnload.report import gpu as gpu_view
from attnload.report import server as server_view
from attnload.report import truth
from attnload.report.agent import steps as agent_steps
from attnload.report.clienthealth import render as client_health
from attnload.report.compare import Comparison
from attnload.report.decode import view as decode_view
from attnload.report.explain import MIXED_MODELS_NOTE, presets_differ
from attnload.report.fmt import (
    DASH,
    count,
    kib,
    pct,
    rate,
    series_name,
    stage_label,
    summary_metrics,
)
from attnload.report.ladder.console import ladder_table, render_verdict
from attnload.report.microscope.console import decode_fit_table, kv_capacity_table
from attnload.report.paired import ci_ms, diff_ms, paired_rows
from attnload.report.reasoning import view as reasoning_view
from attnload.report.turns import cached_notes
from attnload.results.model import Results, Totals


def errors_text(totals: Totals, limit: int = 3) -> str:
    """The most frequent error classes, e.g. ``timeout 4, server 1`` (``abandoned N``, ``dropped N``: not errors)."""
    errors = {**totals.errors, **({"abandoned": totals.requests.abandoned} if totals.requests.abandoned else {})}
    if totals.requests.dropped:  # open-loop arrivals not sent during a connection backoff
        errors["dropped"] = totals.requests.dropped
    if not errors:
        return DASH
    ranked = sorted(errors.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{name} {n}" for name, n in ranked[:limit])
    return text + (" …" if len(ranked) > limit else "")


def _has(results: Results, key: str) -> bool:
    return any(key in m.attention_info for m in results.models)


def _summarised() -> list[Metric]:
    """The table's metrics with summary columns (``measure.metrics``), one compact column each."""
    return [m for m in METRICS if m.columns and m.results_field is not None]


def _headers() -> tuple[str, ...]:
    latencies = (f"{m.title}{' ms' if m.unit == 's' else ''}\n{' / '.join(m.columns)}" for m in _summarised())
    return (*latencies, "out\ntok/s", "req\nok / failed", "errors", "goodput\nreq/s")


def _quantiles(metric: Metric, totals: Totals) -> str:
    summary = totals.summary_of(metric.results_field or "")
    if metric.unit == "s":  # a percentile the data could not reach reads ``≥ N`` (report/truth.py)
        return " / ".join(truth.bound_ms(summary, q) for q in metric.columns)
    return " / ".join(rate(getattr(summary, q)) for q in metric.columns)


def _metric_cells(totals: Totals) -> list[str]:
    """Compact cells (units in the headers) so the table fits a normal terminal."""
    return [
        *(_quantiles(m, totals) for m in _summarised()),
        rate(totals.output_tokens_per_s),
        f"{totals.requests.ok:,} / {totals.requests.failed:,}",
        errors_text(totals, limit=2),
        rate(totals.goodput_rps),
    ]


def _add_metric_columns(table: Table) -> None:
    for title in _headers():
        table.add_column(
            title,
            justify="left" if title == "errors" else "right",
            no_wrap=title != "errors",
            max_width=24 if title == "errors" else None,
        )


def _model_table(results: Results) -> Table:
    table = Table(
        title="attnload results (medians first)", title_justify="left", header_style="bold", box=box.SIMPLE_HEAD
    )
    table.add_column("model", no_wrap=True)
    _add_metric_columns(table)
    show_kv = _has(results, "kv_bytes_per_token_per_gpu")
    show_cap = _has(results, "kv_capacity_tokens")
    if show_kv:
        table.add_column("KV B/token\nper GPU", justify="right", no_wrap=True)
    if show_cap:
        table.add_column("KV capacity\ntokens", justify="right", no_wrap=True)
    for model in results.models:
        row = [series_name(model), *_metric_cells(model)]
        if show_kv:
            row.append(count(model.attention_info.get("kv_bytes_per_token_per_gpu")))
        if show_cap:
            row.append(count(model.attention_info.get("kv_capacity_tokens")))
        style = "red" if truth.empty(model) or (model.requests.ok == 0 and model.requests.total > 0) else None
        table.add_row(*row, style=style)
    return table


def _stage_table(results: Results) -> Table | None:
    if not any(model.stages for model in results.models):
        return None
    table = Table(title="per stage", title_justify="left", header_style="bold", box=box.SIMPLE_HEAD)
    table.add_column("model", no_wrap=True)
    table.add_column("stage", no_wrap=True)
    _add_metric_columns(table)
    for model in results.models:
        for i, stage in enumerate(model.stages):
            row = [model.key if i == 0 else "", stage_label(stage), *_metric_cells(stage)]
            table.add_row(*row, style="dim" if stage.requests.total == 0 else None)
        table.add_section()
    return table


def _paired_table(results: Results) -> Table | None:
    """``--paired``: each model minus the baseline, prompt by prompt, with the CI (ms)."""
    rows = paired_rows(results)
    if not rows:
        return None
    table = Table(
        title=f"paired differences (model − {rows[0].baseline}, ms, {rows[0].confidence:.0%} CI)",
        title_justify="left",
        header_style="bold",
        box=box.SIMPLE_HEAD,
    )
    for title in ("model", "metric", "median diff", "CI", "pairs", ""):
        table.add_column(title, justify="right" if title in ("median diff", "CI", "pairs") else "left", no_wrap=True)
    for row in rows:
        table.add_row(
            row.model, row.metric, diff_ms(row.diff.median_diff), ci_ms(row.diff), f"{row.diff.n:,}", row.verdict
        )
    return table


def render_table(results: Results) -> RenderableType:
    """The whole terminal summary as one rich renderable (tables plus notes)."""
    # what was not measured comes before the answer: an empty measurement must not read as a clean one
    parts: list[RenderableType] = [Text(line, style="bold red") for line in truth.no_data_lines(results)]
    verdict = render_verdict(results)  # the answer first
    if verdict is not None:
        parts.append(verdict)
    parts.append(_model_table(results))
    stages = _stage_table(results)
    if stages is not None:
        parts.append(stages)
    if (ladder := ladder_table(results)) is not None:
        parts.append(ladder)
    parts.extend(t for t in (decode_fit_table(results), kv_capacity_table(results)) if t is not None)
    if (reasoning := reasoning_view.console_table(results)) is not None:
        parts.append(reasoning)
    parts += decode_view.console_tables(results)
    server = server_view.console_table(results)
    if server is not None:
        parts.append(server)
    if (gpu := gpu_view.console_table(results)) is not None:
        parts.append(gpu)
    paired = _paired_table(results)
    if paired is not None:
        parts.append(paired)
    if (steps := agent_steps.console_table(results)) is not None:
        parts.append(steps)
    notes: list[str] = truth.error_example_lines(results)
    notes.extend(f"note: {text}" for text in truth.cut_lines(results))
    notes.extend(f"warning: {text}" for text in truth.stalled_lines(results))
    notes.extend(f"warning: server/client gap: {text}" for text in truth.gap_lines(results))
    if presets_differ(results):
        notes.append(f"note: {MIXED_MODELS_NOTE}")
    notes.extend(f"note: {text}" for text in cached_notes(results))
    notes.extend(f"note: {text}" for text in reasoning_view.notes(results))
    notes.extend(client_health.console_notes(results))
    notes.extend(f"note: {text}" for text in agent_steps.step_notes(results))
    if results.client.client_saturated:
        reasons = "; ".join(results.client.saturation_reasons) or f"CPU {results.client.cpu_max_ratio:.0%}"
        notes.append(f"warning: client saturated ({reasons}): latencies include load-generator delay")
    notes.extend(fleet_notes(results))
    for text in notes:
        parts.append(Text(text, style="bold yellow" if text.startswith("warning") else "italic"))
    return Group(*parts)


def fleet_notes(results: Results) -> list[str]:
    """Lost and stalled workers and missing final counts, one line each (docs/troubleshooting.md); a refused
    worker was said once, when it was refused."""
    client, notes = results.client, []
    for lost in client.lost_workers:
        gap = ", ".join(f"{key} ~{u.requests} requests" for key, u in sorted(lost.unreported.items()) if u.requests)
        notes.append(
            f"warning: lost worker {lost.worker} ({lost.lost_at_s:.1f} s, {sum(lost.users.values())} users): "
            f"traffic it never reported, estimated: {gap or 'none'}"
        )
    for stall in client.stalled_workers:
        notes.append(
            f"warning: worker {stall.worker} stalled {stall.duration_s:.1f} s from {stall.from_s:.1f} s; "
            f"{stall.requests} requests across it carry the freeze in their latency"
        )
    if results.partial is not None:
        windows = ", ".join(f"{w.worker} {w.from_s:.1f}-{w.to_s:.1f} s" for w in results.partial.windows)
        notes.append(f"warning: partial results: final counts missing from {windows}")
    return notes


def print_summary(results: Results, console: Console | None = None) -> None:
    """Print :func:`render_table` to ``console`` (stdout by default)."""
    (console or wide_console()).print(render_table(results))


def render_comparison(comparison: Comparison) -> RenderableType:
    """This run against a baseline: each cell ``now (Δ%)``, regressions in red."""
    table = Table(
        title=f"compared with baseline (regression: >{comparison.threshold:.0%} worse)",
        title_justify="left",
        header_style="bold",
    )
    table.add_column("model")
    for metric in summary_metrics():
        table.add_column(metric.title, justify="right")
    for row in comparison.rows:
        cells = []
        for d in row.deltas:
            style = "bold red" if d.regression else "green" if d.improvement else ""
            cells.append(Text(f"{d.metric.show(d.current)} ({pct(d.change)})", style=style))
        table.add_row(row.key + (f" @{row.stage}" if row.stage else ""), *cells)
    parts: list[RenderableType] = [table]
    if comparison.regressions:
        parts.append(Text("regressions: " + "; ".join(comparison.regressions), style="bold red"))
    else:
        parts.append(Text("no regressions", style="green"))
    return Group(*parts)


__all__ = ["errors_text", "kib", "print_summary", "render_comparison", "render_table"]


def wide_console() -> Console:
    """A console at least 120 columns wide: piped output (CI logs, files) must not truncate numbers."""
    probe = Console()
    return probe if probe.is_terminal and probe.width >= 120 else Console(width=max(probe.width, 140))
