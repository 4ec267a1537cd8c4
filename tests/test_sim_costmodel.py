"""The §3 cost model against the docs/cost-model.md §6 tables and the pure items of §7."""

from __future__ import annotations

import dataclasses

import pytest

from attnload.errors import UsageError
from attnload.sim.costmodel import (
    Deployment,
    EngineConfig,
    GroupLoad,
    decode_step,
    deploy,
    kv_bytes_per_token,
    prefill_time_s,
    step_time,
)
from attnload.sim.presets import HARDWARE, PRESETS

K1, K8, K32 = 1024, 8192, 32768
TIME_TOL = 0.05


def dep(key: str, **changes: object) -> Deployment:
    """A deployment at the §4.6 defaults plus ``changes``; †-cells need no KV fit."""
    return deploy(PRESETS[key], dataclasses.replace(EngineConfig(), **changes), require_fit=False)  # type: ignore[arg-type]


def t_ms(d: Deployment, batch: int, context: int) -> float:
    return decode_step(d, batch, context).total_s * 1e3


V3_D1 = {"dp_attention": 1}
H100_TP1 = {"gpu": "h100", "tp": 1}
CODER_MLA = ("deepseek-coder-v2", {"gpu": "h100", "dp_attention": 4})
CODER_GLA = ("deepseek-coder-v2-gla8", {"gpu": "h100"})

# §6a: (model, changes) -> {L: [(step ms, tok/s) for B in 1, 16, 64, 256]}
TABLE_6A = {
    ("llama-3-70b", ()): {
        K1: [(4.60, 217), (4.95, 202), (6.24, 160), (12.13, 82)],
        K8: [(4.67, 214), (6.18, 162), (11.13, 90), (31.70, 32)],
        K32: [(4.94, 203), (10.37, 96), (27.91, 36), (98.81, 10)],
    },
    ("deepseek-v3", ()): {
        K1: [(6.56, 152), (14.76, 68), (26.62, 38), (31.78, 31)],
        K8: [(6.77, 148), (15.17, 66), (28.26, 35), (38.34, 26)],
        K32: [(7.47, 134), (16.57, 60), (33.89, 30), (60.86, 16)],
    },
    ("deepseek-v3", (("dp_attention", 1),)): {
        K1: [(3.28, 305), (12.55, 80), (25.24, 40), (33.63, 30)],
        K8: [(3.41, 294), (14.65, 68), (33.64, 30), (67.21, 15)],
        K32: [(3.86, 259), (21.85, 46), (62.42, 16), (182.35, 5)],
    },
}


@pytest.mark.parametrize(("model", "rows"), TABLE_6A.items(), ids=["llama-3-70b", "deepseek-v3-D8", "deepseek-v3-D1"])
def test_table_6a_step_time_and_tokens_per_s(
    model: tuple[str, tuple[tuple[str, int], ...]], rows: dict[int, list[tuple[float, int]]]
) -> None:
    d = dep(model[0], **dict(model[1]))
    for context, cells in rows.items():
        for batch, (ms, tok_s) in zip((1, 16, 64, 256), cells, strict=True):
            step = t_ms(d, batch, context)
            assert step == pytest.approx(ms, rel=TIME_TOL), (batch, context)
            assert 1e3 / step == pytest.approx(tok_s, rel=TIME_TOL, abs=0.5), (batch, context)  # cells are rounded


@pytest.mark.parametrize(
    ("key", "changes", "components"),
    [
        ("llama-3-70b", {}, (3.26, 2.30, 1.16, 22.37, 3.89)),
        ("deepseek-v3", {}, (8.32, 24.42, 7.51, 4.80, 2.28)),  # C_lin: grouped-GEMM tiles (cost-model.md §10)
        ("deepseek-v3", V3_D1, (8.32, 21.82, 7.51, 38.38, 2.72)),
    ],
)
def test_table_6a_components(key: str, changes: dict[str, object], components: tuple[float, ...]) -> None:
    b = decode_step(dep(key, **changes), 256, K8)
    got = (b.c_lin_s, b.m_w_s, b.c_att_s, b.m_kv_s, b.t_comm_s)
    assert [x * 1e3 for x in got] == pytest.approx(components, rel=TIME_TOL)
    assert b.total_s == pytest.approx(b.gemm_phase_s + max(b.c_att_s, b.m_kv_s) + b.t_comm_s + 1e-3)
    assert max(b.c_lin_s, b.m_w_s) <= b.gemm_phase_s <= b.c_lin_s + b.m_w_s


# §6b and the text below it: (key, changes) -> (KV B/token/GPU, weights GB/GPU, KV tokens, seqs 1K, 8K, 32K)
TABLE_6B = [
    ("llama-3-70b", {}, 40960, 8.82, 2_882_816, (2815, 351, 87)),
    ("deepseek-v3", {}, 70272, 93.86, 3_761_152, (3672, 456, 112)),
    ("deepseek-v3", V3_D1, 70272, 83.88, 612_256, (597, 74, 18)),
    ("llama-3-70b-gta", {}, 30720, 8.82, 3_843_760, (3753, 469, 117)),
    ("deepseek-v3-gla8", {}, 39040, 83.88, 1_102_064, (1076, 134, 33)),
    (CODER_MLA[0], CODER_MLA[1], 69120, 32.86, 2_265_152, (2212, 276, 68)),
    (CODER_GLA[0], CODER_GLA[1], 38400, 29.50, 1_106_768, (1080, 135, 33)),
    ("llama-3-70b", {"gpu": "h100"}, 40960, 8.82, 1_542_496, (None, 188, None)),
    ("llama-3-70b-gta", {"gpu": "h100"}, 30720, 8.82, 2_056_656, (None, 251, None)),
    ("llama-3-8b", H100_TP1, 131072, 8.03, 488_048, (None, 59, None)),
    ("deepseek-v2-lite", H100_TP1, 31104, 15.70, 1_810_048, (None, 220, None)),
]


@pytest.mark.parametrize(("key", "changes", "kv_gpu", "weights_gb", "tokens", "seqs"), TABLE_6B)
def test_table_6b_capacity(
    key: str, changes: dict[str, object], kv_gpu: int, weights_gb: float, tokens: int, seqs: tuple[int | None, ...]
) -> None:
    d = deploy(PRESETS[key], dataclasses.replace(EngineConfig(), **changes))  # type: ignore[arg-type]
    assert d.kv_bytes_per_token_per_gpu == kv_gpu
    assert d.weights_bytes_per_gpu / 1e9 == pytest.approx(weights_gb, abs=0.01)
    assert d.kv_capacity_tokens == pytest.approx(tokens, abs=d.dp * 16)
    for context, expected in zip((K1, K8, K32), seqs, strict=True):
        if expected is not None:
            assert abs(d.seqs_at(context) - expected) <= 1


TABLE_6C = {
    "coder-v2-D4": {K1: (4.81, 9.54, 15.20, 18.37), K8: (4.99, 10.28, 18.16, 30.20), K32: (5.63, 12.82, 28.30, 70.77)},
    "coder-v2-gla8": {
        K1: (2.98, 7.99, 14.09, 19.02),
        K8: (3.08, 9.64, 20.67, 45.31),
        K32: (3.43, 15.27, 43.20, 135.46),
    },
}


@pytest.mark.parametrize(("name", "model"), [("coder-v2-D4", CODER_MLA), ("coder-v2-gla8", CODER_GLA)])
def test_table_6c(name: str, model: tuple[str, dict[str, object]]) -> None:
    d = dep(model[0], **model[1])
    for context, cells in TABLE_6C[name].items():
        for batch, ms in zip((1, 16, 64, 256), cells, strict=True):
            assert t_ms(d, batch, context) == pytest.approx(ms, rel=TIME_TOL), (batch, context)


def test_table_6d() -> None:
    cells = [(1, K32), (16, K8), (16, K32), (64, K8), (64, K32)]
    gta, gla8 = dep("llama-3-70b-gta"), dep("deepseek-v3-gla8")
    assert [t_ms(gta, b, L) for b, L in cells] == pytest.approx([4.85, 5.83, 8.97, 9.74, 22.32], rel=TIME_TOL)
    assert [t_ms(gla8, b, L) for b, L in cells] == pytest.approx([3.59, 13.58, 17.58, 29.37, 45.36], rel=TIME_TOL)


@pytest.mark.parametrize(
    ("key", "changes", "ttft_ms"),
    [
        ("llama-3-70b", {}, (49.7, 208.9, 1057.8)),
        ("deepseek-v3", {}, (110.9, 698.8, 6767.1)),
        ("deepseek-v3", V3_D1, (46.1, 156.6, 1059.2)),
        (CODER_MLA[0], CODER_MLA[1], (45.7, 299.7, 3009.5)),
        (CODER_GLA[0], CODER_GLA[1], (30.0, 111.6, 867.7)),
    ],
)
def test_table_6e_idle_prefill(key: str, changes: dict[str, object], ttft_ms: tuple[float, ...]) -> None:
    d = dep(key, **changes)
    got = [prefill_time_s(d, p) * 1e3 for p in (2000, 8192, 32768)]
    assert got == pytest.approx(ttft_ms, rel=TIME_TOL)


def test_reference_step_time_matches_aggregates() -> None:
    m, cfg = PRESETS["deepseek-v3"], EngineConfig()
    groups = [([K8] * 32, [(0, 512)]) if g == 0 else ([K8] * 32, []) for g in range(8)]
    ref = step_time(m, HARDWARE["h200"], cfg, groups)
    agg = dep("deepseek-v3").step_breakdown([GroupLoad.of(*g) for g in groups])
    assert ref == agg
    assert ref.total_s > decode_step(dep("deepseek-v3"), 256, K8).total_s  # the chunk costs time


# ---------------------------------------------------------------------------- §7 qualitative checklist


def kv(key: str, attn_tp: int = 1) -> int:
    return kv_bytes_per_token(PRESETS[key], attn_tp)


def seqs8k(key: str, **changes: object) -> int:
    return deploy(PRESETS[key], dataclasses.replace(EngineConfig(), **changes)).seqs_at(K8)  # type: ignore[arg-type]


def test_7_1_mla_total_is_small() -> None:
    assert kv("llama-3-70b") / kv("deepseek-v3") == pytest.approx(4.66, abs=0.01)


def test_7_2_latent_does_not_shard_dp_attention_spreads() -> None:
    assert {kv("deepseek-v3", a) for a in (1, 2, 4, 8)} == {70272}
    assert [kv("llama-3-70b", a) for a in (1, 2, 4, 8)] == [327680 // a for a in (1, 2, 4, 8)]
    assert dep("deepseek-v3").kv_capacity_tokens >= 6 * dep("deepseek-v3", **V3_D1).kv_capacity_tokens
    mla8, gqa, mla1 = seqs8k("deepseek-v3"), seqs8k("llama-3-70b"), seqs8k("deepseek-v3", **V3_D1)
    assert (mla8, gqa, mla1) == (456, 351, 74)
    assert mla8 >= 1.25 * gqa >= 4 * mla1


def test_7_3_gta_roughly_halves_gqa() -> None:
    assert 0.50 <= kv("llama-3-70b-gta") / kv("llama-3-70b") <= 0.55
    assert kv("llama-3-70b-gta", 8) / kv("llama-3-70b", 8) == pytest.approx(0.75)
    assert seqs8k("llama-3-70b-gta", gpu="h100") > seqs8k("llama-3-70b", gpu="h100")
    assert seqs8k("llama-3-70b-gta") > seqs8k("llama-3-70b")
    gta, gqa = dep("llama-3-70b-gta"), dep("llama-3-70b")
    for batch in (16, 64):
        for context in (K8, K32):
            assert t_ms(gta, batch, context) <= 0.95 * t_ms(gqa, batch, context)


def test_7_4_gla_shards_mla_needs_dp_attention() -> None:
    assert kv("deepseek-v3-gla8", 8) / kv("deepseek-v3", 8) <= 0.56
    assert kv("deepseek-v3-gla8") > kv("deepseek-v3") == kv("deepseek-v3-gla2")
    gla8, mla1, mla8 = dep("deepseek-v3-gla8"), dep("deepseek-v3", **V3_D1), dep("deepseek-v3")
    for batch in (16, 64):
        for context in (K8, K32):
            assert t_ms(gla8, batch, context) <= 0.95 * t_ms(mla1, batch, context)
    assert seqs8k("deepseek-v3-gla8") >= 1.8 * seqs8k("deepseek-v3", **V3_D1)
    for context in (K1, K8, K32):
        assert t_ms(gla8, 1, context) <= 0.6 * t_ms(mla8, 1, context)
    assert t_ms(mla8, 64, K32) <= 0.8 * t_ms(gla8, 64, K32)
    assert seqs8k("deepseek-v3") >= 3 * seqs8k("deepseek-v3-gla8")
    coder_mla, coder_gla = dep(CODER_MLA[0], **CODER_MLA[1]), dep(CODER_GLA[0], **CODER_GLA[1])
    for context in (K1, K8, K32):
        assert t_ms(coder_mla, 1, context) >= 1.5 * t_ms(coder_gla, 1, context)
    assert t_ms(coder_gla, 64, K8) >= 1.1 * t_ms(coder_mla, 64, K8)
    assert seqs8k(CODER_MLA[0], **CODER_MLA[1]) >= 2 * seqs8k(CODER_GLA[0], **CODER_GLA[1])


def test_7_5_mla_admits_more_at_tp1() -> None:
    lite, llama = seqs8k("deepseek-v2-lite", **H100_TP1), seqs8k("llama-3-8b", **H100_TP1)
    assert (lite, llama) == (220, 59) and lite >= 3 * llama


def slope_ns(d: Deployment) -> float:
    return (t_ms(d, 1, K32) - t_ms(d, 1, K1)) * 1e6 / (K32 - K1)


def test_7_6_context_slope_at_batch_1() -> None:
    llama8, lite = slope_ns(dep("llama-3-8b", **H100_TP1)), slope_ns(dep("deepseek-v2-lite", **H100_TP1))
    assert llama8 == pytest.approx(48.9, rel=TIME_TOL) and lite == pytest.approx(11.6, rel=TIME_TOL)
    assert llama8 >= 4 * lite
    slopes = [
        slope_ns(dep("deepseek-v3")),
        slope_ns(dep("deepseek-v3", **V3_D1)),
        slope_ns(dep("llama-3-70b")),
        slope_ns(dep("deepseek-v3-gla8")),
        slope_ns(dep("llama-3-70b-gta")),
    ]
    assert slopes == pytest.approx([28.6, 18.3, 10.7, 10.2, 8.0], rel=TIME_TOL)
    assert slopes == sorted(slopes, reverse=True) and len(set(slopes)) == len(slopes)


def att_over_kv(d: Deployment, batch: int, context: int) -> float:
    b = decode_step(d, batch, context)
    return b.c_att_s / b.m_kv_s


def test_7_8_mla_attention_is_compute_heavy() -> None:
    assert att_over_kv(dep("deepseek-v3", gpu="h100", tp=1), 256, K1) == pytest.approx(1.09, rel=TIME_TOL)
    assert att_over_kv(dep("deepseek-v3", gpu="h100", tp=1), 256, K1) >= 1
    assert att_over_kv(dep("deepseek-v3-gla2", gpu="h100", tp=1), 256, K1) <= 0.6
    assert att_over_kv(dep("llama-3-70b", gpu="h100", tp=1), 256, K1) <= 0.05
    assert att_over_kv(dep("deepseek-v3"), 256, K1) >= 1.4


def test_7_9_moe_edge_shrinks_at_high_batch() -> None:
    llama8, lite = dep("llama-3-8b", **H100_TP1), dep("deepseek-v2-lite", **H100_TP1)
    r1, r32 = (t_ms(llama8, b, K1) / t_ms(lite, b, K1) for b in (1, 32))
    assert r1 == pytest.approx(2.12, rel=TIME_TOL) and r32 == pytest.approx(0.81, rel=TIME_TOL)
    assert r32 < 0.5 * r1
    active = dep("deepseek-v2-lite", gpu="h100", tp=1, moe_weight_traffic="active")
    assert t_ms(active, 32, K1) < t_ms(lite, 32, K1)  # coverage is what grows W_read


def test_7_10_dp_attention_trades_latency_for_capacity() -> None:
    d8, d1, gqa = dep("deepseek-v3"), dep("deepseek-v3", **V3_D1), dep("llama-3-70b")
    for context in (K1, K8, K32):
        assert t_ms(d8, 1, context) >= 1.5 * t_ms(d1, 1, context)
    for context in (K8, K32):
        assert t_ms(d8, 64, context) <= 0.9 * t_ms(d1, 64, context)
    assert prefill_time_s(d8, K8) >= 2 * prefill_time_s(gqa, K8) >= 2 * prefill_time_s(d1, K8) * 1.0
    assert prefill_time_s(gqa, K8) >= prefill_time_s(d1, K8)
    for batch in (8, 64, 256):  # crowding a spread batch into one group never lowers t
        spread = decode_step(d8, batch, K8).total_s
        crowded = d8.step_breakdown([GroupLoad(batch, batch * K8, 0.0, batch * K8)] + [GroupLoad()] * 7).total_s
        assert crowded >= spread


def test_7_11_monotonic_in_batch_and_context() -> None:
    for key, changes in (
        ("llama-3-70b", {}),
        ("deepseek-v3", {}),
        ("deepseek-v3", V3_D1),
        ("deepseek-v2-lite", H100_TP1),
        ("deepseek-v3-gla8", {}),
    ):
        d = dep(key, **changes)
        for context in (K1, K8, K32):
            times = [t_ms(d, b, context) for b in range(1, 300, 7)]
            assert times == sorted(times)
        for batch in (1, 16, 256):
            times = [t_ms(d, batch, L) for L in range(16, 65536, 4096)]
            assert times == sorted(times)
        base = [GroupLoad.of([K8] * 4) for _ in range(d.dp)]
        bumped = [GroupLoad.of([K8] * 3 + [K8 + 1])] + base[1:]
        assert d.step_breakdown(bumped).total_s >= d.step_breakdown(base).total_s


def test_7_11_every_preset_starts_with_defaults() -> None:
    for m in PRESETS.values():
        assert deploy(m, EngineConfig()).fits, m.key


@pytest.mark.parametrize("dp", [1, 2, 4, 8, "auto"])
def test_7_11_deepseek_v3_refuses_on_8x_h100(dp: int | str) -> None:
    for key in ("deepseek-v3", "deepseek-v3-gla2", "deepseek-v3-gla8"):
        with pytest.raises(UsageError, match=r"does not fit .*GB/GPU.*Fix: try --gpu h200 or a larger --tp"):
            deploy(PRESETS[key], EngineConfig(gpu="h100", dp_attention=dp))  # type: ignore[arg-type]


def test_refusal_message_names_the_numbers() -> None:
    with pytest.raises(UsageError) as info:
        deploy(PRESETS["deepseek-v3"], EngineConfig(gpu="h100"))
    assert "93.86 GB/GPU" in str(info.value) and "72.00 GB usable" in str(info.value)
    with pytest.raises(UsageError, match="83.88 GB/GPU"):
        deploy(PRESETS["deepseek-v3"], EngineConfig(gpu="h100", dp_attention=1))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("tp", "dp"), [(8, 3), (8, 16), (4, 8), (8, 0)])
def test_7_11_dp_not_dividing_tp_refuses(tp: int, dp: int) -> None:
    with pytest.raises(UsageError, match="does not divide"):
        deploy(PRESETS["deepseek-v3"], EngineConfig(tp=tp, dp_attention=dp))


def test_tiny_capacity_scale_without_a_block_refuses() -> None:
    with pytest.raises(UsageError, match="no room for one KV block"):
        deploy(PRESETS["llama-3-70b"], EngineConfig(kv_capacity_scale=1e-9))


def r_kept(d: Deployment, batch: int) -> float:
    return t_ms(d, batch, K1) / t_ms(d, batch, K32)


def test_7_12_seed_claim_is_a_batch_effect() -> None:
    mla, gqa, mla1 = dep("deepseek-v3"), dep("llama-3-70b"), dep("deepseek-v3", **V3_D1)
    assert r_kept(mla, 1) == pytest.approx(0.878, abs=0.01) and r_kept(gqa, 1) == pytest.approx(0.931, abs=0.01)
    assert r_kept(mla, 1) < r_kept(gqa, 1)  # at B=1 the claim fails
    assert r_kept(mla, 2) == pytest.approx(0.887, abs=0.01) and r_kept(gqa, 2) == pytest.approx(0.872, abs=0.01)
    expected = {4: (0.902, 0.775), 16: (0.890, 0.478), 64: (0.785, 0.224)}
    for batch, (r_mla, r_gqa) in expected.items():
        assert r_kept(mla, batch) == pytest.approx(r_mla, abs=0.01)
        assert r_kept(gqa, batch) == pytest.approx(r_gqa, abs=0.01)
        assert r_kept(mla, batch) >= r_kept(gqa, batch) + 0.1
    for batch in (1, 2, 4, 8):  # at D=1 MLA drops more up to B=8
        assert r_kept(mla1, batch) < r_kept(gqa, batch)
