"""Terminal rendering of ``results.verdict`` (the answer first) and of a context ladder's rungs."""

from __future__ import annotations

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from attnload.report.fmt import DASH, ms_bare, rate
from attnload.results.ladder import tokens_label
from attnload.results.model import Results, VerdictModel

VERDICT_TITLE = "verdict"


def _num(value: float | int | None, digits: int = 2) -> str:
    if value is None:
        return DASH
    return f"{value:,.{digits}f}" if isinstance(value, float) else f"{value:,}"


def _verdict_row(v: VerdictModel) -> list[str]:
    load = str(v.slo_met_users) if v.slo_met_users is not None else _num(v.slo_met_rate)
    return [
        v.target,
        tokens_label(v.context) if v.context else DASH,
        load if (v.slo_met_users is not None or v.slo_met_rate is not None) else DASH,
        _num(v.gpus),
        _num(v.users_per_gpu),
        _num(v.output_tokens_per_s_per_gpu, 0),
        f"${v.usd_per_mtok_output:,.2f}" if v.usd_per_mtok_output is not None else DASH,
    ]


_VERDICT_HEADS = (
    "model",
    "context",
    "users / rate\nat SLO",
    "GPUs",
    "users\nper GPU",
    "out tok/s\nper GPU",
    "$ / M out",
)


def render_verdict(results: Results) -> RenderableType | None:
    """The "verdict" section: the text, then one row per model when any figure is known (None: no verdict)."""
    verdict = results.verdict
    if verdict is None or not verdict.text:
        return None
    parts: list[RenderableType] = [Text(VERDICT_TITLE, style="bold"), Text(verdict.text)]
    if any(v.slo_met_users is not None or v.slo_met_rate is not None for v in verdict.models):
        table = Table(header_style="bold", box=box.SIMPLE_HEAD)
        heads = (
            "model",
            "context",
            "users / rate\nat SLO",
            "GPUs",
            "users\nper GPU",
            "out tok/s\nper GPU",
            "$ / M out",
        )
        for title in heads:
            table.add_column(title, justify="left" if title == "model" else "right", no_wrap=True)
        for v in verdict.models:
            table.add_row(*_verdict_row(v))
        parts.append(table)
    return Group(*parts)


def ladder_table(results: Results) -> Table | None:
    """One row per rung: requested and measured prompt tokens, decode speed per user and its scaling."""
    if not any(m.context_scaling for m in results.models):
        return None
    table = Table(title="context ladder", title_justify="left", header_style="bold", box=box.SIMPLE_HEAD)
    heads = (
        "model",
        "context",
        "users",
        "prompt tok\np50",
        "decode tok/s\nper user",
        "vs shortest",
        "ITL ms\np50 / p99",
        "TTFT ms\np50 / p99",
        "out\ntok/s",
    )
    for title in heads:
        table.add_column(title, justify="left" if title == "model" else "right", no_wrap=True)
    for model in results.models:
        for i, stage in enumerate(s for s in model.stages if s.context is not None):
            point = next(
                (p for p in model.context_scaling if p.context == stage.context and p.users == stage.users), None
            )
            table.add_row(
                model.key if i == 0 else "",
                tokens_label(stage.context or 0),
                _num(stage.users),
                _num(stage.prompt_tokens_p50, 0),
                _num(stage.decode_tokens_per_s_per_user, 1),
                f"{point.relative:.2f}×" if point is not None and point.relative is not None else DASH,
                f"{ms_bare(stage.itl_s.p50)} / {ms_bare(stage.itl_s.p99)}",
                f"{ms_bare(stage.ttft_s.p50)} / {ms_bare(stage.ttft_s.p99)}",
                rate(stage.output_tokens_per_s),
            )
        table.add_section()
    return table
