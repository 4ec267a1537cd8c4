"""The table of per-request metrics (``measure.metrics``): an entry there is the whole of adding a metric.

A throwaway metric appended to the table alone must reach every output that iterates it: the
recorder and its deltas, the Prometheus exposition, the results (written and read back), the CSV,
the ``--requests-out`` line, the console and HTML summaries, ``compare`` and the dashboards.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from rich.console import Console

from attnload.config.load import load_config
from attnload.dashboards.generate import metric_panels
from attnload.exporter.exposition import FleetCollector, FleetState
from attnload.measure.metrics import METRICS, OK, Metric, PanelText, RequestRecord
from attnload.measure.recorder import Recorder
from attnload.measure.requestlog import TargetFacts, request_line
from attnload.report.console import render_table
from attnload.report.csvout import llm_csv_columns, write_llm_csv
from attnload.report.fmt import summary_metrics
from attnload.report.html import render_html
from attnload.results.model import ClientInfo, Results, Summary, Totals
from attnload.results.summarize import RunFacts, StageWindow, build_results

E2E_S = 0.4
REQUESTS = 12

HALF = Metric(
    "half_e2e",
    "HALF",
    take=lambda r: r.e2e_s / 2,
    outcomes=OK,
    prometheus="attnload_test_half_e2e_seconds",
    help="Half of each request's duration (a metric that exists only in this test).",
    results_field="half_e2e_s",
    line_field="half_e2e_s",
    csv=("p50", "p99"),
    columns=("p50",),
    panel=PanelText("Half end-to-end", "Half of each request's duration. "),
)


@pytest.fixture
def half() -> Iterator[Metric]:
    METRICS.append(HALF)
    try:
        yield HALF
    finally:
        METRICS.remove(HALF)


def _record(outcome: str = "ok") -> RequestRecord:
    return RequestRecord(
        model_key="m",
        profile="default",
        stage=0,
        outcome=outcome,
        error=None if outcome == "ok" else "timeout",
        ttft_s=0.05,
        itl_samples=((0.01, 1),) * 9,
        e2e_s=E2E_S,
        prompt_tokens=100,
        completion_tokens=10,
        cached_prompt_tokens=None,
        tokens_estimated=False,
        started_perf=10.0,
    )


def _recorder() -> Recorder:
    worker = Recorder()
    for _ in range(REQUESTS):
        worker.add(_record())
    worker.add(_record("failed"))  # the metric counts successful requests only
    master = Recorder()
    master.merge_delta(worker.take_delta())  # and travels from a worker to the master
    return master


def _results(tmp_path: Path, recorder: Recorder) -> Results:
    path = tmp_path / "c.json"
    path.write_text('{"base_url": "http://127.0.0.1:9/v1", "models": {"m": {"id": "llama", "attention_type": "GQA"}}}')
    run = RunFacts(
        config=load_config(path),
        recorder=recorder,
        started_at=1_700_000_000.0,
        ended_at=1_700_000_010.0,
        stages=[StageWindow(0, 0.0, 10.0, users=4)],
        client=ClientInfo(workers=1),
        run_info={},
    )
    return build_results(run)


def test_a_metric_added_to_the_table_reaches_the_recorder_and_the_exposition(half: Metric) -> None:
    recorder = _recorder()
    assert recorder.combined().hists[half.key].count == REQUESTS
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FleetCollector(recorder, FleetState(model_labels={"m": ("llama", "GQA")})))
    labels = {"model": "llama", "attention": "GQA", "profile": "default", "target": "m"}
    assert registry.get_sample_value("attnload_test_half_e2e_seconds_count", labels) == REQUESTS
    total = registry.get_sample_value("attnload_test_half_e2e_seconds_sum", labels)
    assert total == pytest.approx(REQUESTS * E2E_S / 2, rel=0.01)


def test_a_metric_added_to_the_table_reaches_the_results_and_reads_back(half: Metric, tmp_path: Path) -> None:
    results = _results(tmp_path, _recorder())
    model = results.model("m")
    for scope in (model, model.stages[0], model.profiles["default"]):
        summary = scope.summary_of("half_e2e_s")
        assert summary.count == REQUESTS and summary.p50 == pytest.approx(E2E_S / 2, rel=0.01)
    again = Results.model_validate_json(results.to_json())
    assert again.model("m").summary_of("half_e2e_s") == model.summary_of("half_e2e_s")
    assert '"half_e2e_s"' in results.to_json()


def test_a_metric_added_to_the_table_reaches_the_csv_and_the_request_log(half: Metric, tmp_path: Path) -> None:
    results = _results(tmp_path, _recorder())
    path = write_llm_csv(results, tmp_path / "run")
    rows = list(csv.DictReader(path.open(encoding="utf-8")))
    assert list(rows[0]) == list(llm_csv_columns())
    assert list(rows[0])[-5:-3] == ["HALF p50 (ms)", "HALF p99 (ms)"]  # appended: no existing column moves
    assert float(rows[-1]["HALF p50 (ms)"]) == pytest.approx(E2E_S / 2 * 1000, rel=0.01)
    line = request_line(_record(), TargetFacts("m", "llama", "GQA"), worker=0)
    assert line["half_e2e_s"] == E2E_S / 2


def test_a_metric_added_to_the_table_reaches_the_report_and_the_dashboards(half: Metric, tmp_path: Path) -> None:
    results = _results(tmp_path, _recorder())
    console = Console(width=200, record=True)
    console.print(render_table(results))
    text = console.export_text()
    assert "HALF ms" in text and "200.0" in text
    page = render_html(results)
    assert "<th>HALF p50</th>" in page and 'data-field="half_e2e_s.p50"' in page
    assert "half_e2e_p50" in [m.key for m in summary_metrics()]  # compare's columns
    titles = [p.title for p in metric_panels()]
    assert titles[-2:] == ["Half end-to-end p50", "Half end-to-end p99"]


def test_declared_results_fields_are_metrics_of_the_table() -> None:
    """A ``Summary`` field typed on ``Totals`` is there for readers by attribute; the table still owns it."""
    declared = {name for name, info in Totals.model_fields.items() if info.annotation is Summary}
    assert declared <= {m.results_field for m in METRICS}
    assert Totals().model_dump().keys() >= {m.results_field for m in METRICS if m.results_field is not None}
