"""Whose is the many-chunks-per-read signature: the client's (saturation) or the server's (``server_bursts``)?

Why: when several SSE events arrive in one read, every event after the first gets an ITL of 0,
so ITL p50 collapses toward 0 while p99 holds the whole gap. A client that is behind sees this
(its loop came back late to a socket where events had queued), and so does a client that keeps
up with a server that writes several events at once (vLLM's API server under load, a proxy that
buffers). Blaming the client for the second one fails runs under ``--fail-on saturated`` and tells
users their latencies include load-generator delay when they do not. So the signature counts
against the client only with evidence that the client was behind: its CPU was high, its cgroup
throttled it, or its event loop ran late (``measure.looplag``); without that evidence the stage
gets the ``server_bursts`` flag with the burst size, and ITL is read as the server's flush cadence.

A server that speculates (its own counters say so: ``stages[].server.spec_decode``) writes 1 + the
accepted drafts of each verify step at once, so its reads carry several tokens whatever the client
does: such a stage gets the flag with ``reason: speculation`` and is never read as client delay.
"""

from __future__ import annotations

from collections.abc import Mapping

from attnload.measure.cgroup import throttled_reason
from attnload.measure.histogram import LogHistogram
from attnload.measure.looplag import behind_reason
from attnload.measure.recorder import Recorder, Series
from attnload.results.model import ModelSummary, Results, ServerBursts, ServerSummary, StageSummary, Summary

SERVER_BURSTS_FLAG = "server_bursts"
CLIENT_BUSY_CPU_RATIO = 0.75
"""Worker CPU above this: the signature may be the client's own (a loop this busy reads late)."""
ITL_COLLAPSED_S = 0.0005
"""ITL p50 below this (with p99 above it) is the many-chunks-per-read shape."""
MIN_ITL_SAMPLES = 200
"""Fewer ITL samples than this in a stage or model: too few to call a shape."""
MIN_ITL_SAMPLES_RUN = 1000
"""The whole run's bar for the saturation reason (as before the attribution)."""


def itl_collapsed(itl: LogHistogram, min_samples: int = MIN_ITL_SAMPLES) -> bool:
    """ITL p50 collapsed toward 0 while p99 grew: several chunks arrived per read."""
    p50, p99 = itl.quantile(0.5), itl.quantile(0.99)
    return (
        itl.count >= min_samples
        and p50 is not None
        and p99 is not None
        and p50 < ITL_COLLAPSED_S < p99
        and p99 > 50 * p50
    )


def tokens_per_step(series: Series) -> float | None:
    """Mean tokens per streamed event after the first (3 decimals): what one decode step sends a stream
    when the server writes each step as an event (a speculating server: 1 + accepted drafts)."""
    value = series.hists["event_tokens"].mean
    return None if value is None else round(value, 3)


def tokens_per_read_p50(series: Series) -> float | None:
    """Median tokens per read (2 decimals); None when no stream was read."""
    value = series.hists["read_tokens"].quantile(0.5)
    return None if value is None else round(value, 2)


def client_behind(cpu_max_ratio: float, throttled_ratio: float, loop_lag: Mapping[str, Summary] | None) -> str | None:
    """Evidence that the client was behind, in words; None when it kept up.

    ``loop_lag`` None (nothing measured the loop, e.g. a caller from before it existed) counts as
    behind: without evidence either way the signature stays the client's, as it always was."""
    if cpu_max_ratio > CLIENT_BUSY_CPU_RATIO:
        return f"worker CPU reached {cpu_max_ratio:.0%}"
    if (throttled := throttled_reason(throttled_ratio)) is not None:
        return throttled
    if loop_lag is None:
        return "the event loop's lateness was not measured"
    return behind_reason(dict(loop_lag))


def burst_note(size: float | None) -> str:
    shown = "several" if size is None else f"{size:g}"
    return (
        f"the server wrote {shown} tokens per read (p50) while the client kept up: ITL shows the server's "
        "flush cadence (0 within a burst, the whole gap between bursts), not per-token decode time"
    )


SPECULATION_MIN_TOKENS_PER_EVENT = 1.05
"""Mean tokens per event above this, with the server's speculative counters: the writes are the verify steps'."""


def speculation_note(size: float, per_step: float | None) -> str:
    steps = f" (its counters: {per_step:.2f} tokens per step)" if per_step is not None else ""
    return (
        f"the server speculates{steps} and writes each verify step's tokens at once: {size:g} tokens per read "
        "(p50) are its steps, not client delay; ITL per token is the step's gap over its tokens"
    )


def _bursts(series: Series, server: ServerSummary | None, behind: str | None) -> ServerBursts | None:
    spec = server.spec_decode if server is not None else None
    mean = tokens_per_step(series)
    if spec is not None and mean is not None and mean > SPECULATION_MIN_TOKENS_PER_EVENT:
        size = tokens_per_read_p50(series) or mean
        return ServerBursts(
            tokens_per_read_p50=size, note=speculation_note(size, spec.tokens_per_step), reason="speculation"
        )
    if behind is not None or not itl_collapsed(series.hists["itl"]):
        return None
    size = tokens_per_read_p50(series) or 1.0
    return ServerBursts(tokens_per_read_p50=size, note=burst_note(size))


def _stage(stage: StageSummary, series: Series, behind: str | None) -> StageSummary:
    bursts = _bursts(series, stage.server, behind)
    if bursts is None:
        return stage
    flags = stage.flags if SERVER_BURSTS_FLAG in stage.flags else [*stage.flags, SERVER_BURSTS_FLAG]
    return stage.model_copy(update={"server_bursts": bursts, "flags": flags})


def _model(model: ModelSummary, recorder: Recorder, behind: str | None) -> ModelSummary:
    stages = [_stage(s, recorder.combined(model_key=model.key, stage=s.index), behind) for s in model.stages]
    whole = _bursts(recorder.combined(model_key=model.key), model.server, behind)
    return model.model_copy(update={"stages": stages, "server_bursts": whole})


def with_server_bursts(results: Results, recorder: Recorder, behind: str | None) -> Results:
    """Flag each stage (and model) whose reads carried several events, unless the client was ``behind``;
    a speculating server's multi-token writes are flagged as its own whatever the client did."""
    return results.model_copy(update={"models": [_model(m, recorder, behind) for m in results.models]})


def any_server_bursts(results: Results) -> list[tuple[str, str, ServerBursts]]:
    """(model key, where, bursts) for every flagged stage, or the model's whole run when no stage is."""
    out = []
    for model in results.models:
        flagged = [(f"stage {s.index + 1}", s.server_bursts) for s in model.stages if s.server_bursts is not None]
        if not flagged and model.server_bursts is not None:
            flagged = [("run", model.server_bursts)]
        out += [(model.key, where, bursts) for where, bursts in flagged if bursts is not None]
    return out
