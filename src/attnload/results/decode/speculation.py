"""What speculative decoding bought each model, for the verdict (``results.verdict``).

A model speculates when its server's counters say so (``models[].server.spec_decode``). The client
side of it is the tokens one decode step sends a stream (``tokens_per_step``: 1 + accepted drafts)
and the ITL per token, which is the verify step's gap over its tokens. Against what: another entry
of the run with the same model id whose server did not speculate (the same model served twice, with
and without drafts); its ITL p50 over this one's is the speed-up per token. Without such a pair the
sentence gives the speculating model's numbers alone.
"""

from __future__ import annotations

from collections.abc import Sequence

from attnload.results.model import ModelSummary, VerdictModel


def speculating(model: ModelSummary) -> bool:
    return model.server is not None and model.server.spec_decode is not None


def baseline_of(model: ModelSummary, models: Sequence[ModelSummary]) -> ModelSummary | None:
    """Another entry serving the same model id that did not speculate."""
    return next(
        (m for m in models if m.key != model.key and m.model == model.model and not speculating(m)),
        None,
    )


def with_speculation(verdict: VerdictModel, model: ModelSummary, models: Sequence[ModelSummary]) -> VerdictModel:
    """``verdict`` with what speculation bought ``model`` (unchanged when it did not speculate)."""
    if not speculating(model) or model.server is None or model.server.spec_decode is None:
        return verdict
    base = baseline_of(model, models)
    itl, base_itl = model.itl_s.p50, base.itl_s.p50 if base is not None else None
    return verdict.model_copy(
        update={
            "tokens_per_step": model.tokens_per_step,
            "spec_acceptance_rate": model.server.spec_decode.acceptance_rate,
            "itl_p50_s": itl,
            "baseline": base.key if base is not None else None,
            "itl_speedup": base_itl / itl if itl and base_itl else None,
        }
    )


def speculation_sentence(v: VerdictModel) -> str | None:
    """One sentence per speculating model: tokens per step, acceptance, ITL per token, against its baseline."""
    if v.spec_acceptance_rate is None:
        return None
    per_step = f"{v.tokens_per_step:.2f} tokens per decode step" if v.tokens_per_step else "its decode steps"
    itl = f", ITL {v.itl_p50_s * 1000:.2f} ms per token (p50)" if v.itl_p50_s is not None else ""
    text = f"{v.target} speculated: {per_step} at {v.spec_acceptance_rate:.2f} draft acceptance{itl}"
    if v.baseline is not None and v.itl_speedup is not None:
        text += f", {v.itl_speedup:.2f}× faster per token than {v.baseline} without drafts"
    return text + "."
