"""The GPU view in the results: ``stages[].gpu`` / ``models[].gpu`` with joules per output token.

The runner hands over what the model's GPUs reported per stage (``GpuView``); the energy
per token divides the GPUs' energy by the *client's* completion tokens of that model and
stage (what the user received), so a gateway's or another tenant's traffic on the same
GPUs shows as a higher cost per token, not as a smaller one.
"""

from __future__ import annotations

from typing import TypeVar

from attnload.results.model import GpuSummary, ModelSummary, StageSummary
from attnload.scrape.summary import StageSummaries

GpuResults = StageSummaries[GpuSummary]
"""GPU summaries as the GPU view produced them: per model key, per stage index, and whole-run."""

Viewed = TypeVar("Viewed", StageSummary, ModelSummary)


def per_token(gpu: GpuSummary | None, completion_tokens: int) -> GpuSummary | None:
    """``gpu`` with ``joules_per_output_token`` = energy / the client's completion tokens (None: no tokens)."""
    if gpu is None:
        return None
    joules = gpu.energy_j / completion_tokens if gpu.energy_j is not None and completion_tokens > 0 else None
    return gpu.model_copy(update={"joules_per_output_token": joules})


def with_gpu(summary: Viewed, gpu: GpuSummary | None) -> Viewed:
    """``summary`` (a stage or a whole model) with its GPU view."""
    if gpu is None:
        return summary
    return summary.model_copy(update={"gpu": per_token(gpu, summary.completion_tokens)})
