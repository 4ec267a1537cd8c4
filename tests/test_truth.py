"""What a run did not measure: the pure parts (Kaplan–Meier TTFT, no_data reasons, error examples,
latencies without stalled requests, a worker's silences, the exit code of an empty run)."""

from __future__ import annotations

import random

from attnload.measure.histogram import LogHistogram
from attnload.measure.metrics import RequestRecord
from attnload.measure.recorder import EXAMPLES_PER_CLASS, Recorder, Series
from attnload.measure.survival import km_percentiles
from attnload.results.exitcodes import ExitPolicy, parse_fail_on, run_status
from attnload.results.model import ModelSummary, Results, StageSummary
from attnload.results.truth.censoring import ttft_long_note, ttft_summary
from attnload.results.truth.nodata import no_data_reason
from attnload.results.truth.stalls import without, without_stalled
from attnload.runner.sender.stallwatch import SILENCE_MIN_S, StallWatch


def _record(outcome: str, ttft: float | None, e2e: float, error: str | None = None, **extra: object) -> RequestRecord:
    return RequestRecord(
        model_key="m",
        profile="p",
        stage=0,
        outcome=outcome,
        error=error,
        ttft_s=ttft,
        itl_samples=((0.02, 1),) * 4 if ttft is not None else (),
        e2e_s=e2e,
        prompt_tokens=10,
        completion_tokens=5 if ttft is not None else 0,
        cached_prompt_tokens=None,
        tokens_estimated=False,
        **extra,  # type: ignore[arg-type]
    )


def _reference_km(events: list[float], censored: list[float], q: float) -> float | None:
    """Kaplan–Meier on raw times (events before censorings at a tie): the smallest t with F(t) ≥ q."""
    times = sorted([(t, 0) for t in events] + [(t, 1) for t in censored])
    at_risk, surviving = len(times), 1.0
    for t, cut in times:
        if not cut:
            surviving *= 1 - 1 / at_risk
            if 1 - surviving >= q - 1e-12:
                return t
        at_risk -= 1
    return None


def _hist(values: list[float]) -> LogHistogram:
    hist = LogHistogram()
    for v in values:
        hist.record(v)
    return hist


def test_kaplan_meier_on_buckets_matches_raw_times_within_the_bucket_width() -> None:
    rng = random.Random(7)
    events = [rng.uniform(0.5, 6.0) for _ in range(400)]
    censored = [rng.uniform(0.5, 8.0) for _ in range(200)]
    estimate = km_percentiles(_hist(events), _hist(censored))
    for name, q in (("p50", 0.5), ("p90", 0.9)):
        truth = _reference_km(events, censored, q)
        value = estimate.values[name]
        if truth is None:
            assert name in estimate.lower_bound
        else:
            assert value is not None and abs(value - truth) <= 0.03 * truth, (name, value, truth)


def test_kaplan_meier_merges_by_adding_buckets() -> None:
    a_events, a_cut, b_events, b_cut = _hist([1.0, 2.0]), _hist([1.5]), _hist([3.0, 4.0, 5.0]), _hist([4.5])
    merged_events, merged_cut = LogHistogram(), LogHistogram()
    for h in (a_events, b_events):
        merged_events.merge(h)
    for h in (a_cut, b_cut):
        merged_cut.merge(h)
    whole = km_percentiles(_hist([1.0, 2.0, 3.0, 4.0, 5.0]), _hist([1.5, 4.5]))
    assert km_percentiles(merged_events, merged_cut) == whole


def test_without_censoring_the_percentiles_are_the_histograms_own() -> None:
    events = _hist([0.1 * i for i in range(1, 50)])
    estimate = km_percentiles(events, LogHistogram())
    assert estimate.values["p99"] == events.quantile(0.99) and estimate.lower_bound == ()


def test_percentiles_beyond_the_longest_wait_are_lower_bounds() -> None:
    estimate = km_percentiles(_hist([1.0]), _hist([8.0, 8.1, 8.2]))
    assert estimate.values["p50"] == 8.2 and set(estimate.lower_bound) == {"p50", "p90", "p95", "p99"}


def test_a_cut_request_keeps_its_ttft_or_is_censored_at_its_wait() -> None:
    recorder = Recorder()
    recorder.add(_record("cancelled", 3.0, 5.0, "cancelled"))
    recorder.add(_record("cancelled", None, 2.0, "cancelled"))
    series = recorder.combined()
    assert series.counts["censored_streaming"] == 1 and series.counts["censored_waiting"] == 1
    assert series.hists["ttft"].count == 1 and series.hists["ttft_censored"].max == 2.0
    assert series.hists["e2e"].count == 0  # a cut request has no whole answer
    summary = ttft_summary(series)
    assert summary.p50 is not None and abs(summary.p50 - 3.0) < 0.05 and summary.lower_bound == []


def test_no_data_reasons_say_why_in_words() -> None:
    recorder = Recorder()
    recorder.add(_record("cancelled", None, 8.0, "cancelled"))
    assert "still waiting for its first token" in (no_data_reason(recorder.combined()) or "")
    recorder.reset()
    for _ in range(3):
        recorder.add(_record("failed", None, 0.1, "server"))
    assert no_data_reason(recorder.combined()) == "all 3 failed (server 3)"
    recorder.add(_record("ok", 0.1, 0.5))
    assert no_data_reason(recorder.combined()) is None
    assert "nothing answered" in (no_data_reason(Series()) or "")


def test_an_empty_model_exits_1_and_fail_on_no_data_adds_stages() -> None:
    empty = ModelSummary(key="a", model="a", attention="GQA", flags=["no_data"], no_data_reason="nothing answered")
    stage = StageSummary(index=1, users=4, flags=["no_data"], no_data_reason="x")
    fine = ModelSummary(key="b", model="b", attention="MLA", stages=[stage])
    results = Results(started_at="", ended_at="", duration_s=1.0, config_sha256="", models=[empty, fine])
    code, reasons = run_status(results, ExitPolicy())
    assert code == 1 and reasons == ["no_data: a finished no request (nothing answered)"]
    code, reasons = run_status(results, ExitPolicy(fail_on=parse_fail_on("no-data")))
    assert code == 1 and reasons[1].startswith("no_data: b stage 1 (4 users)")


def test_error_examples_are_the_first_three_per_class_and_merge_bounded() -> None:
    worker_a, worker_b = Recorder(), Recorder()
    for i in range(10):
        for recorder in (worker_a, worker_b):
            recorder.add(
                _record("failed", None, 0.1, "server", http_status=500, error_detail=f"HTTP 500: {i}", error_body="{}")
            )
    master = Recorder()
    master.merge_delta(worker_a.take_delta())
    master.merge_delta(worker_b.take_delta())
    examples = master.combined().examples["server"]
    assert len(examples) == EXAMPLES_PER_CLASS
    assert examples[0]["http_status"] == 500 and examples[0]["detail"].startswith("HTTP 500")


def test_without_stalled_takes_the_stalled_requests_out_of_each_latency() -> None:
    recorder = Recorder()
    for _ in range(90):
        recorder.add(_record("ok", 0.05, 1.0))
    for _ in range(10):
        recorder.add(_record("ok", 0.05, 25.0, worker_stalled_s=20.0))
    series = recorder.combined()
    assert series.hists["e2e"].quantile(0.99) > 20
    rest = without_stalled(series)
    assert rest is not None and rest.requests == 10
    assert rest.e2e_p99_s is not None and rest.e2e_p99_s < 1.05
    assert without(series.hists["e2e"], series.hists["stalled_e2e"]).count == 90


def test_a_silence_of_the_master_is_a_stall_and_a_freeze_counts_once() -> None:
    now = [100.0]
    watch = StallWatch(clock=lambda: now[0], wall=lambda: now[0] + 1000.0)
    watch.heard()
    now[0] += 1.0
    watch.heard()
    now[0] += 0.5
    assert watch.overlap(99.0) == 0.0
    now[0] += SILENCE_MIN_S + 10  # the link is down; the worker keeps running (its loop ticks on time)
    assert watch.overlap(100.5) > SILENCE_MIN_S  # the silence in progress already marks a request
    watch.heard()
    assert len(watch.stalls) == 1 and abs(watch.stalls[0][1] - watch.stalls[0][0] - (SILENCE_MIN_S + 10.5)) < 1e-9
    taken = watch.take()
    assert taken is not None and len(taken["stalls"]) == 1
    # a frozen process misses its ticks and its master's answers: one stall, not two
    now[0] += 1.0
    watch.heard()
    watch.last_tick = now[0]
    now[0] += 8.0
    watch.tick()
    watch.heard()
    assert len(watch.stalls) == 2 and watch.overlap(now[0] - 8.0, now[0]) == 8.0


def test_a_stage_whose_median_ttft_is_over_a_third_of_it_says_how_long_to_run() -> None:
    series = Series()
    series.hists["ttft"].record(30.0)
    note = ttft_long_note(ttft_summary(series), 60.0)
    assert note is not None and "--stage-duration 300s" in note
    assert ttft_long_note(ttft_summary(series), 120.0) is None


def test_a_server_ttft_far_below_the_clients_is_named_even_from_one_request() -> None:
    from attnload.results.model import ServerSummary, Summary
    from attnload.results.server import SERVER_GAP_FLAG, with_server

    stage = StageSummary(index=2, users=1, context=6144, ttft_s=Summary(count=1, p50=31.36, p99=31.36, max=31.36))
    server = ServerSummary(ttft_p50_s=3.6, ttft_p50_bucket_s=(2.5, 5.0))
    flagged = with_server(stage, server)
    assert SERVER_GAP_FLAG in flagged.flags
    (reason,) = flagged.server_gap_reasons
    assert "(1 request)" in reason and "queue and tokenization" in reason and "network" in reason


def test_a_long_rung_runs_longer_by_itself_up_to_four_times() -> None:
    import math

    from attnload.runner.stretch import MAX_STRETCH, RungStretch
    from attnload.workload.shapes import parse_shape

    spec = parse_shape("context:1k,16k", 60.0)
    stretch = RungStretch(spec)
    ttft = {0: 0.5, 1: 50.0}
    at = lambda t: stretch.stage_at(t, lambda i: ttft[i])  # noqa: E731
    assert at(0).index == 0 and at(59).index == 0 and at(61).index == 1  # a short TTFT: planned duration
    assert at(119).index == 1 and at(121).index == 1  # 50 s of 60: one more stage duration
    assert at(179).index == 1 and at(181).index == 1  # 50 s of 120 is still over a third: again
    assert at(239).index == 1 and at(241) is None  # 50 s of 180 is not: the rung ran 180 s
    never = RungStretch(spec)
    for t in range(0, 60 * 2 * MAX_STRETCH + 10, 5):  # no first token ever: at most four times the planned length
        last = never.stage_at(t, lambda i: math.inf)
    assert last is None and never.shift_s == (MAX_STRETCH - 1) * 60.0 * 2


def test_the_silence_after_a_freeze_is_the_freezes() -> None:
    now = [100.0]
    watch = StallWatch(clock=lambda: now[0], wall=lambda: now[0] + 1000.0)
    watch.heard()
    watch.last_tick = now[0] + 0.9
    now[0] += 9.0  # frozen from 100.9 to 109
    watch.tick()
    now[0] += 1.1  # the master's first answer after the wake-up comes a second later
    assert watch.overlap(109.5, now[0]) == 0.0  # a request sent after the wake-up is not stalled
    watch.heard()
    assert watch.stalls == [(100.9, 109.0)]
