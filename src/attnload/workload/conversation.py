"""Multi-turn conversations: one user's chat, whose prompt grows by exactly what the server said.

Chat resends the whole history every turn, so the server's prefix cache holds (or evicts)
the history's KV: that is where an attention type's KV bytes per token decide capacity
and TTFT. This module is the pure state machine behind it: turn 1 is the salted first
user message; each next request is the previous request's messages + the assistant
message **exactly as streamed back** (the caller feeds it in) + the next user message,
until the conversation's turns are used or the next request would not fit the model's
context window; then the user starts a new conversation with a new salt. No clock and
no I/O: callers sleep ``next_delay_s()`` (the think time) and send.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from attnload.config.model import ConversationSpec, Distribution, sample_count
from attnload.measure.tokens import MESSAGE_OVERHEAD_TOKENS, prompt_tokens
from attnload.workload.dataset import DatasetRecord, resolve_output_tokens, user_turns
from attnload.workload.tokenizer import EstimatorTokens, TextTokens

Message = dict[str, str]
PromptCounter = Callable[[Sequence[Mapping[str, object]]], int]
EndReason = Literal["turns", "context", "failed"]


def new_salt() -> str:
    """A random salt in the prompt builder's format: random per run, so no run meets another's cache."""
    return f"[{uuid.uuid4().hex[:16]}] "


@dataclass(frozen=True)
class ConversationScript:
    """What one conversation's user will say: the messages (salt applied) and each turn's max_tokens."""

    user_messages: tuple[str, ...]
    max_tokens: tuple[int | None, ...] = ()
    system: str | None = None

    def max_tokens_for(self, turn: int) -> int | None:
        """``max_tokens`` of 0-based ``turn``; None: the caller's default."""
        return self.max_tokens[turn] if turn < len(self.max_tokens) else None


def synthetic_script(
    spec: ConversationSpec, salt: str, rng: random.Random, tokens: TextTokens | None = None
) -> ConversationScript:
    """``turns`` user messages of ``user_tokens`` tokens each (chat overhead and, first, the salt included)."""
    if spec.user_tokens is None:
        raise ValueError("a synthetic conversation needs conversation.user_tokens")
    counter = tokens or EstimatorTokens()
    messages: list[str] = []
    for turn in range(max(1, sample_count(spec.turns, rng))):
        target = sample_count(spec.user_tokens, rng) - MESSAGE_OVERHEAD_TOKENS
        head = salt if turn == 0 else ""
        body = counter.build_text(max(0, target - counter.count(head)), seed=rng.getrandbits(32))
        messages.append(head + body)
    return ConversationScript(tuple(messages))


def dataset_script(
    record: DatasetRecord,
    salt: str,
    rng: random.Random,
    *,
    turns: Literal["first", "all"] = "first",
    output_tokens: Literal["dataset"] | int | Distribution = "dataset",
) -> ConversationScript:
    """A record's user turns as a conversation; the salt leads its first message (the system one if any)."""
    said = list(user_turns(record, turns))
    system = record.system
    if system is not None:
        system = salt + system
    else:
        said[0] = salt + said[0]
    limits = tuple(resolve_output_tokens(output_tokens, record, turn, rng) for turn in range(len(said)))
    return ConversationScript(tuple(said), limits, system)


class Conversation:
    """One conversation's history. Alternate :meth:`next_request` and :meth:`record_reply`."""

    def __init__(
        self,
        script: ConversationScript,
        *,
        context_window_tokens: int | None = None,
        default_max_tokens: int = 0,
        count_prompt: PromptCounter = prompt_tokens,
    ) -> None:
        self.script = script
        self.context_window_tokens = context_window_tokens
        self.default_max_tokens = default_max_tokens
        self.count_prompt = count_prompt
        self.turn = 0
        self.ended: EndReason | None = None
        self._messages: list[Message] = [{"role": "system", "content": script.system}] if script.system else []
        self._awaiting_reply = False

    def peek(self) -> tuple[list[Message], int | None, int] | None:
        """The next request (messages, max_tokens, prompt tokens) without taking it; None if it ends here."""
        if self._awaiting_reply:
            raise RuntimeError("record_reply() (or fail()) must follow each next_request()")
        if self.ended is not None:
            return None
        if self.turn >= len(self.script.user_messages):
            self.ended = "turns"
            return None
        messages = [*self._messages, {"role": "user", "content": self.script.user_messages[self.turn]}]
        max_tokens = self.script.max_tokens_for(self.turn)
        tokens = self.count_prompt(messages)
        limit = self.context_window_tokens
        wanted = max_tokens if max_tokens is not None else self.default_max_tokens
        if limit is not None and self.turn > 0 and tokens + wanted > limit:
            self.ended = "context"  # turn 1 always goes: a too-long first prompt is the server's to refuse
            return None
        return messages, max_tokens, tokens

    def next_request(self) -> tuple[list[Message], int | None, int] | None:
        """Take the next request; None when the conversation has ended (``ended`` says why)."""
        taken = self.peek()
        if taken is not None:
            self._messages = taken[0]
            self.turn += 1
            self._awaiting_reply = True
            return list(taken[0]), taken[1], taken[2]
        return None

    def record_reply(self, text: str) -> None:
        """Append the assistant message exactly as streamed back (no strip, no re-tokenizing)."""
        if not self._awaiting_reply:
            raise RuntimeError("record_reply() without a request in flight")
        self._messages = [*self._messages, {"role": "assistant", "content": text}]
        self._awaiting_reply = False

    def fail(self) -> None:
        """The request got no usable answer: the history is broken, so the conversation ends."""
        self._awaiting_reply = False
        self.ended = "failed"
