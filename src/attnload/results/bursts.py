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
"""

from __future__ import annotations

from collections.abc import Mapping

from attnload.measure.cgroup import throttled_reason
from attnload.measure.histogram import LogHistogram
from attnload.measure.looplag import behind_reason
from attnload.measure.recorder import Recorder, Series
from attnload.results.model import ModelSummary, Results, ServerBursts, StageSummary, Summary

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


def _bursts(series: Series) -> ServerBursts | None:
    if not itl_collapsed(series.hists["itl"]):
        return None
    size = tokens_per_read_p50(series) or 1.0
    return ServerBursts(tokens_per_read_p50=size, note=burst_note(size))


def _stage(stage: StageSummary, series: Series) -> StageSummary:
    bursts = _bursts(series)
    if bursts is None:
        return stage
    flags = stage.flags if SERVER_BURSTS_FLAG in stage.flags else [*stage.flags, SERVER_BURSTS_FLAG]
    return stage.model_copy(update={"server_bursts": bursts, "flags": flags})


def _model(model: ModelSummary, recorder: Recorder) -> ModelSummary:
    stages = [_stage(s, recorder.combined(model_key=model.key, stage=s.index)) for s in model.stages]
    return model.model_copy(update={"stages": stages, "server_bursts": _bursts(recorder.combined(model_key=model.key))})


def with_server_bursts(results: Results, recorder: Recorder, behind: str | None) -> Results:
    """Flag each stage (and model) whose reads carried several events, unless the client was ``behind``."""
    if behind is not None:
        return results
    return results.model_copy(update={"models": [_model(m, recorder) for m in results.models]})


def any_server_bursts(results: Results) -> list[tuple[str, str, ServerBursts]]:
    """(model key, where, bursts) for every flagged stage, or the model's whole run when no stage is."""
    out = []
    for model in results.models:
        flagged = [(f"stage {s.index + 1}", s.server_bursts) for s in model.stages if s.server_bursts is not None]
        if not flagged and model.server_bursts is not None:
            flagged = [("run", model.server_bursts)]
        out += [(model.key, where, bursts) for where, bursts in flagged if bursts is not None]
    return out
