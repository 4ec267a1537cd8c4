"""What a scraped source said over one stage: the typed summaries a window hands the results.

``ServerSummary`` is a model server's /metrics over a stage (``stages[].server``),
``GpuSummary`` the model's GPUs over it (``stages[].gpu``). They are defined here, where the
windows build them, and the results model (``results/model.py``) carries them as they are:
one type from the scrape to the JSON file and the report. ``StageSummaries`` is what a scrape
view hands the results: per model key, per stage index and whole-run, None where unread.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

Bound = Literal["bandwidth", "compute", "neither"]
"""Which roof a stage's GPUs ran against (``scrape/gpuwindow.py``'s ``classify_bound``)."""


class _Summary(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class GaugeSummary(_Summary):
    """A server gauge over a stage: mean and max of the scrapes (None: the server has no such series)."""

    mean: float | None = None
    max: float | None = None


class SpecDecode(_Summary):
    """Speculative decoding over a stage, from the server's counters (docs/server-metrics.md).

    ``acceptance_rate`` is the probability that a draft token is accepted given the drafts before it
    were (what ``attnload sim --spec-acceptance`` sets, comparable across draft lengths): accepted
    drafts ÷ (accepted + rejections), a rejection being each draft not accepted in full. vLLM's and
    SGLang's own "acceptance rate" (accepted ÷ draft tokens, lower for longer drafts) is
    ``draft_acceptance_rate``."""

    acceptance_rate: float | None = None
    mean_accepted_tokens: float | None = None
    """Accepted draft tokens per verify step of one sequence (the tokens per step are 1 more)."""
    draft_tokens: int | float | None = None
    """Draft tokens proposed over the stage (None: the server exports gauges only, SGLang)."""
    draft_acceptance_rate: float | None = None
    """Accepted ÷ draft tokens, as vLLM logs it and SGLang's ``spec_accept_rate`` gauge says."""
    tokens_per_step: float | None = None
    """1 + ``mean_accepted_tokens``: tokens one sequence gets per decode step (vLLM's mean acceptance length)."""


class ServerSummary(_Summary):
    """What the model server's own /metrics said over a stage (docs/server-metrics.md).

    Counters are deltas over the stage (a counter reset is handled); gauges are mean/max over
    the scrapes; KV usage is a fraction 0-1 as the servers export it.
    """

    source: str | None = None
    """``vllm``, ``sglang`` or ``attnload-sim`` (recognised by metric names)."""
    samples: int = 0
    kv_cache_usage: GaugeSummary = GaugeSummary()
    requests_running: GaugeSummary = GaugeSummary()
    requests_waiting: GaugeSummary = GaugeSummary()
    preemptions: int | float | None = None
    aborted: int | float | None = None
    """Requests the server aborted over the stage (vLLM ``request_success_total{finished_reason="abort"}``):
    next to the client's ``requests.abandoned``; None where the server aborted none or has no such series."""
    prefix_cache_hit_ratio: float | None = None
    prompt_tokens: int | float | None = None
    generation_tokens: int | float | None = None
    ttft_p50_s: float | None = None
    ttft_p99_s: float | None = None
    ttft_p50_bucket_s: tuple[float, float | None] | None = None
    """``[lower, upper]`` seconds of the server histogram's bucket holding the p50 (upper None: the
    ``+Inf`` bucket): ``ttft_p50_s`` is interpolated inside it, so the true p50 is only known to lie there."""
    ttft_p99_bucket_s: tuple[float, float | None] | None = None
    """The same for the p99."""
    spec_decode: SpecDecode | None = None
    """Speculative decoding's acceptance over the stage; None where the server does not speculate."""


class GpuSummary(_Summary):
    """What the model's GPUs did over a stage, from dcgm-exporter or the simulator (docs/gpu-metrics.md).

    Activity is mean/max over the model's GPUs and the stage's scrapes, each a fraction 0-1
    (``gpu_util`` too: DCGM's percent / 100); None where the exporter lacks the field, never 0."""

    source: str | None = None
    """``dcgm`` (dcgm-exporter) or ``attnload-sim`` (the simulator's roofline)."""
    gpus: int = 0
    samples: int = 0
    dram_active: GaugeSummary | None = None
    tensor_active: GaugeSummary | None = None
    sm_active: GaugeSummary | None = None
    gpu_util: GaugeSummary | None = None
    power_w: float | None = None
    """Mean over the scrapes of the power summed over the model's GPUs, W."""
    energy_j: float | None = None
    energy_from: Literal["counter", "power"] | None = None
    """``counter``: DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION deltas; ``power``: power × time (no counter)."""
    joules_per_output_token: float | None = None
    """``energy_j`` over the client's completion tokens of this model and stage."""
    fb_used_gib: float | None = None
    bound: Bound | None = None


SummaryT = TypeVar("SummaryT", bound=BaseModel)


@dataclass
class StageSummaries(Generic[SummaryT]):
    """A source's summaries as its poller produced them: per model key, per stage index, and whole-run."""

    stages: dict[str, dict[int, SummaryT | None]] = field(default_factory=dict)
    totals: dict[str, SummaryT | None] = field(default_factory=dict)

    def stage(self, key: str, index: int) -> SummaryT | None:
        return self.stages.get(key, {}).get(index)

    def total(self, key: str) -> SummaryT | None:
        return self.totals.get(key)
