"""What the run did not measure, in words, for the console and the HTML report (``results.truth``).

``no_data`` lines come first, before the verdict: an empty measurement must not read as a clean one.
Then, under the tables: one example per error class, the requests a stop cut, stages too short for their
TTFT, and latencies without a stalled worker's requests. A TTFT percentile the data could not reach
reads ``≥ 8,000`` (a lower bound).
"""

from __future__ import annotations

from html import escape

from attnload.report.fmt import DASH, ms_bare, stage_label
from attnload.results.model import ModelSummary, Results, Summary, Totals
from attnload.results.truth.censoring import ttft_long_note
from attnload.results.truth.fields import NO_DATA_FLAG


def bound_ms(summary: Summary, name: str) -> str:
    """A percentile in ms for a table cell, ``≥ N`` when it is only a lower bound."""
    text = ms_bare(getattr(summary, name))
    return f"≥ {text}" if name in summary.lower_bound and text != DASH else text


def no_data_lines(results: Results) -> list[str]:
    """One line per model that finished nothing, then per such stage of the other models."""
    lines = [
        f"no_data: {m.key} finished no request: {m.no_data_reason}" for m in results.models if NO_DATA_FLAG in m.flags
    ]
    lines += [
        f"no_data: {m.key} {stage_label(s)} finished no request: {s.no_data_reason}"
        for m in results.models
        if NO_DATA_FLAG not in m.flags
        for s in m.stages
        if NO_DATA_FLAG in s.flags
    ]
    return lines


def error_example_lines(results: Results) -> list[str]:
    """One example per model and error class: status, attnload's reading and the body's start."""
    lines = []
    for model in results.models:
        for name, examples in sorted(model.error_examples.items()):
            first = examples[0]
            status = f"HTTP {first.http_status}" if first.http_status is not None else "no response"
            body = f"; body: {first.body[:120]}" if first.body else ""
            lines.append(
                f"error example: {model.key} {name} ({model.errors.get(name, 0):,}): {status} at {first.time}: "
                f"{first.detail}{body}"
            )
    return lines


def cut_lines(results: Results) -> list[str]:
    """Requests a stop cut, stages too short for their TTFT, TTFT percentiles that are lower bounds."""
    lines = []
    for model in results.models:
        cut = model.censored
        if cut.waiting_first_token or cut.streaming:
            lines.append(
                f"{model.key}: {cut.waiting_first_token + cut.streaming:,} requests cut by a stop "
                f"({cut.waiting_first_token:,} waiting for a first token, {cut.streaming:,} streaming); "
                "TTFT counts both (Kaplan–Meier: a wait is a lower bound on its TTFT)"
            )
        if model.ttft_s.lower_bound:
            lines.append(
                f"{model.key}: TTFT {', '.join(model.ttft_s.lower_bound)} are lower bounds (≥): too many requests "
                "were still waiting at the end for the data to reach them"
            )
        for stage in model.stages:
            if (note := ttft_long_note(stage.ttft_s, stage.end_s - stage.start_s)) is not None:
                lines.append(f"{model.key} {stage_label(stage)}: {note}")
    return lines


def gap_lines(results: Results) -> list[str]:
    """Each stage whose server and client views disagree, and why (what lies between the two clocks)."""
    return [f"{m.key} {stage_label(s)}: {r}" for m in results.models for s in m.stages for r in s.server_gap_reasons]


def stalled_lines(results: Results) -> list[str]:
    """Latencies with and without the requests a stalled worker held."""
    lines = []
    for model in results.models:
        for scope, totals in ((model.key, model), *((f"{model.key} {stage_label(s)}", s) for s in model.stages)):
            rest = totals.without_stalled
            if rest is None:
                continue
            lines.append(
                f"{scope}: E2E p99 {ms_bare(totals.e2e_s.p99)} ms with the {rest.requests:,} requests a stalled worker "
                f"held, {ms_bare(rest.e2e_p99_s)} ms without (TTFT p99 {ms_bare(rest.ttft_p99_s)} ms, ITL p99 "
                f"{ms_bare(rest.itl_p99_s)} ms without): the stall is the network's or the client's, not the server's"
            )
    return lines


def empty(model: ModelSummary) -> bool:
    """The model finished no request (``no_data``)."""
    return NO_DATA_FLAG in model.flags


def marked(path: str, totals: Totals, text: str) -> str:
    """A table cell's text for the field at ``path`` (``ttft_s.p50``), ``≥``-marked when it is a lower bound."""
    summary_name, _, percentile = path.partition(".")
    summary = getattr(totals, summary_name, None)
    bounded = isinstance(summary, Summary) and percentile in summary.lower_bound and text != DASH
    return f"≥ {text}" if bounded else text


def html_no_data(results: Results) -> str:
    """The callouts the HTML report opens with, before the verdict: models and stages with no data."""
    return "".join(f'<div class="callout bad no-data">{escape(line)}</div>' for line in no_data_lines(results))


def html_callouts(results: Results) -> str:
    """The summary's notes: requests cut by a stop, short stages, latencies without stalled requests."""
    notes = [*cut_lines(results), *stalled_lines(results)]
    return "".join(f'<div class="callout note truth-note">{escape(line)}.</div>' for line in notes)


def html_error_examples(results: Results) -> str:
    """Up to three examples per model and error class: time, status, attnload's reading, the body's start."""
    items = []
    for model in results.models:
        for name, examples in sorted(model.error_examples.items()):
            for example in examples:
                status = f"HTTP {example.http_status}" if example.http_status is not None else "no response"
                body = f"<pre>{escape(example.body)}</pre>" if example.body else ""
                items.append(
                    f"<li><strong>{escape(model.key)} {escape(name)}</strong> {escape(example.time)} · "
                    f"{escape(status)} · {escape(example.detail)}{body}</li>"
                )
    return f'<ul class="error-examples">{"".join(items)}</ul>' if items else ""
