"""Paired A/B differences in the console and HTML, the seeded send order, and failures kept apart
from stop-time cancellations in the report's charts."""

from __future__ import annotations

from collections import Counter

from rich.console import Console

from attnload.measure.paired import PairedRecorder
from attnload.report import print_summary, render_html
from attnload.report.charts import charts, failures
from attnload.report.paired import paired_rows
from attnload.results.model import PairedDiff, PairedSummary, Requests, Results
from helpers.results import gqa_model, mla_model, results


def _paired_run() -> Results:
    summary = PairedSummary(
        baseline="llama-3-70b",
        pairs=165,
        ttft_s=PairedDiff(median_diff=0.0001, ci_low=-0.0002, ci_high=0.0004, n=165),
        tpot_s=PairedDiff(median_diff=0.002, ci_low=0.001, ci_high=0.003, n=165),
        e2e_s=PairedDiff(median_diff=-0.05, ci_low=-0.08, ci_high=-0.02, n=165),
    )
    return results(gqa_model(), mla_model().model_copy(update={"paired": summary}))


def test_console_shows_each_models_paired_differences_with_ci() -> None:
    console = Console(width=200, record=True, color_system=None)
    print_summary(_paired_run(), console)
    text = console.export_text()
    assert "paired differences (model − llama-3-70b, ms, 95% CI)" in text
    lines = {
        line.split()[2]: line
        for line in text.splitlines()
        if line.strip().startswith("deepseek-v3")
        and "(MLA)" in line
        and ("TTFT" in line or "TPOT" in line or "end-to-end" in line)
    }
    assert "+0.10" in lines["TTFT"] and "[-0.20, +0.40]" in lines["TTFT"] and "no difference shown" in lines["TTFT"]
    assert "[+1.00, +3.00]" in lines["TPOT"] and "slower" in lines["TPOT"]
    assert "faster" in lines["end-to-end"]


def test_html_has_a_paired_section() -> None:
    page = render_html(_paired_run())
    assert '<section id="paired"><h2>Paired differences</h2>' in page
    assert 'data-field="paired.median_diff" data-value="0.0001"' in page and "[-0.20, +0.40]" in page
    assert '<section id="paired">' not in render_html(results())


def test_rows_only_for_paired_models() -> None:
    rows = paired_rows(_paired_run())
    assert [(r.model, r.metric) for r in rows] == [("deepseek-v3 (MLA)", m) for m in ("TTFT", "TPOT", "end-to-end")]
    assert paired_rows(results()) == []


def test_send_order_is_seeded_and_balanced() -> None:
    keys = ["gqa", "mla"]
    recorder = PairedRecorder("gqa", seed=7)
    orders = [recorder.send_order(keys) for _ in range(2000)]
    again = PairedRecorder("gqa", seed=7)
    assert orders == [again.send_order(keys) for _ in range(2000)]  # reproducible
    leads = Counter(order[0] for order in orders)
    assert abs(leads["gqa"] - leads["mla"]) < 200, leads  # neither model is always sent first


def test_failures_chart_leaves_out_stop_time_cancellations() -> None:
    stopped = gqa_model().model_copy(update={"errors": {"cancelled": 4}, "requests": Requests(ok=10, cancelled=4)})
    broken = mla_model().model_copy(
        update={"errors": {"timeout": 3, "cancelled": 1}, "requests": Requests(ok=10, failed=3, cancelled=1)}
    )
    assert failures(stopped) == {} and failures(broken) == {"timeout": 3}
    titles = {title: svg for title, _, svg in charts(results(stopped, broken))}
    assert "Errors" not in titles
    assert "cancelled" not in titles["Failures"] and "timeout" in titles["Failures"]
    assert 'id="plot-cancellations"' in titles["Cancelled at stop"]
    only_cancelled = {title for title, _, _ in charts(results(stopped))}
    assert "Failures" not in only_cancelled and "Cancelled at stop" in only_cancelled
