"""The HTML report's per-turn table: how TTFT and cached prompt tokens move as conversations grow.

Cached tokens the server did not report are shown as absent, never as 0: vLLM sends
``usage.prompt_tokens_details.cached_tokens`` only when started with ``--enable-prompt-tokens-details``,
so a table of zeros would deny a prefix cache that in fact hit. :func:`cached_notes` says so and
puts the server's own prefix-cache hit ratio (its /metrics, ``server.prefix_cache_hit_ratio``) beside it.
"""

from __future__ import annotations

from html import escape

from attnload.results.model import ModelSummary, Results


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value * 1000.0:,.1f}"


def _tokens(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


PROMPT_DETAILS_FLAG = "--enable-prompt-tokens-details"


def _hit_ratio(model: ModelSummary) -> str:
    ratio = model.server.prefix_cache_hit_ratio if model.server is not None else None
    return "not read" if ratio is None else f"{ratio:.0%}"


def cached_notes(results: Results) -> list[str]:
    """One sentence per conversation model whose server reported no cached tokens on any turn."""
    notes = []
    for model in results.models:
        if model.turns and all(row.cached_tokens_mean is None for row in model.turns):
            notes.append(
                f"{model.key}: the server reported no cached prompt tokens "
                f"(usage.prompt_tokens_details.cached_tokens), so the turn table shows none rather than 0; "
                f"vLLM reports them only when started with {PROMPT_DETAILS_FLAG}. "
                f"Server prefix-cache hit ratio over the run: {_hit_ratio(model)}."
            )
    return notes


def hit_ratio_line(results: Results) -> str:
    """The servers' prefix-cache hit ratios over the run, shown beside the turn table."""
    parts = [f"{model.key} {_hit_ratio(model)}" for model in results.models if model.turns]
    return "Server prefix-cache hit ratio over the run (its /metrics): " + ", ".join(parts) + "."


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
                f'<td class="num">{_ms(row.itl_s.p50)}</td></tr>'
            )
    notes = "".join(
        f'<div class="callout note cached-tokens-note">{escape(text)}</div>' for text in cached_notes(results)
    )
    return (
        f'{notes}<p class="note" id="turn-prefix-cache">{escape(hit_ratio_line(results))}</p>'
        '<table class="stages" id="turn-table"><thead><tr><th>model</th><th>turn</th><th>requests</th>'
        "<th>prompt tok (mean)</th><th>cached tok (mean)</th><th>TTFT p50 (ms)</th><th>TTFT p99 (ms)</th>"
        f"<th>ITL p50 (ms)</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )
