"""Agent sessions as wholes: how long each lasted, how many steps it answered, its tokens in and out.

Per-step latency lives in the context recorder (a request is a step); what a step table cannot
say is what a *session* cost: a GQA session whose idle prefix was evicted takes longer end to end
than an MLA one that stayed resident. Each sending process files a session when it ends, keyed by
(model, why it ended: ``steps``, ``context`` or ``failed``); counters and a duration histogram
merge across workers like the recorder's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from attnload.measure.histogram import LogHistogram

END_REASONS = ("steps", "context", "failed")
"""Why a session ended: its step count, the model's context window (counted, not failed), a failed step."""


@dataclass
class SessionSeries:
    """Sessions of one (model, end reason)."""

    count: int = 0
    steps: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    duration: LogHistogram = field(default_factory=LogHistogram)

    def merge(self, other: SessionSeries) -> None:
        self.count += other.count
        self.steps += other.steps
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.duration.merge(other.duration)


class SessionRecorder:
    """Ended agent sessions per (model, end reason), with deltas for the master."""

    def __init__(self) -> None:
        self.series: dict[tuple[str, str], SessionSeries] = {}
        self._delta: dict[tuple[str, str], SessionSeries] = {}

    def reset(self) -> None:
        self.series.clear()
        self._delta.clear()

    def add(
        self, model_key: str, ended: str, steps: int, duration_s: float, prompt_tokens: int, completion_tokens: int
    ) -> None:
        one = SessionSeries(1, steps, prompt_tokens, completion_tokens)
        one.duration.record(duration_s)
        for store in (self.series, self._delta):
            store.setdefault((model_key, ended), SessionSeries()).merge(one)

    def take_delta(self) -> list[list[Any]]:
        delta, self._delta = self._delta, {}
        return [
            [model, ended, s.count, s.steps, s.prompt_tokens, s.completion_tokens, s.duration.to_wire()]
            for (model, ended), s in delta.items()
        ]

    def merge_delta(self, rows: list[list[Any]]) -> None:
        for model, ended, count, steps, prompt, completion, duration in rows:
            one = SessionSeries(int(count), int(steps), int(prompt), int(completion), LogHistogram.from_wire(duration))
            for store in (self.series, self._delta):
                store.setdefault((str(model), str(ended)), SessionSeries()).merge(one)

    def of(self, model_key: str) -> dict[str, SessionSeries]:
        """This model's sessions by end reason."""
        return {ended: s for (model, ended), s in self.series.items() if model == model_key}
