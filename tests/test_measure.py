"""Histograms: ≤1 % relative error, exact merges across workers, no percentile above max."""

from __future__ import annotations

import random

import pytest

from attnload.measure.histogram import LogHistogram
from attnload.measure.recorder import Recorder, RequestRecord, split_gaps

pytestmark = pytest.mark.usefixtures("client_impl")  # every test on both per-chunk paths


def exact_quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))]


@pytest.mark.parametrize("q", [0.5, 0.9, 0.95, 0.99])
def test_quantiles_within_one_percent(q: float) -> None:
    rng = random.Random(7)
    values = [rng.lognormvariate(-3.0, 1.2) for _ in range(50_000)]
    hist = LogHistogram()
    for value in values:
        hist.record(value)
    assert hist.quantile(q) == pytest.approx(exact_quantile(values, q), rel=0.01)


def test_merge_equals_recording_everything_in_one() -> None:
    rng = random.Random(3)
    parts = [[rng.uniform(0.001, 2.0) for _ in range(1000)] for _ in range(4)]
    merged, whole = LogHistogram(), LogHistogram()
    for part in parts:
        piece = LogHistogram()
        for value in part:
            piece.record(value)
            whole.record(value)
        merged.merge(LogHistogram.from_wire(piece.to_wire()))
    assert merged.buckets == whole.buckets and merged.count == whole.count
    assert merged.total == pytest.approx(whole.total) and merged.max == whole.max


def test_no_percentile_exceeds_max() -> None:
    hist = LogHistogram()
    for value in (0.0501, 0.0502, 0.0503):
        hist.record(value)
    summary = hist.summary()
    assert all(summary[k] <= summary["max"] for k in ("p50", "p90", "p95", "p99"))  # type: ignore[operator]
    assert summary["max"] == 0.0503


def test_prometheus_buckets_are_cumulative_and_complete() -> None:
    hist = LogHistogram()
    for value in (0.0005, 0.01, 0.05, 0.05, 3.0, 500.0):
        hist.record(value)
    counts = hist.cumulative_counts([0.001, 0.02, 0.1, 10.0, 120.0])
    assert counts == [1, 2, 4, 5, 5]


def record(outcome: str = "ok", stage: int = 0, ttft: float = 0.05) -> RequestRecord:
    return RequestRecord(
        model_key="m",
        profile="p",
        stage=stage,
        outcome=outcome,
        error=None if outcome == "ok" else "server",
        ttft_s=ttft,
        itl_samples=((0.01, 1),) * 9,
        e2e_s=ttft + 0.09,
        prompt_tokens=10,
        completion_tokens=10,
        cached_prompt_tokens=2,
        tokens_estimated=False,
    )


def test_deltas_ship_each_record_exactly_once() -> None:
    worker, master = Recorder(), Recorder()
    for _ in range(3):
        worker.add(record())
    master.merge_delta(worker.take_delta())
    worker.add(record("failed"))
    worker.add(record(stage=1))
    master.merge_delta(worker.take_delta())
    master.merge_delta(worker.take_delta())  # empty: nothing new
    total = master.combined()
    assert total.counts["ok"] == 4 and total.counts["failed"] == 1
    assert total.errors == {"server": 1} and total.counts["completion_tokens"] == 50
    assert total.hists["itl"].count == 36 and master.combined(stage=1).counts["ok"] == 1


def test_failed_requests_do_not_enter_latency_histograms() -> None:
    recorder = Recorder()
    recorder.add(record("failed", ttft=9.0))
    assert recorder.combined().hists["ttft"].count == 0


def test_multi_token_chunks_give_one_sample_per_token() -> None:
    # first chunk 1 token, then chunks of 4, 4, 3 tokens after 40, 40, 30 ms
    samples = split_gaps([0.04, 0.04, 0.03], [1, 4, 4, 3], completion_tokens=12)
    assert samples == ((0.01, 4), (0.01, 4), (0.01, 3))


def test_server_count_rescales_local_estimates() -> None:
    samples = split_gaps([0.02, 0.02], [1, 1, 1], completion_tokens=5)
    assert sum(n for _, n in samples) == 4 and all(n >= 1 for _, n in samples)
