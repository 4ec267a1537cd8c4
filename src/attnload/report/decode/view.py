"""Speculative decoding and prefill interference in the console and the HTML report.

Speculation: per model and stage, the client's tokens per decode step beside the server's, the server's
per-token acceptance and the ITL per token (charts: tokens per step and acceptance by stage).
Interference (``--shape interference:L``): per model, decode ITL p50 without and during the injected
prefills, the longest gap and the stall per 1000 prefill tokens (chart: decode ITL over time, the
injected prefills' windows drawn as a dashed square wave over it).
"""

from __future__ import annotations

from collections.abc import Iterator
from html import escape

from rich import box
from rich.table import Table

from attnload.report.fmt import DASH, ms_bare, percent, series_name, stage_label
from attnload.report.svg import PALETTE, Series, line_chart
from attnload.results.model import ModelSummary, Results, StageSummary


def _speculating(results: Results) -> Iterator[tuple[ModelSummary, StageSummary]]:
    for model in results.models:
        for stage in model.stages:
            if stage.server is not None and stage.server.spec_decode is not None:
                yield model, stage


def _interfered(results: Results) -> list[ModelSummary]:
    return [m for m in results.models if m.prefill_interference is not None]


def _number(value: float | None, digits: int = 2) -> str:
    return DASH if value is None else f"{value:.{digits}f}"


def _spec_cells(stage: StageSummary) -> list[str]:
    spec = stage.server.spec_decode if stage.server is not None else None
    assert spec is not None
    return [
        _number(stage.tokens_per_step),
        _number(spec.tokens_per_step),
        percent(spec.acceptance_rate),
        percent(spec.draft_acceptance_rate),
        ms_bare(stage.itl_s.p50),
    ]


_SPEC_HEAD = (
    "tokens/step\nclient",
    "tokens/step\nserver",
    "acceptance\nper token",
    "acceptance\nper draft",
    "ITL p50\nms",
)
_INTERFERENCE_HEAD = (
    "prefill\ntokens",
    "injections",
    "ITL p50 ms\nbaseline",
    "ITL p50 ms\nduring",
    "ITL max ms\nduring",
)


def _interference_cells(model: ModelSummary) -> list[str]:
    found = model.prefill_interference
    assert found is not None
    return [
        f"{found.prefill_tokens:,}",
        str(found.injections),
        ms_bare(found.itl_p50_baseline_s),
        ms_bare(found.itl_p50_during_s),
        ms_bare(found.itl_max_during_s),
        _number(found.ms_per_1k_prefill_tokens, 1),
    ]


def console_tables(results: Results) -> list[Table]:
    """The speculation and interference tables (none when the run had neither)."""
    tables = []
    if speculating := list(_speculating(results)):
        table = Table(title="speculative decoding", title_justify="left", header_style="bold", box=box.SIMPLE_HEAD)
        for title in ("model", "stage", *_SPEC_HEAD):
            table.add_column(title, justify="left" if title in ("model", "stage") else "right", no_wrap=True)
        for model, stage in speculating:
            table.add_row(series_name(model), stage_label(stage), *_spec_cells(stage))
        tables.append(table)
    if interfered := _interfered(results):
        table = Table(
            title="prefill interference (decode gaps overlapping an injected prompt's prefill)",
            title_justify="left",
            header_style="bold",
            box=box.SIMPLE_HEAD,
        )
        for title in ("model", *_INTERFERENCE_HEAD, "stall ms\nper 1K prefill"):
            table.add_column(title, justify="left" if title == "model" else "right", no_wrap=True)
        for model in interfered:
            table.add_row(series_name(model), *_interference_cells(model))
        tables.append(table)
    return tables


def _table_html(table_id: str, head: tuple[str, ...], rows: list[tuple[str, list[str]]]) -> str:
    header = "".join(f"<th>{escape(h.replace(chr(10), ' '))}</th>" for h in head)
    body = "".join(
        f'<tr><th scope="row">{escape(label)}</th>{"".join(f"<td class=num>{escape(c)}</td>" for c in cells)}</tr>'
        for label, cells in rows
    )
    return f'<table id="{table_id}"><thead><tr><th>model</th>{header}</tr></thead><tbody>{body}</tbody></table>'


def _spec_charts(results: Results) -> str:
    per_step, acceptance = [], []
    for i, model in enumerate(results.models):
        stages = [s for s in model.stages if s.server is not None and s.server.spec_decode is not None]
        if not stages:
            continue
        color = PALETTE[i % len(PALETTE)]
        client = [(s.index + 1.0, s.tokens_per_step) for s in stages if s.tokens_per_step is not None]
        server = [(s.index + 1.0, s.server.spec_decode.tokens_per_step) for s in stages]  # type: ignore[union-attr]
        per_step.append(Series(f"{model.key} client", client, color))
        per_step.append(Series(f"{model.key} server", [(x, y) for x, y in server if y is not None], color, True))
        rates = [(s.index + 1.0, s.server.spec_decode.acceptance_rate) for s in stages]  # type: ignore[union-attr]
        acceptance.append(Series(model.key, [(x, y) for x, y in rates if y is not None], color))
    return (
        "<figure><figcaption>Tokens per decode step by stage (solid: the client's tokens per event; dashed: the "
        "server's 1 + accepted drafts)</figcaption>"
        + line_chart("spec-tokens-per-step", per_step, "stage", "tokens per step", log_y=False)
        + "</figure><figure><figcaption>Draft acceptance per token by stage (the server's counters)</figcaption>"
        + line_chart("spec-acceptance", acceptance, "stage", "acceptance", log_y=False)
        + "</figure>"
    )


def _interference_chart(results: Results) -> str:
    series = []
    for i, model in enumerate(results.models):
        found = model.prefill_interference
        if found is None or not found.itl_timeline:
            continue
        color = PALETTE[i % len(PALETTE)]
        series.append(Series(f"{model.key} decode ITL", [(t, itl * 1e3) for t, itl in found.itl_timeline], color))
        values = [itl * 1e3 for _, itl in found.itl_timeline]
        low, high = min(values), max(values)
        wave = [p for start, end in found.windows_s for p in ((start, low), (start, high), (end, high), (end, low))]
        series.append(Series(f"{model.key} injected prefill", wave, color, dashed=True))
    return (
        "<figure><figcaption>Decode ITL over time (mean per half second); dashed: each injected prompt's window, "
        "from sending it to its first token</figcaption>"
        + line_chart("interference-itl", series, "seconds since the test began", "ITL ms", sort_x=False)
        + "</figure>"
    )


def html_section(results: Results) -> str:
    """The HTML report's "Decode steps" section; empty when the run had no speculation and no interference."""
    parts = []
    if speculating := list(_speculating(results)):
        rows = [(f"{m.key} · {stage_label(s)}", _spec_cells(s)) for m, s in speculating]
        parts.append("<h3>Speculative decoding</h3>" + _table_html("spec-decode-table", _SPEC_HEAD, rows))
        parts.append(_spec_charts(results))
    if interfered := _interfered(results):
        rows = [(m.key, _interference_cells(m)) for m in interfered]
        head = (*_INTERFERENCE_HEAD, "stall ms per 1K prefill")
        parts.append("<h3>Prefill interference</h3>" + _table_html("interference-table", head, rows))
        parts.append(_interference_chart(results))
    return "".join(parts)
