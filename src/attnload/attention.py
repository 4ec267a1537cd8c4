"""Attention types and the per-type facts every side reads (config, simulator, reports).

One :class:`AttentionKind` per type holds its arithmetic: KV elements a GPU stores per token
per layer, attention FLOPs of decode (absorbed form for latent types) and prefill, the latent
up-projection a non-absorbed prefill pays, and whether its KV can be split by heads (a latent
cannot, so DP attention is its default). Adding an attention type is one entry in
:data:`KINDS` plus its presets (dimensions) in ``sim/presets.py``; nothing else branches on
the type's name. The formulas read a model's dimensions through :class:`Dims`, so this
module stays a leaf that config, the simulator and the reports can all import.

The load generator never imports the simulator: a run that wants preset facts next to its
measurements is handed a :data:`FactsLookup` by its entry point (``commands/locustfile.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


class Dims(Protocol):
    """The attention dimensions of a model preset (``docs/cost-model.md`` §1), read-only so that a frozen
    dataclass such as ``ModelPreset`` satisfies it."""

    @property
    def h_q(self) -> int: ...  # query heads

    @property
    def h_kv(self) -> int: ...  # KV heads (GQA/MHA/MQA/GTA)

    @property
    def d_h(self) -> int: ...  # head dimension

    @property
    def d_r(self) -> int: ...  # decoupled RoPE dimension (latent and tied types)

    @property
    def d_c(self) -> int: ...  # MLA latent width

    @property
    def h_c(self) -> int: ...  # GLA latent heads

    @property
    def d_ch(self) -> int: ...  # GLA latent width per head

    @property
    def d_nope(self) -> int: ...  # non-RoPE query/key dimension of the expanded (prefill) form

    @property
    def d_v(self) -> int: ...  # value dimension of the expanded form


def _heads(n: int, attn_tp: int) -> int:
    return math.ceil(n / attn_tp)


@dataclass(frozen=True)
class AttentionKind:
    """One attention type's arithmetic (per layer, per token), named as in ``docs/cost-model.md`` §1 and §3.1."""

    name: str
    kv_elements: Callable[[Dims, int], int]
    """``e_kv(A)``: KV elements one GPU stores per token per layer at attention TP ``A``."""
    decode_flop: Callable[[Dims], float]
    """``f_dec``: decode attention FLOPs per context token, all query heads (absorbed form for latents)."""
    prefill_flop: Callable[[Dims], float]
    """``f_pre``: prefill attention FLOPs per (query, key) pair (expanded form for latents)."""
    upproj_flop: Callable[[Dims], float] = lambda m: 0.0
    """Non-absorbed prefill re-expands each cached prefix token's latent into per-head K/V (0: K/V cached)."""
    latent: bool = False
    """The KV is a latent shared by all heads: it cannot be split by TP, so DP attention is the default."""


def _mha_decode(m: Dims) -> float:
    return 4.0 * m.h_q * m.d_h


KINDS: dict[str, AttentionKind] = {
    k.name: k
    for k in (
        AttentionKind("GQA", lambda m, a: 2 * _heads(m.h_kv, a) * m.d_h, _mha_decode, _mha_decode),
        AttentionKind(
            "MLA",
            lambda m, a: m.d_c + m.d_r,
            lambda m: 2.0 * m.h_q * (2 * m.d_c + m.d_r),
            lambda m: 2.0 * m.h_q * (m.d_nope + m.d_r + m.d_v),
            lambda m: 2.0 * m.h_q * m.d_c * (m.d_nope + m.d_v),
            latent=True,
        ),
        AttentionKind("GTA", lambda m, a: _heads(m.h_kv, a) * m.d_h + m.d_r, _mha_decode, _mha_decode),
        AttentionKind(
            "GLA",
            lambda m, a: _heads(m.h_c, a) * m.d_ch + m.d_r,
            lambda m: 2.0 * m.h_q * (2 * m.d_ch + m.d_r),
            lambda m: 2.0 * m.h_q * (m.d_nope + m.d_r + m.d_v),
            lambda m: 2.0 * m.h_q * m.d_ch * (m.d_nope + m.d_v),
        ),
        AttentionKind("MHA", lambda m, a: 2 * _heads(m.h_kv, a) * m.d_h, _mha_decode, _mha_decode),
        AttentionKind("MQA", lambda m, a: 2 * m.d_h, _mha_decode, _mha_decode),  # one KV head on every GPU
    )
}
"""Every attention type's arithmetic, by canonical name."""

ATTENTION_TYPES = tuple(KINDS)
"""Grouped-query, multi-head latent, grouped-tied, grouped latent, multi-head and multi-query attention."""

FactsLookup = Callable[[str], "dict[str, object] | None"]
"""Model id -> KV and capacity facts (preset, KV bytes/token/GPU, capacity, ...) or None when unknown."""


def no_facts(model_id: str) -> dict[str, object] | None:
    """The lookup of a run whose entry point knows no presets: measurements only."""
    return None


BandwidthLookup = Callable[[str], "float | None"]
"""GPU preset name (a model's ``gpu_type``) -> peak memory bandwidth in GB/s, or None when unknown."""


def no_bandwidth(gpu_type: str) -> float | None:
    """The lookup of a run whose entry point knows no GPU presets: ``memory_bandwidth_gbps`` only."""
    return None


def kind_of(name: str) -> AttentionKind:
    """The arithmetic of attention type ``name`` (canonical); an unknown one is a ``ValueError``."""
    try:
        return KINDS[name]
    except KeyError:
        raise ValueError(f"unknown attention type {name!r}; valid: {', '.join(ATTENTION_TYPES)}") from None


def parse_attention(value: object) -> str:
    """The canonical (upper-case) attention type; an unknown one is a ``ValueError`` listing the valid ones."""
    text = str(value).strip().upper()
    if text not in KINDS:
        raise ValueError(f"unknown attention type {value!r}; valid: {', '.join(ATTENTION_TYPES)}")
    return text
