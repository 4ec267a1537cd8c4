"""``with_microscope``: the microscope's fields put on a built :class:`Results`."""

from __future__ import annotations

from attnload.attention import BandwidthLookup, no_bandwidth
from attnload.config.model import ModelTarget, TestConfig
from attnload.measure.recorder import Recorder
from attnload.results.microscope.capacity import knee, kv_capacity
from attnload.results.microscope.fit import fit_summary, lockstep_cut
from attnload.results.microscope.kvread import kv_read
from attnload.results.microscope.schema import KvCapacity, KvRead
from attnload.results.microscope.sentences import capacity_sentence, mechanism_sentence
from attnload.results.model import ModelSummary, Results
from attnload.results.verdict import gpu_count


def with_microscope(
    results: Results,
    config: TestConfig,
    recorder: Recorder,
    *,
    lockstep: bool,
    gpu_bandwidth: BandwidthLookup = no_bandwidth,
    capacity_probe: tuple[int, int] | None = None,
) -> Results:
    """``results`` with each stage's ``decode_fit``; with ``lockstep`` (a decode sweep) each model's ``kv_read``
    and the mechanism sentence at the head of the verdict; with ``capacity_probe`` (a capacity probe's context and
    pinned output) each model's ``kv_capacity`` and its sentence."""
    targets = {t.key: t for t in config.models}
    models: list[ModelSummary] = []
    reads: dict[str, KvRead] = {}
    capacities: dict[str, KvCapacity] = {}
    for model in results.models:
        stages, fits = [], []
        for stage in model.stages:
            cut = lockstep_cut(stage.users, stage.requests.ok) if lockstep else None
            fit = fit_summary(recorder.combined(model_key=model.key, stage=stage.index).fit, cut)
            stages.append(stage.model_copy(update={"decode_fit": fit}))
            if fit is not None:
                fits.append((stage.index, stage.users or 0, fit))
        update: dict[str, object] = {"stages": stages}
        if lockstep and model.key in targets:
            reads[model.key] = update["kv_read"] = kv_read(
                targets[model.key], model.attention_info, fits, gpu_bandwidth
            )
        if capacity_probe is not None and model.key in targets:
            capacity = probe_capacity(targets[model.key], model, *capacity_probe)
            capacities[model.key] = update["kv_capacity"] = capacity
        models.append(model.model_copy(update=update))
    verdict = results.verdict
    sentence = " ".join(s for s in (mechanism_sentence(reads), capacity_sentence(capacities)) if s)
    if verdict is not None and sentence:
        verdict = verdict.model_copy(update={"text": f"{sentence} {verdict.text}".strip()})
    return results.model_copy(update={"models": models, "verdict": verdict})


def probe_capacity(target: ModelTarget, model: ModelSummary, context: int, output: int) -> KvCapacity:
    """A capacity probe's ``kv_capacity`` from the model's stages (each stage's knee judged as the probe did)."""
    first = model.stages[0].ttft_s.p50 if model.stages else None
    stages = [(s.users or 0, s.server, knee(s.server, s.ttft_s.p50, first)) for s in model.stages]
    predicted = model.attention_info.get("kv_capacity_tokens")
    gpus = gpu_count(target, model)[0]
    return kv_capacity(context, output, stages, gpus, int(predicted) if isinstance(predicted, int | float) else None)
