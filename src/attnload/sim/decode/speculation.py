"""Speculative decoding in the simulator: how many draft tokens a verify step accepts, and the counters.

With ``--spec-tokens K`` every decode step verifies K + 1 query tokens per sequence (the last
accepted token plus K drafts, as MTP, EAGLE or n-gram drafting make it): the cost model reads the
weights and the KV once and pays attention FLOPs and activations K + 1 times
(``costmodel.decode_loads``'s ``query_tokens``), so an attention whose decode is compute-bound
(MLA's absorbed form) pays for the extra query tokens and a bandwidth-bound one (GQA, GTA, GLA)
barely does. The step emits 1 + the accepted drafts: each draft is accepted with probability
``--spec-acceptance`` A, stopping at the first rejection (a seeded RNG, so a virtual-clock run
repeats exactly). Expected tokens per step: ``1 + A + A² + … + A^K`` (K = 3, A = 0.6: 2.176).

The counters are vLLM's (``vllm/v1/spec_decode/metrics.py``: drafts, draft tokens, accepted
tokens, accepted tokens per draft position), which the server exposes under vLLM's names and
SGLang's two gauges are derived from (docs/cost-model.md §11).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


def expected_tokens_per_step(spec_tokens: int, acceptance: float) -> float:
    """``1 + A + A² + … + A^K``: the bonus token plus the expected accepted drafts."""
    return 1.0 + sum(acceptance**i for i in range(1, spec_tokens + 1))


@dataclass
class SpecCounts:
    """vLLM's speculative counters since the engine started (cumulative)."""

    spec_tokens: int
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)
    """Drafts whose position i (0-based) was accepted; position K − 1 counts the drafts accepted in full."""

    def __post_init__(self) -> None:
        if not self.accepted_per_pos:
            self.accepted_per_pos = [0] * self.spec_tokens

    def observe(self, accepted: int) -> None:
        self.drafts += 1
        self.draft_tokens += self.spec_tokens
        self.accepted_tokens += accepted
        for pos in range(accepted):
            self.accepted_per_pos[pos] += 1

    @property
    def accept_length(self) -> float:
        """SGLang's ``spec_accept_length``: accepted drafts + the bonus token, per verify step."""
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts else 0.0

    @property
    def accept_rate(self) -> float:
        """SGLang's ``spec_accept_rate`` (vLLM's logged draft acceptance rate): accepted ÷ draft tokens."""
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else 0.0


class Speculator:
    """Draws each verify step's accepted drafts and counts them."""

    def __init__(self, spec_tokens: int, acceptance: float, seed: int) -> None:
        self.spec_tokens = spec_tokens
        self.acceptance = acceptance
        self._random = random.Random(seed).random
        self.counts = SpecCounts(spec_tokens)

    def accept(self) -> int:
        """One sequence's verify step: drafts accepted before the first rejection (0 … K)."""
        accepted, k, a, draw = 0, self.spec_tokens, self.acceptance, self._random
        while accepted < k and draw() < a:
            accepted += 1
        self.counts.observe(accepted)
        return accepted
