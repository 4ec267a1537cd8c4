"""The KV capacity probe (``--shape capacity:8k``): where a model stops admitting sequences at one context.

Closed-loop stages at a fixed prompt length and pinned output, users per model doubling from 1 and then
bisecting, until each model shows its knee: its server's view says the cache is full, requests wait or
sequences are preempted, or (no server view) TTFT p50 more than doubles over the first stage. The answer,
``kv_capacity``, is the most sequences the server ran at once at the knee (its own ``requests_running``;
without a server view, the most users per model that did not reach the knee), times context + output.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from attnload.results.microscope.schema import KvCapacity
from attnload.scrape.summary import ServerSummary

QUEUED_MEAN = 0.5
"""Requests waiting, on average over the stage's scrapes, from which the server queues: a closed loop's next
request may be caught waiting for an instant before the step that admits it (a mean near 0)."""
FULL_CACHE = 0.98
"""A KV cache usage (0–1) at or over this is full."""
TTFT_KNEE_RATIO = 2.0
"""Without a server view: TTFT p50 over this many times the first stage's is the knee."""
BISECT_RATIO = 1.25
"""Bisection stops when a model's bracket (first knee ÷ last clear) is this narrow."""


def knee(server: ServerSummary | None, ttft_p50_s: float | None, first_ttft_p50_s: float | None) -> str | None:
    """Why a stage is past the model's capacity (None: it is not, or nothing says so)."""
    if server is not None and server.samples:
        if (server.requests_waiting.mean or 0) >= QUEUED_MEAN:
            return "requests waiting"
        if (server.preemptions or 0) > 0:
            return "preemptions"
        if (server.kv_cache_usage.max or 0) >= FULL_CACHE:
            return "KV cache full"
        if server.requests_running.max is not None:
            return None
    if ttft_p50_s is not None and first_ttft_p50_s and ttft_p50_s > TTFT_KNEE_RATIO * first_ttft_p50_s:
        return f"TTFT p50 over {TTFT_KNEE_RATIO:g}× the first stage's"
    return None


@dataclass
class Bracket:
    """One model's search: the most users per model seen clear of the knee, the fewest seen past it."""

    clear: int = 0
    past: int | None = None
    reason: str | None = None

    def note(self, users: int, reason: str | None) -> None:
        if reason is None:
            self.clear = max(self.clear, users)
        elif self.past is None or users < self.past:
            self.past, self.reason = users, reason

    @property
    def open(self) -> bool:
        return self.past is None or (self.past > self.clear + 1 and self.past > BISECT_RATIO * max(self.clear, 1))


def next_users(brackets: Mapping[str, Bracket], last: int, cap: int, bisect_left: int) -> int | None:
    """Users per model for the next stage: double while some model has no knee (up to ``cap``), then bisect the
    widest open bracket (``bisect_left`` stages at most); None when done."""
    if any(b.past is None for b in brackets.values()):
        return min(last * 2, cap) if last < cap else None
    open_ = [b for b in brackets.values() if b.open and b.past is not None]
    if not open_ or bisect_left <= 0:
        return None
    widest = max(open_, key=lambda b: (b.past or 0) / max(b.clear, 1))
    return max(widest.clear + 1, round(((max(widest.clear, 1)) * (widest.past or 1)) ** 0.5))


def kv_capacity(
    context: int,
    output: int,
    stages: list[tuple[int, ServerSummary | None, str | None]],
    gpus: int | None,
    predicted_tokens: int | None,
) -> KvCapacity:
    """From the probe's stages ((users per model, server view, knee reason)): the sequences served at once."""
    past = [(u, s, r) for u, s, r in stages if r is not None]
    clear = [u for u, _s, r in stages if r is None]
    running = [s.requests_running.max for _u, s, _r in past if s is not None and s.requests_running.max is not None]
    knee_reason = min(past, key=lambda p: p[0])[2] if past else None
    if running:
        max_running = round(max(running))
        note = "the server's own requests_running at the knee"
    elif clear:
        max_running = max(clear)
        note = (
            "the most users per model clear of the knee (no server view)" if past else "no knee reached: a lower bound"
        )
    else:
        return KvCapacity(context=context, note="every stage was past the knee: start lower (fewer users)")
    if not past:
        note = "no knee reached within the probe's users: a lower bound"
    kv_tokens = max_running * (context + output)
    return KvCapacity(
        context=context,
        max_running=max_running,
        kv_tokens=kv_tokens,
        per_gpu=round(kv_tokens / gpus, 1) if gpus else None,
        predicted_tokens=predicted_tokens,
        ratio=round(kv_tokens / predicted_tokens, 3) if predicted_tokens else None,
        knee=knee_reason,
        note=note,
    )
