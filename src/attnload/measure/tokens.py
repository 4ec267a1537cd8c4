"""The local token estimator shared by the simulator and the load generator.

No tokenizer, no hub download: docs/cost-model.md §4.5 defines prompt tokens as
``Σ_messages (ceil(utf8_bytes(content) / 4) + 4)``; both sides use this one function
so prompt-token targets, the simulator's ``usage`` and the client's estimates agree.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

MESSAGE_OVERHEAD_TOKENS = 4
BYTES_PER_TOKEN = 4


def text_tokens(text: str) -> int:
    """Tokens in one message's content: ``ceil(utf8 bytes / 4)``."""
    return -(-len(text.encode("utf-8")) // BYTES_PER_TOKEN)


def prompt_tokens(messages: Iterable[Mapping[str, object]]) -> int:
    """Prompt tokens of a chat request, as the simulator reports them in ``usage``."""
    total = 0
    for message in messages:
        content = message.get("content", "")
        if content is None:  # an assistant message that only calls tools
            content = ""
        total += text_tokens(message_text(content)) + MESSAGE_OVERHEAD_TOKENS
        calls = message.get("tool_calls")
        if isinstance(calls, list):  # an agent's tool calls: each call's name and arguments
            total += sum(_call_tokens(call) for call in calls if isinstance(call, Mapping))
    return total


def _call_tokens(call: Mapping[str, object]) -> int:
    function = call.get("function")
    if not isinstance(function, Mapping):
        return 0
    return text_tokens(str(function.get("name", "")) + str(function.get("arguments", "")))


def tools_tokens(tools: object) -> int:
    """Prompt tokens of a request's ``tools`` array: its compact JSON by bytes/4 (0 without tools).

    Agents send the tool definitions on every request; the simulator adds this to ``usage`` and the
    client to a step's context, by the same formula.
    """
    if not isinstance(tools, list) or not tools:
        return 0
    return text_tokens(json.dumps(tools, separators=(",", ":"), ensure_ascii=False))


def message_text(content: object) -> str:
    """A message's content as text (OpenAI or Anthropic content parts: their text parts joined)."""
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return str(content)


def chunk_tokens(text: str) -> int:
    """Estimated tokens in one streamed content chunk (≥ 1): words, else bytes/4.

    Used only to split a multi-token chunk's gap; totals are re-scaled to the server's
    ``usage.completion_tokens`` when it is reported (see ``measure.recorder.split_gaps``).
    """
    words = len(text.split())
    return max(1, words if words else text_tokens(text))
