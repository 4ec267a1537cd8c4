"""Presets, aliases and fallbacks: docs/cost-model.md §1–§2."""

from __future__ import annotations

import pytest

from attnload.errors import UsageError
from attnload.sim.costmodel import attention_info, kv_bytes_per_token
from attnload.sim.presets import (
    HARDWARE,
    PRESETS,
    UnknownModel,
    find_preset_key,
    generic_preset,
    lookup_hardware,
    lookup_preset,
)

# §1 table: BF16 KV bytes/token per GPU at A = 1, 2, 8.
KV_TABLE = {
    "llama-3-8b": (131072, 65536, 16384),
    "llama-3-70b": (327680, 163840, 40960),
    "llama-3-70b-gta": (174080, 92160, 30720),
    "deepseek-v2-lite": (31104, 31104, 31104),
    "deepseek-coder-v2": (69120, 69120, 69120),
    "deepseek-coder-v2-gla8": (253440, 130560, 38400),
    "deepseek-v3": (70272, 70272, 70272),
    "deepseek-v3-gla2": (70272, 39040, 39040),
    "deepseek-v3-gla8": (257664, 132736, 39040),
}


@pytest.mark.parametrize(("key", "expected"), KV_TABLE.items())
def test_kv_bytes_per_token_table(key: str, expected: tuple[int, int, int]) -> None:
    m = PRESETS[key]
    assert tuple(kv_bytes_per_token(m, a) for a in (1, 2, 8)) == expected


def test_generic_kv_and_fp8_halves() -> None:
    assert kv_bytes_per_token(PRESETS["generic-mha"]) == 2621440
    assert {kv_bytes_per_token(PRESETS["generic-mqa"], a) for a in (1, 2, 4, 8)} == {40960}
    assert kv_bytes_per_token(PRESETS["llama-3-70b"], 1, "fp8") == 327680 // 2


@pytest.mark.parametrize(
    ("key", "attn_params"),
    [
        ("llama-3-8b", 1.342e9),
        ("llama-3-70b", 12.08e9),
        ("deepseek-v2-lite", 0.372e9),
        ("deepseek-coder-v2", 8.954e9),
        ("deepseek-v3", 11.41e9),
        ("qwen3-235b-a22b", 6.70e9),
    ],
)
def test_attention_projection_params(key: str, attn_params: float) -> None:
    assert PRESETS[key].params_attn == pytest.approx(attn_params, rel=2e-3)


def test_parameter_counts_and_moe() -> None:
    assert PRESETS["llama-3-70b"].params_total == 70_553_706_496
    assert PRESETS["qwen2.5-72b"].params_total == 72_706_203_648
    v3 = PRESETS["deepseek-v3"]
    assert (v3.params_total, v3.params_active, v3.moe_experts, v3.moe_top_k) == (671e9, 37e9, 256, 8)
    assert PRESETS["deepseek-v3-gla8"].params_total == v3.params_total  # synthetic keeps the backbone
    assert PRESETS["deepseek-v2-lite"].max_model_len == 32768


def test_qwen3_moe_parameters_add_up() -> None:
    """Qwen3-235B-A22B: attention + 128 routed experts + embedding and lm_head (151,936 × 4096 each) make
    the published 235B total, and attention + 8 of 128 experts + embeddings the 22B active."""
    q = PRESETS["qwen3-235b-a22b"]
    embeddings = 2 * 151936 * 4096
    assert (q.attention, q.h_kv, q.moe_experts, q.moe_top_k) == ("GQA", 4, 128, 8)
    assert q.params_attn + q.moe_routed_params + embeddings == pytest.approx(q.params_total, rel=5e-3)
    assert q.params_attn + q.moe_routed_params * 8 / 128 + embeddings == pytest.approx(q.params_active, rel=2e-2)


def test_hardware_presets() -> None:
    assert HARDWARE["h200"].hbm_bandwidth_bytes_per_s == 4.8e12
    assert HARDWARE["a100"].fp8_flop_per_s is None
    assert lookup_hardware("H100").hbm_bytes == 80e9
    with pytest.raises(UsageError, match="valid: h100, h200, a100"):
        lookup_hardware("b200")


@pytest.mark.parametrize(
    ("alias", "key"),
    [
        ("deepseek-chat", "deepseek-v3"),
        ("DeepSeek-Chat", "deepseek-v3"),
        ("deepseek-reasoner", "deepseek-v3"),
        ("deepseek-ai/DeepSeek-V3", "deepseek-v3"),
        ("DeepSeek-R1", "deepseek-v3"),
        ("Meta-Llama-3-70B-Instruct", "llama-3-70b"),
        ("meta-llama/Meta-Llama-3-70B-Instruct", "llama-3-70b"),
        ("Llama-3.3-70B-Instruct", "llama-3-70b"),
        ("Llama-3.1-8B-Instruct", "llama-3-8b"),
        ("Qwen/Qwen2.5-72B-Instruct", "qwen2.5-72b"),
        ("DeepSeek-V2-Lite-Chat", "deepseek-v2-lite"),
        ("DeepSeek-Coder-V2-Instruct", "deepseek-coder-v2"),
        ("LLAMA-3-70B", "llama-3-70b"),
        ("org/deepseek-v3-gla8", "deepseek-v3-gla8"),
        ("Qwen/Qwen3-235B-A22B", "qwen3-235b-a22b"),
    ],
)
def test_aliases(alias: str, key: str) -> None:
    assert find_preset_key(alias) == key
    assert lookup_preset(alias).key == key


def test_alias_attention_types() -> None:
    assert lookup_preset("deepseek-chat").attention == "MLA"
    assert lookup_preset("Meta-Llama-3-70B-Instruct").attention == "GQA"


def test_unknown_model_is_a_clear_usage_error() -> None:
    assert find_preset_key("gpt-4o") is None
    with pytest.raises(UnknownModel, match="unknown model 'gpt-4o'") as info:
        lookup_preset("gpt-4o")
    assert isinstance(info.value, UsageError)
    assert "attention_type" in str(info.value)


@pytest.mark.parametrize(
    ("kind", "key", "same_as"),
    [
        ("GQA", "generic-gqa", "llama-3-70b"),
        ("mla", "generic-mla", "deepseek-v3"),
        ("GTA", "generic-gta", "llama-3-70b-gta"),
        ("GLA", "generic-gla", "deepseek-v3-gla8"),
        ("MHA", "generic-mha", None),
        ("MQA", "generic-mqa", None),
    ],
)
def test_generic_fallback(kind: str, key: str, same_as: str | None) -> None:
    m = generic_preset(kind)
    assert m.key == key and m.attention == kind.upper()
    if same_as is not None:
        assert kv_bytes_per_token(m) == kv_bytes_per_token(PRESETS[same_as])
        assert m.params_total == PRESETS[same_as].params_total


def test_generic_rejects_unknown_type_with_valid_list() -> None:
    with pytest.raises(UsageError, match="valid: GQA, MLA, GTA, GLA, MHA, MQA"):
        generic_preset("linear")


def test_attention_info_for_reports() -> None:
    info = attention_info("deepseek-chat")
    assert info is not None
    assert info["attention"] == "MLA" and info["dp_attention"] == 8 and info["tp"] == 8
    assert info["kv_bytes_per_token"] == 70272 and info["kv_bytes_per_token_per_gpu"] == 70272
    assert info["kv_capacity_tokens"] == 3_761_152 and info["max_seqs_at_8k"] == 456
    gqa = attention_info("llama-3-70b")
    assert gqa is not None and gqa["kv_bytes_per_token_per_gpu"] == 40960 and gqa["max_seqs_at_8k"] == 351
    assert attention_info("gpt-4o") is None
    refused = attention_info("deepseek-v3", gpu="h100")
    assert refused is not None and refused["fits"] is False and refused["kv_capacity_tokens"] == 0
    assert attention_info("llama-3-70b", dp_attention=3) is None
