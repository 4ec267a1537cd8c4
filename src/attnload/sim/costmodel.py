"""The attention-aware roofline cost model (ATTENTION_MODEL.md §3) as pure functions.

Everything here is arithmetic on presets and an :class:`EngineConfig`: KV bytes per token
per GPU, per-GPU weights and KV capacity (§3.4, with the refusal when a model does not
fit), the two-phase step time with its five components (§3), and idle-engine prefill time.
The engine calls :meth:`Deployment.step_breakdown` on per-group aggregates, so a step
costs O(D) here whatever the batch; the reference :func:`step_time` takes explicit
contexts and chunks as in §5. Units: bytes, seconds, FLOP; names say which.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from attnload.errors import UsageError
from attnload.sim.presets import PRESETS, HardwarePreset, ModelPreset, find_preset_key, lookup_hardware

DTYPE_BYTES = {"fp8": 1, "bf16": 2, "fp16": 2}
CONTEXT_8K = 8192


@dataclass(frozen=True)
class EngineConfig:
    """Deployment and engine parameters with the §2/§4.6 defaults (each is an `attnload sim` flag)."""

    gpu: str = "h200"
    tp: int = 8
    dp_attention: int | Literal["auto"] = "auto"
    weight_dtype: str = "fp8"
    kv_dtype: str = "bf16"
    block_size: int = 16
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    preemption: Literal["recompute", "none"] = "recompute"
    prefix_cache: bool = True
    moe_weight_traffic: Literal["coverage", "active"] = "coverage"
    kv_capacity_scale: float = 1.0
    seed: int = 0
    eff_gemm: float = 0.70
    eff_attn: float = 0.60
    eff_bw: float = 0.80
    step_overhead_ms: float = 1.0
    allreduce_latency_us: float = 8.0
    dp_gather_latency_us: float = 8.0
    gpu_memory_utilization: float = 0.90
    reserve_gb: float = 0.0


@dataclass(frozen=True)
class GroupLoad:
    """One attention group's work in a step, aggregated (what §3 needs, not the sequences).

    ``decode_context_tokens`` = Σ L_i over decodes; ``prefill_pairs`` = Σ (c·L0 + c(c+1)/2) over
    chunks; ``kv_read_tokens`` = Σ L_i + Σ (L0 + c); ``tokens`` = T_g (decodes + chunk tokens).
    """

    tokens: int = 0
    decode_context_tokens: float = 0.0
    prefill_pairs: float = 0.0
    kv_read_tokens: float = 0.0

    @staticmethod
    def of(decode_contexts: Sequence[int], chunks: Sequence[tuple[int, int]] = ()) -> GroupLoad:
        """Aggregate explicit decode contexts and ``(L0, c)`` prefill chunks."""
        pairs = sum(c * l0 + c * (c + 1) / 2 for l0, c in chunks)
        return GroupLoad(tokens=len(decode_contexts) + sum(c for _, c in chunks),
                         decode_context_tokens=float(sum(decode_contexts)), prefill_pairs=pairs,
                         kv_read_tokens=float(sum(decode_contexts) + sum(l0 + c for l0, c in chunks)))


@dataclass(frozen=True)
class StepBreakdown:
    """A step's time and its components (seconds); C_att/M_kv are the slowest group's."""

    c_lin_s: float
    m_w_s: float
    c_att_s: float
    m_kv_s: float
    t_comm_s: float
    overhead_s: float

    @property
    def total_s(self) -> float:
        """Two-phase roofline: GEMM phase, then attention phase, then communication and overhead."""
        return max(self.c_lin_s, self.m_w_s) + max(self.c_att_s, self.m_kv_s) + self.t_comm_s + self.overhead_s


def kv_elements_per_token_per_layer(m: ModelPreset, attn_tp: int) -> int:
    """``e_kv(A)`` of §1: KV elements one GPU stores per token per layer at attention TP ``A``."""
    kind = m.attention
    if kind in ("GQA", "MHA"):
        return 2 * math.ceil(m.h_kv / attn_tp) * m.d_h
    if kind == "MQA":
        return 2 * m.d_h  # one KV head, replicated on every GPU
    if kind == "GTA":
        return math.ceil(m.h_kv / attn_tp) * m.d_h + m.d_r
    if kind == "MLA":
        return m.d_c + m.d_r  # the latent cannot be split by heads
    if kind == "GLA":
        return math.ceil(m.h_c / attn_tp) * m.d_ch + m.d_r
    raise ValueError(f"unknown attention type {kind!r}")


def kv_bytes_per_token(m: ModelPreset, attn_tp: int = 1, kv_dtype: str = "bf16") -> int:
    """``kv(A)``: KV bytes per token per GPU (A = 1 gives the model's total per token)."""
    return kv_elements_per_token_per_layer(m, attn_tp) * m.layers * DTYPE_BYTES[kv_dtype]


def decode_flop_per_context_token(m: ModelPreset) -> float:
    """``f_dec`` (§3.1), all query heads, per layer: absorbed form for MLA/GLA."""
    if m.attention == "MLA":
        return 2.0 * m.h_q * (2 * m.d_c + m.d_r)
    if m.attention == "GLA":
        return 2.0 * m.h_q * (2 * m.d_ch + m.d_r)
    return 4.0 * m.h_q * m.d_h


def prefill_flop_per_pair(m: ModelPreset) -> float:
    """``f_pre`` (§3.1) per (query, key) pair, per layer: expanded form for MLA/GLA."""
    if m.attention in ("MLA", "GLA"):
        return 2.0 * m.h_q * (m.d_nope + m.d_r + m.d_v)
    return 4.0 * m.h_q * m.d_h


def resolve_dp_attention(m: ModelPreset, cfg: EngineConfig) -> int:
    """D: ``auto`` is tp for MLA (the latent cannot shard), 1 otherwise; must divide tp."""
    if cfg.tp < 1:
        raise UsageError(f"tp must be ≥ 1, got {cfg.tp}")
    dp = (cfg.tp if m.attention == "MLA" else 1) if cfg.dp_attention == "auto" else int(cfg.dp_attention)
    if dp < 1 or cfg.tp % dp:
        raise UsageError(f"{m.key}: dp_attention {dp} does not divide tp {cfg.tp}. "
                         f"Fix: use a divisor of {cfg.tp} or --dp-attention auto")
    return dp


def moe_weight_read_bytes(m: ModelPreset, tokens: int, weight_bytes: int, mode: str) -> float:
    """``W_read(T)`` of §3.2: expert coverage under uniform routing grows toward all experts."""
    if not m.is_moe:
        return weight_bytes * m.params_total
    if mode == "active" or tokens <= 0:
        return weight_bytes * m.params_active
    experts, top_k = m.moe_experts, m.moe_top_k
    coverage = experts * (1.0 - (1.0 - top_k / experts) ** tokens)
    return weight_bytes * (m.params_active + m.moe_routed_params * (coverage - top_k) / experts)


@dataclass(frozen=True)
class Deployment:
    """A preset placed on hardware: parallelism, per-GPU bytes, KV capacity and step-time constants."""

    preset: ModelPreset
    hw: HardwarePreset
    cfg: EngineConfig
    dp: int
    """D, the number of attention groups."""
    attn_tp: int
    """A = tp/D, GPUs per group (attention heads split A-ways)."""
    kv_bytes_per_token_per_gpu: int
    weights_bytes_per_gpu: float
    usable_bytes_per_gpu: float
    free_kv_bytes_per_gpu: float
    blocks_per_group: int
    _gemm_flop_per_s: float = field(repr=False, default=0.0)
    _attn_flop_per_s: float = field(repr=False, default=0.0)
    _bw_bytes_per_s: float = field(repr=False, default=0.0)

    @property
    def fits(self) -> bool:
        return self.blocks_per_group > 0

    @property
    def kv_capacity_tokens(self) -> int:
        return self.dp * self.blocks_per_group * self.cfg.block_size

    @property
    def group_kv_tokens(self) -> int:
        return self.blocks_per_group * self.cfg.block_size

    @property
    def max_seqs_per_group(self) -> int:
        return self.cfg.max_num_seqs // self.dp

    @property
    def batched_tokens_per_group(self) -> int:
        return self.cfg.max_num_batched_tokens // self.dp

    def seqs_at(self, context_tokens: int) -> int:
        """Sequences of ``context_tokens`` that fit in KV: D·floor(blocks_g / ceil(L/block))."""
        return self.dp * (self.blocks_per_group // math.ceil(context_tokens / self.cfg.block_size))

    def step_breakdown(self, loads: Sequence[GroupLoad]) -> StepBreakdown:
        """§3 for one step given each group's aggregated load (groups absent = idle)."""
        m, cfg, a, tp = self.preset, self.cfg, self.attn_tp, self.cfg.tp
        b_w = DTYPE_BYTES[cfg.weight_dtype]
        total_tokens = sum(g.tokens for g in loads)
        att_tokens = max((g.tokens for g in loads), default=0)
        c_lin = 2.0 * (m.params_attn * att_tokens / a
                       + (m.params_active - m.params_attn) * total_tokens / tp) / self._gemm_flop_per_s
        w_read = moe_weight_read_bytes(m, total_tokens, b_w, cfg.moe_weight_traffic)
        m_w = (b_w * m.params_attn / a + (w_read - b_w * m.params_attn) / tp) / self._bw_bytes_per_s
        f_dec, f_pre = decode_flop_per_context_token(m), prefill_flop_per_pair(m)
        c_att = m_kv = worst = 0.0
        for g in loads:
            att = m.layers * (f_dec * g.decode_context_tokens + f_pre * g.prefill_pairs) / (a * self._attn_flop_per_s)
            kv = self.kv_bytes_per_token_per_gpu * g.kv_read_tokens / self._bw_bytes_per_s
            if max(att, kv) > worst:
                c_att, m_kv, worst = att, kv, max(att, kv)
        comm = m.layers * (self._allreduce_s(a, att_tokens) + self._allreduce_s(tp, total_tokens)
                           + self._gather_s(total_tokens))
        return StepBreakdown(c_lin, m_w, c_att, m_kv, comm, cfg.step_overhead_ms * 1e-3)

    def _allreduce_s(self, gpus: int, tokens: int) -> float:
        if gpus == 1:
            return 0.0
        payload = 2.0 * (gpus - 1) / gpus * tokens * self.preset.hidden * 2
        return self.cfg.allreduce_latency_us * 1e-6 + payload / self.hw.link_bytes_per_s

    def _gather_s(self, tokens: int) -> float:
        if self.dp == 1:
            return 0.0
        payload = (self.dp - 1) / self.dp * tokens * self.preset.hidden * 2
        return self.cfg.dp_gather_latency_us * 1e-6 + payload / self.hw.link_bytes_per_s


def deploy(m: ModelPreset, cfg: EngineConfig, *, require_fit: bool = True) -> Deployment:
    """Place ``m`` per ``cfg``; with ``require_fit`` a model without KV room raises ``UsageError`` (§3.4)."""
    hw = lookup_hardware(cfg.gpu)
    for name in ("weight_dtype", "kv_dtype"):
        if getattr(cfg, name) not in DTYPE_BYTES:
            raise UsageError(f"{name} must be one of {', '.join(DTYPE_BYTES)}, got {getattr(cfg, name)!r}")
    if cfg.block_size < 1 or cfg.max_num_seqs < 1 or cfg.max_num_batched_tokens < 1:
        raise UsageError("block_size, max_num_seqs and max_num_batched_tokens must be ≥ 1")
    dp = resolve_dp_attention(m, cfg)
    if cfg.max_num_seqs < dp or cfg.max_num_batched_tokens < dp:
        raise UsageError(f"{m.key}: max_num_seqs and max_num_batched_tokens are split over {dp} DP groups; "
                         f"each must be ≥ {dp}")
    attn_tp = cfg.tp // dp
    kv_per_gpu = kv_bytes_per_token(m, attn_tp, cfg.kv_dtype)
    b_w = DTYPE_BYTES[cfg.weight_dtype]
    weights = b_w * (m.params_attn / attn_tp + (m.params_total - m.params_attn) / cfg.tp)
    usable = hw.hbm_bytes * cfg.gpu_memory_utilization - cfg.reserve_gb * 1e9
    free = (usable - weights) * cfg.kv_capacity_scale
    blocks = max(0, math.floor(free / (kv_per_gpu * cfg.block_size)))
    gemm_peak = hw.fp8_flop_per_s if cfg.weight_dtype == "fp8" and hw.fp8_flop_per_s else hw.bf16_flop_per_s
    dep = Deployment(m, hw, cfg, dp, attn_tp, kv_per_gpu, weights, usable, free, blocks,
                     _gemm_flop_per_s=gemm_peak * cfg.eff_gemm,
                     _attn_flop_per_s=hw.bf16_flop_per_s * cfg.eff_attn,
                     _bw_bytes_per_s=hw.hbm_bandwidth_bytes_per_s * cfg.eff_bw)
    if require_fit and not dep.fits:
        raise UsageError(refusal_reason(dep))
    return dep


def refusal_reason(dep: Deployment) -> str:
    """One line: why a deployment has no KV room, and what to try."""
    m, cfg = dep.preset, dep.cfg
    where = f"{cfg.tp}×{cfg.gpu} (tp {cfg.tp}, dp_attention {dep.dp}, {cfg.weight_dtype} weights)"
    if dep.weights_bytes_per_gpu >= dep.usable_bytes_per_gpu:
        return (f"{m.key} does not fit {where}: weights need {dep.weights_bytes_per_gpu / 1e9:.2f} GB/GPU "
                f"against {dep.usable_bytes_per_gpu / 1e9:.2f} GB usable. Fix: try --gpu h200 or a larger --tp")
    return (f"{m.key} has no room for one KV block on {where} at kv_capacity_scale {cfg.kv_capacity_scale}. "
            f"Fix: raise --kv-capacity-scale or --gpu-memory-utilization")


def decode_loads(dep: Deployment, batch: int, context_tokens: int) -> list[GroupLoad]:
    """B decodes at context L spread evenly over the D groups (sequence i in group i mod D), as §6."""
    loads = []
    for g in range(dep.dp):
        n = batch // dep.dp + (1 if g < batch % dep.dp else 0)
        loads.append(GroupLoad(tokens=n, decode_context_tokens=float(n * context_tokens),
                               kv_read_tokens=float(n * context_tokens)))
    return loads


def decode_step(dep: Deployment, batch: int, context_tokens: int) -> StepBreakdown:
    """The step for ``batch`` decodes at ``context_tokens`` spread over groups (may exceed capacity: †)."""
    return dep.step_breakdown(decode_loads(dep, batch, context_tokens))


def step_time(m: ModelPreset, hw: HardwarePreset | str, cfg: EngineConfig,
              groups: Sequence[tuple[Sequence[int], Sequence[tuple[int, int]]]]) -> StepBreakdown:
    """Reference §5: D pairs ``(decode_contexts, [(L0, n_new), ...])``; ``.total_s`` is the step time."""
    gpu = hw if isinstance(hw, str) else hw.key
    dep = deploy(m, replace(cfg, gpu=gpu), require_fit=False)
    if len(groups) > dep.dp:
        raise ValueError(f"{len(groups)} groups given for dp_attention {dep.dp}")
    return dep.step_breakdown([GroupLoad.of(ctx, chunks) for ctx, chunks in groups])


def prefill_time_s(dep: Deployment, prompt_tokens: int, cached_tokens: int = 0) -> float:
    """TTFT of one prompt on an idle engine: chunks of ⌊max_num_batched_tokens/D⌋ in one group."""
    chunk = dep.batched_tokens_per_group
    done, total_s = cached_tokens, 0.0
    while done < prompt_tokens:
        c = min(chunk, prompt_tokens - done)
        total_s += dep.step_breakdown([GroupLoad.of((), ((done, c),))]).total_s
        done += c
    return total_s


def attention_info(model_id: str, gpu: str = "h200", tp: int = 8,
                   dp_attention: int | Literal["auto"] = "auto") -> dict[str, object] | None:
    """KV and capacity facts for a model id (preset key or alias) at a deployment; None if unknown.

    For reports: the load generator shows KV bytes/token/GPU and capacity next to measured
    latency. A deployment that does not fit returns ``fits: False`` and zero capacity.
    """
    key = find_preset_key(model_id)
    if key is None:
        return None
    try:
        dep = deploy(PRESETS[key], EngineConfig(gpu=gpu, tp=tp, dp_attention=dp_attention), require_fit=False)
    except UsageError:
        return None
    return deployment_details(dep)


def deployment_details(dep: Deployment) -> dict[str, object]:
    """The facts ``ServedModel.details``, ``--list`` and reports show for a deployment."""
    return {
        "preset": dep.preset.key,
        "attention": dep.preset.attention,
        "gpu": dep.cfg.gpu,
        "tp": dep.cfg.tp,
        "dp_attention": dep.dp,
        "kv_bytes_per_token": kv_bytes_per_token(dep.preset, 1, dep.cfg.kv_dtype),
        "kv_bytes_per_token_per_gpu": dep.kv_bytes_per_token_per_gpu,
        "weights_bytes_per_gpu": round(dep.weights_bytes_per_gpu),
        "kv_capacity_tokens": dep.kv_capacity_tokens,
        "max_seqs_at_8k": dep.seqs_at(CONTEXT_8K) if dep.fits else 0,
        "fits": dep.fits,
        "simulated": True,
    }
