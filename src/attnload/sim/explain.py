"""Text for ``attnload sim --list`` (presets at the configured parallelism) and ``--explain``.

``--explain`` is the what-if view of ATTENTION_MODEL.md §3: for B decodes at context L it
shows where a step's time goes (weight traffic, KV traffic, attention compute,
communication), per-user tokens/s, KV bytes per token per GPU and the capacity at L.
Both return strings; the CLI prints them.
"""

from __future__ import annotations

from collections.abc import Sequence

from attnload.errors import UsageError
from attnload.sim.costmodel import (
    EngineConfig,
    decode_step,
    deploy,
    kv_bytes_per_token,
    prefill_time_s,
    refusal_reason,
)
from attnload.sim.factory import ModelSpec
from attnload.sim.presets import PRESETS, aliases_of


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.rjust(w) if c[:1].isdigit() else c.ljust(w) for c, w in zip(r, widths, strict=True))
              for r in rows]
    return "\n".join(line.rstrip() for line in lines)


def render_list(cfg: EngineConfig) -> str:
    """Every preset with KV bytes/token (A=1) and per GPU at ``cfg``'s gpu/tp/dp_attention."""
    rows = []
    for preset in PRESETS.values():
        try:
            dep = deploy(preset, cfg, require_fit=False)
        except UsageError:  # e.g. a dp_attention that does not divide tp
            rows.append([preset.key, preset.attention, str(preset.layers), "-", "-", "-", "-", "-", "-",
                         "invalid dp_attention"])
            continue
        fits = dep.fits
        rows.append([
            preset.key, preset.attention, str(preset.layers),
            f"{kv_bytes_per_token(preset, 1, cfg.kv_dtype)}", str(dep.dp), str(dep.kv_bytes_per_token_per_gpu),
            f"{dep.weights_bytes_per_gpu / 1e9:.2f}",
            f"{dep.kv_capacity_tokens:,}" if fits else "-", str(dep.seqs_at(8192)) if fits else "-",
            ", ".join(aliases_of(preset.key)) if fits else "does not fit",
        ])
    title = (f"presets on {cfg.tp}×{cfg.gpu}, tp {cfg.tp}, dp_attention {cfg.dp_attention}, "
             f"{cfg.weight_dtype} weights, {cfg.kv_dtype} KV, kv_capacity_scale {cfg.kv_capacity_scale} (simulated)")
    header = ["preset", "attn", "layers", "KV B/token", "D", "KV B/token/GPU", "weights GB/GPU", "KV tokens",
              "seqs@8K", "aliases"]
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
        f"  idle prefill (TTFT) of a {context_tokens}-token prompt: "
        f"{prefill_time_s(dep, context_tokens) * 1e3:.1f} ms",
        "",
        f"decode step at context {context_tokens} (ms; two-phase roofline: max(C_lin, M_w) + max(C_att, M_kv)"
        f" + t_comm + overhead)",
    ]
    rows = []
    for batch in batches:
        b = decode_step(dep, batch, context_tokens)
        over = "†" if batch > min(seqs, cfg.max_num_seqs) else ""
        rows.append([f"{batch}{over}", f"{b.c_lin_s * 1e3:.2f}", f"{b.m_w_s * 1e3:.2f}", f"{b.c_att_s * 1e3:.2f}",
                     f"{b.m_kv_s * 1e3:.2f}", f"{b.t_comm_s * 1e3:.2f}", f"{b.overhead_s * 1e3:.2f}",
                     f"{b.total_s * 1e3:.2f}", f"{1 / b.total_s:.1f}", f"{batch / b.total_s:,.0f}"])
    header = ["B", "C_lin (GEMM)", "M_w (weights)", "C_att (attn FLOPs)", "M_kv (KV read)", "t_comm",
              "overhead", "step", "tok/s/user", "tok/s total"]
    lines.append(_table(header, rows))
    lines.append("† beyond KV capacity or max_num_seqs: the engine never forms this batch")
    return "\n".join(lines)
