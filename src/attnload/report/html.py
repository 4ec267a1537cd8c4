"""The self-contained HTML report: one file, inline CSS and static SVG, nothing fetched at view time.

Numeric table cells carry ``data-field`` (the JSON path) and ``data-value`` (the raw
number from the results file) beside the formatted text, so the page can be checked
against the JSON it was rendered from.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

from attnload import __version__
from attnload.report import gpu as gpu_view
from attnload.report import server as server_view
from attnload.report import truth
from attnload.report.agent import steps as agent_steps
from attnload.report.charts import charts
from attnload.report.clienthealth import render as client_health
from attnload.report.compare import Comparison, compare_results
from attnload.report.console import errors_text, fleet_notes
from attnload.report.decode import view as decode_view
from attnload.report.explain import MIXED_MODELS_NOTE, attention_facts, explain, presets_differ
from attnload.report.fmt import DASH, count, error_total, pct, series_name, stage_label, summary_metrics
from attnload.report.ladder.html import ladder_charts, verdict_section
from attnload.report.microscope.html import microscope_charts
from attnload.report.paired import ci_ms, diff_ms, paired_rows
from attnload.report.reasoning import view as reasoning_view
from attnload.report.requests import RUN_SCAN_LINES, find_requests_file, scatter_figure
from attnload.report.turns import turn_table
from attnload.results.model import ModelSummary, Results, Totals

_CSS = (Path(__file__).with_name("report.css")).read_text(encoding="utf-8")


def _num_cell(path: str, value: float | int | None, text: str, extra_class: str = "") -> str:
    raw = "" if value is None else repr(value)
    cls = f' class="{extra_class}"' if extra_class else ""
    return f'<td{cls} data-field="{path}" data-value="{escape(raw)}">{escape(text)}</td>'


def _totals_cells(totals: Totals) -> str:
    *latencies, output, goodput = summary_metrics()
    cells = [
        _num_cell(m.path, m.get(totals), truth.marked(m.path, totals, m.show(m.get(totals))), "num") for m in latencies
    ]
    cells.append(_num_cell(output.path, totals.output_tokens_per_s, output.show(totals.output_tokens_per_s), "num"))
    cells.append(_num_cell("requests.ok", totals.requests.ok, f"{totals.requests.ok:,}", "num"))
    failed_cls = "num bad" if totals.requests.failed else "num"
    cells.append(_num_cell("requests.failed", totals.requests.failed, f"{totals.requests.failed:,}", failed_cls))
    cells.append(f'<td class="errors" data-total="{error_total(totals)}">{escape(errors_text(totals))}</td>')
    cells.append(_num_cell(goodput.path, totals.goodput_rps, goodput.show(totals.goodput_rps), "num"))
    return "".join(cells)


def _head() -> str:
    """The summary's and the stages' header: the metrics' columns (``fmt.summary_metrics``), then the counts."""
    *latencies, output, goodput = summary_metrics()
    return (
        "".join(f"<th>{escape(m.title)}</th>" for m in latencies)
        + f'<th>{escape(output.title)}</th><th>ok</th><th>failed</th><th class="l">errors</th>'
        + f"<th>{escape(goodput.title)}</th>"
    )


_ATTENTION_FACTS = {
    "kv_bytes_per_token_per_gpu": "<th>KV B/token/GPU</th>",
    "kv_capacity_tokens": "<th>KV capacity (tokens)</th>",
}
"""The attention facts the summary shows as columns when any model has them, with their headers."""


def _summary_table(results: Results) -> str:
    facts = [fact for fact in _ATTENTION_FACTS if any(fact in m.attention_info for m in results.models)]
    head = '<th>model</th><th class="l">attention</th>' + _head() + "".join(_ATTENTION_FACTS[fact] for fact in facts)
    rows = []
    for m in results.models:
        sub = f'<div class="sub">{escape(m.model)}</div>' if m.model != m.key else ""
        failed = ' class="failed-model"' if m.requests.ok == 0 and m.requests.total > 0 else ""
        row = (
            f'<tr data-model="{escape(m.key)}"{failed}><th scope="row">{escape(m.key)}'
            f'{sub}</th><td><span class="badge '
            f'att-{escape(m.attention.lower())}">{escape(m.attention.upper())}</span></td>{_totals_cells(m)}'
        )
        row += "".join(_attention_info_cell(m, fact) for fact in facts)
        rows.append(row + "</tr>")
    return _table("summary", "summary-table", head, rows)


def _attention_info_cell(model: ModelSummary, fact: str) -> str:
    value = model.attention_info.get(fact)
    return _num_cell(f"attention_info.{fact}", value if not isinstance(value, str) else None, count(value), "num")


def _table(css_class: str, table_id: str, head: str, rows: list[str]) -> str:
    """A table with one header row and ``rows``."""
    return (
        f'<table class="{css_class}" id="{table_id}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _stage_table(results: Results) -> str:
    rows = []
    for m in results.models:
        for s in m.stages:
            empty = ' class="empty-stage"' if s.requests.total == 0 else ""
            flags = " ".join(f'<span class="flag">{escape(f)}</span>' for f in s.flags)
            rows.append(
                f'<tr data-model="{escape(m.key)}" data-stage="{s.index}"{empty}><th scope="row">'
                f"{escape(m.key)}</th><td>{escape(stage_label(s))} {flags}</td>{_totals_cells(s)}</tr>"
            )
    if not rows:
        return '<p class="note">This run had a single stage; the summary above is the whole story.</p>'
    return _table("stages", "stage-table", f'<th>model</th><th class="l">stage</th>{_head()}', rows)


def _attention_section(results: Results) -> str:
    cards = []
    for m in results.models:
        facts = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in attention_facts(m))
        cards.append(
            f'<div class="card" data-model="{escape(m.key)}"><h3>{escape(series_name(m))}</h3><dl>{facts}</dl></div>'
        )
    text = "".join(f"<p>{escape(p)}</p>" for p in explain(results))
    return f'<div class="cards">{"".join(cards)}</div><div class="explain">{text}</div>'


def _compare_section(comparison: Comparison, baseline: Results) -> str:
    head = "".join(f"<th>{escape(m.title)}</th>" for m in summary_metrics()) + "<th>failure ratio</th>"
    rows = []
    for row in comparison.rows:
        cells = []
        for d in row.deltas:
            cls = "regression" if d.regression else "improvement" if d.improvement else ""
            base = d.metric.show(d.baseline)
            cells.append(
                f'<td class="num {cls}" data-metric="{d.metric.key}">{escape(d.metric.show(d.current))}'
                f'<div class="sub">was {escape(base)} · {escape(pct(d.change))}</div></td>'
            )
        fb, fc = row.failure_ratio
        cls = "regression" if row.failure_regression else ""
        cells.append(
            f'<td class="num {cls}">{escape(DASH if fc is None else f"{fc:.1%}")}'
            f'<div class="sub">was {escape(DASH if fb is None else f"{fb:.1%}")}</div></td>'
        )
        where = escape(row.key) + (f'<div class="sub">{escape(row.stage)}</div>' if row.stage else "")
        rows.append(
            f'<tr class="{"has-regression" if row.regressions else ""}"><th scope="row">{where}</th>'
            f"{''.join(cells)}</tr>"
        )
    flagged = comparison.regressions
    summary = (
        f'<div class="callout bad"><strong>{len(flagged)} regression(s)</strong> (more than '
        f"{comparison.threshold:.0%} worse):<ul>{''.join(f'<li>{escape(r)}</li>' for r in flagged)}</ul></div>"
        if flagged
        else f'<div class="callout good">No regressions beyond {comparison.threshold:.0%}.</div>'
    )
    extra = ""
    if comparison.only_current or comparison.only_baseline:
        extra = (
            f'<p class="note">Only in this run: {escape(", ".join(comparison.only_current) or DASH)}. '
            f"Only in the baseline: {escape(', '.join(comparison.only_baseline) or DASH)}.</p>"
        )
    return (
        f'<p class="note">Baseline: run started {escape(baseline.started_at)} (config '
        f"{escape(baseline.config_sha256[:12])}). Each cell: this run, then the baseline and the change."
        f'</p>{summary}{extra}<table class="compare" id="compare-table"><thead><tr><th>model</th>{head}'
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _run_section(results: Results) -> str:
    client = results.client
    items = [
        ("started", results.started_at),
        ("ended", results.ended_at),
        ("duration", f"{results.duration_s:,.1f} s"),
        ("config sha256", results.config_sha256),
        ("workers", str(client.workers)),
        ("workers lost", str(client.workers_lost)),
        ("client CPU max", f"{client.cpu_max_ratio:.0%}"),
        ("client saturated", "yes" if client.client_saturated else "no"),
        ("report by", f"attnload {__version__}"),
    ]
    items += [("fleet", note.removeprefix("warning: ")) for note in fleet_notes(results)]
    for key, value in results.config.items():
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        items.append((f"config: {key}", text))
    body = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in items)
    return f'<dl class="run">{body}</dl>'


def _banners(results: Results) -> str:
    out = [truth.html_callouts(results)]
    client = results.client
    if client.client_saturated:
        reasons = "; ".join(client.saturation_reasons) or f"CPU peaked at {client.cpu_max_ratio:.0%}"
        out.append(
            f'<div class="callout bad" id="saturation"><strong>Client saturated</strong> ({escape(reasons)})'
            ": the load generator itself was a bottleneck, so latencies include its delay. "
            "Add workers and rerun.</div>"
        )
    for m in results.models:
        if m.requests.ok == 0 and m.requests.total > 0:
            out.append(
                f'<div class="callout bad"><strong>{escape(m.key)}</strong> completed no request '
                f"({escape(errors_text(m, limit=5))}).</div>"
            )
    if presets_differ(results):
        out.append(f'<div class="callout note">Note: the {MIXED_MODELS_NOTE}.</div>')
    out += [f'<div class="callout note reasoning-note">Note: {escape(t)}.</div>' for t in reasoning_view.notes(results)]
    return "".join(out)


def _paired_section(results: Results) -> str:
    """``--paired``: the per-pair differences against the baseline with their CIs (ms)."""
    rows = paired_rows(results)
    head = "".join(f"<th>{t}</th>" for t in ("model", "metric", "median diff (ms)", "CI (ms)", "pairs", ""))
    body = "".join(
        f"<tr><td>{escape(r.model)}</td><td>{escape(r.metric)}</td>"
        f"{_num_cell('paired.median_diff', r.diff.median_diff, diff_ms(r.diff.median_diff))}"
        f"<td>{escape(ci_ms(r.diff))}</td><td>{r.diff.n:,}</td><td>{escape(r.verdict)}</td></tr>"
        for r in rows
    )
    note = (
        f'<p class="note">Model − {escape(rows[0].baseline)}, prompt by prompt; {rows[0].confidence:.0%} '
        "bootstrap CI of the median. Which model is sent first alternates at random (seeded).</p>"
    )
    return f"{note}<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_html(
    results: Results, compare: Results | None = None, requests: Path | None = None, requests_lines: int | None = None
) -> str:
    """The report as one HTML string; ``compare`` is the baseline run shown side by side; ``requests``
    the run's ``--requests-out`` file (its TTFT-vs-prompt scatter is added, from its first
    ``requests_lines`` lines; None: all)."""
    scatter = scatter_figure(requests, requests_lines)
    figures = "".join(
        f"<figure><figcaption><strong>{escape(title)}</strong><span>{escape(caption)}</span></figcaption>{svg}</figure>"
        for title, caption, svg in [
            *ladder_charts(results),
            *microscope_charts(results),
            *charts(results, compare),
            *([scatter] if scatter else []),
        ]
    )
    opening = truth.html_no_data(results) + (verdict_section(results) or "")  # what is missing, then the answer
    sections = [
        *([("verdict", "Verdict", opening)] if opening else []),
        ("summary", "Summary", _banners(results) + _summary_table(results) + truth.html_error_examples(results)),
        ("attention", "Attention", _attention_section(results)),
        (
            "plots",
            "Plots",
            f'<div class="plots">{figures}</div>' if figures else '<p class="note">No completed requests to plot.</p>',
        ),
        ("stages", "Per stage", _stage_table(results)),
    ]
    if reasoning_view.has_reasoning(results):
        sections.append(("reasoning", "Reasoning", reasoning_view.html_section(results)))
    if server_view.has_server(results):
        sections.append(("server", "Server view", server_view.html_section(results)))
    if gpu_view.has_gpu(results):
        sections.append(("gpu", "GPU view", gpu_view.html_section(results)))
    if decode := decode_view.html_section(results):
        sections.append(("decode-steps", "Decode steps: speculation and prefill interference", decode))
    if health := client_health.html_section(results):
        sections.append(("client-health", "Client health and arrival phase", health))
    if any(m.turns for m in results.models):
        sections.append(("turns", "Per conversation turn", turn_table(results)))
    if agent_steps.has_steps(results):
        sections.append(("steps", "Per agent step", agent_steps.html_section(results)))
    if paired_rows(results):
        sections.append(("paired", "Paired differences", _paired_section(results)))
    if compare is not None:
        sections.append(
            ("compare", "Compared with baseline", _compare_section(compare_results(results, compare), compare))
        )
    sections.append(("run", "Run, client and config", _run_section(results)))
    nav = "".join(f'<a href="#{sid}">{escape(title)}</a>' for sid, title, _ in sections)
    body = "".join(f'<section id="{sid}"><h2>{escape(title)}</h2>{html}</section>' for sid, title, html in sections)
    models = ", ".join(series_name(m) for m in results.models)
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>attnload report — {escape(results.started_at)}</title><style>{_CSS}</style></head><body>"
        f'<header><h1>attnload report</h1><p class="sub">{escape(models)} · {escape(results.started_at)} · '
        f"{results.duration_s:,.0f} s</p><nav>{nav}</nav></header><main>{body}</main>"
        f"<footer>Medians first; percentiles from mergeable histograms (≤1% relative error). "
        f"Generated by attnload {__version__}.</footer></body></html>"
    )


def write_html(
    results: Results, path: str | Path, compare: Results | None = None, requests: Path | None = None
) -> Path:
    """Write :func:`render_html` to ``path`` (parents created); returns the path written. Without
    ``requests``, the ``--requests-out`` file the results name is used when it exists (its first
    ``RUN_SCAN_LINES`` lines: the run's own report is written as the master stops)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    scan = None if requests is not None else RUN_SCAN_LINES
    requests = requests if requests is not None else find_requests_file(results)
    target.write_text(render_html(results, compare, requests, scan), encoding="utf-8")
    return target
