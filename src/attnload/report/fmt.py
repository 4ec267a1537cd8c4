"""Number formatting, metric lookup and the scraped sources' table, shared by the console, HTML and Locust renderings.

One place decides how a latency or a byte count reads, so the terminal table, the
HTML report and the LLM tab show the same figure for the same field. ``ViewTable`` is the
one per-stage table of a scraped source: the server view (``report/server.py``) and the GPU
view (``report/gpu.py``) are its columns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from html import escape
from typing import Generic, TypeVar

from rich import box
from rich.table import Table

from attnload.measure.metrics import METRICS as TABLE
from attnload.measure.metrics import Metric as TableMetric
from attnload.results.model import GpuSummary, ModelSummary, Results, ServerSummary, StageSummary, Totals

DASH = "—"


def ms(seconds: float | None, digits: int = 1) -> str:
    """A latency in seconds as milliseconds; ``—`` when the distribution is empty."""
    if seconds is None:
        return DASH
    value = seconds * 1000.0
    if value >= 1000:
        return f"{seconds:,.2f} s"
    return f"{value:,.{digits}f} ms"


def ms_bare(seconds: float | None) -> str:
    """Milliseconds without the unit, for table columns whose header names it."""
    if seconds is None:
        return DASH
    value = seconds * 1000.0
    return f"{value:,.0f}" if value >= 1000 else f"{value:,.1f}"


def rate(value: float | None, unit: str = "") -> str:
    if value is None:
        return DASH
    text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.2f}" if abs(value) < 10 else f"{value:,.1f}"
    return f"{text} {unit}".rstrip()


def kib(n_bytes: float | int | str | None) -> str:
    """Bytes as KiB (1024 B, as docs/cost-model.md counts them)."""
    if n_bytes is None or isinstance(n_bytes, str):
        return DASH if n_bytes is None else str(n_bytes)
    value = float(n_bytes) / 1024.0
    return f"{value:,.0f} KiB" if value >= 100 else f"{value:,.1f} KiB"


def count(n: float | int | str | None) -> str:
    if n is None:
        return DASH
    if isinstance(n, str):
        return n
    if n >= 1e6:
        return f"{n / 1e6:,.2f} M"
    return f"{n:,.0f}"


def percent(fraction: float | None) -> str:
    """A 0–1 share (KV cache used, a hit ratio) as a percentage with one decimal: ``2.3 %``.

    Why: servers export these as fractions (vLLM's ``kv_cache_usage_perc`` is 0–1 despite its
    name); a raw ``0.02309707431366254`` under a percent header reads as 0.02 %.
    """
    if fraction is None:
        return DASH
    return f"{fraction * 100:,.1f} %"


def pct(delta: float | None) -> str:
    if delta is None:
        return DASH
    return f"{delta * 100:+.1f}%"


def stage_label(stage: StageSummary) -> str:
    """``64 users`` for a closed-loop stage, ``2 req/s`` for an open-loop one, ``16K ctx, 8 users`` on a ladder."""
    ctx = ""
    if stage.context is not None:
        ctx = (f"{stage.context // 1024}K" if stage.context % 1024 == 0 else f"{stage.context:,}") + " ctx, "
    if stage.users is not None:
        return ctx + f"{stage.users} user" + ("" if stage.users == 1 else "s")
    if stage.rate is not None:
        return f"{stage.rate:g} req/s"
    return f"stage {stage.index + 1}"


def stage_x(stage: StageSummary) -> float | None:
    """The load axis of a stage: users (closed loop) or arrival rate (open loop)."""
    if stage.users is not None:
        return float(stage.users)
    return stage.rate


def load_axis_name(results: Results) -> str:
    for model in results.models:
        for stage in model.stages:
            if stage.users is not None:
                return "concurrent users"
            if stage.rate is not None:
                return "arrival rate (req/s per model)"
    return "stage"


def series_name(model: ModelSummary) -> str:
    return f"{model.key} ({model.attention.upper()})"


def error_total(totals: Totals) -> int:
    return sum(totals.errors.values())


@dataclass(frozen=True)
class Metric:
    """One column of the summary: a value getter, how it reads, and which way is better."""

    key: str
    title: str
    path: str
    """Dotted path of the field in the results JSON (``ttft_s.p50``), for tests and tooltips."""
    get: Callable[[Totals], float | None]
    show: Callable[[float | None], str]
    higher_is_better: bool = False


def _quantile(field: str, q: str) -> Callable[[Totals], float | None]:
    def get(totals: Totals) -> float | None:
        value: float | None = getattr(totals.summary_of(field), q)
        return value

    return get


def _shown(metric: TableMetric) -> Callable[[float | None], str]:
    return ms if metric.unit == "s" else rate


def summary_metrics() -> tuple[Metric, ...]:
    """The summary's columns: each metric's quantiles that the table names for it (``measure.metrics``),
    then throughput."""
    latencies = (
        Metric(
            f"{m.key}_{q}",
            f"{m.title} {q}",
            f"{m.results_field}.{q}",
            _quantile(m.results_field, q),
            ms if m.unit == "s" else rate,
        )
        for m in TABLE
        if m.results_field is not None
        for q in m.columns
    )
    return (
        *latencies,
        Metric(
            "output_tps", "out tok/s", "output_tokens_per_s", lambda t: t.output_tokens_per_s, lambda v: rate(v), True
        ),
        Metric("goodput", "goodput req/s", "goodput_rps", lambda t: t.goodput_rps, rate, True),
    )


Viewed = TypeVar("Viewed", ServerSummary, GpuSummary)
"""What a scraped source said over a stage: the server view or the GPU view."""


@dataclass(frozen=True)
class ViewColumn(Generic[Viewed]):
    """One column of a scraped source's table: title, JSON path under the stage, getter, how it reads."""

    title: str
    path: str
    get: Callable[[Totals, Viewed], float | int | None]
    show: Callable[[float | None], str]
    text: Callable[[Viewed], str] | None = None
    """How the cell reads when not ``show(get(...))``: a server TTFT in a wide bucket reads as its range."""

    def render(self, totals: Totals, view: Viewed) -> str:
        return self.text(view) if self.text is not None else self.show(self.get(totals, view))


@dataclass(frozen=True)
class ViewRow(Generic[Viewed]):
    """A table row: a model's stage (None: its whole run) and what the source said over it."""

    model: ModelSummary
    stage: StageSummary | None
    view: Viewed

    @property
    def totals(self) -> Totals:
        return self.stage if self.stage is not None else self.model


@dataclass(frozen=True)
class RowFlag(Generic[Viewed]):
    """The last column, a word per row (``server_client_gap``, ``bandwidth``)."""

    title: str
    cell: Callable[[ViewRow[Viewed]], str]
    path: str | None = None
    """Its JSON path where the HTML shows it as a column; None: the console only."""
    warn: bool = False
    """A non-empty cell colours the console row."""


@dataclass(frozen=True)
class ViewTable(Generic[Viewed]):
    """A scraped source's per-stage table: one column list that the console and the HTML both draw."""

    source: str
    """What the console's caption calls the metrics (``server``, ``GPU``); the HTML table is ``<source>-table``."""
    title: str
    pick: Callable[[StageSummary | ModelSummary], Viewed | None]
    columns: tuple[ViewColumn[Viewed], ...]
    flag: RowFlag[Viewed]
    groups: tuple[tuple[str, tuple[int, ...]], ...] = ()
    """The console's headers, each over the columns its cell pairs (``24% / 29%``); empty: one per column."""
    stage_note: Callable[[ViewRow[Viewed]], str] | None = None
    """HTML beside the stage's name (the gap flag with its reasons)."""

    def rows(self, results: Results) -> list[ViewRow[Viewed]]:
        """Each model's stages with a view, else its whole-run view."""
        out: list[ViewRow[Viewed]] = []
        for model in results.models:
            staged = [ViewRow(model, s, view) for s in model.stages if (view := self.pick(s)) is not None]
            whole = self.pick(model)
            out.extend(staged or ([ViewRow(model, None, whole)] if whole is not None else []))
        return out

    def console(self, results: Results) -> Table | None:
        """The terminal's table (None when the source was never read)."""
        found = self.rows(results)
        if not found:
            return None
        table = Table(title=self.title, title_justify="left", header_style="bold", box=box.SIMPLE_HEAD)
        groups = self.groups or tuple((c.title, (i,)) for i, c in enumerate(self.columns))
        table.add_column("model", no_wrap=True)
        table.add_column("stage", no_wrap=True)
        for title, _ in groups:
            table.add_column(title, justify="right", no_wrap=True)
        table.add_column(self.flag.title, no_wrap=True)
        last = None
        for row in found:
            shown = [column.render(row.totals, row.view) for column in self.columns]
            flag = self.flag.cell(row)
            table.add_row(
                row.model.key if row.model.key != last else "",
                stage_label(row.stage) if row.stage else "run",
                *(" / ".join(shown[i] for i in indexes) for _, indexes in groups),
                flag,
                style="yellow" if self.flag.warn and flag else None,
            )
            last = row.model.key
        unread = [m.key for m in results.models if self.pick(m) is None]
        if unread:
            table.caption = f"no {self.source} metrics for " + ", ".join(unread)
        return table

    def html(self, results: Results, note: str) -> str:
        """The HTML table after ``note``, cells carrying ``data-field``/``data-value`` like the others."""
        head = "".join(f"<th>{escape(c.title)}</th>" for c in self.columns)
        if self.flag.path is not None:
            head += f"<th>{escape(self.flag.title)}</th>"
        body = [self._html_row(row) for row in self.rows(results)]
        return (
            f'{note}<table class="stages" id="{self.source.lower()}-table"><thead><tr><th>model</th>'
            f'<th class="l">stage</th><th>source</th>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
        )

    def _html_row(self, row: ViewRow[Viewed]) -> str:
        cells = []
        for column in self.columns:
            value = column.get(row.totals, row.view)
            raw = "" if value is None else repr(value)
            cells.append(
                f'<td class="num" data-field="{escape(column.path)}" data-value="{escape(raw)}">'
                f"{escape(column.render(row.totals, row.view))}</td>"
            )
        if self.flag.path is not None:
            cells.append(f'<td data-field="{escape(self.flag.path)}">{escape(self.flag.cell(row))}</td>')
        where = escape(stage_label(row.stage) if row.stage is not None else "whole run")
        if self.stage_note is not None:
            where += " " + self.stage_note(row)
        index = f' data-stage="{row.stage.index}"' if row.stage is not None else ""
        return (
            f'<tr data-model="{escape(row.model.key)}"{index}><th scope="row">{escape(row.model.key)}</th>'
            f"<td>{where}</td><td>{escape(row.view.source or DASH)}</td>{''.join(cells)}</tr>"
        )
