"""The HTML report's per-turn table: how TTFT and cached prompt tokens move as conversations grow."""

from __future__ import annotations

from html import escape

from attnload.results.model import Results


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value * 1000.0:,.1f}"


def _tokens(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def turn_table(results: Results) -> str:
    """One row per (model, turn index): requests, prompt and cached tokens (means), TTFT p50/p99, ITL p50."""
    rows = []
    for model in results.models:
        for row in model.turns:
            rows.append(
                f'<tr data-model="{escape(model.key)}" data-turn="{row.turn}"><th scope="row">{escape(model.key)}'
                f'</th><td class="num">{row.turn}</td><td class="num">{row.requests:,}</td>'
                f'<td class="num">{_tokens(row.prompt_tokens_mean)}</td>'
                f'<td class="num">{_tokens(row.cached_tokens_mean)}</td>'
                f'<td class="num">{_ms(row.ttft_s.p50)}</td><td class="num">{_ms(row.ttft_s.p99)}</td>'
                f'<td class="num">{_ms(row.itl_s.p50)}</td></tr>')
    return ('<table class="stages" id="turn-table"><thead><tr><th>model</th><th>turn</th><th>requests</th>'
            "<th>prompt tok (mean)</th><th>cached tok (mean)</th><th>TTFT p50 (ms)</th><th>TTFT p99 (ms)</th>"
            f"<th>ITL p50 (ms)</th></tr></thead><tbody>{''.join(rows)}</tbody></table>")
