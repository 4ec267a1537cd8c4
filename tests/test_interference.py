"""``--shape interference:L`` without processes: the shape, and the recorder's classification of decode gaps
against injected-prefill windows (a stream that waits through a window loses the window's stall)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from attnload.errors import UsageError
from attnload.exporter.exposition import FleetCollector, FleetState
from attnload.measure.interference import INJECTOR_PROFILE, InterferenceRecorder
from attnload.measure.recorder import Recorder, RequestRecord
from attnload.results.decode.interference import prefill_interference
from attnload.workload.shapes import DECODE_PROMPT_TOKENS, InterferenceSpec, parse_shape


def test_shape_is_one_stage_of_short_prompts_with_the_injected_length() -> None:
    spec = parse_shape("interference:16k", 30.0)
    assert isinstance(spec, InterferenceSpec) and spec.injected_prefill_tokens == 16384
    (stage,) = spec.stages
    assert (stage.users, stage.context, stage.end_s) == (16, DECODE_PROMPT_TOKENS, 30.0)
    again = parse_shape(spec.with_users((6,)).to_text(), 30.0)
    assert again == spec.with_users((6,))
    with pytest.raises(UsageError, match="interference:16k"):
        parse_shape("interference:lots", 30.0)
    with pytest.raises(UsageError, match="one --users value"):
        spec.with_users((1, 8))


def _decode(started: float, gaps: list[float], key: str = "m") -> RequestRecord:
    """A decode stream: first token 0.1 s after ``started``, then one token per gap."""
    return RequestRecord(
        key,
        "p",
        0,
        "ok",
        None,
        0.1,
        tuple((g, 1) for g in gaps),
        0.1 + sum(gaps),
        128,
        1 + len(gaps),
        None,
        False,
        started_perf=started,
    )


def _injected(ttft: float) -> RequestRecord:
    return RequestRecord("m", INJECTOR_PROFILE, 0, "ok", None, ttft, (), ttft, 16384, 1, None, False)


def test_gaps_overlapping_a_window_are_during_and_their_excess_is_the_stall() -> None:
    recorder = InterferenceRecorder()
    window = recorder.open_window("m", 10.0)  # sent at t = 10 s, first token at 10.5 s
    recorder.close_window("m", window, _injected(0.5), 16384)
    # two streams with 10 ms steps; in [10, 10.5] each sees two 0.2 s mixed steps (and ordinary steps at the edges)
    for started in (9.0, 9.001):
        steps = [0.01] * 89 + [0.2, 0.2] + [0.01] * 100
        recorder.observe(_decode(started, steps), now_perf=20.0)
    series = recorder.series["m"]
    summary = prefill_interference(recorder, "m")
    assert summary is not None and summary.injections == 1 and summary.prefill_tokens == 16384
    assert summary.itl_p50_baseline_s == pytest.approx(0.01, rel=0.02)
    assert summary.itl_max_during_s == pytest.approx(0.2, rel=0.02)
    assert summary.itl_p50_during_s is not None and summary.itl_p50_during_s > 3 * summary.itl_p50_baseline_s
    # each stream lost 2 × (0.2 − 0.01) s in the window: 0.38 s per 16384 tokens = 23.2 ms per 1K
    assert summary.ms_per_1k_prefill_tokens == pytest.approx(380 / 16.384, rel=0.03)
    assert series.during.count == 2 * 13 + 1 and summary.injected_ttft_p50_s == pytest.approx(0.5, rel=0.02)


def test_the_injected_requests_and_other_models_are_not_decoders() -> None:
    recorder = InterferenceRecorder()
    recorder.open_window("m", 10.0)  # still open: counts up to now
    recorder.observe(_injected(0.5), now_perf=11.0)
    recorder.observe(_decode(9.5, [0.2] * 5, key="other"), now_perf=11.0)
    recorder.observe(_decode(9.5, [0.2] * 5), now_perf=11.0)
    assert "other" not in recorder.series and recorder.series["m"].during.count == 3
    assert prefill_interference(recorder, "m") is None  # nothing injected has finished


def test_worker_deltas_merge_on_the_master() -> None:
    worker, master = InterferenceRecorder(), InterferenceRecorder()
    window = worker.open_window("m", 10.0)
    worker.close_window("m", window, _injected(0.5), 16384)
    worker.observe(_decode(9.0, [0.01] * 89 + [0.2, 0.2] + [0.01] * 20), now_perf=20.0)
    master.merge_delta(worker.take_delta())
    assert prefill_interference(master, "m") == prefill_interference(worker, "m")
    assert worker.take_delta() == {}


def test_the_stall_is_a_live_gauge_per_model_equal_to_the_results() -> None:
    """``attnload_prefill_stall_ms_per_ktok`` is what results' ``ms_per_1k_prefill_tokens`` will say, per
    model; a model nothing was injected into has no sample (an empty panel, not a 0)."""
    recorder = InterferenceRecorder()
    window = recorder.open_window("m", 10.0)
    recorder.close_window("m", window, _injected(0.5), 16384)
    recorder.observe(_decode(9.0, [0.01] * 89 + [0.2, 0.2] + [0.01] * 100), now_perf=20.0)
    recorder.open_window("quiet", 10.0)
    registry = CollectorRegistry()
    labels = {"m": ("llama-3-70b", "GQA"), "quiet": ("deepseek-v3", "MLA")}
    registry.register(FleetCollector(Recorder(), FleetState(model_labels=labels, interference=recorder)))
    summary = prefill_interference(recorder, "m")
    assert summary is not None and summary.ms_per_1k_prefill_tokens == pytest.approx(380 / 16.384, rel=0.03)
    name = "attnload_prefill_stall_ms_per_ktok"
    gauge = registry.get_sample_value(name, {"model": "llama-3-70b", "attention": "GQA", "target": "m"})
    assert gauge == summary.ms_per_1k_prefill_tokens
    assert registry.get_sample_value(name, {"model": "deepseek-v3", "attention": "MLA", "target": "quiet"}) is None
