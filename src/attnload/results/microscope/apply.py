"""``with_microscope``: the microscope's fields put on a built :class:`Results`."""

from __future__ import annotations

from attnload.attention import BandwidthLookup, no_bandwidth
from attnload.config.model import TestConfig
from attnload.measure.recorder import Recorder
from attnload.results.microscope.fit import fit_summary, lockstep_cut
from attnload.results.microscope.kvread import kv_read
from attnload.results.microscope.schema import KvRead
from attnload.results.microscope.sentences import mechanism_sentence
from attnload.results.model import ModelSummary, Results


def with_microscope(
    results: Results,
    config: TestConfig,
    recorder: Recorder,
    *,
    lockstep: bool,
    gpu_bandwidth: BandwidthLookup = no_bandwidth,
) -> Results:
    """``results`` with each stage's ``decode_fit``; with ``lockstep`` (a decode sweep) each model's ``kv_read``
    and the mechanism sentence at the head of the verdict."""
    targets = {t.key: t for t in config.models}
    models: list[ModelSummary] = []
    reads: dict[str, KvRead] = {}
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
        models.append(model.model_copy(update=update))
    verdict = results.verdict
    sentence = mechanism_sentence(reads)
    if verdict is not None and sentence is not None:
        verdict = verdict.model_copy(update={"text": f"{sentence} {verdict.text}".strip()})
    return results.model_copy(update={"models": models, "verdict": verdict})
