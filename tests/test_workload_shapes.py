"""Shapes, open-loop schedules, the sweep's plan and paired statistics: pure functions, no processes."""

from __future__ import annotations

import random
import statistics

import pytest

from attnload.errors import UsageError
from attnload.measure.paired import PairedRecorder, bootstrap_median_ci
from attnload.measure.recorder import RequestRecord
from attnload.runner.sender.openloop import arrival_offsets
from attnload.workload.shapes import parse_shape
from attnload.workload.sweep import FRACTIONS, ModelStageStats, Slo, SweepPlan


def test_concurrency_stages_and_boundaries() -> None:
    spec = parse_shape("concurrency:1,8,64,256", 60.0)
    assert [(s.index, s.start_s, s.end_s, s.users) for s in spec.stages] == [
        (0, 0.0, 60.0, 1),
        (1, 60.0, 120.0, 8),
        (2, 120.0, 180.0, 64),
        (3, 180.0, 240.0, 256),
    ]
    assert spec.stage_at(59.9).index == 0 and spec.stage_at(60.0).index == 1
    assert spec.stage_at(240.0) is None and spec.duration_s == 240.0


def test_rate_and_sweep_parse() -> None:
    spec = parse_shape("rate:0.5,1,2,4", 30.0)
    assert [s.rate for s in spec.stages] == [0.5, 1.0, 2.0, 4.0] and spec.open_loop
    sweep = parse_shape("sweep", 30.0)
    assert sweep.kind == "sweep" and sweep.levels == (256.0,) and sweep.stages == ()
    assert sweep.stage_at(5.0) is None
    assert parse_shape("sweep:64", 30.0).levels == (64.0,)
    assert parse_shape(sweep.to_text(), 30.0) == sweep


@pytest.mark.parametrize(
    "text", ["concurrency:", "rate:-1", "rate:0", "concurrency:1.5", "bogus:1", "rate:a", "sweep:x", "sweep:0"]
)
def test_bad_shapes_are_usage_errors(text: str) -> None:
    with pytest.raises(UsageError) as error:
        parse_shape(text, 10.0)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("arrivals", ["poisson", "constant"])
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_arrival_shares_make_the_whole_schedule(arrivals: str, workers: int) -> None:
    rate, duration = 7.3, 60.0
    shares = [
        arrival_offsets(
            rate,
            duration,
            arrivals=arrivals,
            share_index=w,
            share_count=workers,
            seed=1,  # type: ignore[arg-type]
            stage=0,
            stream=0,
        )
        for w in range(workers)
    ]
    union = sorted(t for share in shares for t in share)
    assert len(union) == round(rate * duration)  # the stage sends exactly its target count
    assert all(0.0 <= t < duration for t in union)
    assert all(share == sorted(share) for share in shares)
    if arrivals == "constant":
        gaps = [b - a for a, b in zip(union, union[1:], strict=False)]
        assert max(gaps) - min(gaps) < 1e-9
    else:  # exponential-looking gaps: coefficient of variation near 1
        gaps = [b - a for a, b in zip(union, union[1:], strict=False)]
        cv = statistics.pstdev(gaps) / statistics.mean(gaps)
        assert 0.8 < cv < 1.2


def test_arrivals_are_seeded_and_streams_are_phase_shifted() -> None:
    a = arrival_offsets(2.0, 10.0, arrivals="poisson", share_index=0, share_count=1, seed=5, stage=1, stream=0)
    b = arrival_offsets(2.0, 10.0, arrivals="poisson", share_index=0, share_count=1, seed=5, stage=1, stream=0)
    c = arrival_offsets(2.0, 10.0, arrivals="poisson", share_index=0, share_count=1, seed=6, stage=1, stream=0)
    assert a == b and a != c
    s0 = arrival_offsets(
        1.0, 4.0, arrivals="constant", share_index=0, share_count=1, seed=0, stage=0, stream=0, streams=2
    )
    s1 = arrival_offsets(
        1.0, 4.0, arrivals="constant", share_index=0, share_count=1, seed=0, stage=0, stream=1, streams=2
    )
    assert s0 == [0.0, 1.0, 2.0, 3.0] and s1 == [0.5, 1.5, 2.5, 3.5]


def _stats(tok_s: float, rps: float, ttft_p99: float = 0.1) -> ModelStageStats:
    return ModelStageStats(
        output_tokens_per_s=tok_s, requests_per_s=rps, ttft_p99_s=ttft_p99, itl_p99_s=0.01, e2e_p99_s=1.0
    )


def test_sweep_finds_each_knee_then_steps_rates_below_it() -> None:
    plan = SweepPlan(["a", "b"], 64, Slo(ttft_p99_s=1.0))
    stage = plan.first()
    assert stage.kind == "concurrency" and stage.users == 2
    # a saturates after 4 users/model (tok/s 100, 200, 400, 420); b breaks its TTFT SLO at 8.
    a = [100, 200, 400, 420]
    b = [(80, 0.2), (160, 0.2), (320, 0.3), (600, 2.0)]
    users = []
    for i in range(4):
        users.append(stage.users)
        stage = plan.advance({"a": _stats(a[i], a[i] / 100), "b": _stats(b[i][0], b[i][0] / 100, b[i][1])}, i)
    assert users == [2, 4, 8, 16]
    assert stage is not None and stage.kind == "rate"
    assert stage.rates_rps == pytest.approx({"a": FRACTIONS[0] * 4.0, "b": FRACTIONS[0] * 3.2})
    index = 4
    while stage is not None:
        rates = stage.rates_rps or {}
        ok_b = stage.fraction is not None and stage.fraction <= 0.7
        stage = plan.advance({"a": _stats(0, rates["a"]), "b": _stats(0, rates["b"], 0.5 if ok_b else 3.0)}, index)
        index += 1
    assert index == 4 + len(FRACTIONS)
    report = plan.report()
    assert report["a"]["knee_users"] == 4 and report["b"]["knee_users"] == 4
    assert report["a"]["max_sustainable_rps"] == pytest.approx(4.0)
    assert report["b"]["max_sustainable_rps"] == pytest.approx(0.7 * 3.2)


def test_sweep_is_bounded_by_its_user_cap() -> None:
    plan = SweepPlan(["a"], 4, Slo())
    stage = plan.first()
    stages = 0
    tok = 100.0
    while stage is not None and stages < 50:
        stats = (
            {"a": _stats(tok, tok / 100)}
            if stage.kind == "concurrency"
            else {"a": _stats(0, (stage.rates_rps or {})["a"])}
        )
        tok *= 2
        stage = plan.advance(stats, stages)
        stages += 1
    assert stages == 3 + len(FRACTIONS)  # 1, 2, 4 users then the rate steps
    assert plan.report()["a"]["knee_users"] == 4


def _record(key: str, ttft: float, e2e: float, outcome: str = "ok") -> RequestRecord:
    return RequestRecord(
        model_key=key,
        profile="p",
        stage=0,
        outcome=outcome,
        error=None,
        ttft_s=ttft,
        itl_samples=(),
        e2e_s=e2e,
        prompt_tokens=10,
        completion_tokens=11,
        cached_prompt_tokens=0,
        tokens_estimated=False,
    )


def test_paired_differences_ship_and_merge_with_a_ci() -> None:
    rng = random.Random(3)
    worker, master = PairedRecorder("gqa"), PairedRecorder("gqa")
    for _ in range(300):
        base = rng.uniform(0.05, 0.5)  # prompt-to-prompt variation cancels in the difference
        order = rng.sample(["gqa", "mla"], 2)
        pair = {"gqa": _record("gqa", base, base * 10), "mla": _record("mla", base + 0.03, base * 10 + 0.2)}
        worker.add(0, pair, order)
    worker.add(0, {"gqa": _record("gqa", 0.1, 1.0), "mla": _record("mla", 0.1, 1.0, outcome="failed")}, ["gqa", "mla"])
    master.merge_delta(worker.take_delta())
    assert worker.take_delta()["d"] == {}
    summary = master.summary("mla")
    assert summary is not None and master.summary("gqa") is None
    assert summary["pairs"] == 300
    assert summary["ttft_s"]["median_diff"] == pytest.approx(0.03)
    assert summary["ttft_s"]["ci_low"] <= 0.03 <= summary["ttft_s"]["ci_high"]
    assert summary["e2e_s"]["median_diff"] == pytest.approx(0.2)


def test_paired_head_start_cancels_whatever_the_share_of_each_order() -> None:
    """Two identical targets: the one sent first is 50 µs faster. With the model ahead in 60 % of pairs a
    plain median reads −50 µs with a CI away from 0; the two orders' medians averaged read 0."""
    rng = random.Random(5)
    recorder = PairedRecorder("a")
    for i in range(800):
        base = rng.uniform(0.02, 0.03)
        ahead = i % 5 < 3
        head = -50e-6 if ahead else 50e-6
        noise = rng.gauss(0.0, 5e-6)
        pair = {"a": _record("a", base, base), "b": _record("b", base + head + noise, base + head + noise)}
        recorder.add(0, pair, ["b", "a"] if ahead else ["a", "b"])
    ttft = recorder.summary("b")["ttft_s"]  # type: ignore[index]
    assert ttft["n"] == 800
    assert abs(ttft["median_diff"]) < 2e-6 and ttft["ci_low"] <= 0.0 <= ttft["ci_high"], ttft
    both_orders = recorder.samples[(0, "b", "ttft_s", True)].values + recorder.samples[(0, "b", "ttft_s", False)].values
    plain, low, high = bootstrap_median_ci(both_orders)
    assert plain is not None and plain < -40e-6 and high is not None and high < 0.0


def test_bootstrap_ci_covers_the_median_and_narrows_with_n() -> None:
    rng = random.Random(0)
    small = [rng.gauss(1.0, 1.0) for _ in range(30)]
    large = [rng.gauss(1.0, 1.0) for _ in range(1500)]
    m_small, lo_small, hi_small = bootstrap_median_ci(small)
    m_large, lo_large, hi_large = bootstrap_median_ci(large)
    assert lo_small <= m_small <= hi_small and lo_large <= m_large <= hi_large  # type: ignore[operator]
    assert (hi_large - lo_large) < (hi_small - lo_small)  # type: ignore[operator]
    assert lo_large < 1.0 < hi_large  # type: ignore[operator]
    assert bootstrap_median_ci([]) == (None, None, None)
