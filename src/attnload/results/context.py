"""Turn table, TTFT by prompt length and replay arrival rates, from the :class:`ContextRecorder`."""

from __future__ import annotations

from typing import Any

from attnload.measure.context import PROMPT, STEP, TURN, ContextRecorder, prompt_bucket
from attnload.measure.histogram import LogHistogram
from attnload.measure.recorder import Series
from attnload.results.model import (
    AgentSessionsSummary,
    PromptLengthBucket,
    StageSummary,
    StepSummary,
    Summary,
    TurnSummary,
)


def _summary(series: Series, name: str) -> Summary:
    return Summary.model_validate(series.hists[name].summary())


def _mean(total: int, n: int) -> float | None:
    return total / n if n else None


def context_fields(context: ContextRecorder | None, model_key: str) -> dict[str, Any]:
    """``turns`` and ``ttft_by_prompt_tokens`` of one model (empty lists when nothing was recorded)."""
    if context is None:
        return {}
    turns = []
    for turn, series in context.by(model_key, TURN).items():
        counts = series.counts
        ok = counts.get("ok", 0)
        turns.append(
            TurnSummary(
                turn=turn,
                requests=ok + counts.get("failed", 0),
                failed=counts.get("failed", 0),
                prompt_tokens_mean=_mean(counts.get("prompt_tokens", 0), ok),
                cached_tokens_mean=_mean(counts.get("cached_prompt_tokens", 0), counts.get("cached_reported", 0)),
                ttft_s=_summary(series, "ttft"),
                itl_s=_summary(series, "itl"),
            )
        )
    buckets = []
    for high, series in context.by(model_key, PROMPT).items():
        ok = series.counts.get("ok", 0)
        buckets.append(
            PromptLengthBucket(
                min_tokens=prompt_bucket(high)[0],
                max_tokens=high,
                requests=ok,
                prompt_tokens_mean=_mean(series.counts.get("prompt_tokens", 0), ok),
                ttft_s=_summary(series, "ttft"),
            )
        )
    return {"turns": turns, "ttft_by_prompt_tokens": buckets, **agent_fields(context, model_key)}


def agent_fields(context: ContextRecorder, model_key: str) -> dict[str, Any]:
    """``steps`` and ``agent_sessions`` of one model (empty and None without agent sessions)."""
    steps = []
    for step, series in context.by(model_key, STEP).items():
        counts = series.counts
        ok = counts.get("ok", 0)
        steps.append(
            StepSummary(
                step=step,
                requests=ok + counts.get("failed", 0),
                failed=counts.get("failed", 0),
                context_tokens=_mean(counts.get("prompt_tokens", 0), ok),
                ttft_s=_summary(series, "ttft"),
                cached_tokens_mean=_mean(counts.get("cached_prompt_tokens", 0), counts.get("cached_reported", 0)),
                step_time_s=_summary(series, "e2e"),
            )
        )
    ended = context.sessions.of(model_key)
    sessions = None
    if ended:
        total = sum(s.count for s in ended.values())
        duration = LogHistogram()
        for kind in ended.values():
            duration.merge(kind.duration)
        sessions = AgentSessionsSummary(
            sessions=total,
            ended_steps=ended["steps"].count if "steps" in ended else 0,
            ended_context=ended["context"].count if "context" in ended else 0,
            ended_failed=ended["failed"].count if "failed" in ended else 0,
            steps_completed_mean=_mean(sum(s.steps for s in ended.values()), total),
            prompt_tokens_mean=_mean(sum(s.prompt_tokens for s in ended.values()), total),
            completion_tokens_mean=_mean(sum(s.completion_tokens for s in ended.values()), total),
            duration_s=Summary.model_validate(duration.summary()),
        )
    return {"steps": steps, "agent_sessions": sessions}


def with_replay_rates(
    stage: StageSummary, context: ContextRecorder | None, model_key: str, trace_rate_per_s: float | None
) -> StageSummary:
    """A replay stage gets the trace's arrival rate and the one achieved (measured the same way)."""
    if trace_rate_per_s is None or context is None:
        return stage
    sends = context.sent(model_key, stage.index)
    achieved = sends.rate_per_s if sends is not None else 0.0
    return stage.model_copy(update={"trace_arrival_rate_per_s": trace_rate_per_s, "achieved_rate_per_s": achieved})
