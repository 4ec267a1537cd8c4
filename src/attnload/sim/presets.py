"""Model and hardware presets of the simulator (docs/cost-model.md §1–§2) and id resolution.

This module owns the *facts*: architecture dimensions, parameter counts, GPU peaks, the
alias table and the generic fallbacks. The arithmetic on them lives in ``costmodel``.
Ids are resolved case-insensitively, first as given and then without an ``org/`` prefix,
so ``deepseek-ai/DeepSeek-V3`` and ``deepseek-chat`` both reach the ``deepseek-v3`` preset.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NamedTuple

from attnload.attention import ATTENTION_TYPES
from attnload.errors import UsageError

HEAD_DIM = 128
DEFAULT_MAX_MODEL_LEN = 131072
ROPE_DIM = 64  # d_R: the decoupled RoPE key of MLA/GLA and GTA's half-width RoPE head


@dataclass(frozen=True)
class ModelPreset:
    """Everything the cost model needs about one architecture (per-layer dims, parameter counts)."""

    key: str
    attention: str
    layers: int
    h_q: int
    hidden: int
    params_total: float
    params_active: float
    params_attn: float
    """Attention projection parameters: sharded A-ways inside a group, replicated across groups."""
    h_kv: int = 0
    d_h: int = HEAD_DIM
    d_c: int = 0
    """MLA latent width (512 for the DeepSeek family)."""
    d_r: int = 0
    h_c: int = 0
    """GLA latent heads (sharded by attention TP)."""
    d_ch: int = 0
    d_nope: int = HEAD_DIM
    d_v: int = HEAD_DIM
    max_model_len: int = DEFAULT_MAX_MODEL_LEN
    moe_experts: int = 0
    moe_top_k: int = 0
    moe_routed_params: float = 0.0
    synthetic: bool = False
    """GTA/GLA variants and generic types: not a published checkpoint."""

    @property
    def is_moe(self) -> bool:
        return self.moe_experts > 0


@dataclass(frozen=True)
class HardwarePreset:
    """One GPU's dense peaks, HBM and per-direction link bandwidth (§2, decimal units)."""

    key: str
    bf16_flop_per_s: float
    fp8_flop_per_s: float | None
    hbm_bandwidth_bytes_per_s: float
    hbm_bytes: float
    link_bytes_per_s: float
    tdp_w: float = 700.0
    """Board power limit (SXM parts' published TDP): the simulated power never exceeds it."""
    idle_w: float = 90.0
    """Power of an allocated GPU with no kernel running (clocks up, HBM refreshed); a round figure."""
    name: str = ""
    """What dcgm-exporter's ``modelName`` label says for this part."""


HARDWARE: dict[str, HardwarePreset] = {
    "h100": HardwarePreset("h100", 989e12, 1979e12, 3.35e12, 80e9, 450e9, 700.0, 90.0, "NVIDIA H100 80GB HBM3"),
    "h200": HardwarePreset("h200", 989e12, 1979e12, 4.8e12, 141e9, 450e9, 700.0, 90.0, "NVIDIA H200"),
    "a100": HardwarePreset("a100", 312e12, None, 2.039e12, 80e9, 300e9, 400.0, 60.0, "NVIDIA A100-SXM4-80GB"),
}


class _Experts(NamedTuple):
    """A MoE model's routed experts: how many, how many each token uses, and their parameters in total."""

    routed: int
    top_k: int
    params: float


_DENSE = _Experts(0, 0, 0.0)
MLA_LATENT = 512  # d_c of the DeepSeek family


def _published(
    key: str,
    attention: str,
    shape: tuple[int, int, int],
    params: tuple[float, float, float],
    experts: _Experts,
    max_model_len: int,
    *,
    h_kv: int = 0,
    d_c: int = 0,
    d_r: int = 0,
) -> ModelPreset:
    """A published checkpoint: ``shape`` is (layers, h_q, hidden), ``params`` (total, active, attention)."""
    return ModelPreset(
        key,
        attention,
        *shape,
        *params,
        h_kv=h_kv,
        d_c=d_c,
        d_r=d_r,
        max_model_len=max_model_len,
        moe_experts=experts.routed,
        moe_top_k=experts.top_k,
        moe_routed_params=experts.params,
    )


def _gqa(
    key: str,
    shape: tuple[int, int, int],
    h_kv: int,
    params_total: float,
    params_active: float | None = None,
    experts: _Experts = _DENSE,
    max_model_len: int = DEFAULT_MAX_MODEL_LEN,
) -> ModelPreset:
    """GQA: q and o project to ``h_q`` heads, k and v to ``h_kv`` (§1); a dense model uses every parameter."""
    layers, h_q, hidden = shape
    params_attn = layers * 2 * hidden * (h_q + h_kv) * HEAD_DIM
    params = (params_total, params_active or params_total, params_attn)
    return _published(key, "GQA", shape, params, experts, max_model_len, h_kv=h_kv)


def _mla(
    key: str,
    shape: tuple[int, int, int],
    q_lora: int | None,
    params_total: float,
    params_active: float,
    experts: _Experts,
    max_model_len: int = DEFAULT_MAX_MODEL_LEN,
) -> ModelPreset:
    """MLA with the DeepSeek family's 512-wide latent and 64-wide decoupled RoPE key."""
    layers, h_q, hidden = shape
    params = (params_total, params_active, _mla_attn_params(layers, hidden, h_q, q_lora))
    return _published(key, "MLA", shape, params, experts, max_model_len, d_c=MLA_LATENT, d_r=ROPE_DIM)


def _mla_attn_params(layers: int, hidden: int, h_q: int, q_lora: int | None) -> int:
    """MLA projections per §1: q (or q_a + q_b), kv_a (latent + RoPE key), kv_b, o."""
    q_out = h_q * (HEAD_DIM + ROPE_DIM)
    q = hidden * q_out if q_lora is None else hidden * q_lora + q_lora * q_out
    kv_a = hidden * (MLA_LATENT + ROPE_DIM)
    kv_b = MLA_LATENT * h_q * (HEAD_DIM + HEAD_DIM)
    o = h_q * HEAD_DIM * hidden
    return layers * (q + kv_a + kv_b + o)


# Published checkpoints; shape is (layers, query heads, hidden), from the HF configs (§1).
_LLAMA_70B = _gqa("llama-3-70b", (80, 64, 8192), 8, 70_553_706_496)
_CODER_V2 = _mla("deepseek-coder-v2", (60, 128, 5120), 1536, 236e9, 21e9, _Experts(160, 6, 222.72e9))  # 8.954B attn
_V3 = _mla("deepseek-v3", (61, 128, 7168), 1536, 671e9, 37e9, _Experts(256, 8, 653.91e9))  # 11.41B attn (61 × 187.1M)


def _variant(base: ModelPreset, key: str, attention: str | None = None, **dims: int) -> ModelPreset:
    """A synthetic variant that keeps the backbone's parameters (P_attn included; an assumption)."""
    return dataclasses.replace(base, key=key, attention=attention or base.attention, synthetic=True, **dims)


def _gla(base: ModelPreset, key: str, heads: int) -> ModelPreset:
    return _variant(base, key, attention="GLA", d_c=0, h_c=heads, d_ch=2 * HEAD_DIM, d_r=ROPE_DIM)


PRESETS: dict[str, ModelPreset] = {
    p.key: p
    for p in (
        _gqa("llama-3-8b", (32, 32, 4096), 8, 8_030_261_248),
        _LLAMA_70B,
        _variant(_LLAMA_70B, "llama-3-70b-gta", attention="GTA", d_r=ROPE_DIM),
        _gqa("qwen2.5-72b", (80, 64, 8192), 8, 72_706_203_648),
        _mla("deepseek-v2-lite", (27, 16, 2048), None, 15.7e9, 2.4e9, _Experts(64, 6, 14.395e9), 32768),  # 0.372B attn
        _CODER_V2,
        _gla(_CODER_V2, "deepseek-coder-v2-gla8", 8),
        # Qwen3-235B-A22B: GQA (64 q / 4 kv heads: 6.70B attn) with 128 routed experts, top-8, no shared
        # expert; routed = 94 layers × 128 × 3·4096·1536.
        _gqa(
            "qwen3-235b-a22b", (94, 64, 4096), 4, 235.09e9, 22.2e9, _Experts(128, 8, 94 * 128 * 3 * 4096 * 1536), 40960
        ),
        _V3,
        _gla(_V3, "deepseek-v3-gla2", 2),
        _gla(_V3, "deepseek-v3-gla8", 8),
        _variant(_LLAMA_70B, "generic-gqa"),
        _variant(_LLAMA_70B, "generic-mha", attention="MHA", h_kv=64),
        _variant(_LLAMA_70B, "generic-mqa", attention="MQA", h_kv=1),
        _variant(_LLAMA_70B, "generic-gta", attention="GTA", d_r=ROPE_DIM),
        _variant(_V3, "generic-mla"),
        _gla(_V3, "generic-gla", 8),
    )
}

GENERIC_BY_ATTENTION = {
    "GQA": "generic-gqa",
    "MLA": "generic-mla",
    "GTA": "generic-gta",
    "GLA": "generic-gla",
    "MHA": "generic-mha",
    "MQA": "generic-mqa",
}

DEFAULT_MODELS = ("llama-3-70b", "deepseek-v3")
"""The default demo pair (§4.6): GQA on 8×H200 TP8 vs MLA on 8×H200 with DP attention."""

ALIASES: dict[str, tuple[str, ...]] = {
    "deepseek-v3": ("deepseek-chat", "deepseek-reasoner", "DeepSeek-V3", "DeepSeek-R1"),
    "llama-3-70b": ("Meta-Llama-3-70B-Instruct", "Llama-3.1-70B-Instruct", "Llama-3.3-70B-Instruct"),
    "llama-3-8b": ("Meta-Llama-3-8B-Instruct", "Llama-3.1-8B-Instruct"),
    "qwen2.5-72b": ("Qwen2.5-72B-Instruct",),
    "qwen3-235b-a22b": ("Qwen3-235B-A22B", "Qwen3-235B-A22B-Instruct-2507"),
    "deepseek-v2-lite": ("DeepSeek-V2-Lite-Chat",),
    "deepseek-coder-v2": ("DeepSeek-Coder-V2-Instruct",),
}

_ALIAS_INDEX: dict[str, str] = {key: key for key in PRESETS}
_ALIAS_INDEX.update({alias.lower(): key for key, names in ALIASES.items() for alias in names})


class UnknownModel(UsageError):
    """No preset or alias matches a model id: the server answers 404 ``model_not_found``."""

    def __init__(self, model_id: str) -> None:
        self.model_id = model_id
        super().__init__(
            f"unknown model {model_id!r}: not a preset or alias. Fix: use one of "
            f"{', '.join(PRESETS)} (or an alias such as deepseek-chat), or give it an "
            f"attention_type in a --config entry"
        )


def find_preset_key(model_id: str) -> str | None:
    """The preset key for ``model_id`` (a key or alias, any case, with or without ``org/``), or None."""
    name = model_id.strip().lower()
    key = _ALIAS_INDEX.get(name)
    if key is None and "/" in name:
        key = _ALIAS_INDEX.get(name.rsplit("/", 1)[-1])
    return key


def lookup_preset(model_id: str) -> ModelPreset:
    """The preset for a model id or alias; raises :class:`UnknownModel` (a ``UsageError``) otherwise."""
    key = find_preset_key(model_id)
    if key is None:
        raise UnknownModel(model_id)
    return PRESETS[key]


def generic_preset(attention_type: str) -> ModelPreset:
    """The generic fallback preset for an explicit attention type (§1 "Fallback")."""
    kind = attention_type.strip().upper()
    if kind not in GENERIC_BY_ATTENTION:
        raise UsageError(f"unknown attention type {attention_type!r}; valid: {', '.join(ATTENTION_TYPES)}")
    return PRESETS[GENERIC_BY_ATTENTION[kind]]


def aliases_of(preset_key: str) -> tuple[str, ...]:
    """Alias ids that route to ``preset_key`` (the server matches them case-insensitively)."""
    return ALIASES.get(preset_key, ())


def lookup_hardware(gpu: str) -> HardwarePreset:
    """The GPU preset for ``gpu`` (h100, h200, a100); ``UsageError`` naming the valid keys otherwise."""
    hw = HARDWARE.get(gpu.strip().lower())
    if hw is None:
        raise UsageError(f"unknown gpu {gpu!r}; valid: {', '.join(HARDWARE)}")
    return hw
