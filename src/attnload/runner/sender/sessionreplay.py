"""``--shape replay:PATH`` with an agent session trace: each session's steps in order, each after its
predecessor's answer and the trace's wait.

Why not the request replay's fixed schedule: a step's prompt holds the previous step's answer, so it
cannot be due at a fixed offset. A session starts at its own trace offset (worker *w* of *n* plays
sessions *w*, *w + n*, …, each to every model, with its own history per model); every later step is due
its tool time (+ delay) after the previous answer, and counts its latency from then (lateness shows).
The prompt is the agent's: step 1 is the run salt, the session's shared ``hash_ids`` blocks and unique
filler; each later step adds the reply as streamed, a tool call and a ``role: tool`` result sized so
the prompt has the trace's input tokens. A failed step ends its session (its history is broken).
"""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import gevent

from attnload.measure.recorder import RequestRecord
from attnload.measure.tokens import MESSAGE_OVERHEAD_TOKENS, prompt_tokens
from attnload.runner.sender.openloop import OpenStage
from attnload.workload.prompts import PlannedRequest
from attnload.workload.sessiontrace import SessionStep, TraceSession, load_sessions
from attnload.workload.shapes import REPLAY_LEAD_S, ReplaySpec
from attnload.workload.tokenizer import EstimatorTokens, TextTokens
from attnload.workload.trace import TracePrompts, TraceRequest

REPLAY_PROFILE = "replay"
SendStep = Callable[[str, PlannedRequest, float, str], RequestRecord]
"""``send(stream, plan, intended, session id)``: one step to one model, its record back."""


class SessionReplay:
    """This worker's sessions of a session trace, for the open loop's ``planned`` and ``arrival`` hooks."""

    def __init__(self, spec: ReplaySpec, keys: list[str], salt: Callable[[], str], tokens: TextTokens | None) -> None:
        self.sessions = load_sessions(spec.path, spec.speed)
        self.keys = keys
        self.salt = salt
        self.tokens = tokens or EstimatorTokens()
        self._due: dict[tuple[str, float], tuple[int, TraceSession]] = {}
        self._prompts: TracePrompts | None = None

    def schedule(self, stage: OpenStage) -> Iterator[tuple[float, str, PlannedRequest | None]]:
        """Each of this worker's sessions at its start, once per model (no plan: the arrival plays it)."""
        self._prompts = TracePrompts(self.salt(), self.tokens if not isinstance(self.tokens, EstimatorTokens) else None)
        count = max(stage.share_count, 1)
        for number, session in enumerate(self.sessions):
            if number % count != stage.share_index % count:
                continue
            due = stage.started_perf + REPLAY_LEAD_S + session.start_s
            for stream in self.keys:
                self._due[(stream, due)] = (number, session)
                yield due, stream, None

    def play(self, stream: str, intended: float, send: SendStep) -> None:
        """One session to one model: its steps in order, each ``wait_s`` after the previous answer."""
        number, session = self._due.pop((stream, intended))
        prompts = self._prompts
        assert prompts is not None
        first = session.steps[0]
        request = TraceRequest(0.0, first.input_tokens, first.output_tokens, first.hash_ids, first.line)
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": prompts.content(request, unique_seed=number * 7_919 + 1)}
        ]
        for index, step in enumerate(session.steps):
            if index:
                intended = time.perf_counter() + step.wait_s
                if step.wait_s > 0:
                    gevent.sleep(step.wait_s)
            plan = PlannedRequest(
                profile=REPLAY_PROFILE,
                messages=list(messages),
                max_tokens=step.output_tokens,
                ignore_eos=True,
                step=step.step,
            )
            record = send(stream, plan, intended, session.session_id)
            if record.outcome != "ok" or record.reply_text is None or index + 1 == len(session.steps):
                return
            messages = self._extended(messages, record.reply_text, session, index)

    def _extended(
        self, messages: list[dict[str, Any]], reply: str, session: TraceSession, index: int
    ) -> list[dict[str, Any]]:
        """The messages + the reply as streamed + a tool call + a tool result filling the next step's input."""
        nxt: SessionStep = session.steps[index + 1]
        call_id = f"call_{session.session_id}_{index + 1}"
        call = {
            "id": call_id,
            "type": "function",
            "function": {"name": "tool", "arguments": json.dumps({"step": index + 1})},
        }
        grown = [
            *messages,
            {"role": "assistant", "content": reply},
            {"role": "assistant", "content": "", "tool_calls": [call]},
        ]
        room = nxt.input_tokens - prompt_tokens(grown) - MESSAGE_OVERHEAD_TOKENS
        seed = zlib.crc32(f"attnload.session:{session.session_id}:{index}".encode())
        grown.append({"role": "tool", "tool_call_id": call_id, "content": self.tokens.build_text(max(room, 1), seed)})
        return grown
