"""A stage's speculative-decoding acceptance from the server's counters (``stages[].server.spec_decode``).

vLLM counts drafts, draft tokens, accepted tokens and accepted tokens per draft position; SGLang
exports two gauges, the mean acceptance length (accepted + the bonus token) and accepted ÷ draft
tokens. Both are turned into the same four numbers. The acceptance rate reported is the per-token
one, the probability a draft token is accepted given the ones before it were, because it is what
a drafter's quality is (and what ``attnload sim --spec-acceptance`` sets): the engines' own ratio
falls with the draft length K for the same drafter (K = 3 at 0.6 per token gives 0.39). From
vLLM's counters it is accepted ÷ (accepted + rejections), a rejection being each draft not accepted
in full (drafts − the last position's count, at most draft tokens − accepted: an n-gram drafter proposes
fewer than K when it finds no match); from SGLang's gauges it solves
``A + A² + … + A^K = length − 1`` with K = (length − 1) ÷ rate.
"""

from __future__ import annotations

from collections.abc import Mapping

from attnload.scrape.summary import SpecDecode


def from_counters(deltas: Mapping[str, float]) -> SpecDecode | None:
    """The stage's acceptance from vLLM's counter deltas; None when nothing was drafted."""
    drafts, draft_tokens = deltas.get("spec_drafts"), deltas.get("spec_draft_tokens")
    accepted = deltas.get("spec_accepted_tokens")
    if not drafts or not draft_tokens or accepted is None:
        return None
    mean = accepted / drafts
    full = deltas.get("spec_accepted_all")
    per_token = None
    if full is not None:  # a draft shorter than K (n-gram) ends unrejected: never more rejections than misses
        tried = accepted + max(0.0, min(drafts - full, draft_tokens - accepted))
        per_token = accepted / tried if tried else None
    return SpecDecode(
        acceptance_rate=per_token if per_token is not None else accepted / draft_tokens,
        mean_accepted_tokens=mean,
        draft_tokens=int(round(draft_tokens)),
        draft_acceptance_rate=accepted / draft_tokens,
        tokens_per_step=1.0 + mean,
    )


def from_gauges(accept_length: float | None, accept_rate: float | None) -> SpecDecode | None:
    """The stage's acceptance from SGLang's gauges (their means over the scrapes); None without them."""
    if accept_length is None or accept_length <= 0:
        return None
    mean = max(0.0, accept_length - 1.0)
    per_token = None
    if accept_rate is not None:
        per_token = 0.0 if accept_rate <= 0 else per_token_rate(mean, max(1, round(mean / accept_rate)))
    return SpecDecode(
        acceptance_rate=per_token,
        mean_accepted_tokens=mean,
        draft_acceptance_rate=accept_rate,
        tokens_per_step=1.0 + mean,
    )


def per_token_rate(mean_accepted: float, draft_length: int) -> float:
    """The A with ``A + A² + … + A^K = mean_accepted`` (bisection; 1 when even that is short)."""
    if mean_accepted >= draft_length:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(50):
        mid = (low + high) / 2
        if sum(mid**i for i in range(1, draft_length + 1)) < mean_accepted:
            low = mid
        else:
            high = mid
    return (low + high) / 2
