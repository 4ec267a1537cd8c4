"""Agent sessions: a tool-calling loop whose prompt grows by a tool result every step.

An agent resends its whole history every step (system prompt, tool definitions, every earlier
reply, tool call and tool result), so the server's prefix cache either still holds the session's
KV when the next step arrives (a short prefill) or evicted it while the tool ran (the whole
history re-prefilled). That is where an attention type's KV bytes per token decide the bill.

This module is the pure state machine, shaped like :class:`~attnload.workload.conversation.Conversation`
so the runner drives both the same way: step 1 sends the salted system prompt and the task; each
next step sends the previous messages + the assistant reply **exactly as streamed** + a tool call
made here (the load generator plays the tools, so any model, random weights included, can be
driven) + one ``role: tool`` result per call, of the drawn size. The session ends at its step
count or when the next step would not fit the model's context window. No clock and no I/O: the
caller waits the tool time between steps.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from attnload.config.model import AgentSpec, ToolsSpec, sample_count
from attnload.measure.tokens import MESSAGE_OVERHEAD_TOKENS, prompt_tokens, tools_tokens
from attnload.workload.tokenizer import EstimatorTokens, TextTokens

Message = dict[str, Any]
PromptCounter = Callable[[Sequence[Mapping[str, object]]], int]
EndReason = Literal["steps", "context", "failed"]
TASK_TOKENS = 48
"""The first user message (the task the agent is given), in tokens."""


def tool_definitions(spec: ToolsSpec, tokens: TextTokens | None = None) -> list[dict[str, Any]]:
    """``spec.count`` function definitions of about ``spec.tokens`` tokens each, the same for every session
    (an agent framework sends one fixed tool list), so they never carry a salt."""
    counter = tokens or EstimatorTokens()
    tools = []
    for index in range(spec.count):
        name = f"tool_{index}"
        skeleton = {
            "type": "function",
            "function": {
                "name": name,
                "description": "",
                "parameters": {
                    "type": "object",
                    "properties": {"query": {"type": "string", "description": "what to look up"}},
                    "required": ["query"],
                },
            },
        }
        room = spec.tokens - tools_tokens([skeleton])
        skeleton["function"]["description"] = counter.build_text(max(room, 1), seed=7_919 * (index + 1))  # type: ignore[index]
        tools.append(skeleton)
    return tools


@dataclass(frozen=True)
class AgentScript:
    """What one session will do, drawn up front so paired models get the same script.

    ``results[k]`` are the tool results that follow step ``k + 1``'s reply (one per parallel call).
    """

    system: str
    task: str
    tools: tuple[dict[str, Any], ...]
    results: tuple[tuple[str, ...], ...]
    session_id: str
    tool_choice: str | None = None
    fan_out: tuple[int, ...] = ()
    """Steps after which ``sub_agents.count`` child sessions run; their final answers are the tool results."""
    children: int = 0
    """Child sessions per fan-out step (``sub_agents.count``)."""

    @property
    def steps(self) -> int:
        return len(self.results) + 1


def agent_script(
    spec: AgentSpec,
    salt: str,
    rng: random.Random,
    tokens: TextTokens | None = None,
    tools: Sequence[dict[str, Any]] | None = None,
) -> AgentScript:
    """A session's script: the salted system prompt of ``system_tokens``, the task, and per step the
    ``parallel_calls`` tool results of ``tool_result_tokens`` each (content tokens, drawn per call)."""
    counter = tokens or EstimatorTokens()
    steps = max(1, sample_count(spec.steps, rng))
    system_room = spec.system_tokens - MESSAGE_OVERHEAD_TOKENS - counter.count(salt)
    system = salt + counter.build_text(max(system_room, 0), seed=rng.getrandbits(32))
    task = counter.build_text(TASK_TOKENS - MESSAGE_OVERHEAD_TOKENS, seed=rng.getrandbits(32))
    results = tuple(
        tuple(
            counter.build_text(max(1, sample_count(spec.tool_result_tokens, rng)), seed=rng.getrandbits(32))
            for _ in range(spec.parallel_calls)
        )
        for _ in range(steps - 1)
    )
    defined = list(tools) if tools is not None else tool_definitions(spec.tools, tokens)
    session_id = salt.strip().strip("[]") or f"{rng.getrandbits(64):016x}"
    sub = spec.sub_agents
    fan_out = tuple(k for k in range(1, steps) if k % sub.every == 0) if sub is not None else ()
    children = sub.count if sub is not None else 0
    return AgentScript(system, task, tuple(defined), results, session_id, spec.tool_choice, fan_out, children)


def child_spec(spec: AgentSpec) -> AgentSpec:
    """A sub-agent: ``sub_agents.steps`` steps of the parent's kind, fanning out no further."""
    assert spec.sub_agents is not None
    return spec.model_copy(update={"steps": spec.sub_agents.steps, "sub_agents": None})


class AgentConversation:
    """One agent session's history. Alternate :meth:`next_request` and :meth:`record_reply`.

    ``turn`` is the step number (1-based) of the request last taken, as a Conversation's turn.
    """

    def __init__(
        self,
        script: AgentScript,
        *,
        context_window_tokens: int | None = None,
        default_max_tokens: int = 0,
        count_prompt: PromptCounter = prompt_tokens,
    ) -> None:
        self.script = script
        self.context_window_tokens = context_window_tokens
        self.default_max_tokens = default_max_tokens
        self.count_prompt = count_prompt
        self.tools_tokens = tools_tokens(list(script.tools))
        self.turn = 0
        self.ended: EndReason | None = None
        self.children_pending = 0
        """Sub-agents the last step fanned out to, until :meth:`children_done` brings their answers."""
        self._messages: list[Message] = [
            {"role": "system", "content": script.system},
            {"role": "user", "content": script.task},
        ]
        self._awaiting_reply = False

    def context_tokens(self, messages: Sequence[Mapping[str, object]]) -> int:
        """The prompt a step sends: its messages and the ``tools`` array."""
        return self.count_prompt(messages) + self.tools_tokens

    def peek(self) -> tuple[list[Message], int | None, int] | None:
        """The next request (messages, max_tokens, context tokens) without taking it; None if it ends here."""
        if self._awaiting_reply or self.children_pending:
            raise RuntimeError("record_reply() (or fail(), or children_done()) must come first")
        if self.ended is not None:
            return None
        if self.turn >= self.script.steps:
            self.ended = "steps"
            return None
        tokens = self.context_tokens(self._messages)
        limit = self.context_window_tokens
        if limit is not None and self.turn > 0 and tokens + self.default_max_tokens > limit:
            self.ended = "context"  # step 1 always goes: a too-long first prompt is the server's to refuse
            return None
        return list(self._messages), None, tokens

    def next_request(self) -> tuple[list[Message], int | None, int] | None:
        """Take the next step's request; None when the session has ended (``ended`` says why)."""
        taken = self.peek()
        if taken is not None:
            self.turn += 1
            self._awaiting_reply = True
        return taken

    def record_reply(self, text: str) -> None:
        """Append the reply exactly as streamed, then (unless this was the last step) the client's tool
        call and each call's ``role: tool`` result."""
        if not self._awaiting_reply:
            raise RuntimeError("record_reply() without a request in flight")
        self._awaiting_reply = False
        self._messages.append({"role": "assistant", "content": text})
        if self.turn >= self.script.steps:
            return
        results = self.script.results[self.turn - 1]
        if self.turn in self.script.fan_out:
            self.children_pending = self.script.children
            self._messages.append(
                {"role": "assistant", "content": "", "tool_calls": self._calls(self.script.children, "sub_agent")}
            )
            return
        calls = self._calls(len(results))
        self._messages.append({"role": "assistant", "content": "", "tool_calls": calls})
        for call, result in zip(calls, results, strict=True):
            self._messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})

    def children_done(self, answers: Sequence[str]) -> None:
        """The sub-agents' final answers come back as the fan-out step's tool results, in call order."""
        calls = self._messages[-1]["tool_calls"]
        for call, answer in zip(calls, answers, strict=True):
            self._messages.append({"role": "tool", "tool_call_id": call["id"], "content": answer})
        self.children_pending = 0

    def _calls(self, count: int, name: str | None = None) -> list[dict[str, Any]]:
        return [
            {
                "id": f"call_{self.script.session_id}_{self.turn}_{index}",
                "type": "function",
                "function": {
                    "name": name or self._tool_name(index),
                    "arguments": json.dumps({"query": f"step {self.turn} call {index}"}),
                },
            }
            for index in range(count)
        ]

    def fail(self) -> None:
        """The step got no usable answer: the history is broken, so the session ends."""
        self._awaiting_reply = False
        self.children_pending = 0
        self.ended = "failed"

    def _tool_name(self, index: int) -> str:
        tools = self.script.tools
        if not tools:
            return f"tool_{index}"
        return str(tools[(self.turn + index) % len(tools)]["function"]["name"])
