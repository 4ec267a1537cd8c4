"""Turn the merged recorder into a :class:`Results` object (the only place summaries are computed).

:func:`build_results` takes the run's facts and the parts its collector's channels give
(``runner/collector/channels.py``): a feature adds to the results through its part, not here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from attnload.config.model import ModelTarget, TestConfig
from attnload.measure.cgroup import throttled_reason
from attnload.measure.histogram import LogHistogram
from attnload.measure.looplag import behind_reason
from attnload.measure.metrics import METRICS
from attnload.measure.recorder import Recorder, Series
from attnload.results.bursts import (
    MIN_ITL_SAMPLES_RUN,
    client_behind,
    itl_collapsed,
    tokens_per_read_p50,
    tokens_per_step,
)
from attnload.results.ladder import context_scaling, decode_speed
from attnload.results.model import ClientInfo, ModelSummary, Requests, Results, StageSummary, Summary, Totals
from attnload.results.reasoning import reasoning_fields, reasoning_note
from attnload.results.truth import nodata
from attnload.results.truth.censoring import censored_of, ttft_long_note, ttft_summary
from attnload.results.truth.evidence import stage_evidence
from attnload.results.truth.fields import TTFT_LONG_FLAG
from attnload.results.truth.stalls import without_stalled
from attnload.results.verdict import build_verdict

SATURATION_CPU_RATIO = 0.9
CLIENT_BEHIND_LAG_S = 0.1
"""Open loop: a dispatch-lag p99 above this means the client did not keep the schedule."""
CLIENT_BEHIND_SENT_RATIO = 0.95
"""Open loop: fewer requests sent than this share of rate × duration also flags the stage."""
_MIN_EXPECTED_FOR_COUNT_CHECK = 20


@dataclass(frozen=True)
class StageWindow:
    """When a stage ran, in seconds since the test started."""

    index: int
    start_s: float
    end_s: float
    users: int | None = None
    rate: float | None = None
    flags: tuple[str, ...] = ()
    rates: dict[str, float] | None = None
    """Open-loop rate per model key (a sweep gives each model its own)."""
    model_users: dict[str, int] | None = None
    """Closed loop: the users each model had (sampled by the runner); None: split ``users`` by weight."""
    context: int | None = None
    """A context ladder's rung: the requested prompt tokens of every request in the stage."""


def split_users(total: int, config: TestConfig, paired: bool) -> dict[str, int]:
    """Each model's share of ``total`` closed-loop users as the runner assigns them: round-robin over
    the models, each taking ``round(weight)`` slots (``--paired``: every user drives every model)."""
    if paired:
        return {m.key: total for m in config.models}
    slots = [m.key for m in config.models for _ in range(max(1, round(m.weight)))]
    shares = dict.fromkeys((m.key for m in config.models), 0)
    for i in range(total):
        shares[slots[i % len(slots)]] += 1
    return shares


def stage_users(window: StageWindow, config: TestConfig, model_key: str, paired: bool) -> int | None:
    """What ``stages[].users`` reports for one model: its own users, measured when sampled."""
    if window.users is None:
        return None
    if window.model_users is not None:
        return window.model_users.get(model_key, 0)
    return split_users(window.users, config, paired).get(model_key, 0)


def summary(hist: LogHistogram) -> Summary:
    return Summary.model_validate(hist.summary())


def cached_total(counts: dict[str, int]) -> int | None:
    """Cached prompt tokens the server reported; None when no request of the scope reported any
    (absent is not zero: vLLM sends them only with ``--enable-prompt-tokens-details``)."""
    return counts.get("cached_prompt_tokens", 0) if counts.get("cached_reported", 0) else None


def prompt_sizes(target: ModelTarget, whole: Series) -> str:
    """``exact`` with a tokenizer; ``calibrated`` once prompts were sized from server usage; else ``estimated``."""
    if target.tokenizer is not None:
        return "exact"
    return "calibrated" if whole.counts.get("calibrated", 0) else "estimated"


def metric_summaries(series: Series) -> dict[str, Summary]:
    """A :class:`Summary` per metric of the table that names a results field (``ttft_s``, ``itl_s``, …)."""
    return {m.results_field: summary(series.hists[m.key]) for m in METRICS if m.results_field is not None}


def totals(series: Series, duration_s: float, slo_set: bool) -> dict[str, Any]:
    """The fields shared by model, profile and stage summaries."""
    counts = series.counts
    duration_s = max(duration_s, 1e-9)
    return {
        "requests": Requests(
            ok=counts.get("ok", 0),
            failed=counts.get("failed", 0),
            cancelled=counts.get("cancelled", 0),
            abandoned=counts.get("abandoned", 0),
            dropped=counts.get("dropped", 0),
        ),
        "errors": dict(sorted(series.errors.items())),
        **metric_summaries(series),
        "ttft_s": ttft_summary(series),  # over finished and cut requests (Kaplan–Meier: ``measure.survival``)
        "prompt_tokens": counts.get("prompt_tokens", 0),
        "completion_tokens": counts.get("completion_tokens", 0),
        "cached_prompt_tokens": cached_total(counts),
        "estimated_tokens": counts.get("estimated", 0) > 0,
        "output_tokens_per_s": counts.get("completion_tokens", 0) / duration_s,
        "requests_per_s": counts.get("ok", 0) / duration_s,
        "goodput_rps": counts.get("good", 0) / duration_s if slo_set else None,
        **reasoning_fields(counts),
        "tokens_per_read_p50": tokens_per_read_p50(series),
        "censored": censored_of(series),
        "no_data_reason": nodata.no_data_reason(series),
        "without_stalled": without_stalled(series),
        "tokens_per_step": tokens_per_step(series),
    }


@dataclass(frozen=True)
class RunFacts:
    """What every results document has: the run, its merged recorder, its stages and its client."""

    config: TestConfig
    recorder: Recorder
    started_at: float
    ended_at: float
    stages: list[StageWindow]
    client: ClientInfo
    run_info: dict[str, Any]
    paired: bool = False
    """``--paired``: every user drives every model (each model's stage users are the total)."""
    replay: bool = False
    """A trace replay: stages are checked by arrival rate, and name the trace as their arrivals."""
    interrupted: bool = False


class ResultsPart:
    """One collected feature's share of the results (the collector's channels give them).

    Each hook returns its input unchanged unless the feature adds to it: ``stage`` adds to a model's
    stage summary, ``fields`` gives model summary fields over the recorder's (before the verdict reads them),
    ``finish`` adds to the whole document (after the verdict)."""

    def stage(self, key: str, stage: StageSummary) -> StageSummary:
        return stage

    def fields(self, key: str, whole: Series) -> dict[str, Any]:
        return {}

    def finish(self, results: Results) -> Results:
        return results


def build_results(run: RunFacts, parts: Sequence[ResultsPart] = ()) -> Results:
    """Summaries per model, per profile and per stage, then each part's share; wall times are epoch seconds."""
    config, recorder = run.config, run.recorder
    duration_s = max(run.ended_at - run.started_at, 1e-9)
    slo_set = any(v is not None for v in config.slo.model_dump().values())
    models = []
    for target in config.models:
        whole = recorder.combined(model_key=target.key)
        profiles = {
            p.name: Totals(**totals(recorder.combined(model_key=target.key, profile=p.name), duration_s, slo_set))
            for p in config.profiles
            if any(k[0] == target.key and k[1] == p.name for k in recorder.series)
        }
        stage_summaries = _stage_summaries(run, target.key, slo_set, parts)
        fields = {
            **totals(whole, duration_s, slo_set),
            "key": target.key,
            "model": target.id,
            "attention": target.attention,
            "stages": stage_summaries,
            "profiles": profiles,
            "context_scaling": context_scaling(stage_summaries),
            "reasoning_note": reasoning_note(target.key, whole.counts),
            "target": target.key,
            "prompt_sizes": prompt_sizes(target, whole),
            "error_examples": whole.examples,
        }
        fields["flags"] = nodata.with_flag([], fields["no_data_reason"])
        for part in parts:
            fields.update(part.fields(target.key, whole))
        models.append(ModelSummary(**fields))
    results = Results.model_validate(
        {
            "schema": "attnload.results/v1",
            "started_at": _iso(run.started_at),
            "ended_at": _iso(run.ended_at),
            "duration_s": duration_s,
            "config_sha256": config.sha256,
            "config": run.run_info,
            "client": run.client,
            "models": models,
            "verdict": build_verdict(config, models),
            "interrupted": run.interrupted,
        }
    )
    for part in parts:
        results = part.finish(results)
    return results


def _stage_summaries(run: RunFacts, key: str, slo_set: bool, parts: Sequence[ResultsPart]) -> list[StageSummary]:
    """One model's stages, each with its arrivals and what each part adds (server and GPU views, …)."""
    out = []
    for window in run.stages:
        users = stage_users(window, run.config, key, run.paired)
        stage = _stage_summary(run.recorder, key, window, slo_set, replay=run.replay, users=users)
        stage = with_arrivals(stage, run.run_info, run.replay)
        for part in parts:
            stage = part.stage(key, stage)
        out.append(stage)
    return out


def _stage_summary(
    recorder: Recorder,
    model_key: str,
    window: StageWindow,
    slo_set: bool,
    replay: bool = False,
    users: int | None = None,
) -> StageSummary:
    series = recorder.combined(model_key=model_key, stage=window.index)
    window_s = max(window.end_s - window.start_s, 1e-9)
    fields = totals(series, window_s, slo_set)
    lag = series.hists["lag"]
    rate = (window.rates or {}).get(model_key, window.rate)
    flags = list(window.flags)
    achieved = None
    if rate is not None:
        counts = series.counts
        sent = counts.get("ok", 0) + counts.get("failed", 0) + counts.get("cancelled", 0) + counts.get("abandoned", 0)
        achieved = sent / window_s
        expected = rate * window_s
        p99 = lag.quantile(0.99)
        behind = p99 is not None and p99 > CLIENT_BEHIND_LAG_S
        # A replay's stage includes its drain time: its sends are checked by arrival rate, not count.
        short = not replay and expected >= _MIN_EXPECTED_FOR_COUNT_CHECK and sent < CLIENT_BEHIND_SENT_RATIO * expected
        if (behind or short) and "client_behind" not in flags:
            flags.append("client_behind")
    flags = nodata.with_flag(flags, fields["no_data_reason"])
    if ttft_long_note(fields["ttft_s"], window_s) is not None:
        flags.append(TTFT_LONG_FLAG)
    prompt_p50 = series.hists["prompt"].quantile(0.5)
    stage = StageSummary(
        **fields,
        index=window.index,
        users=users if users is not None else window.users,
        users_total=window.users,
        rate=rate,
        start_s=window.start_s,
        end_s=window.end_s,
        dispatch_lag_s=summary(lag) if lag.count else None,
        flags=flags,
        achieved_rate_rps=achieved,
        context=window.context,
        prompt_tokens_p50=round(prompt_p50, 1) if prompt_p50 is not None else None,
        evidence=stage_evidence(series),
    )
    return stage.model_copy(update={"decode_tokens_per_s_per_user": decode_speed(stage)})


def with_arrivals(stage: StageSummary, run_info: dict[str, Any], replay: bool) -> StageSummary:
    """An open-loop stage names its arrival law (the run's; a replay's is its trace)."""
    if stage.rate is None:
        return stage
    if replay:
        return stage.model_copy(update={"arrivals": "trace"})
    return stage.model_copy(update={"arrivals": run_info.get("arrivals"), "burstiness": run_info.get("burstiness")})


def client_info(
    workers: int,
    workers_lost: int,
    cpu_max_ratio: float,
    recorder: Recorder,
    throttled_ratio: float = 0.0,
    loop_lag: dict[str, Summary] | None = None,
) -> ClientInfo:
    """Saturation is measured: CPU above 90 %, cgroup throttling, an event loop late most of the time, or
    the chunk-coalescing signature in ITL when the client was behind (``results.bursts``: otherwise the
    signature is the server's bursts).

    ``loop_lag``: each sending process's event-loop lateness (None: not measured)."""
    reasons = []
    if (throttled := throttled_reason(throttled_ratio)) is not None:
        reasons.append(throttled)
    if cpu_max_ratio > SATURATION_CPU_RATIO:
        reasons.append(f"worker CPU reached {cpu_max_ratio:.0%} (> {SATURATION_CPU_RATIO:.0%})")
    if (late := behind_reason(loop_lag or {}, p99=False)) is not None:
        reasons.append(f"{late}: requests and reads waited on the client")
    behind = client_behind(cpu_max_ratio, throttled_ratio, loop_lag)
    if behind is not None and itl_collapsed(recorder.combined().hists["itl"], MIN_ITL_SAMPLES_RUN):
        reasons.append(
            "ITL p50 collapsed toward 0 while p99 grew: several chunks arrive per read "
            f"(the client is behind: {behind})"
        )
    return ClientInfo(
        workers=workers,
        workers_lost=workers_lost,
        cpu_max_ratio=round(cpu_max_ratio, 3),
        client_saturated=bool(reasons),
        saturation_reasons=reasons,
        loop_lag_s=dict(sorted((loop_lag or {}).items())),
    )


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, tz=UTC).isoformat(timespec="milliseconds")
