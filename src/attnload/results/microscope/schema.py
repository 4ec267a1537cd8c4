"""The microscope's results types: per stage ``decode_fit``, per model ``kv_read`` and ``kv_capacity``."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class DecodeFitSummary(_Frozen):
    """A least-squares line of a stage's ITL against position: the decode step against context.

    The line goes through the median ITL of each position bin (weighted by its samples); the plain
    least-squares line through every sample, from the mergeable sums, is ``mean_slope_ms_per_1k``."""

    samples: int = 0
    slope_ms_per_1k: float | None = None
    """Milliseconds the inter-token gap grows per 1K (1024) tokens of context."""
    intercept_ms: float | None = None
    """The line's ITL at position 0, ms."""
    r2: float | None = None
    """How much of the binned medians' spread the line explains."""
    mean_slope_ms_per_1k: float | None = None
    """The least-squares slope through every sample (means: stalls of the client or server tilt it)."""
    positions: list[int] = []
    """[min, max] position (prompt tokens + the token's index in the answer) of the samples."""
    sequences: int = 0
    """Answers whose gaps are in the fit."""
    bins: list[list[float]] = []
    """[position, median ITL in ms, samples] per position bin (8 per octave): what the report plots."""
    note: str | None = None
    """What limits the fit: too few samples, or a decode sweep's answers cut by ``--stage-duration``."""


class KvRead(_Frozen):
    """KV bytes each decode step reads per token of context per GPU: measured from the slope, against the math."""

    stage: int | None = None
    """The stage whose fit is used (a decode sweep's largest batch)."""
    slope_ms_per_1k: float | None = None
    sequences_per_gpu: float | None = None
    """Sequences the busiest GPU holds in that batch (with DP attention, its rank's share of the batch)."""
    measured_bytes_per_token_per_gpu: float | None = None
    predicted_bytes_per_token_per_gpu: float | None = None
    ratio: float | None = None
    """measured / predicted."""
    bandwidth_gbps: float | None = None
    bandwidth_source: str | None = None
    """``memory_bandwidth_gbps``, ``gpu_type`` or ``attention_info`` (the simulator's preset deployment)."""
    bound: str | None = None
    """``memory`` (the step grows as reading the KV at the GPU's bandwidth explains), ``compute`` (faster:
    attention math sets it) or ``unclear`` (slower than the KV math: not a lockstep bandwidth-bound batch)."""
    note: str | None = None
    """What is missing for a measured figure, or what the figure assumes."""


class KvCapacity(_Frozen):
    """A capacity probe's answer: the sequences a model served at once at one context, against the KV math."""

    context: int
    max_running: int | None = None
    """The most concurrent sequences served without queueing."""
    kv_tokens: int | None = None
    """max_running × (context + output)."""
    per_gpu: float | None = None
    """kv_tokens per GPU."""
    predicted_tokens: int | None = None
    """The attention table's KV capacity (tokens, whole deployment)."""
    ratio: float | None = None
    """kv_tokens / predicted_tokens."""
    knee: str | None = None
    """What ended the probe: the server's full cache, queue or preemptions, or the client's TTFT."""
    note: str | None = None
