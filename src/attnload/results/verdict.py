"""The answer first (``results.verdict``): what a run supports saying, in words and per model.

The seed's section 6 turns a throughput advantage into a cost advantage: "the same GPUs carry more users,
or the same users need fewer GPUs". For each model this finds the largest users (closed loop) or rate
(open loop) whose stage met the config's ``slo`` at p99 with no failures, puts it per GPU when the GPU count
is known (the model's ``gpus``, else DCGM's count, else the simulator's deployment) and prices a million
output tokens when the config gives a price. Where the data cannot support a statement (one stage, no SLO,
failures, no GPU count) the text says what is missing instead of guessing.
"""

from __future__ import annotations

from attnload.config.model import ModelTarget, Slo, TestConfig
from attnload.results.decode.speculation import speculation_sentence, with_speculation
from attnload.results.ladder import longest_rung, pair_sentences, tokens_label
from attnload.results.model import ModelSummary, StageSummary, Verdict, VerdictModel
from attnload.results.truth.fields import NO_DATA_FLAG, Interval

SECONDS_PER_HOUR = 3600.0


def meets_slo(stage: StageSummary, slo: Slo) -> bool:
    """The stage's p99s are within every SLO the config sets, with successes and no failures."""
    if stage.requests.ok == 0 or stage.requests.failed > 0:
        return False
    for limit, summary in ((slo.ttft_p99_s, stage.ttft_s), (slo.itl_p99_s, stage.itl_s), (slo.e2e_p99_s, stage.e2e_s)):
        if limit is not None and (summary.p99 is None or summary.p99 > limit):
            return False
    return True


def best_stage(model: ModelSummary, slo: Slo) -> StageSummary | None:
    """The stage with the largest users (or rate) that met the SLO; a tie goes to the longer context."""
    met = [s for s in model.stages if meets_slo(s, slo) and (s.users is not None or s.rate is not None)]
    if not met:
        return None
    return max(met, key=lambda s: (s.users if s.users is not None else s.rate or 0.0, s.context or 0))


def gpu_count(target: ModelTarget, model: ModelSummary) -> tuple[int | None, str]:
    """GPUs serving the model and where the count came from."""
    if target.gpus is not None:
        return target.gpus, "config"
    if model.gpu is not None and model.gpu.gpus > 0:
        return model.gpu.gpus, "DCGM"
    tp = model.attention_info.get("tp")
    if isinstance(tp, int) and tp > 0:
        return tp, "the simulator's deployment"
    return None, ""


def usd_per_mtok_output(target: ModelTarget, stage: StageSummary, gpus: int | None) -> float | None:
    """USD per million output tokens at ``stage``.

    Self-hosted (``gpu_hour_usd``): the GPUs' price per hour ÷ the stage's output tokens per hour (millions).
    An API (``price_per_mtok``): the output price plus the input tokens each output token cost at that price.
    """
    if target.gpu_hour_usd is not None and gpus:
        per_hour = stage.output_tokens_per_s * SECONDS_PER_HOUR / 1e6
        return target.gpu_hour_usd * gpus / per_hour if per_hour > 0 else None
    price = target.price_per_mtok
    if price is not None:
        ratio = stage.prompt_tokens / stage.completion_tokens if stage.completion_tokens else 0.0
        return price.output + price.input * ratio
    return None


def model_verdict(target: ModelTarget, model: ModelSummary, slo: Slo) -> VerdictModel:
    """One model's capacity at the SLO, per GPU, and its cost (fields None where the data says nothing)."""
    gpus, _source = gpu_count(target, model)
    stage = best_stage(model, slo) if slo.is_set else None
    evidence = _evidence(model, stage)
    if stage is None:
        return VerdictModel(target=model.key, gpus=gpus, **evidence)
    return VerdictModel(
        **evidence,
        target=model.key,
        context=stage.context,
        slo_met_users=stage.users,
        slo_met_rate=stage.rate if stage.users is None else None,
        gpus=gpus,
        users_per_gpu=stage.users / gpus if gpus and stage.users is not None else None,
        output_tokens_per_s_per_gpu=stage.output_tokens_per_s / gpus if gpus else None,
        usd_per_mtok_output=usd_per_mtok_output(target, stage, gpus),
    )


def _evidence(model: ModelSummary, stage: StageSummary | None) -> dict[str, Interval | None]:
    """The intervals behind a model's figures: a ladder's decode change to its longest rung (at its fewest
    users) and TTFT and TPOT at that rung; else at the stage that met the SLO."""
    ends = longest_rung(model)
    if ends is not None:
        stage = next((s for s in model.stages if s.context == ends.context and s.users == ends.users), stage)
    if stage is None or stage.evidence is None:
        return {"decode_change": ends.change if ends is not None else None}
    return {
        "decode_change": ends.change if ends is not None else None,
        "ttft_p50_s": stage.evidence.ttft_p50_s,
        "tpot_p50_s": stage.evidence.tpot_p50_s,
    }


def _slo_text(slo: Slo) -> str:
    parts = []
    if slo.ttft_p99_s is not None:
        parts.append(f"TTFT p99 ≤ {slo.ttft_p99_s * 1000:g} ms")
    if slo.itl_p99_s is not None:
        parts.append(f"ITL p99 ≤ {slo.itl_p99_s * 1000:g} ms")
    if slo.e2e_p99_s is not None:
        parts.append(f"e2e p99 ≤ {slo.e2e_p99_s:g} s")
    return ", ".join(parts)


def _capacity_sentence(v: VerdictModel, target: ModelTarget, model: ModelSummary) -> str:
    if v.slo_met_users is None and v.slo_met_rate is None:
        failed = sum(s.requests.failed for s in model.stages)
        why = f" ({failed:,} failed requests; a stage with failures never counts)" if failed else ""
        return f"{model.key} met the SLO in no stage{why}"
    users = v.slo_met_users
    load = f"{users} user{'' if users == 1 else 's'}" if users is not None else f"{v.slo_met_rate:g} req/s"
    at = f" at {tokens_label(v.context)} context" if v.context else ""
    text = f"{model.key} held {load}{at}"
    if v.gpus:
        source = gpu_count(target, model)[1]
        per_gpu = f"{v.users_per_gpu:.2f} users per GPU, " if v.users_per_gpu is not None else ""
        text += f" on {v.gpus} GPUs ({source}): {per_gpu}{v.output_tokens_per_s_per_gpu:,.0f} output tok/s per GPU"
    else:
        text += " (GPU count unknown: set the model's gpus for per-GPU figures)"
    if v.usd_per_mtok_output is not None:
        text += f", ${v.usd_per_mtok_output:,.2f} per million output tokens"
    return text


def _missing(config: TestConfig, models: list[ModelSummary], ladder: bool) -> list[str]:
    notes = []
    stages = max((len(m.stages) for m in models), default=0)
    if ladder and len({s.context for m in models for s in m.stages}) < 2:
        notes.append("one context only: a ladder needs two rungs to say how decode falls with context")
    if not config.slo.is_set:
        notes.append("no slo in the config, so no capacity at an SLO (add slo: ttft_p99_s, itl_p99_s)")
    elif stages < 2:
        notes.append("one stage only: the largest load meeting the SLO needs a ladder of loads (--users 1,8,32)")
    if not any(m.gpu_hour_usd is not None or m.price_per_mtok is not None for m in config.models):
        notes.append("no price in the config (gpu_hour_usd or price_per_mtok), so no cost per million tokens")
    return notes


def _comparison(models: list[VerdictModel]) -> str | None:
    """Which model carries more users per GPU and which costs less, when two could both be measured."""
    parts = []
    per_gpu = [m for m in models if m.users_per_gpu]
    if len(per_gpu) >= 2:
        best, worst = max(per_gpu, key=lambda m: m.users_per_gpu or 0), min(per_gpu, key=lambda m: m.users_per_gpu or 0)
        if best.users_per_gpu != worst.users_per_gpu:
            ratio = (best.users_per_gpu or 0) / (worst.users_per_gpu or 1)
            parts.append(f"{best.target} carries {ratio:.1f}× the users per GPU of {worst.target} at the SLO")
    priced = [m for m in models if m.usd_per_mtok_output]
    if len(priced) >= 2:
        cheap = min(priced, key=lambda m: m.usd_per_mtok_output or 0)
        dear = max(priced, key=lambda m: m.usd_per_mtok_output or 0)
        if cheap.usd_per_mtok_output != dear.usd_per_mtok_output:
            parts.append(
                f"{cheap.target} costs the least per million output tokens "
                f"(${cheap.usd_per_mtok_output:,.2f} against {dear.target}'s ${dear.usd_per_mtok_output:,.2f})"
            )
    return "; ".join(parts) or None


def build_verdict(config: TestConfig, all_models: list[ModelSummary]) -> Verdict:
    """``results.verdict``: the pair sentences of a ladder, each model's capacity and cost, what is missing.
    A model that finished no request (``no_data``) is named first and compared with nothing."""
    empty = [m for m in all_models if NO_DATA_FLAG in m.flags]
    models = [m for m in all_models if NO_DATA_FLAG not in m.flags]
    if not models:
        return Verdict(text=_no_data_sentence(empty))
    text = build_verdict_of(config, models)
    if empty:
        text = text.model_copy(update={"text": f"{_no_data_sentence(empty)} {text.text}"})
    return text


def _no_data_sentence(empty: list[ModelSummary]) -> str:
    names = ", ".join(m.key for m in empty)
    they = "it is" if len(empty) == 1 else "they are"
    return f"No data (no_data) for {names}: no request finished, so {they} compared with nothing."


def build_verdict_of(config: TestConfig, models: list[ModelSummary]) -> Verdict:
    """The verdict over the models that measured something."""
    targets = {t.key: t for t in config.models}
    ladder = any(s.context is not None for m in models for s in m.stages)
    sentences = pair_sentences(models) if ladder else []
    if ladder and (estimated := [m.key for m in models if m.prompt_sizes == "estimated"]):
        sentences.append(
            f"Prompt sizes of {', '.join(estimated)} are estimated (no tokenizer, no usage to calibrate from): "
            "the measured prompt tokens are in each stage."
        )
    verdicts = [
        with_speculation(model_verdict(targets[m.key], m, config.slo), m, models) for m in models if m.key in targets
    ]
    sentences += [text for v in verdicts if (text := speculation_sentence(v)) is not None]
    if config.slo.is_set:
        capacity = "; ".join(_capacity_sentence(v, targets[v.target], m) for v, m in zip(verdicts, models, strict=True))
        sentences.append(f"At the SLO ({_slo_text(config.slo)}): {capacity}.")
        if (comparison := _comparison(verdicts)) is not None:
            sentences.append(comparison + ".")
    missing = _missing(config, models, ladder)
    if missing:
        sentences.append("Not stated: " + "; ".join(missing) + ".")
    return Verdict(text=" ".join(sentences), models=verdicts)
