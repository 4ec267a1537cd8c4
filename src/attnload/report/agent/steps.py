"""How an agent session's steps behave as their context grows: the tables and the two charts.

What separates GQA from MLA under agents is whether a session's prefix is still cached when its next
step arrives (the tool ran meanwhile): the step table puts context, cached tokens and TTFT side by
side per step, and the charts plot TTFT p50 against the step and against the context, one line per
model. Cached tokens a server did not report show as absent, never as 0 (vLLM reports them only with
``--enable-prompt-tokens-details``; its CPU backend turns prefix caching off for MLA).
"""

from __future__ import annotations

from html import escape

from rich import box
from rich.table import Table

from attnload.report.fmt import DASH, ms_bare, series_name
from attnload.report.svg import PALETTE, Series, line_chart
from attnload.results.model import Results

PROMPT_DETAILS_FLAG = "--enable-prompt-tokens-details"


def _tokens(value: float | None) -> str:
    return DASH if value is None else f"{value:,.0f}"


def has_steps(results: Results) -> bool:
    return any(m.steps for m in results.models)


def step_notes(results: Results) -> list[str]:
    """One sentence per agent model whose server reported no cached prompt tokens on any step."""
    return [
        f"{model.key}: the server reported no cached prompt tokens on any agent step, so the step table shows "
        f"none rather than 0; vLLM reports them only when started with {PROMPT_DETAILS_FLAG} (and its CPU "
        "backend runs MLA without a prefix cache)"
        for model in results.models
        if model.steps and all(row.cached_tokens_mean is None for row in model.steps)
    ]


def console_table(results: Results) -> Table | None:
    """Per model and step: requests, context and cached tokens (means), TTFT p50/p99, step time p50."""
    if not has_steps(results):
        return None
    table = Table(title="per agent step", title_justify="left", header_style="bold", box=box.SIMPLE_HEAD)
    for title in ("model", "step", "requests", "context tok", "cached tok", "TTFT ms p50 / p99", "step ms p50"):
        table.add_column(title, justify="left" if title == "model" else "right", no_wrap=True)
    for model in results.models:
        for i, row in enumerate(model.steps):
            table.add_row(
                model.key if i == 0 else "",
                str(row.step),
                f"{row.requests:,}",
                _tokens(row.context_tokens),
                _tokens(row.cached_tokens_mean),
                f"{ms_bare(row.ttft_s.p50)} / {ms_bare(row.ttft_s.p99)}",
                ms_bare(row.step_time_s.p50),
            )
        if model.steps:
            table.add_section()
    return table


def html_section(results: Results) -> str:
    """The step table, the per-session line and the notes, as HTML."""
    rows, sessions = [], []
    for model in results.models:
        for row in model.steps:
            rows.append(
                f'<tr data-model="{escape(model.key)}" data-step="{row.step}"><th scope="row">{escape(model.key)}'
                f'</th><td class="num">{row.step}</td><td class="num">{row.requests:,}</td>'
                f'<td class="num">{_tokens(row.context_tokens)}</td>'
                f'<td class="num">{_tokens(row.cached_tokens_mean)}</td>'
                f'<td class="num">{ms_bare(row.ttft_s.p50)}</td><td class="num">{ms_bare(row.ttft_s.p99)}</td>'
                f'<td class="num">{ms_bare(row.step_time_s.p50)}</td></tr>'
            )
        done = model.agent_sessions
        if done is not None:
            sessions.append(
                f"{model.key}: {done.sessions:,} sessions ended ({done.ended_steps:,} at their step count, "
                f"{done.ended_context:,} at max_context, {done.ended_failed:,} by a failed step), "
                f"{_tokens(done.steps_completed_mean)} steps, {_tokens(done.prompt_tokens_mean)} tokens in and "
                f"{_tokens(done.completion_tokens_mean)} out per session, duration p50 "
                f"{ms_bare(done.duration_s.p50)} ms"
            )
    notes = "".join(f'<div class="callout note">{escape(text)}</div>' for text in step_notes(results))
    listed = "".join(f"<li>{escape(text)}</li>" for text in sessions)
    return (
        f'{notes}<ul id="agent-sessions">{listed}</ul>'
        '<table class="stages" id="step-table"><thead><tr><th>model</th><th>step</th><th>requests</th>'
        "<th>context tok (mean)</th><th>cached tok (mean)</th><th>TTFT p50 (ms)</th><th>TTFT p99 (ms)</th>"
        f"<th>step p50 (ms)</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def step_charts(results: Results) -> list[tuple[str, str, str]]:
    """(title, caption, svg): TTFT p50 against the step and against the step's context, one line per model."""
    if not has_steps(results):
        return []
    by_step: list[Series] = []
    by_context: list[Series] = []
    for i, model in enumerate(results.models):
        color = PALETTE[i % len(PALETTE)]
        rows = [r for r in model.steps if r.ttft_s.p50 is not None]
        by_step.append(
            Series(series_name(model), [(float(r.step), (r.ttft_s.p50 or 0.0) * 1000.0) for r in rows], color)
        )
        by_context.append(
            Series(
                series_name(model),
                [(r.context_tokens or 0.0, (r.ttft_s.p50 or 0.0) * 1000.0) for r in rows if r.context_tokens],
                color,
            )
        )
    return [
        (
            "TTFT vs agent step",
            "TTFT p50 per step of the agent sessions. A step whose session stayed cached while its tool ran "
            "prefills only the new tool result; one that was evicted re-prefills the whole history.",
            line_chart(
                "plot-ttft-step",
                by_step,
                "step",
                "TTFT p50 (ms)",
                describe=lambda s, x, y: f"{s.name}: {y:,.1f} ms at step {x:g}",
            ),
        ),
        (
            "TTFT vs agent context",
            "TTFT p50 per step against the step's mean context (prompt tokens, tools included).",
            line_chart(
                "plot-ttft-step-context",
                by_context,
                "context tokens (step mean)",
                "TTFT p50 (ms)",
                describe=lambda s, x, y: f"{s.name}: {y:,.1f} ms at {x:,.0f} tokens",
            ),
        ),
    ]
