"""Reasoning in the results: the reasoning share of output, and the server's own count beside it.

The client counts reasoning tokens from the streamed reasoning deltas; a server's
``usage.completion_tokens_details.reasoning_tokens`` is kept beside that count, never in its
place: vLLM 0.32 reports 0 when the chat template opens ``<think>`` in the prompt (it counts only
tokens between a start and an end marker in the output) while it streamed every one of them as
reasoning. Where the two disagree the model carries a note naming both numbers.
"""

from __future__ import annotations

from typing import Any

REL_TOLERANCE = 0.02
"""The counts agree when they differ by at most 2 % of the larger (and at most ``ABS_TOLERANCE``
tokens when smaller): a delta split differently from the server's tokenizer is not a disagreement."""
ABS_TOLERANCE = 1


def share(reasoning_tokens: int, completion_tokens: int) -> float | None:
    """Reasoning tokens as a share of all output tokens; None when nothing was output."""
    if completion_tokens <= 0:
        return None
    return min(reasoning_tokens / completion_tokens, 1.0)


def reasoning_fields(counts: dict[str, int]) -> dict[str, Any]:
    """``reasoning_tokens``, ``reasoning_share`` and ``server_reasoning_tokens`` of one scope's counters."""
    reasoning = counts.get("reasoning_tokens", 0)
    return {
        "reasoning_tokens": reasoning,
        "reasoning_share": share(reasoning, counts.get("completion_tokens", 0)),
        "server_reasoning_tokens": counts.get("server_reasoning_tokens", 0)
        if counts.get("reasoning_reported")
        else None,
    }


def disagree(client: int, server: int) -> bool:
    """Whether the server's reasoning count and the streamed one differ beyond tokenizer noise."""
    gap = abs(client - server)
    return gap > max(ABS_TOLERANCE, REL_TOLERANCE * max(client, server))


def reasoning_note(model_key: str, counts: dict[str, int]) -> str | None:
    """One sentence naming both counts when the server's reasoning count disagrees with the streamed one
    (over the requests the server reported on); None when they agree or the server said nothing."""
    reported = counts.get("reasoning_reported", 0)
    if not reported:
        return None
    client = counts.get("reasoning_tokens_reported", 0)
    server = counts.get("server_reasoning_tokens", 0)
    if not disagree(client, server):
        return None
    return (
        f"{model_key}: the server reported {server:,} reasoning tokens (usage reasoning_tokens) where "
        f"{client:,} arrived as reasoning deltas over the same {reported:,} requests; results keep both "
        "(reasoning_tokens: streamed, server_reasoning_tokens: the server's)"
    )
