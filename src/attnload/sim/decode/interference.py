"""What a long prompt arriving among decoding streams costs them: the mixed step (docs/cost-model.md §11).

With chunked prefill (vLLM's default) a step holds every running decode plus prefill chunks that fill
the rest of the token budget (``max_num_batched_tokens``, split over attention groups); the step's
time grows by the chunk's GEMM rows and its attention — expanded-form FLOPs and, for MLA/GLA, the
up-projection of its cached prefix — so every decoder's gap grows with the attention's prefill cost.
An engine that does not mix (SGLang's profile) runs prefill-only steps instead, and the decoders wait
for each one. The functions here are pure: ``--explain`` prints them and docs/cost-model.md §11
quotes them; the scheduler builds the same loads step by step.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnload.sim.costmodel import Deployment, GroupLoad, decode_loads


@dataclass(frozen=True)
class PrefillStall:
    """One prompt prefilled among ``batch`` decodes at ``context``, chunk by chunk."""

    prompt_tokens: int
    decode_step_s: float
    """The decode-only step (what each decoder's gap is without the prompt)."""
    steps_s: tuple[float, ...]
    """Each step that carries a chunk of the prompt (mixed, or prefill-only when the engine does not mix)."""
    chunk_tokens: int
    mixed: bool
    """The chunks share steps with the decodes (False: prefill-only steps hold the decoders)."""

    @property
    def stall_s(self) -> float:
        """Extra time the decoders wait while the prompt prefills: Σ (mixed − decode-only), or the
        prefill-only steps themselves."""
        return sum(self.steps_s) - (self.decode_step_s * len(self.steps_s) if self.mixed else 0.0)

    @property
    def ms_per_1k_prefill_tokens(self) -> float:
        """Decoder stall per 1000 prompt tokens, ms: what ``prefill_interference`` measures on the wire."""
        return self.stall_s * 1e3 / (self.prompt_tokens / 1000) if self.prompt_tokens else 0.0


def prefill_stall(dep: Deployment, batch: int, context_tokens: int, prompt_tokens: int) -> PrefillStall:
    """The §11 mixed steps: ``prompt_tokens`` prefilled on attention group 0 in chunks of what the group's
    token budget leaves beside its decodes (each decode takes ``1 + spec_tokens``), the other groups
    decoding alongside; without ``mix_prefill_decode`` the chunks run alone (the budget whole)."""
    cfg = dep.cfg
    query = 1 + cfg.spec_tokens
    decodes = decode_loads(dep, batch, context_tokens, query)
    decode_s = dep.step_breakdown(decodes).total_s if batch else 0.0
    mixing = cfg.mix_prefill_decode
    own = decodes[0]
    chunk = dep.batched_tokens_per_group - (own.tokens if mixing else 0)
    if chunk < 1:
        raise ValueError(f"no room for a prefill chunk beside {own.tokens} decode tokens in one group")
    steps = []
    done = 0
    while done < prompt_tokens:
        c = min(chunk, prompt_tokens - done)
        pairs = c * done + c * (c + 1) / 2
        if mixing:
            first = GroupLoad(
                own.tokens + c,
                own.decode_context_tokens,
                pairs,
                own.kv_read_tokens + done + c,
                float(done),
            )
            loads = [first, *decodes[1:]]
        else:
            loads = [GroupLoad(c, 0.0, pairs, float(done + c), float(done))]
        steps.append(dep.step_breakdown(loads).total_s)
        done += c
    return PrefillStall(prompt_tokens, decode_s, tuple(steps), chunk, mixing)
