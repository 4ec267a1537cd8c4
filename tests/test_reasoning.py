"""Reasoning downstream of the request record: TTFAT and reasoning tokens through every output.

Synthetic ``RequestRecord``s with known TTFT, TTFAT and reasoning counts go through the recorder,
the worker-to-master deltas, the results, the console, HTML, CSV, the per-request line, the LLM tab
and the master's ``/metrics``; each output must carry the numbers put in. The server's own
reasoning count is kept beside the streamed one, and a disagreement (vLLM 0.32 reports 0 while it
streamed every reasoning token) becomes a note naming both.
"""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from rich.console import Console

from attnload.config.load import load_config
from attnload.exporter.exposition import FleetCollector, FleetState
from attnload.measure.metrics import answer_latency
from attnload.measure.recorder import Recorder, RequestRecord, Series
from attnload.measure.requestlog import TargetFacts, request_line
from attnload.report.console import render_table
from attnload.report.csvout import LLM_CSV_COLUMNS, write_llm_csv
from attnload.report.html import render_html
from attnload.report.live.webui import COLUMNS, llm_rows
from attnload.results.model import ClientInfo, ModelSummary, Results
from attnload.results.reasoning import disagree, reasoning_note, share
from attnload.results.summarize import RunFacts, StageWindow, build_results

REASONING_TTFT_S = 0.100
"""The reasoning model's first (reasoning) token."""
REASONING_TTFAT_S = 0.500
"""Its first answer token: 40 reasoning tokens at 10 ms after the first."""
PLAIN_TTFT_S = 0.080


def _config(tmp_path: Path) -> object:
    path = tmp_path / "c.json"
    path.write_text(
        '{"base_url": "http://127.0.0.1:9/v1", "models": {'
        '"r": {"id": "deepseek-r1", "attention_type": "MLA"}, '
        '"g": {"id": "llama-3-70b", "attention_type": "GQA"}}}'
    )
    return load_config(path)


def _record(model: str = "r", stage: int = 0, outcome: str = "ok", **changes: object) -> RequestRecord:
    reasoning = model == "r"
    base = RequestRecord(
        model_key=model,
        profile="p",
        stage=stage,
        outcome=outcome,
        error=None if outcome == "ok" else "timeout",
        ttft_s=REASONING_TTFT_S if reasoning else PLAIN_TTFT_S,
        itl_samples=tuple((0.01, 1) for _ in range(59)),
        e2e_s=0.7,
        prompt_tokens=100,
        completion_tokens=60,
        cached_prompt_tokens=None,
        tokens_estimated=False,
        ttfat_s=REASONING_TTFAT_S if reasoning else PLAIN_TTFT_S,
        reasoning_tokens=40 if reasoning else 0,
        server_reasoning_tokens=0 if reasoning else None,
        started_perf=10.0,
        http_status=200,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def _recorder(records: list[RequestRecord]) -> Recorder:
    recorder = Recorder()
    for record in records:
        recorder.add(record)
    return recorder


def _results(tmp_path: Path, records: list[RequestRecord], stages: int = 2) -> Results:
    windows = [StageWindow(i, 5.0 * i, 5.0 * (i + 1), users=2 * (i + 1)) for i in range(stages)]
    run = RunFacts(
        config=_config(tmp_path),  # type: ignore[arg-type]
        recorder=_recorder(records),
        started_at=1_700_000_000.0,
        ended_at=1_700_000_000.0 + 5.0 * stages,
        stages=windows,
        client=ClientInfo(workers=1),
        run_info={},
    )
    return build_results(run)


def _traffic() -> list[RequestRecord]:
    """Reasoning model: 10 requests per stage (server says 0 each); plain model: 10 per stage."""
    return [_record(m, stage) for m in ("r", "g") for stage in (0, 1) for _ in range(10)]


# ----------------------------------------------------------------------------- recorder and deltas


def test_ttfat_and_reasoning_counters_recorded() -> None:
    series = _recorder([_record(), _record(), _record("g")]).combined()
    ttfat = series.hists["ttfat"]
    assert ttfat.count == 3
    assert ttfat.quantile(0.99) == pytest.approx(REASONING_TTFAT_S, rel=0.01)
    assert series.counts["reasoning_tokens"] == 80
    assert series.counts["server_reasoning_tokens"] == 0
    assert series.counts["reasoning_reported"] == 2  # the plain model's server did not report a count
    assert series.counts["reasoning_tokens_reported"] == 80


def test_ttfat_none_when_the_answer_never_began() -> None:
    """Reasoning came, the answer did not (max_tokens spent thinking): no TTFAT sample, TTFT still counts."""
    record = _record(ttfat_s=None, completion_tokens=40)
    assert answer_latency(record) is None
    series = _recorder([record]).combined()
    assert series.hists["ttfat"].count == 0 and series.hists["ttft"].count == 1
    assert series.counts["reasoning_tokens"] == 40


def test_without_reasoning_the_first_token_is_the_answer() -> None:
    """A path that leaves ``ttfat_s`` unset but saw no reasoning: TTFAT is TTFT, exactly."""
    record = _record("g", ttfat_s=None)
    assert answer_latency(record) == PLAIN_TTFT_S
    assert _recorder([record]).combined().hists["ttfat"].count == 1
    assert answer_latency(_record("g", ttfat_s=None, ttft_s=None)) is None


def test_failed_requests_give_no_ttfat_and_abandoned_ones_do() -> None:
    failed = _recorder([_record(outcome="failed")]).combined()
    assert failed.hists["ttfat"].count == 0 and failed.counts["reasoning_tokens"] == 40
    abandoned = _recorder([_record(outcome="abandoned")]).combined()
    assert abandoned.hists["ttfat"].count == 1  # what it saw is real, as for TTFT


def test_deltas_carry_ttfat_and_reasoning_to_the_master() -> None:
    worker = _recorder([_record(), _record("g")])
    master = Recorder()
    master.merge_delta(json.loads(json.dumps(worker.take_delta())))  # the wire is JSON-safe
    merged = master.combined()
    assert merged.hists["ttfat"].count == 2
    assert merged.hists["ttfat"].max == worker.combined().hists["ttfat"].max
    assert merged.counts["reasoning_tokens"] == 40 and merged.counts["reasoning_reported"] == 1
    assert worker.take_delta() == {}  # the delta was taken


def test_an_old_workers_wire_merges_without_reasoning() -> None:
    """A worker from before reasoning sends no ``ttfat`` histogram and no reasoning counters."""
    old = _recorder([_record("g")]).take_delta()
    for wire in old.values():
        wire["h"].pop("ttfat")
        for name in ("reasoning_tokens", "server_reasoning_tokens", "reasoning_reported"):
            wire["c"].pop(name, None)
    master = Recorder()
    master.merge_delta(old)
    series = master.combined()
    assert series.counts["ok"] == 1 and series.hists["ttfat"].count == 0 and series.counts["reasoning_tokens"] == 0


def test_a_histogram_this_process_does_not_know_still_merges() -> None:
    wire = _recorder([_record()]).series[("r", "p", 0)].to_wire()
    wire["h"]["later"] = wire["h"]["ttft"]
    series = Series()
    series.merge(Series.from_wire(wire))
    assert series.hists["later"].count == 1


# ----------------------------------------------------------------------------- results


def test_results_carry_ttfat_reasoning_share_and_the_servers_count(tmp_path: Path) -> None:
    data = _results(tmp_path, _traffic())
    r, g = data.model("r"), data.model("g")
    assert r.ttfat_s.count == 20 and r.ttfat_s.p50 == pytest.approx(REASONING_TTFAT_S, rel=0.01)
    assert r.ttft_s.p50 == pytest.approx(REASONING_TTFT_S, rel=0.01)
    assert r.reasoning_tokens == 800 and r.completion_tokens == 1200
    assert r.reasoning_share == pytest.approx(40 / 60)
    assert r.server_reasoning_tokens == 0  # reported, and zero: kept beside, never in place of, the streamed count
    for stage in r.stages:
        assert stage.ttfat_s.count == 10 and stage.reasoning_tokens == 400 and stage.server_reasoning_tokens == 0
        assert stage.reasoning_share == pytest.approx(40 / 60)
    assert g.ttfat_s.p50 == pytest.approx(PLAIN_TTFT_S, rel=0.01) and g.ttfat_s.count == 20
    assert (g.reasoning_tokens, g.reasoning_share, g.server_reasoning_tokens) == (0, 0.0, None)
    again = Results.model_validate_json(data.to_json())
    assert again.model("r").ttfat_s == r.ttfat_s and again.model("r").reasoning_note == r.reasoning_note


def test_a_disagreeing_server_count_is_a_note_naming_both(tmp_path: Path) -> None:
    data = _results(tmp_path, _traffic())
    note = data.model("r").reasoning_note
    assert note is not None
    assert "reported 0 reasoning tokens" in note and "800 arrived as reasoning deltas" in note
    assert data.model("g").reasoning_note is None  # its server said nothing: nothing to disagree with


def test_an_agreeing_server_count_gives_no_note(tmp_path: Path) -> None:
    records = [_record(server_reasoning_tokens=40) for _ in range(5)] + [_record(server_reasoning_tokens=39)]
    data = _results(tmp_path, records, stages=1)
    assert data.model("r").server_reasoning_tokens == 239 and data.model("r").reasoning_note is None


def test_the_note_compares_only_requests_the_server_reported_on(tmp_path: Path) -> None:
    """Half the requests carry a server count equal to theirs; the rest none: no disagreement."""
    records = [_record(server_reasoning_tokens=40), _record(server_reasoning_tokens=None)]
    data = _results(tmp_path, records, stages=1)
    assert data.model("r").reasoning_tokens == 80 and data.model("r").server_reasoning_tokens == 40
    assert data.model("r").reasoning_note is None


def test_disagreement_rules() -> None:
    assert disagree(40, 0) and disagree(0, 3) and disagree(1000, 950)
    assert not disagree(40, 39) and not disagree(1000, 985) and not disagree(0, 0)
    assert share(0, 0) is None and share(30, 60) == 0.5
    assert reasoning_note("r", {"reasoning_reported": 0, "reasoning_tokens_reported": 40}) is None


def test_old_results_without_reasoning_still_load() -> None:
    model = ModelSummary.model_validate({"key": "a", "model": "a", "attention": "GQA", "stages": [{"index": 0}]})
    for scope in (model, model.stages[0]):
        assert scope.ttfat_s.count == 0 and scope.reasoning_tokens == 0 and scope.reasoning_share is None
        assert scope.server_reasoning_tokens is None
    assert model.reasoning_note is None


# ----------------------------------------------------------------------------- renderings


def _console_text(data: Results) -> str:
    console = Console(width=220, record=True, force_terminal=False)
    console.print(render_table(data))
    return console.export_text()


def test_console_shows_ttfat_and_the_note_when_reasoning_was_seen(tmp_path: Path) -> None:
    text = _console_text(_results(tmp_path, _traffic()))
    assert "reasoning (TTFAT" in text and "TTFAT" in text
    row = next(line for line in text.splitlines() if line.strip().startswith("r (MLA)") and "66.7 %" in line)
    assert "500.0" in row and "100.0" in row and "800" in row  # TTFAT p50, TTFT p50, reasoning tokens
    assert "note: r: the server reported 0 reasoning tokens" in " ".join(text.split())


def test_console_without_reasoning_is_unchanged(tmp_path: Path) -> None:
    data = _results(tmp_path, [_record("g") for _ in range(5)], stages=1)
    text = _console_text(data)
    assert "TTFAT" not in text and "reasoning" not in text


def test_html_has_the_reasoning_section_and_the_note(tmp_path: Path) -> None:
    data = _results(tmp_path, _traffic())
    page = render_html(data)
    assert 'id="reasoning-table"' in page and '<a href="#reasoning">Reasoning</a>' in page
    assert f'data-field="ttfat_s.p50" data-value="{data.model("r").ttfat_s.p50!r}"' in page
    assert 'data-field="reasoning_tokens" data-value="800"' in page
    assert 'data-field="server_reasoning_tokens" data-value="0"' in page
    assert 'class="callout note reasoning-note"' in page and "reported 0 reasoning tokens" in page
    plain = render_html(_results(tmp_path, [_record("g")], stages=1))
    assert 'id="reasoning-table"' not in plain and "reasoning-note" not in plain


def test_csv_has_ttfat_and_reasoning_columns(tmp_path: Path) -> None:
    data = _results(tmp_path, _traffic())
    path = write_llm_csv(data, tmp_path / "run")
    rows = list(csv.DictReader(path.open(encoding="utf-8")))
    assert list(rows[0]) == list(LLM_CSV_COLUMNS)
    total = next(row for row in rows if row["Target"] == "r" and row["Stage"] == "Aggregated")
    assert float(total["TTFAT p50 (ms)"]) == pytest.approx(REASONING_TTFAT_S * 1000, rel=0.01)
    assert float(total["TTFAT p99 (ms)"]) == pytest.approx(REASONING_TTFAT_S * 1000, rel=0.01)
    assert (total["Reasoning Tokens"], total["Server Reasoning Tokens"]) == ("800", "0")
    assert float(total["Reasoning Share"]) == pytest.approx(40 / 60, abs=1e-4)
    stage0 = next(row for row in rows if row["Target"] == "r" and row["Stage"] == "0")
    assert stage0["Reasoning Tokens"] == "400"
    plain = next(row for row in rows if row["Target"] == "g" and row["Stage"] == "Aggregated")
    assert (plain["Reasoning Tokens"], plain["Reasoning Share"], plain["Server Reasoning Tokens"]) == (
        "0",
        "0.0000",
        "N/A",
    )


def test_request_line_has_ttfat_and_reasoning_tokens() -> None:
    line = request_line(_record(), TargetFacts("r", "deepseek-r1", "MLA"), worker=0, now_perf=10.0, now_epoch=1e9)
    assert (line["ttft_s"], line["ttfat_s"]) == (REASONING_TTFT_S, REASONING_TTFAT_S)
    assert (line["reasoning_tokens"], line["server_reasoning_tokens"]) == (40, 0)
    never = request_line(_record(ttfat_s=None), TargetFacts("r", "deepseek-r1", "MLA"), worker=0)
    assert never["ttfat_s"] is None


def test_llm_tab_shows_ttfat_and_share(tmp_path: Path) -> None:
    assert ("ttfat_p50_ms", "TTFAT p50 (ms)") in COLUMNS and ("reasoning_share", "Reasoning share") in COLUMNS
    rows = {row["safe_name"]: row for row in llm_rows(_results(tmp_path, _traffic()))}
    assert rows["r"]["ttfat_p50_ms"] == "500.0" and rows["r"]["reasoning_share"] == "66.7 %"
    assert rows["g"]["ttfat_p50_ms"] == "80.0" and rows["g"]["reasoning_share"] == "0.0 %"
    assert all(key in row for row in rows.values() for key, _ in COLUMNS)


def test_metrics_expose_ttfat_and_reasoning_tokens() -> None:
    recorder = _recorder(_traffic())
    state = FleetState(model_labels={"r": ("deepseek-r1", "MLA"), "g": ("llama-3-70b", "GQA")})
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FleetCollector(recorder, state))
    r = {"model": "deepseek-r1", "attention": "MLA", "profile": "p", "target": "r"}
    g = {"model": "llama-3-70b", "attention": "GQA", "profile": "p", "target": "g"}
    assert registry.get_sample_value("attnload_ttfat_seconds_count", r) == 20
    assert registry.get_sample_value("attnload_ttfat_seconds_sum", r) == pytest.approx(20 * REASONING_TTFAT_S, rel=0.01)
    assert registry.get_sample_value("attnload_ttfat_seconds_bucket", {**r, "le": "0.3"}) is None  # not a bound
    below = registry.get_sample_value("attnload_ttfat_seconds_bucket", {**r, "le": "0.41359"})
    above = registry.get_sample_value("attnload_ttfat_seconds_bucket", {**r, "le": "0.516988"})
    assert (below, above) == (0.0, 20.0)
    assert registry.get_sample_value("attnload_reasoning_tokens_total", r) == 800
    assert registry.get_sample_value("attnload_reasoning_tokens_total", g) == 0
    ttft_bounds = _bounds(registry, "attnload_time_to_first_token_seconds")
    assert _bounds(registry, "attnload_ttfat_seconds") == ttft_bounds and len(ttft_bounds) > 50


def _bounds(registry: CollectorRegistry, name: str) -> list[tuple[str, ...]]:
    return [
        tuple(sorted(s.labels.items()))
        for family in registry.collect()
        for s in family.samples
        if s.name == f"{name}_bucket" and s.labels["target"] == "r"
    ]
