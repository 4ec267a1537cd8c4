"""``attnload sim --explain``'s views of what else a decode step pays (docs/cost-model.md §11).

Speculative decoding (``--spec-tokens K``): the step at query length K + 1 beside query length 1,
its attention phase alone (where MLA's compute-bound absorbed form pays and a bandwidth-bound
attention does not), the expected tokens per step and the time per token that buys. Prefill
interference: a prompt of the explained context prefilled among the decodes, chunk by chunk
(``sim/interference.py``), and the stall it adds per 1000 prompt tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from attnload.sim.costmodel import Deployment, decode_step
from attnload.sim.decode.interference import prefill_stall
from attnload.sim.decode.speculation import expected_tokens_per_step

Table = Callable[[Sequence[str], Sequence[Sequence[str]]], str]


def speculation_view(dep: Deployment, batches: Sequence[int], context_tokens: int, table: Table) -> list[str]:
    """Step and attention-phase time at query length K + 1 against 1, and the time per token."""
    k, a = dep.cfg.spec_tokens, dep.cfg.spec_acceptance
    if k < 1:
        return []
    q = k + 1
    per_step = expected_tokens_per_step(k, a)
    rows = []
    for batch in batches:
        one, many = decode_step(dep, batch, context_tokens), decode_step(dep, batch, context_tokens, q)
        att_one, att_many = max(one.c_att_s, one.m_kv_s), max(many.c_att_s, many.m_kv_s)
        per_token = many.total_s / per_step
        rows.append(
            [
                str(batch),
                f"{one.total_s * 1e3:.2f}",
                f"{many.total_s * 1e3:.2f}",
                f"{many.total_s / one.total_s:.3f}",
                f"{att_one * 1e3:.2f}",
                f"{att_many * 1e3:.2f}",
                f"{att_many / att_one:.2f}" if att_one > 0 else "-",
                f"{per_step:.2f}",
                f"{per_token * 1e3:.2f}",
                f"{one.total_s / per_token:.2f}×",
            ]
        )
    header = [
        "B",
        "step q=1",
        f"step q={q}",
        f"q={q}/q=1",
        "attn q=1",
        f"attn q={q}",
        "attn ratio",
        "tokens/step",
        "ms/token",
        "speedup",
    ]
    return [
        "",
        f"speculative decoding: K={k} draft tokens at acceptance {a:g}, verify step at query length {q} "
        f"(ms at context {context_tokens}; weights and KV read once, attention FLOPs and activations ×{q}; "
        f"tokens/step = 1 + A + … + A^K):",
        table(header, rows),
    ]


def interference_view(dep: Deployment, batches: Sequence[int], context_tokens: int, table: Table) -> list[str]:
    """A ``context_tokens`` prompt prefilled among B decodes: its steps, the stall and ms per 1K prompt tokens."""
    cfg = dep.cfg
    rows = []
    for batch in batches:
        try:
            stall = prefill_stall(dep, batch, context_tokens, context_tokens)
        except ValueError:
            continue  # the decodes alone fill the token budget
        rows.append(
            [
                str(batch),
                f"{stall.decode_step_s * 1e3:.2f}",
                str(stall.chunk_tokens),
                str(len(stall.steps_s)),
                f"{max(stall.steps_s) * 1e3:.2f}",
                f"{stall.stall_s * 1e3:.1f}",
                f"{stall.ms_per_1k_prefill_tokens:.2f}",
            ]
        )
    if not rows:
        return []
    kind = "mixed steps (chunks beside the decodes)" if cfg.mix_prefill_decode else "prefill-only steps"
    header = ["B", "decode step", "chunk", "steps", "longest step", "stall", "ms per 1K prefill"]
    return [
        "",
        f"prefill interference ({cfg.engine}: {kind}, budget {cfg.max_num_batched_tokens} tokens over "
        f"{dep.dp} group(s)): a {context_tokens}-token prompt arriving among B decodes (ms)",
        table(header, rows),
    ]
