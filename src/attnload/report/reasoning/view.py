"""One column list for the reasoning view, drawn by the console, the HTML report and the LLM tab.

TTFAT (time to the first answer token) sits beside TTFT: the gap between them is the time spent
reasoning before the answer began. ``reasoning_tokens`` is the client's count of streamed reasoning
deltas; the server's own count (``server_reasoning_tokens``) is shown beside it, and where the two
disagree the model's ``reasoning_note`` says so in words.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from html import escape

from rich import box
from rich.table import Table

from attnload.report.fmt import count, ms_bare, percent, series_name, stage_label
from attnload.results.model import ModelSummary, Results, StageSummary, Summary, Totals


@dataclass(frozen=True)
class Column:
    """A column: its title, the JSON path of the field it shows, the raw value, and how it reads."""

    title: str
    path: str
    get: Callable[[Totals], float | int | None]
    show: Callable[[float | int | None], str]


def _ms(value: float | int | None) -> str:
    return ms_bare(None if value is None else float(value))


def _share(value: float | int | None) -> str:
    return percent(None if value is None else float(value))


def _answer(totals: Totals) -> Summary:
    """TTFAT's summary (its row of the metrics table, ``measure.metrics``)."""
    return totals.summary_of("ttfat_s")


COLUMNS: tuple[Column, ...] = (
    Column("TTFT p50 ms", "ttft_s.p50", lambda t: t.ttft_s.p50, _ms),
    Column("TTFAT p50 ms", "ttfat_s.p50", lambda t: _answer(t).p50, _ms),
    Column("TTFAT p99 ms", "ttfat_s.p99", lambda t: _answer(t).p99, _ms),
    Column("reasoning tok", "reasoning_tokens", lambda t: t.reasoning_tokens, count),
    Column("out tok", "completion_tokens", lambda t: t.completion_tokens, count),
    Column("reasoning share", "reasoning_share", lambda t: t.reasoning_share, _share),
    Column("server's count", "server_reasoning_tokens", lambda t: t.server_reasoning_tokens, count),
)


def has_reasoning(results: Results) -> bool:
    """Whether any model streamed reasoning, or its server said it reasoned (or the two disagree)."""
    return any(
        m.reasoning_tokens > 0 or (m.server_reasoning_tokens or 0) > 0 or m.reasoning_note for m in results.models
    )


def notes(results: Results) -> list[str]:
    """Each model's disagreement note (the server's reasoning count against the streamed one)."""
    return [m.reasoning_note for m in results.models if m.reasoning_note]


def _rows(results: Results) -> Iterator[tuple[ModelSummary, StageSummary | None, Totals]]:
    """The model's whole run (stage None), then its stages when it had more than one."""
    for model in results.models:
        yield model, None, model
        if len(model.stages) > 1:
            for stage in model.stages:
                yield model, stage, stage


def _scope(stage: StageSummary | None) -> str:
    return "run" if stage is None else stage_label(stage)


def console_table(results: Results) -> Table | None:
    """The reasoning table (None when no reasoning was seen, so plain runs keep their tables)."""
    if not has_reasoning(results):
        return None
    table = Table(
        title="reasoning (TTFAT: time to the first answer token, after any reasoning)",
        title_justify="left",
        header_style="bold",
        box=box.SIMPLE_HEAD,
    )
    table.add_column("model", no_wrap=True)
    table.add_column("scope", no_wrap=True)
    for column in COLUMNS:
        table.add_column(column.title.replace(" ", "\n", 1), justify="right", no_wrap=True)
    for model, stage, totals in _rows(results):
        label = series_name(model) if stage is None else ""
        table.add_row(label, _scope(stage), *(c.show(c.get(totals)) for c in COLUMNS))
    return table


def _cell(column: Column, totals: Totals) -> str:
    value = column.get(totals)
    raw = "" if value is None else repr(value)
    text = column.show(value)
    return f'<td class="num" data-field="{column.path}" data-value="{escape(raw)}">{escape(text)}</td>'


def html_section(results: Results) -> str:
    """The HTML report's "Reasoning" section (disagreement notes are the summary's callouts)."""
    head = '<th>model</th><th class="l">scope</th>' + "".join(f"<th>{escape(c.title)}</th>" for c in COLUMNS)
    rows = []
    for model, stage, totals in _rows(results):
        index = "" if stage is None else f' data-stage="{stage.index}"'
        rows.append(
            f'<tr data-model="{escape(model.key)}"{index}><th scope="row">{escape(model.key)}</th>'
            f"<td>{escape(_scope(stage))}</td>{''.join(_cell(c, totals) for c in COLUMNS)}</tr>"
        )
    explain = (
        '<p class="note">TTFT counts the first token of any kind; TTFAT the first answer (content) token '
        "after any reasoning. ITL and TPOT count every output token, reasoning included. Reasoning tokens "
        "are counted from the streamed reasoning deltas; the server's own count is shown beside them.</p>"
    )
    table = (
        f'<table class="reasoning" id="reasoning-table"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
    return explain + table


LIVE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("ttfat_p50_ms", "TTFAT p50 (ms)"),
    ("ttfat_p99_ms", "TTFAT p99 (ms)"),
    ("reasoning_share", "Reasoning share"),
)
"""The LLM tab's reasoning columns (blank cells until the quantity is measured)."""
LIVE_KEYS = tuple(key for key, _ in LIVE_COLUMNS)


def live_cells(totals: Totals) -> dict[str, str]:
    """The LLM tab's reasoning cells of one row, formatted as the console formats them."""
    return {
        "ttfat_p50_ms": "" if (p50 := _answer(totals).p50) is None else ms_bare(p50),
        "ttfat_p99_ms": "" if (p99 := _answer(totals).p99) is None else ms_bare(p99),
        "reasoning_share": "" if totals.reasoning_share is None else percent(totals.reasoning_share),
    }


__all__ = ["COLUMNS", "LIVE_COLUMNS", "LIVE_KEYS", "console_table", "has_reasoning", "html_section", "notes"]
