"""``attnload sim --throughput`` (sim/throughput.py), engine profiles, --ep and the calibrated
cost-model terms of docs/design.md, each with its own test, plus the issue-18 directions."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest

from attnload.commands.cli import build_parser, main
from attnload.sim import cli as sim_cli
from attnload.sim.costmodel import (
    EngineConfig,
    GroupLoad,
    decode_loads,
    decode_step,
    dense_nonattention_params,
    deploy,
    dp_expected_max_load,
    engine_profile,
    ep_remote_ranks_per_token,
    grouped_gemm_efficiency,
    moe_tokens_per_expert,
    prefill_time_s,
    upproj_flop_per_prefix_token,
)
from attnload.sim.explain import imbalanced_loads
from attnload.sim.presets import PRESETS
from attnload.sim.scheduler import Scheduler, SimSequence
from attnload.sim.throughput import run_throughput

K8 = 8192


def dep(key: str, **changes: object):  # type: ignore[no-untyped-def]
    return deploy(PRESETS[key], dataclasses.replace(EngineConfig(), **changes), require_fit=False)  # type: ignore[arg-type]


def profiled(key: str, engine: str, **changes: object):  # type: ignore[no-untyped-def]
    return deploy(
        PRESETS[key], dataclasses.replace(EngineConfig(), **{**engine_profile(engine), "engine": engine, **changes})
    )


# ---------------------------------------------------------------- offline runner


@pytest.mark.parametrize(
    ("key", "engine", "changes", "isl", "osl", "prompts", "conc"),
    [
        ("llama-3-8b", "vllm", {"gpu": "h100", "tp": 1}, 1000, 300, 600, None),  # recompute preemptions
        ("llama-3-70b", "trtllm", {"gpu": "h100", "tp": 2, "kv_dtype": "fp8"}, 1000, 200, 300, None),
        ("deepseek-v3", "sglang", {"max_num_seqs": 512}, 1024, 200, 400, 256),
        ("deepseek-v3", "trtllm", {"ep": 8, "max_num_seqs": 512, "max_num_batched_tokens": 4608}, 1024, 150, 300, 256),
    ],
)
def test_fast_forward_equals_step_by_step(
    key: str, engine: str, changes: dict[str, object], isl: int, osl: int, prompts: int, conc: int | None
) -> None:
    d = profiled(key, engine, **changes)
    fast = run_throughput(d, isl, osl, prompts, conc)
    slow = run_throughput(d, isl, osl, prompts, conc, fast_forward=False)
    assert fast.steps == slow.steps and fast.preemptions == slow.preemptions
    assert fast.max_running == slow.max_running
    assert fast.duration_s == pytest.approx(slow.duration_s, rel=1e-9)
    for name in ("ttft_p50_s", "ttft_p99_s", "itl_p50_s", "itl_p99_s", "tpot_p50_s", "tpot_p99_s"):
        assert getattr(fast, name) == pytest.approx(getattr(slow, name), rel=1e-6), name


def test_max_concurrency_caps_running_and_counts_arrivals_from_slot() -> None:
    d = dep("llama-3-8b", gpu="h100", tp=1, kv_dtype="fp8")
    r = run_throughput(d, 500, 100, 200, 16)
    assert r.max_running == 16 and r.preemptions == 0
    assert r.ttft_p99_s < 0.5  # no queueing: each request is sent when a slot frees
    assert r.output_tokens_per_s == pytest.approx(200 * 100 / r.duration_s)


def test_cli_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "sim",
        "--throughput",
        "--models",
        "llama-3-8b",
        "--gpu",
        "h100",
        "--tp",
        "1",
        "--input-len",
        "512",
        "--output-len",
        "64",
        "--num-prompts",
        "64",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    for text in (
        "requests/s",
        "output tok/s",
        "total tok/s",
        "TTFT p50 / p99",
        "ITL  p50 / p99",
        "TPOT p50 / p99",
        "peak running",
        "preemptions",
        "engine vllm",
    ):
        assert text in out, text
    assert main([*argv, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["num_prompts"] == 64 and result["engine"] == "vllm" and result["max_running"] == 64


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--models", "deepseek-v3", "--gpu", "h100"], "does not fit"),
        (["--models", "llama-3-70b", "--ep", "2"], "dense model"),
        (["--models", "deepseek-v3", "--ep", "3"], "ep 3 must divide tp 8"),
        (["--models", "llama-3-70b", "--dp-attention", "3"], "does not divide tp 8"),
        (
            [
                "--models",
                "llama-3-8b",
                "--gpu",
                "h100",
                "--tp",
                "1",
                "--kv-capacity-scale",
                "0.05",
                "--input-len",
                "30000",
            ],
            "does not fit one attention",
        ),
        (["--models", "llama-3-8b", "--input-len", "600000"], "exceed max_model_len"),
    ],
)
def test_bad_combinations_exit_2_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--throughput", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_published_scale_run_is_cheap() -> None:
    """1024-way, 5120 prompts × 2K output: seconds of CPU, not minutes (issue: < 60 s)."""
    d = profiled(
        "deepseek-v3", "trtllm", ep=8, max_num_seqs=1024, max_num_batched_tokens=9208, gpu_memory_utilization=0.8
    )
    start = time.process_time()
    r = run_throughput(d, 1024, 2048, 5120, 1024)
    assert time.process_time() - start < 20
    assert r.max_running == 1024 and r.preemptions == 0


# ---------------------------------------------------------------- engine profiles


def test_engine_profiles() -> None:
    assert engine_profile("vllm") == {k: getattr(EngineConfig(), k) for k in engine_profile("vllm")}
    trt = engine_profile("trtllm")
    assert trt["preemption"] == "none" and trt["kv_memory_basis"] == "free" and trt["chunked_prefill"] is False
    assert engine_profile("sglang")["mix_prefill_decode"] is False
    # KV of what the weights leave: llama-3-70b on one H200 gets 0.9 × (141 − 70.55) GB.
    d = profiled("llama-3-70b", "trtllm", gpu="h200", tp=1)
    assert d.free_kv_bytes_per_gpu == pytest.approx(0.9 * (141e9 - 70_553_706_496))


def test_explicit_flags_win_over_the_profile() -> None:
    args = build_parser("sim").parse_args(["sim", "--engine", "trtllm", "--preemption", "recompute"])
    cfg = sim_cli.engine_config(args)
    assert cfg.preemption == "recompute" and cfg.kv_memory_basis == "free" and cfg.max_num_seqs == 2048


def test_sglang_prefill_holds_every_ranks_decodes() -> None:
    """Non-mixing engine: while any rank has prefill work, no rank decodes (prefill/decode interference)."""
    for engine, stalls in (("sglang", True), ("vllm", False)):
        d = profiled("deepseek-v3", engine)
        tokens: list[str] = []
        sched = Scheduler(d, lambda seq, n, out=tokens: out.append(seq.request_id))
        for i in range(8):
            sched.submit(SimSequence(f"d{i}", 64, 50), 0.0)
        now = 0.0
        for _ in range(3):  # prefill the decoders and let them decode
            now += sched.plan(now) or 0.0
            sched.complete(now)
        sched.submit(SimSequence("p", 4000, 2), now)
        tokens.clear()
        now += sched.plan(now) or 0.0
        sched.complete(now)
        assert (not any(t.startswith("d") for t in tokens)) == stalls, engine


def test_trtllm_prefill_is_not_chunked() -> None:
    d = profiled("llama-3-8b", "trtllm", gpu="h100", tp=1, max_num_batched_tokens=2048)
    sched = Scheduler(d, lambda seq, n: None)
    sched.submit(SimSequence("a", 1500, 4), 0.0)
    sched.submit(SimSequence("b", 1500, 4), 0.0)
    sched.plan(0.0)
    assert [(s.request_id, c) for _, _, chunks in sched._plan for s, c in chunks] == [("a", 1500)]


# ---------------------------------------------------------------- calibrated terms, one test each


def test_term_dp_padding_to_the_largest_rank() -> None:
    d = dep("deepseek-v3")
    balanced = d.step_breakdown(imbalanced_loads(d, 64, K8, 8))
    skewed = d.step_breakdown(imbalanced_loads(d, 64, K8, 22))
    assert balanced.dp_pad_tokens == 0 and skewed.dp_pad_tokens == 8 * 22 - 64
    assert skewed.c_lin_s > balanced.c_lin_s and skewed.total_s > balanced.total_s
    assert dep("llama-3-70b").step_breakdown(imbalanced_loads(dep("llama-3-70b"), 64, K8, 64)).dp_pad_tokens == 0
    # random routing: the busiest of 8 ranks expects ≈ 13.4 of 64, not 8
    assert dp_expected_max_load(64, 8) == pytest.approx(13.4, abs=0.2) and dp_expected_max_load(64, 1) == 64


def test_term_grouped_gemm_efficiency() -> None:
    assert grouped_gemm_efficiency(1, 64) == pytest.approx(1 / 64)
    assert grouped_gemm_efficiency(32, 64) == pytest.approx(0.5) and grouped_gemm_efficiency(64, 64) == 1.0
    v3 = PRESETS["deepseek-v3"]
    assert moe_tokens_per_expert(v3, 1) == pytest.approx(1.0)
    assert moe_tokens_per_expert(v3, 1024) == pytest.approx(32.0, rel=0.01)
    # The expert GEMMs at 30 tokens per expert cost more FLOP-time per token than at 3,000.
    d = dep("deepseek-v3", dp_attention=1)
    small, big = (d.step_breakdown([GroupLoad(t)]) for t in (960, 96000))
    assert small.moe_gemm_efficiency < 0.5 < big.moe_gemm_efficiency
    assert small.c_lin_s / 960 > big.c_lin_s / 96000


def test_term_grouped_gemm_kernel_rate() -> None:
    """The trtllm profile computes expert GEMMs at 0.54 of the dense rate; dense GEMMs and the other
    profiles are untouched, and the flag wins over the profile."""
    assert engine_profile("trtllm")["moe_kernel_rate"] == 0.54 and engine_profile("vllm")["moe_kernel_rate"] == 1.0
    load = [GroupLoad(4096)]
    moe = {
        rate: dep("qwen3-235b-a22b", tp=4, ep=4, dp_attention=1, moe_kernel_rate=rate).step_breakdown(load)
        for rate in (1.0, 0.54)
    }
    q = PRESETS["qwen3-235b-a22b"]
    per_expert = moe_tokens_per_expert(q, 4096)
    routed_flop = 2 * q.moe_routed_params * q.moe_top_k / q.moe_experts * 4096 / 4
    routed_s = routed_flop / grouped_gemm_efficiency(per_expert, 64) / (EngineConfig().eff_gemm * 1979e12)
    assert moe[0.54].c_lin_s - moe[1.0].c_lin_s == pytest.approx(routed_s * (1 / 0.54 - 1), rel=1e-9)
    dense = {rate: dep("llama-3-70b", moe_kernel_rate=rate).step_breakdown(load).c_lin_s for rate in (1.0, 0.54)}
    assert dense[1.0] == dense[0.54]
    args = build_parser("sim").parse_args(["sim", "--engine", "trtllm", "--moe-kernel-rate", "1"])
    assert sim_cli.engine_config(args).moe_kernel_rate == 1.0


def test_term_dp_replicates_dense_weights() -> None:
    """trtllm under attention DP holds the dense MLPs, shared experts and lm_head whole in every group:
    weights per GPU and weight reads per step grow by exactly those bytes × (1/A − 1/tp); D = 1 and
    the other profiles are unchanged."""
    assert engine_profile("trtllm")["dp_replicates_dense"] is True
    assert engine_profile("vllm")["dp_replicates_dense"] is False
    v3 = PRESETS["deepseek-v3"]
    dense = dense_nonattention_params(v3)
    assert dense == pytest.approx(5.16e9, rel=0.01)  # 3 dense MLPs, 58 shared experts, embeddings + lm_head
    load = decode_loads(dep("deepseek-v3"), 1024, 2048)
    split, held = (dep("deepseek-v3", dp_replicates_dense=flag) for flag in (False, True))
    assert held.weights_bytes_per_gpu - split.weights_bytes_per_gpu == pytest.approx(dense * (1 - 1 / 8))
    extra_s = dense * (1 - 1 / 8) / (4.8e12 * EngineConfig().eff_bw)
    assert held.step_breakdown(load).m_w_s - split.step_breakdown(load).m_w_s == pytest.approx(extra_s)
    pure_tp = {flag: dep("deepseek-v3", dp_attention=1, dp_replicates_dense=flag) for flag in (False, True)}
    assert pure_tp[True].weights_bytes_per_gpu == pure_tp[False].weights_bytes_per_gpu
    args = build_parser("sim").parse_args(["sim", "--engine", "trtllm", "--no-dp-replicates-dense"])
    assert sim_cli.engine_config(args).dp_replicates_dense is False


def test_term_ep_all_to_all() -> None:
    v3 = PRESETS["deepseek-v3"]
    assert ep_remote_ranks_per_token(v3, 1) == 0
    assert ep_remote_ranks_per_token(v3, 8) == pytest.approx(8 * (1 - (7 / 8) ** 8) * 7 / 8)
    no_ep, ep8 = dep("deepseek-v3"), dep("deepseek-v3", ep=8)
    b0, b8 = decode_step(no_ep, 1024, 2048), decode_step(ep8, 1024, 2048)
    assert b0.a2a_s == 0 and b8.a2a_s > 2 * 61 * 80e-6  # dispatch + combine latency per layer, plus bytes
    bytes_s = 61 * (1024 / 8) * ep_remote_ranks_per_token(v3, 8) * 7168 * 3 / 450e9
    assert b8.a2a_s == pytest.approx(61 * 2 * 80e-6 + bytes_s)


def test_term_mla_prefill_upprojection() -> None:
    v3, gla8 = PRESETS["deepseek-v3"], PRESETS["deepseek-v3-gla8"]
    assert upproj_flop_per_prefix_token(v3) == 2 * 128 * 512 * 256
    assert upproj_flop_per_prefix_token(gla8) == 2 * 128 * 256 * 256
    assert upproj_flop_per_prefix_token(PRESETS["llama-3-70b"]) == 0
    d = dep("deepseek-v3", dp_attention=1)
    first = d.step_breakdown([GroupLoad.of((), ((0, 8192),))])
    later = d.step_breakdown([GroupLoad.of((), ((24576, 8192),))])
    assert first.mla_upproj_s == 0 and later.mla_upproj_s == pytest.approx(
        61 * upproj_flop_per_prefix_token(v3) * 24576 / (8 * 1979e12 * 0.7)
    )


def test_term_gemm_knee() -> None:
    b = decode_step(dep("llama-3-70b", gpu="h200", tp=1), 193, 1500)
    assert max(b.c_lin_s, b.m_w_s) < b.gemm_phase_s < b.c_lin_s + b.m_w_s
    sharp = decode_step(dep("llama-3-70b", gpu="h200", tp=1, gemm_knee=0), 193, 1500)
    assert sharp.gemm_phase_s == max(sharp.c_lin_s, sharp.m_w_s)


# ---------------------------------------------------------------- directions


def test_direction_mla_family_holds_more_sequences_at_equal_kv_budget() -> None:
    """Same GPUs, same KV bytes: MLA-family models fit more 8K sequences than GQA ones."""
    gqa = dep("llama-3-70b")
    for key, changes in (("deepseek-v3", {}), ("deepseek-v3-gla8", {}), ("deepseek-coder-v2", {"dp_attention": 4})):
        mla = dep(key, **changes)
        budget = 40e9  # bytes of KV per GPU for both
        mla_seqs = mla.dp * int(budget // (mla.kv_bytes_per_token_per_gpu * K8))
        gqa_seqs = gqa.dp * int(budget // (gqa.kv_bytes_per_token_per_gpu * K8))
        assert mla_seqs > gqa_seqs, key
    for engine in ("vllm", "trtllm"):  # and on one H100 at TP1 under each profile
        lite = profiled("deepseek-v2-lite", engine, gpu="h100", tp=1)
        llama = profiled("llama-3-8b", engine, gpu="h100", tp=1)
        assert lite.seqs_at(K8) > 3 * llama.seqs_at(K8)


def test_direction_dp_attention_helps_large_balanced_and_costs_small_or_imbalanced() -> None:
    d8, d1 = dep("deepseek-v3"), dep("deepseek-v3", dp_attention=1)
    assert decode_step(d8, 256, K8).total_s < 0.75 * decode_step(d1, 256, K8).total_s  # large, balanced
    assert decode_step(d8, 1, K8).total_s > 1.5 * decode_step(d1, 1, K8).total_s  # small
    assert decode_step(d8, 16, K8).total_s > decode_step(d1, 16, K8).total_s
    one_rank = d8.step_breakdown(imbalanced_loads(d8, 64, K8, 64)).total_s  # imbalanced
    assert decode_step(d8, 64, K8).total_s < decode_step(d1, 64, K8).total_s < one_rank


def test_explain_shows_both_sides_of_dp_attention(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--explain", "deepseek-v3", "--batch", "1,64,256"]) == 0
    out = capsys.readouterr().out
    assert "DP attention vs pure TP" in out and "DP costs" in out and "DP helps; costs if all on one rank" in out
    for term in (
        "DP padding",
        "grouped-GEMM efficiency",
        "EP all-to-all",
        "MLA prefill up-projection",
        "prefill/decode interference",
    ):
        assert term in out, term
    assert main(["sim", "--explain", "deepseek-v3", "--ep", "8", "--engine", "sglang"]) == 0
    out = capsys.readouterr().out
    assert "EP all-to-all (ep 8)" in out and "holds every rank's decodes" in out


@pytest.mark.parametrize("prompt", [32768, 65536])
def test_direction_mla_prefill_slower_than_gla_variant(prompt: int) -> None:
    for changes in ({"dp_attention": 1}, {"gpu": "h200", "tp": 8, "dp_attention": 8}):
        mla, gla = dep("deepseek-v3", **changes), dep("deepseek-v3-gla8", **changes)
        assert prefill_time_s(mla, prompt) > prefill_time_s(gla, prompt), changes
    mla = dep("deepseek-coder-v2", gpu="h100", dp_attention=1)
    gla = dep("deepseek-coder-v2-gla8", gpu="h100", dp_attention=1)
    assert prefill_time_s(mla, prompt) > prefill_time_s(gla, prompt)
