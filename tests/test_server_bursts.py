"""Whose is the many-chunks-per-read signature: the server's bursts (``server_bursts``) or a client that is
behind (``client_saturated``)? And the client's own health (event-loop lag) on /metrics and in results."""

from __future__ import annotations

import time

import gevent
import pytest
from prometheus_client import CollectorRegistry

from attnload.exporter.exposition import FleetCollector, FleetState
from attnload.measure.looplag import FleetLoopLag, LoopLagMeter, behind_reason, watch_loop
from attnload.measure.metrics import read_sizes
from attnload.measure.recorder import Recorder, RequestRecord
from attnload.report.clienthealth.render import console_notes, html_section, llm_cell
from attnload.report.live.webui import COLUMNS, llm_rows
from attnload.results.bursts import SERVER_BURSTS_FLAG, client_behind, tokens_per_read_p50, with_server_bursts
from attnload.results.exitcodes import ExitPolicy, run_status
from attnload.results.model import ClientInfo, ModelSummary, StageSummary, Summary
from attnload.results.summarize import client_info, summary
from helpers.results import envelope

BURST_ITL = 0.040
"""The server writes 4 one-token events every 40 ms."""


def _record(gaps: tuple[float, ...], stage: int = 0) -> RequestRecord:
    return RequestRecord(
        model_key="m",
        profile="p",
        stage=stage,
        outcome="ok",
        error=None,
        ttft_s=0.05,
        itl_samples=tuple((g, 1) for g in gaps),
        e2e_s=1.0,
        prompt_tokens=10,
        completion_tokens=len(gaps) + 1,
        cached_prompt_tokens=0,
        tokens_estimated=False,
    )


def _bursty(requests: int = 100) -> Recorder:
    """48 tokens per request in reads of 4: the first read's 3 zero gaps, then (40 ms, 0, 0, 0) × 11."""
    recorder = Recorder()
    for _ in range(requests):
        recorder.add(_record((0.0,) * 3 + (BURST_ITL, 0.0, 0.0, 0.0) * 11))
    return recorder


def _lag(p50_s: float, p99_s: float) -> Summary:
    return Summary(count=160, p50=p50_s, p99=p99_s, max=p99_s)


HEALTHY = {"worker-a": _lag(0.0002, 0.002)}


def test_read_sizes_group_zero_gap_chunks_into_their_read() -> None:
    assert read_sizes(((0.0, 1), (0.0, 1), (0.0, 1), (0.04, 1), (0.0, 1))) == ((4.0, 1), (2.0, 1))
    assert read_sizes(((0.01, 1), (0.01, 1))) == ((1.0, 3),)  # token by token: the first chunk is a read too
    assert read_sizes(((0.005, 3),)) == ((1.0, 1), (3.0, 1))  # one event of 3 tokens is one read of 3
    assert read_sizes(()) == ((1.0, 1),)


def test_tokens_per_read_p50_is_the_burst_size() -> None:
    series = _bursty().combined()
    assert series.hists["read_tokens"].count == 100 * 12
    assert tokens_per_read_p50(series) == pytest.approx(4.0, rel=0.01)


def test_bursts_with_a_client_that_kept_up_are_not_saturation() -> None:
    info = client_info(1, 0, 0.03, _bursty(), loop_lag=HEALTHY)
    assert not info.client_saturated and info.saturation_reasons == []
    assert info.loop_lag_s == HEALTHY


@pytest.mark.parametrize(
    ("cpu", "lag", "evidence"),
    [
        (0.80, HEALTHY, "worker CPU reached 80%"),
        (0.03, {"worker-a": _lag(0.012, 0.05)}, "event loop of worker-a late by 12.0 ms at p50"),
        (0.03, {"worker-a": _lag(0.001, 0.25)}, "event loop of worker-a late by 250 ms at p99"),
        (0.03, None, "the event loop's lateness was not measured"),
    ],
)
def test_bursts_with_a_client_that_was_behind_are_still_saturation(
    cpu: float, lag: dict[str, Summary] | None, evidence: str
) -> None:
    info = client_info(1, 0, cpu, _bursty(), loop_lag=lag)
    assert info.client_saturated, info
    reason = info.saturation_reasons[-1]
    assert "ITL p50 collapsed" in reason and evidence in reason, reason


def test_a_cpu_bound_client_is_flagged_whatever_the_loop_says() -> None:
    info = client_info(1, 0, 0.97, Recorder(), loop_lag=HEALTHY)
    assert info.client_saturated and info.saturation_reasons == ["worker CPU reached 97% (> 90%)"]


def test_a_loop_late_most_of_the_time_is_saturation_on_its_own() -> None:
    late = client_info(1, 0, 0.4, Recorder(), loop_lag={"worker-a": _lag(0.0066, 0.094)})
    assert late.client_saturated
    assert late.saturation_reasons == [
        "event loop of worker-a late by 6.6 ms at p50 (> 5 ms): requests and reads waited on the client"
    ]
    # a late p99 alone (a GC pause, a spawn burst) only owns the chunks-per-read signature
    assert not client_info(1, 0, 0.4, Recorder(), loop_lag={"worker-a": _lag(0.001, 0.25)}).client_saturated


def test_behind_reason_needs_a_late_loop() -> None:
    assert behind_reason(HEALTHY) is None
    assert client_behind(0.5, 0.0, HEALTHY) is None
    assert client_behind(0.5, 0.0, {}) is None  # no sending process reported (no load): nothing behind
    assert client_behind(0.76, 0.0, HEALTHY) == "worker CPU reached 76%"


def _model() -> ModelSummary:
    """A model with one closed-loop stage; what the flag needs is read from the recorder."""
    return ModelSummary(key="m", model="m", attention="gqa", stages=[StageSummary(index=0, users=4)])


def test_stage_flag_server_bursts_with_the_burst_size_and_the_note() -> None:
    recorder = _bursty()
    results = with_server_bursts(envelope(_model()), recorder, behind=None)
    model = results.models[0]
    (stage,) = model.stages
    assert stage.flags == [SERVER_BURSTS_FLAG]
    assert stage.server_bursts is not None
    assert stage.server_bursts.tokens_per_read_p50 == pytest.approx(4.0, rel=0.01)
    assert "flush cadence" in stage.server_bursts.note
    assert model.server_bursts is not None  # the whole run too (what an unstaged run shows)
    again = with_server_bursts(results, recorder, behind=None)
    assert again.models[0].stages[0].flags == [SERVER_BURSTS_FLAG]  # never twice


def test_no_flag_when_the_client_was_behind_or_reads_were_token_by_token() -> None:
    recorder = _bursty()
    behind = with_server_bursts(envelope(_model()), recorder, behind="worker CPU reached 80%")
    assert behind.models[0].stages[0].flags == [] and behind.models[0].server_bursts is None
    steady = Recorder()
    for _ in range(100):
        steady.add(_record((0.010, 0.011, 0.009) * 10))
    calm = with_server_bursts(envelope(_model()), steady, behind=None)
    assert calm.models[0].stages[0].flags == [] and calm.models[0].server_bursts is None


def test_fail_on_saturated_ignores_server_bursts() -> None:
    recorder = _bursty()
    client = client_info(1, 0, 0.03, recorder, loop_lag=HEALTHY)
    results = with_server_bursts(envelope(_model(), client=client), recorder, behind=None)
    assert run_status(results, ExitPolicy(fail_on=frozenset({"saturated"}))) == (0, [])
    saturated = client_info(1, 0, 0.03, recorder, loop_lag={"w": _lag(0.02, 0.2)})
    code, reasons = run_status(envelope(client=saturated), ExitPolicy(fail_on=frozenset({"saturated"})))
    assert code == 1 and "client saturated" in reasons[0]


def test_reports_name_the_bursts_and_the_loop_lag() -> None:
    recorder = _bursty()
    client = ClientInfo(workers=1, loop_lag_s=HEALTHY)
    results = with_server_bursts(envelope(_model(), client=client), recorder, behind=None)
    notes = console_notes(results)
    assert notes[0].startswith("note: server bursts (m, stage 1): the server wrote 4 tokens per read")
    assert "worker-a p50 0.20 ms p99 2.00 ms" in notes[1]
    html = html_section(results)
    assert 'id="server-bursts"' in html and "server_bursts" in html and 'id="loop-lag"' in html
    assert llm_cell(results.models[0].stages[0]) == "4 tok/read"
    assert ("server_bursts", "Server bursts") in COLUMNS
    assert llm_rows(results)[0]["server_bursts"] == "4 tok/read"
    assert console_notes(envelope(_model())) == []
    unstaged = with_server_bursts(envelope(ModelSummary(key="m", model="m", attention="gqa")), recorder, behind=None)
    assert console_notes(unstaged)[0].startswith("note: server bursts (m, run): the server wrote 4 tokens")


def test_loop_lag_meter_sees_a_blocked_hub() -> None:
    meter = LoopLagMeter()
    watcher = gevent.spawn(watch_loop, meter, 0.01)
    try:
        gevent.sleep(0.05)
        for _ in range(3):
            end = time.perf_counter() + 0.04
            while time.perf_counter() < end:  # a greenlet that never yields: the hub is blocked 40 ms
                pass
            gevent.sleep(0.02)
    finally:
        watcher.kill()
    assert meter.run.count >= 5
    assert meter.run.max >= 0.025  # the timer due during a block fired at least that late
    fleet = FleetLoopLag()
    fleet.merge("w1", meter.take_delta())
    fleet.merge("w1", meter.take_delta())  # an empty window changes nothing
    fleet.merge("w1", "garbage")
    assert fleet.run["w1"].count == meter.run.count
    p50, p99, count, total = fleet.gauges()["w1"]
    assert p99 >= 0.025 and p50 <= p99 and count == meter.run.count and total == pytest.approx(meter.run.total)


def test_loop_lag_is_exported_per_worker() -> None:
    state = FleetState(worker_loop_lag={"worker-a": (0.0004, 0.003, 160, 0.2)})
    registry = CollectorRegistry()
    registry.register(FleetCollector(Recorder(), state))
    name = "attnload_worker_loop_lag_seconds"
    assert registry.get_sample_value(name, {"worker": "worker-a", "quantile": "0.5"}) == 0.0004
    assert registry.get_sample_value(name, {"worker": "worker-a", "quantile": "0.99"}) == 0.003
    assert registry.get_sample_value(name + "_count", {"worker": "worker-a"}) == 160
    assert registry.get_sample_value(name + "_sum", {"worker": "worker-a"}) == 0.2


def test_results_summary_of_loop_lag() -> None:
    meter = LoopLagMeter()
    for late in (0.0001, 0.0002, 0.0003, 0.05):
        meter.record(late)
    meter.record(-0.001)  # a timer cannot fire early: clamped to 0
    lag = summary(meter.run)
    assert lag.count == 5 and lag.max == pytest.approx(0.05)
