"""The HTML report's opening section (the verdict), its decode-speed-vs-context chart and a grid's SLO table.

The chart is the seed's criterion drawn: per-user decode speed (1 / TPOT p50) against the rung's context
length, one line per model (and per users level of a grid) in its attention type's colour.
"""

from __future__ import annotations

from html import escape

from attnload.config.model import Slo
from attnload.report.svg import PALETTE, Series, line_chart
from attnload.results.ladder import tokens_label
from attnload.results.model import Results, VerdictModel
from attnload.results.verdict import meets_slo

SLO_MET, SLO_MISSED = "met", "missed"


def attention_colors(results: Results) -> dict[str, str]:
    """One colour per attention type (sorted), as the TTFT-vs-prompt scatter colours them."""
    attentions = sorted({m.attention.upper() for m in results.models})
    return {a: PALETTE[i % len(PALETTE)] for i, a in enumerate(attentions)}


def has_ladder(results: Results) -> bool:
    return any(m.context_scaling for m in results.models)


def decode_context_chart(results: Results) -> str:
    """Decode tok/s per user against context tokens: a line per model (dashed for a grid's larger users)."""
    colors = attention_colors(results)
    series: list[Series] = []
    for model in results.models:
        levels = sorted({p.users or 0 for p in model.context_scaling})
        for i, users in enumerate(levels):
            points = [
                (float(p.context), p.decode_tokens_per_s_per_user)
                for p in model.context_scaling
                if (p.users or 0) == users and p.decode_tokens_per_s_per_user is not None
            ]
            name = f"{model.key} ({model.attention.upper()})" + (f", {users} users" if len(levels) > 1 else "")
            series.append(Series(name, points, colors[model.attention.upper()], dashed=i > 0))
    return line_chart(
        "plot-decode-context",
        series,
        "context (prompt tokens)",
        "decode tok/s per user",
        log_y=False,
        describe=lambda s, x, y: f"{s.name}: {y:,.1f} tok/s per user at {x:,.0f} tokens",
    )


def ladder_charts(results: Results) -> list[tuple[str, str, str]]:
    """(title, caption, svg) of the ladder's chart, first among the plots (none without a ladder)."""
    if not has_ladder(results):
        return []
    return [
        (
            "Decode speed per user vs context",
            "Output tokens/s of one stream (1 / TPOT p50) at each rung of the context ladder, one line per model "
            "in its attention type's colour (dashed: a grid's larger user counts). The seed's criterion: the "
            "line that falls less keeps decoding fast as the context grows.",
            decode_context_chart(results),
        )
    ]


def _cell(value: float | int | None, fmt: str = "{:,.2f}") -> str:
    return f'<td class="num">{"—" if value is None else escape(fmt.format(value))}</td>'


def _verdict_row(v: VerdictModel) -> str:
    load = v.slo_met_users if v.slo_met_users is not None else v.slo_met_rate
    return (
        f"<tr><td>{escape(v.target)}</td>"
        f'<td class="num">{escape(tokens_label(v.context)) if v.context else "—"}</td>'
        f"{_cell(load, '{:,}' if v.slo_met_users is not None else '{:,.2f}')}{_cell(v.gpus, '{:,}')}"
        f"{_cell(v.users_per_gpu)}{_cell(v.output_tokens_per_s_per_gpu, '{:,.0f}')}"
        f"{_cell(v.usd_per_mtok_output, '${:,.2f}')}</tr>"
    )


def verdict_section(results: Results) -> str:
    """The report's first section: the verdict's text and, when known, each model's capacity and cost."""
    verdict = results.verdict
    if verdict is None or not verdict.text:
        return ""
    out = f'<p class="verdict" id="verdict-text">{escape(verdict.text)}</p>'
    if any(v.slo_met_users is not None or v.slo_met_rate is not None for v in verdict.models):
        heads = ("model", "context", "users / rate at SLO", "GPUs", "users per GPU", "out tok/s per GPU", "$ / M out")
        head = "".join(f"<th>{escape(h)}</th>" for h in heads)
        rows = "".join(_verdict_row(v) for v in verdict.models)
        out += f'<table id="verdict-table"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'
    return out + slo_grid(results)


def slo_grid(results: Results) -> str:
    """A grid run with an SLO: per model, contexts down and users across, each cell met or missed."""
    grid = [m for m in results.models if len({s.users for s in m.stages if s.context is not None}) > 1]
    slo = _slo_of(results)
    if not grid or slo is None:
        return ""
    out = ['<p class="note">SLO met (p99s within the config\'s slo, no failures) per context and users:</p>']
    for model in grid:
        users = sorted({s.users or 0 for s in model.stages if s.context is not None})
        contexts = sorted({s.context or 0 for s in model.stages if s.context is not None})
        head = "".join(f"<th>{u} users</th>" for u in users)
        rows = []
        for context in contexts:
            cells = []
            for u in users:
                stage = next((s for s in model.stages if s.context == context and s.users == u), None)
                met = stage is not None and meets_slo(stage, slo)
                cells.append(f'<td class="slo-{SLO_MET if met else SLO_MISSED}">{SLO_MET if met else SLO_MISSED}</td>')
            rows.append(f"<tr><td>{escape(tokens_label(context))}</td>{''.join(cells)}</tr>")
        out.append(
            f'<table class="slo-grid" data-model="{escape(model.key)}"><caption>{escape(model.key)}</caption>'
            f"<thead><tr><th>context</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        )
    return "".join(out)


def _slo_of(results: Results) -> Slo | None:
    """The run's SLO, as the results record it (``config.slo``); None when the run set none."""
    raw = results.config.get("slo")
    if not isinstance(raw, dict) or not any(v is not None for v in raw.values()):
        return None
    return Slo.model_validate({k: v for k, v in raw.items() if k in Slo.model_fields})
