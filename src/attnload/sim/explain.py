"""Text for ``attnload sim --list`` (presets at the configured parallelism) and ``--explain``.

``--explain`` is the what-if view of docs/cost-model.md §3: for B decodes at context L it
shows where a step's time goes (weight traffic, KV traffic, attention compute,
communication), per-user tokens/s, KV bytes per token per GPU and the capacity at L.
Both return strings; the CLI prints them.
"""

from __future__ import annotations

from collections.abc import Sequence

from attnload.errors import UsageError
from attnload.sim.costmodel import (
    DTYPE_BYTES,
    Deployment,
    EngineConfig,
    GroupLoad,
    decode_loads,
    decode_step,
    dense_nonattention_params,
    deploy,
    dp_expected_max_load,
    ep_remote_ranks_per_token,
    grouped_gemm_efficiency,
    kv_bytes_per_token,
    moe_tokens_per_expert,
    prefill_time_s,
    refusal_reason,
    upproj_flop_per_prefix_token,
)
from attnload.sim.decode.explain import interference_view, speculation_view
from attnload.sim.factory import ModelSpec
from attnload.sim.presets import PRESETS, aliases_of


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += [
        "  ".join(c.rjust(w) if c[:1].isdigit() else c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows
    ]
    return "\n".join(line.rstrip() for line in lines)


def render_list(cfg: EngineConfig) -> str:
    """Every preset with KV bytes/token (A=1) and per GPU at ``cfg``'s gpu/tp/dp_attention."""
    rows = []
    for preset in PRESETS.values():
        try:
            dep = deploy(preset, cfg, require_fit=False)
        except UsageError:  # e.g. a dp_attention that does not divide tp
            rows.append(
                [preset.key, preset.attention, str(preset.layers), "-", "-", "-", "-", "-", "-", "invalid dp_attention"]
            )
            continue
        fits = dep.fits
        rows.append(
            [
                preset.key,
                preset.attention,
                str(preset.layers),
                f"{kv_bytes_per_token(preset, 1, cfg.kv_dtype)}",
                str(dep.dp),
                str(dep.kv_bytes_per_token_per_gpu),
                f"{dep.weights_bytes_per_gpu / 1e9:.2f}",
                f"{dep.kv_capacity_tokens:,}" if fits else "-",
                str(dep.seqs_at(8192)) if fits else "-",
                ", ".join(aliases_of(preset.key)) if fits else "does not fit",
            ]
        )
    title = (
        f"presets on {cfg.tp}×{cfg.gpu}, tp {cfg.tp}, dp_attention {cfg.dp_attention}, "
        f"{cfg.weight_dtype} weights, {cfg.kv_dtype} KV, kv_capacity_scale {cfg.kv_capacity_scale} (simulated)"
    )
    header = [
        "preset",
        "attn",
        "layers",
        "KV B/token",
        "D",
        "KV B/token/GPU",
        "weights GB/GPU",
        "KV tokens",
        "seqs@8K",
        "aliases",
    ]
    return title + "\n" + _table(header, rows)


def render_explain(spec: ModelSpec, batches: Sequence[int], context_tokens: int) -> str:
    """Step-time breakdown for each batch at ``context_tokens``, plus KV and capacity facts."""
    if context_tokens < 1 or any(b < 1 for b in batches):
        raise UsageError("--batch and --context must be ≥ 1")
    dep = deploy(spec.preset, spec.cfg, require_fit=False)
    if not dep.fits:
        raise UsageError(refusal_reason(dep))
    m, cfg = dep.preset, dep.cfg
    seqs = dep.seqs_at(context_tokens)
    lines = [
        f"{spec.id}: preset {m.key} ({m.attention}{', synthetic' if m.synthetic else ''}) on {cfg.tp}×{cfg.gpu}, "
        f"tp {cfg.tp}, dp_attention D={dep.dp} (A={dep.attn_tp} GPUs/group), {cfg.weight_dtype} weights, "
        f"{cfg.kv_dtype} KV (simulated)",
        f"  KV bytes/token: {kv_bytes_per_token(m, 1, cfg.kv_dtype):,} total, "
        f"{dep.kv_bytes_per_token_per_gpu:,} per GPU (A={dep.attn_tp})",
        f"  weights/GPU: {dep.weights_bytes_per_gpu / 1e9:.2f} GB of {dep.usable_bytes_per_gpu / 1e9:.2f} GB usable; "
        f"KV capacity {dep.kv_capacity_tokens:,} tokens = {seqs} sequences at context {context_tokens}",
        f"  idle prefill (TTFT) of a {context_tokens}-token prompt: {prefill_time_s(dep, context_tokens) * 1e3:.1f} ms",
        "",
        f"decode step at context {context_tokens} (ms; two-phase roofline: max(C_lin, M_w) + max(C_att, M_kv)"
        f" + t_comm + overhead)",
    ]
    rows = []
    for batch in batches:
        b = decode_step(dep, batch, context_tokens)
        over = "†" if batch > min(seqs, cfg.max_num_seqs) else ""
        rows.append(
            [
                f"{batch}{over}",
                f"{b.c_lin_s * 1e3:.2f}",
                f"{b.m_w_s * 1e3:.2f}",
                f"{b.c_att_s * 1e3:.2f}",
                f"{b.m_kv_s * 1e3:.2f}",
                f"{b.t_comm_s * 1e3:.2f}",
                f"{b.overhead_s * 1e3:.2f}",
                f"{b.total_s * 1e3:.2f}",
                f"{1 / b.total_s:.1f}",
                f"{batch / b.total_s:,.0f}",
            ]
        )
    header = [
        "B",
        "C_lin (GEMM)",
        "M_w (weights)",
        "C_att (attn FLOPs)",
        "M_kv (KV read)",
        "t_comm",
        "overhead",
        "step",
        "tok/s/user",
        "tok/s total",
    ]
    lines.append(_table(header, rows))
    lines.append("† beyond KV capacity or max_num_seqs: the engine never forms this batch")
    lines += calibrated_terms(dep, max(batches), context_tokens)
    lines += speculation_view(dep, batches, context_tokens, _table)
    lines += interference_view(dep, batches, context_tokens, _table)
    lines += dp_attention_view(dep, batches, context_tokens)
    return "\n".join(lines)


def imbalanced_loads(dep: Deployment, batch: int, context_tokens: int, busiest: int) -> list[GroupLoad]:
    """``busiest`` decodes on rank 0, the rest of ``batch`` spread over the other ranks."""
    busiest = min(batch, busiest)
    rest = batch - busiest
    loads = [GroupLoad(busiest, float(busiest * context_tokens), 0.0, float(busiest * context_tokens))]
    others = dep.dp - 1
    for g in range(others):
        n = rest // others + (1 if g < rest % others else 0)
        loads.append(GroupLoad(n, float(n * context_tokens), 0.0, float(n * context_tokens)))
    return loads


def calibrated_terms(dep: Deployment, batch: int, context_tokens: int) -> list[str]:
    """One line per calibrated cost-model term (docs/design.md), at ``batch`` decodes."""
    m, cfg = dep.preset, dep.cfg
    b = decode_step(dep, batch, context_tokens)
    lines = ["", f'calibrated terms at B={batch}, context {context_tokens} (docs/design.md "Calibrated cost model"):']
    if dep.dp > 1:
        lines.append(
            f"  DP padding: decode steps pad every rank to the largest rank's batch: +{b.dp_pad_tokens} FFN rows "
            f"(random routing would put {dp_expected_max_load(batch, dep.dp):.1f} on the busiest rank, "
            f"not {batch / dep.dp:.1f})"
        )
    else:
        lines.append("  DP padding: none (dp_attention 1: every GPU sees the whole batch)")
    if dep.dp > 1 and cfg.dp_replicates_dense:
        extra = DTYPE_BYTES[cfg.weight_dtype] * dense_nonattention_params(m) * (1 / dep.attn_tp - 1 / cfg.tp)
        lines.append(
            f"  DP replication ({cfg.engine}): dense MLPs, shared experts and lm_head held whole in each "
            f"group: +{extra / 1e9:.2f} GB per GPU, read every step "
            f"(+{extra / (dep.hw.hbm_bandwidth_bytes_per_s * cfg.eff_bw) * 1e3:.2f} ms)"
        )
    if m.is_moe:
        per_expert = moe_tokens_per_expert(m, batch)
        lines.append(
            f"  grouped-GEMM efficiency: {per_expert:.1f} tokens per touched expert → "
            f"{grouped_gemm_efficiency(per_expert, cfg.moe_gemm_tile_tokens):.2f} of the expert GEMMs' "
            f"tensor-core work is useful (tiles of {cfg.moe_gemm_tile_tokens} rows), computed at "
            f"{cfg.moe_kernel_rate:.2f}× the dense GEMM rate (engine {cfg.engine})"
        )
        if cfg.ep > 1:
            lines.append(
                f"  EP all-to-all (ep {cfg.ep}): {b.a2a_s * 1e3:.2f} ms per step, dispatch + combine to "
                f"{ep_remote_ranks_per_token(m, cfg.ep):.2f} remote ranks per token per layer"
            )
        else:
            lines.append("  EP all-to-all: none (ep 1: experts split by TP, an all-reduce instead)")
    else:
        lines.append("  grouped-GEMM efficiency and EP all-to-all: dense model, not applicable")
    if upproj_flop_per_prefix_token(m) > 0:
        full = prefill_time_s(dep, context_tokens)
        upproj = sum(
            dep.step_breakdown([GroupLoad.of((), ((l0, c),))]).mla_upproj_s for l0, c in _chunks(dep, context_tokens)
        )
        lines.append(
            f"  {m.attention} prefill up-projection: {upproj * 1e3:.1f} ms of the {full * 1e3:.1f} ms idle "
            f"prefill of a {context_tokens}-token prompt (each chunk re-expands its cached latent prefix)"
        )
    chunk = min(dep.batched_tokens_per_group, context_tokens)
    per_rank = max(1, batch // dep.dp)
    decode_only = dep.step_breakdown(decode_loads(dep, batch, context_tokens)).total_s
    mixed_loads = decode_loads(dep, batch, context_tokens)
    first = mixed_loads[0]
    mixed_loads[0] = GroupLoad(
        first.tokens + chunk, first.decode_context_tokens, chunk * (chunk + 1) / 2, first.kv_read_tokens + chunk
    )
    mixed = dep.step_breakdown(mixed_loads).total_s
    prefill_only = dep.step_breakdown([GroupLoad.of((), ((0, chunk),))]).total_s
    if cfg.mix_prefill_decode:
        lines.append(
            f"  prefill/decode interference ({cfg.engine}: mixed steps): a {chunk}-token prefill chunk on one "
            f"rank makes every rank's decode step {mixed * 1e3:.2f} ms instead of {decode_only * 1e3:.2f} ms "
            f"({per_rank} decodes per rank)"
        )
    else:
        lines.append(
            f"  prefill/decode interference ({cfg.engine}: prefill-only steps): a {chunk}-token prefill "
            f"chunk on one rank holds every rank's decodes for {prefill_only * 1e3:.2f} ms "
            f"(a decode step is {decode_only * 1e3:.2f} ms)"
        )
    return lines


def _chunks(dep: Deployment, prompt_tokens: int) -> list[tuple[int, int]]:
    chunk, done, out = dep.batched_tokens_per_group, 0, []
    while done < prompt_tokens:
        c = min(chunk, prompt_tokens - done)
        out.append((done, c))
        done += c
    return out


def dp_attention_view(dep: Deployment, batches: Sequence[int], context_tokens: int) -> list[str]:
    """DP attention (D = tp) against pure TP (D = 1): balanced, randomly routed and all-on-one-rank batches."""
    cfg = dep.cfg
    if cfg.tp == 1:
        return []
    try:
        dp_dep = deploy(dep.preset, _with_dp(cfg, cfg.tp), require_fit=False)
        tp_dep = deploy(dep.preset, _with_dp(cfg, 1), require_fit=False)
    except UsageError:
        return []
    d = dp_dep.dp
    rows = []
    for batch in batches:
        balanced = decode_step(dp_dep, batch, context_tokens).total_s
        busiest = -(-int(dp_expected_max_load(batch, d) * 1000) // 1000)
        routed = dp_dep.step_breakdown(imbalanced_loads(dp_dep, batch, context_tokens, busiest)).total_s
        one = dp_dep.step_breakdown(imbalanced_loads(dp_dep, batch, context_tokens, batch)).total_s
        pure = decode_step(tp_dep, batch, context_tokens).total_s
        verdict = "DP helps" if balanced < pure else "DP costs"
        if balanced < pure <= one:
            verdict += "; costs if all on one rank"
        rows.append(
            [
                str(batch),
                f"{balanced * 1e3:.2f}",
                f"{routed * 1e3:.2f}",
                f"{one * 1e3:.2f}",
                f"{pure * 1e3:.2f}",
                verdict,
            ]
        )
    header = ["B", f"D={d} balanced", f"D={d} random routing", f"D={d} all on one rank", "D=1 (pure TP)", "verdict"]
    return [
        "",
        f"DP attention vs pure TP, decode step ms at context {context_tokens} (sequences that fit: "
        f"D={d} {dp_dep.seqs_at(context_tokens) if dp_dep.fits else 0}, "
        f"D=1 {tp_dep.seqs_at(context_tokens) if tp_dep.fits else 0}):",
        _table(header, rows),
    ]


def _with_dp(cfg: EngineConfig, dp: int) -> EngineConfig:
    from dataclasses import replace

    return replace(cfg, dp_attention=dp)
