"""Latency by conversation turn and by prompt length, and open-loop send times: mergeable like the recorder.

Why a second recorder: the main one is keyed by (model, profile, stage), but what separates
GQA from MLA under chat is how TTFT grows with the context the server must hold, i.e. by
turn index and by prompt length. Each key keeps a :class:`Series` (the same histograms and
counters, so worker deltas merge exactly and no raw samples travel). Prompt lengths fall in
power-of-two buckets. Open-loop sends keep (count, first, last) wall times per (model,
stage), which merge by sum/min/max, so a replay's achieved arrival rate is measured over the
whole fleet with the same formula as the trace's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attnload.measure.recorder import Recorder, RequestRecord, Series
from attnload.measure.sessions import SessionRecorder

TURN = "turn"
STEP = "step"
"""Agent sessions: series per step index, as conversations have per turn."""
PROMPT = "prompt"
SMALLEST_BUCKET_TOKENS = 128
"""Prompts up to this many tokens share the first bucket; each later bucket doubles."""


def prompt_bucket(tokens: int) -> tuple[int, int]:
    """``(low, high]`` token bounds of the power-of-two bucket holding a prompt of ``tokens``."""
    high = SMALLEST_BUCKET_TOKENS
    while tokens > high:
        high *= 2
    return (0 if high == SMALLEST_BUCKET_TOKENS else high // 2), high


@dataclass
class Sends:
    """Open-loop send times of one (model, stage): count and first/last wall time."""

    count: int = 0
    first: float = float("inf")
    last: float = float("-inf")

    def add(self, count: int, first: float, last: float) -> None:
        self.count += count
        self.first = min(self.first, first)
        self.last = max(self.last, last)

    @property
    def rate_per_s(self) -> float:
        """``(n - 1) / (last - first)``: the formula the trace's own arrival rate uses."""
        span = self.last - self.first
        return (self.count - 1) / span if self.count >= 2 and span > 0 else 0.0


class ContextRecorder:
    """Series per (model, ``turn``, turn index) and (model, ``prompt``, bucket high), plus send times."""

    def __init__(self) -> None:
        self.series = Recorder()
        self.sends: dict[tuple[str, int], Sends] = {}
        self._sends_delta: dict[tuple[str, int], Sends] = {}
        self.sessions = SessionRecorder()
        """Ended agent sessions (duration, steps, tokens) per model and end reason."""

    def reset(self) -> None:
        self.series.reset()
        self.sessions.reset()
        self.sends.clear()
        self._sends_delta.clear()

    def add(self, record: RequestRecord) -> None:
        if record.outcome != "cancelled":
            if record.turn is not None:
                self.series.add(_rekeyed(record, TURN, record.turn))
            if record.step is not None:
                self.series.add(_rekeyed(record, STEP, record.step))
            if record.outcome == "ok":
                self.series.add(_rekeyed(record, PROMPT, prompt_bucket(record.prompt_tokens)[1]))
        if record.sent_at is not None:
            for store in (self.sends, self._sends_delta):
                store.setdefault((record.model_key, record.stage), Sends()).add(1, record.sent_at, record.sent_at)

    def take_delta(self) -> dict[str, Any]:
        sends, self._sends_delta = self._sends_delta, {}
        delta: dict[str, Any] = {
            "series": self.series.take_delta(),
            "sends": [[model, stage, s.count, s.first, s.last] for (model, stage), s in sends.items()],
        }
        sessions = self.sessions.take_delta()
        if sessions:
            delta["agent_sessions"] = sessions
        return delta

    def merge_delta(self, delta: dict[str, Any]) -> None:
        self.series.merge_delta(delta.get("series") or {})
        self.sessions.merge_delta(delta.get("agent_sessions") or [])
        for model, stage, count, first, last in delta.get("sends") or ():
            for store in (self.sends, self._sends_delta):
                store.setdefault((model, int(stage)), Sends()).add(int(count), float(first), float(last))

    def by(self, model_key: str, kind: str) -> dict[int, Series]:
        """This model's series of one kind, by turn or step index or bucket high bound, ascending."""
        found = {
            stage: series
            for (model, profile, stage), series in self.series.series.items()
            if model == model_key and profile == kind
        }
        return dict(sorted(found.items()))

    def sent(self, model_key: str, stage: int) -> Sends | None:
        return self.sends.get((model_key, stage))


def _rekeyed(record: RequestRecord, kind: str, index: int) -> RequestRecord:
    """The record filed under (model, kind, index) in the inner recorder. Token sums count successful
    requests only, so the table's means (over successful requests) are not diluted by failures."""
    ok = record.outcome == "ok"
    return RequestRecord(
        model_key=record.model_key,
        profile=kind,
        stage=index,
        outcome=record.outcome,
        error=record.error,
        ttft_s=record.ttft_s,
        itl_samples=record.itl_samples,
        e2e_s=record.e2e_s,
        prompt_tokens=record.prompt_tokens if ok else 0,
        completion_tokens=record.completion_tokens if ok else 0,
        cached_prompt_tokens=record.cached_prompt_tokens if ok else None,
        tokens_estimated=record.tokens_estimated,
    )
