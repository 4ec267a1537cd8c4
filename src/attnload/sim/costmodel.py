"""The attention-aware roofline cost model (docs/cost-model.md §3) as pure functions.

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

from attnload.attention import kind_of
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
    engine: Literal["vllm", "sglang", "trtllm"] = "vllm"
    """The serving engine whose behaviour the profile fields below follow (``ENGINE_PROFILES``)."""
    ep: int = 1
    """Expert-parallel size for MoE models (1: experts split tensor-parallel over tp GPUs)."""
    chunked_prefill: bool = True
    mix_prefill_decode: bool = True
    """False: a step with prefill work runs only prefill, holding every group's decodes."""
    kv_memory_basis: Literal["total", "free"] = "total"
    """total: KV gets HBM·gpu_memory_utilization − weights (vLLM, SGLang); free: KV gets
    gpu_memory_utilization of what the weights leave (TensorRT-LLM's kv_cache_free_gpu_mem_fraction)."""
    gemm_knee: float = 1.5
    """GEMM-phase roofline knee exponent (0: sharp max; see ``StepBreakdown.gemm_phase_s``)."""
    a2a_latency_us: float = 80.0
    """EP all-to-all: fixed cost of each dispatch and each combine per MoE layer."""
    moe_gemm_tile_tokens: int = 64
    """Grouped-GEMM row tile (Hopper FP8 kernels: 64): each touched expert computes whole tiles."""
    moe_bw_small_batch: float = 1.0
    """Grouped-GEMM bandwidth efficiency (× eff_bw) at ≤ 1 token per expert, rising linearly to 1 at one
    full tile per expert: small per-expert GEMMs do not stream weights at the dense kernels' rate."""
    moe_kernel_rate: float = 1.0
    """Expert (grouped) GEMM compute rate as a fraction of the dense GEMM rate (eff_gemm × peak): 1 as
    DeepGEMM's microbenchmarks; 0.54 in the trtllm profile, from published kernel and throughput figures
    (docs/design.md, "Grouped-GEMM kernel rate")."""
    dp_replicates_dense: bool = False
    """Under attention DP, the dense non-expert weights (dense MLPs, shared experts, embeddings and lm_head)
    are held whole by every attention group, as the attention weights are, instead of split over tp
    (TensorRT-LLM: MLP and shared-expert TP size 1 and a replicated lm_head under attention DP)."""
    spec_tokens: int = 0
    """Speculative decoding: draft tokens verified per sequence per decode step (0: off; ``sim/speculation.py``)."""
    spec_acceptance: float = 0.7
    """Probability each draft token is accepted, given those before it were."""


ENGINE_PROFILES: dict[str, dict[str, object]] = {
    # vLLM V1 (the defaults above): 0.90 of HBM, recompute preemption, 8192-token chunked prefill
    # mixed with decodes, 256 sequences.
    "vllm": {},
    # SGLang: a step runs prefill (extend) or decode, never both (no --enable-mixed-chunk), so with
    # DP attention a prefill on one rank holds every rank's decode; mem_fraction_static ≈ 0.88.
    "sglang": {"mix_prefill_decode": False, "gpu_memory_utilization": 0.88},
    # TensorRT-LLM (trtllm-bench, PyTorch backend): KV gets kv_cache_free_gpu_mem_fraction 0.90 of the
    # memory the weights leave, the GUARANTEED_NO_EVICT capacity scheduler reserves prompt + output at
    # admission (no preemption), context and generation share a step, chunked context is off (MLA on
    # Hopper cannot chunk), max_batch_size 2048 and max_num_tokens 8192; its CUTLASS MoE backend's grouped
    # GEMMs on Hopper compute at 0.54 of the dense rate, and attention DP replicates the dense MLPs, shared
    # experts and lm_head in every group (docs/design.md).
    "trtllm": {
        "kv_memory_basis": "free",
        "gpu_memory_utilization": 0.90,
        "preemption": "none",
        "chunked_prefill": False,
        "mix_prefill_decode": True,
        "max_num_seqs": 2048,
        "max_num_batched_tokens": 8192,
        "moe_kernel_rate": 0.54,
        "dp_replicates_dense": True,
    },
}
"""Engine behaviour that differs between servers; a flag given explicitly wins over its profile."""

PROFILE_FIELDS = (
    "gpu_memory_utilization",
    "preemption",
    "max_num_seqs",
    "max_num_batched_tokens",
    "chunked_prefill",
    "mix_prefill_decode",
    "kv_memory_basis",
    "moe_kernel_rate",
    "dp_replicates_dense",
)


def engine_profile(engine: str) -> dict[str, object]:
    """The fields ``engine`` sets (missing ones keep the vLLM defaults)."""
    if engine not in ENGINE_PROFILES:
        raise UsageError(f"unknown engine {engine!r}; valid: {', '.join(ENGINE_PROFILES)}")
    defaults = EngineConfig()
    return {name: ENGINE_PROFILES[engine].get(name, getattr(defaults, name)) for name in PROFILE_FIELDS}


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
    prefix_tokens: float = 0.0
    """Σ L0 over prefill chunks: cached tokens an MLA/GLA chunk re-expands (up-projection)."""

    @staticmethod
    def of(decode_contexts: Sequence[int], chunks: Sequence[tuple[int, int]] = ()) -> GroupLoad:
        """Aggregate explicit decode contexts and ``(L0, c)`` prefill chunks."""
        pairs = sum(c * l0 + c * (c + 1) / 2 for l0, c in chunks)
        return GroupLoad(
            tokens=len(decode_contexts) + sum(c for _, c in chunks),
            decode_context_tokens=float(sum(decode_contexts)),
            prefill_pairs=pairs,
            kv_read_tokens=float(sum(decode_contexts) + sum(l0 + c for l0, c in chunks)),
            prefix_tokens=float(sum(l0 for l0, _ in chunks)),
        )


@dataclass(frozen=True)
class StepBreakdown:
    """A step's time and its components (seconds); C_att/M_kv are the slowest group's.

    The named calibration terms (docs/design.md "Calibrated cost model") are already inside the
    five components and are repeated here for ``--explain``: ``dp_pad_tokens`` (FFN rows added by
    padding every DP rank to the largest rank's batch, inside C_lin), ``moe_gemm_efficiency``
    (grouped-GEMM compute efficiency at this step's tokens per expert, inside C_lin),
    ``moe_bw_efficiency`` (its weight-streaming efficiency, inside M_w), ``a2a_s`` (EP dispatch +
    combine, inside t_comm) and ``mla_upproj_s`` (latent up-projection of cached prefix tokens
    during MLA/GLA prefill, inside C_att).
    """

    c_lin_s: float
    m_w_s: float
    c_att_s: float
    m_kv_s: float
    t_comm_s: float
    overhead_s: float
    dp_pad_tokens: int = 0
    moe_gemm_efficiency: float = 1.0
    moe_bw_efficiency: float = 1.0
    a2a_s: float = 0.0
    mla_upproj_s: float = 0.0

    gemm_knee: float = 1.5
    """Roofline knee exponent p of the GEMM phase (0: sharp ``max``)."""

    @property
    def gemm_phase_s(self) -> float:
        """GEMM phase: ``max(C_lin, M_w)``, or with a knee ``(C_lin^p + M_w^p)^(1/p)``: near the ridge
        compute and weight streaming do not overlap perfectly (calibrated, docs/design.md)."""
        c, m = self.c_lin_s, self.m_w_s
        if self.gemm_knee <= 0 or c <= 0 or m <= 0:
            return max(c, m)
        p = self.gemm_knee
        return float((c**p + m**p) ** (1.0 / p))

    @property
    def total_s(self) -> float:
        """Two-phase roofline: GEMM phase, then attention phase, then communication and overhead."""
        return self.gemm_phase_s + max(self.c_att_s, self.m_kv_s) + self.t_comm_s + self.overhead_s


def kv_elements_per_token_per_layer(m: ModelPreset, attn_tp: int) -> int:
    """``e_kv(A)`` of §1: KV elements one GPU stores per token per layer at attention TP ``A``."""
    return kind_of(m.attention).kv_elements(m, attn_tp)


def kv_bytes_per_token(m: ModelPreset, attn_tp: int = 1, kv_dtype: str = "bf16") -> int:
    """``kv(A)``: KV bytes per token per GPU (A = 1 gives the model's total per token)."""
    return kv_elements_per_token_per_layer(m, attn_tp) * m.layers * DTYPE_BYTES[kv_dtype]


def decode_flop_per_context_token(m: ModelPreset) -> float:
    """``f_dec`` (§3.1), all query heads, per layer: absorbed form for MLA/GLA."""
    return kind_of(m.attention).decode_flop(m)


def prefill_flop_per_pair(m: ModelPreset) -> float:
    """``f_pre`` (§3.1) per (query, key) pair, per layer: expanded form for MLA/GLA."""
    return kind_of(m.attention).prefill_flop(m)


def upproj_flop_per_prefix_token(m: ModelPreset) -> float:
    """MLA/GLA non-absorbed prefill re-expands the cached latent of every prefix token into per-head
    keys and values (``kv_b``), per layer: ``2·h_q·w·(d_nope + d_v)`` with ``w`` the latent width one
    head reads (MLA: all of ``d_c``; GLA: one latent head ``d_ch``). 0 for other types, which cache K/V."""
    return kind_of(m.attention).upproj_flop(m)


def dense_nonattention_params(m: ModelPreset) -> float:
    """Parameters every token uses outside attention and the routed experts: dense MLPs, shared
    experts, embeddings and lm_head."""
    routed_active = m.moe_routed_params * m.moe_top_k / m.moe_experts if m.is_moe else 0.0
    return m.params_active - m.params_attn - routed_active


def group_held_params(m: ModelPreset, cfg: EngineConfig) -> float:
    """Parameters each attention group holds whole (split only A-ways inside it): attention, plus the
    dense non-attention weights when the engine replicates them under DP."""
    return m.params_attn + (dense_nonattention_params(m) if cfg.dp_replicates_dense else 0.0)


def moe_tokens_per_expert(m: ModelPreset, tokens: int) -> float:
    """Mean rows each touched expert multiplies in a step: ``T·k / cov(T)`` (uniform routing)."""
    if not m.is_moe or tokens <= 0:
        return 0.0
    coverage = m.moe_experts * (1.0 - (1.0 - m.moe_top_k / m.moe_experts) ** tokens)
    return tokens * m.moe_top_k / coverage


def grouped_gemm_efficiency(tokens_per_expert: float, tile_tokens: int) -> float:
    """Compute efficiency of a grouped GEMM: each touched expert runs whole row tiles, so
    ``n / (tile·⌈n/tile⌉)`` of its tensor-core work is useful (1/64 at one token, 1 at full tiles)."""
    if tokens_per_expert <= 0:
        return 1.0
    return tokens_per_expert / (tile_tokens * math.ceil(tokens_per_expert / tile_tokens))


def grouped_gemm_bw_efficiency(tokens_per_expert: float, tile_tokens: int, small_batch: float) -> float:
    """Weight-streaming efficiency (× eff_bw) of a grouped GEMM: ``small_batch`` at ≤ 1 token per
    expert, rising linearly to 1 at one full tile per expert."""
    if small_batch >= 1.0:
        return 1.0
    fill = min(1.0, max(0.0, (tokens_per_expert - 1.0) / max(1, tile_tokens - 1)))
    return small_batch + (1.0 - small_batch) * fill


def ep_remote_ranks_per_token(m: ModelPreset, ep: int) -> float:
    """Expected EP ranks other than its own that one token's top-k experts live on (uniform routing,
    E/ep experts per rank): ``ep·(1 − (1 − 1/ep)^k)·(ep − 1)/ep``."""
    if ep <= 1 or not m.is_moe:
        return 0.0
    return ep * (1.0 - (1.0 - 1.0 / ep) ** m.moe_top_k) * (ep - 1) / ep


def dp_expected_max_load(batch: int, dp: int) -> float:
    """Expected sequences on the busiest of ``dp`` ranks when ``batch`` requests are routed at random
    (normal approximation of the maximum of D binomial loads; ``batch/dp`` when dp = 1)."""
    if dp <= 1 or batch <= 0:
        return float(batch)
    mean = batch / dp
    spread = math.sqrt(batch * (1 / dp) * (1 - 1 / dp))
    return min(float(batch), mean + spread * math.sqrt(2 * math.log(dp)))


def resolve_dp_attention(m: ModelPreset, cfg: EngineConfig) -> int:
    """D: ``auto`` is tp for MLA (the latent cannot shard), 1 otherwise; must divide tp."""
    if cfg.tp < 1:
        raise UsageError(f"tp must be ≥ 1, got {cfg.tp}")
    dp = (cfg.tp if kind_of(m.attention).latent else 1) if cfg.dp_attention == "auto" else int(cfg.dp_attention)
    if dp < 1 or cfg.tp % dp:
        raise UsageError(
            f"{m.key}: dp_attention {dp} does not divide tp {cfg.tp}. "
            f"Fix: use a divisor of {cfg.tp} or --dp-attention auto"
        )
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
        """§3 for one step given each group's aggregated load (groups absent = idle), with the
        calibrated terms of docs/design.md: DP padding, grouped-GEMM efficiency, EP all-to-all and
        the MLA/GLA prefill up-projection."""
        m, cfg, a, tp = self.preset, self.cfg, self.attn_tp, self.cfg.tp
        b_w = DTYPE_BYTES[cfg.weight_dtype]
        total_tokens = sum(g.tokens for g in loads)
        att_tokens = max((g.tokens for g in loads), default=0)
        # DP attention: in decode-only steps (CUDA-graph batches) every rank pads its batch to the
        # largest rank's before the collective FFN/MoE; steps with prefill gather what each rank has.
        decode_only = all(g.prefill_pairs == 0 for g in loads)
        ffn_tokens = self.dp * att_tokens if self.dp > 1 and decode_only else total_tokens
        c_lin_flop = m.params_attn * att_tokens / a + dense_nonattention_params(m) * ffn_tokens / tp
        gemm_eff = bw_eff = 1.0
        if m.is_moe:
            routed_active = m.moe_routed_params * m.moe_top_k / m.moe_experts
            per_expert = moe_tokens_per_expert(m, ffn_tokens)
            gemm_eff = grouped_gemm_efficiency(per_expert, cfg.moe_gemm_tile_tokens)
            bw_eff = grouped_gemm_bw_efficiency(per_expert, cfg.moe_gemm_tile_tokens, cfg.moe_bw_small_batch)
            c_lin_flop += routed_active * ffn_tokens / tp / (gemm_eff * cfg.moe_kernel_rate)
        c_lin = 2.0 * c_lin_flop / self._gemm_flop_per_s
        w_read = moe_weight_read_bytes(m, total_tokens, b_w, cfg.moe_weight_traffic)
        if m.is_moe:
            active_bytes = b_w * m.params_active
            expert_bytes = max(0.0, w_read - active_bytes) + b_w * m.moe_routed_params * m.moe_top_k / m.moe_experts
            w_read += expert_bytes * (1.0 / bw_eff - 1.0)
        held = b_w * group_held_params(m, cfg)
        m_w = (held / a + (w_read - held) / tp) / self._bw_bytes_per_s
        f_dec, f_pre, f_up = decode_flop_per_context_token(m), prefill_flop_per_pair(m), upproj_flop_per_prefix_token(m)
        c_att = m_kv = worst = upproj = 0.0
        for g in loads:
            att = m.layers * (f_dec * g.decode_context_tokens + f_pre * g.prefill_pairs) / (a * self._attn_flop_per_s)
            up = m.layers * f_up * g.prefix_tokens / (a * self._gemm_flop_per_s) if f_up else 0.0
            kv = self.kv_bytes_per_token_per_gpu * g.kv_read_tokens / self._bw_bytes_per_s
            if max(att + up, kv) > worst:
                c_att, m_kv, worst, upproj = att + up, kv, max(att + up, kv), up
        a2a = 0.0
        if cfg.ep > 1 and m.is_moe:
            a2a = self._a2a_s(ffn_tokens)
            comm = m.layers * (self._allreduce_s(a, att_tokens) + self._allreduce_s(tp // cfg.ep, total_tokens) + a2a)
        else:
            comm = m.layers * (
                self._allreduce_s(a, att_tokens) + self._allreduce_s(tp, total_tokens) + self._gather_s(ffn_tokens)
            )
        return StepBreakdown(
            c_lin,
            m_w,
            c_att,
            m_kv,
            comm,
            cfg.step_overhead_ms * 1e-3,
            dp_pad_tokens=ffn_tokens - total_tokens,
            moe_gemm_efficiency=gemm_eff,
            moe_bw_efficiency=bw_eff,
            a2a_s=m.layers * a2a,
            mla_upproj_s=upproj,
            gemm_knee=cfg.gemm_knee,
        )

    def _a2a_s(self, tokens: int) -> float:
        """One MoE layer's EP dispatch (weight dtype) + combine (BF16) for this GPU's share of tokens."""
        cfg, m = self.cfg, self.preset
        per_gpu = tokens / cfg.tp
        payload = per_gpu * ep_remote_ranks_per_token(m, cfg.ep) * m.hidden * (DTYPE_BYTES[cfg.weight_dtype] + 2)
        return 2 * cfg.a2a_latency_us * 1e-6 + payload / self.hw.link_bytes_per_s

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
    if cfg.spec_tokens < 0 or not 0.0 <= cfg.spec_acceptance <= 1.0:
        raise UsageError(f"{m.key}: spec_tokens must be ≥ 0 and spec_acceptance within [0, 1]")
    dp = resolve_dp_attention(m, cfg)
    if cfg.ep != 1:
        if not m.is_moe:
            raise UsageError(f"{m.key} is a dense model: --ep {cfg.ep} needs a MoE model. Fix: drop --ep")
        if cfg.ep < 1 or cfg.tp % cfg.ep or m.moe_experts % cfg.ep:
            raise UsageError(
                f"{m.key}: ep {cfg.ep} must divide tp {cfg.tp} and the {m.moe_experts} experts. "
                f"Fix: use a divisor of {cfg.tp}"
            )
    if cfg.max_num_seqs < dp or cfg.max_num_batched_tokens < dp:
        raise UsageError(
            f"{m.key}: max_num_seqs and max_num_batched_tokens are split over {dp} DP groups; each must be ≥ {dp}"
        )
    attn_tp = cfg.tp // dp
    kv_per_gpu = kv_bytes_per_token(m, attn_tp, cfg.kv_dtype)
    b_w = DTYPE_BYTES[cfg.weight_dtype]
    held = group_held_params(m, cfg)
    weights = b_w * (held / attn_tp + (m.params_total - held) / cfg.tp)
    if cfg.kv_memory_basis == "free":
        usable = weights + (hw.hbm_bytes - weights - cfg.reserve_gb * 1e9) * cfg.gpu_memory_utilization
    else:
        usable = hw.hbm_bytes * cfg.gpu_memory_utilization - cfg.reserve_gb * 1e9
    free = (usable - weights) * cfg.kv_capacity_scale
    blocks = max(0, math.floor(free / (kv_per_gpu * cfg.block_size)))
    gemm_peak = hw.fp8_flop_per_s if cfg.weight_dtype == "fp8" and hw.fp8_flop_per_s else hw.bf16_flop_per_s
    dep = Deployment(
        m,
        hw,
        cfg,
        dp,
        attn_tp,
        kv_per_gpu,
        weights,
        usable,
        free,
        blocks,
        _gemm_flop_per_s=gemm_peak * cfg.eff_gemm,
        _attn_flop_per_s=hw.bf16_flop_per_s * cfg.eff_attn,
        _bw_bytes_per_s=hw.hbm_bandwidth_bytes_per_s * cfg.eff_bw,
    )
    if require_fit and not dep.fits:
        raise UsageError(refusal_reason(dep))
    return dep


def refusal_reason(dep: Deployment) -> str:
    """One line: why a deployment has no KV room, and what to try."""
    m, cfg = dep.preset, dep.cfg
    where = f"{cfg.tp}×{cfg.gpu} (tp {cfg.tp}, dp_attention {dep.dp}, {cfg.weight_dtype} weights)"
    if dep.weights_bytes_per_gpu >= dep.usable_bytes_per_gpu:
        return (
            f"{m.key} does not fit {where}: weights need {dep.weights_bytes_per_gpu / 1e9:.2f} GB/GPU "
            f"against {dep.usable_bytes_per_gpu / 1e9:.2f} GB usable. Fix: try --gpu h200 or a larger --tp"
        )
    return (
        f"{m.key} has no room for one KV block on {where} at kv_capacity_scale {cfg.kv_capacity_scale}. "
        f"Fix: raise --kv-capacity-scale or --gpu-memory-utilization"
    )


def decode_loads(dep: Deployment, batch: int, context_tokens: int, query_tokens: int = 1) -> list[GroupLoad]:
    """B decodes at context L spread evenly over the D groups (sequence i in group i mod D), as §6.
    ``query_tokens`` q > 1 is a speculative verify step (§11): q tokens per sequence through the GEMMs
    and attention (q·L attended pairs), the KV read once."""
    loads = []
    for g in range(dep.dp):
        n = batch // dep.dp + (1 if g < batch % dep.dp else 0)
        loads.append(
            GroupLoad(
                tokens=n * query_tokens,
                decode_context_tokens=float(n * context_tokens * query_tokens),
                kv_read_tokens=float(n * context_tokens),
            )
        )
    return loads


def decode_step(dep: Deployment, batch: int, context_tokens: int, query_tokens: int = 1) -> StepBreakdown:
    """The step for ``batch`` decodes at ``context_tokens`` spread over groups (may exceed capacity: †)."""
    return dep.step_breakdown(decode_loads(dep, batch, context_tokens, query_tokens))


def step_time(
    m: ModelPreset,
    hw: HardwarePreset | str,
    cfg: EngineConfig,
    groups: Sequence[tuple[Sequence[int], Sequence[tuple[int, int]]]],
) -> StepBreakdown:
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


def attention_info(
    model_id: str, gpu: str = "h200", tp: int = 8, dp_attention: int | Literal["auto"] = "auto"
) -> dict[str, object] | None:
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
        "memory_bandwidth_gbps": dep.hw.hbm_bandwidth_bytes_per_s / 1e9,
    }


def gpu_bandwidth_gbps(gpu_type: str) -> float | None:
    """A GPU preset's peak memory bandwidth in GB/s (a model's ``gpu_type``); None for an unknown name."""
    try:
        return lookup_hardware(gpu_type).hbm_bandwidth_bytes_per_s / 1e9
    except UsageError:
        return None
