"""``kv_read``: the KV bytes a decode step reads per token of context per GPU, from a decode sweep's slope.

With the users of a model decoding in lockstep, every step reads the KV of every sequence a GPU holds, so
the step grows by (sequences on the GPU × bytes per token per GPU ÷ bandwidth) per token of context: the
slope × bandwidth ÷ sequences is the bytes read. Held against the attention math (``attention_info``'s KV
bytes per token per GPU): near it (an effective bandwidth below peak lifts the ratio a little above 1) the
decode is bandwidth-bound; far above it something else grows with context (attention FLOPs: MLA's absorbed
attention at query length 1); below it the batch was not a lockstep bandwidth-bound one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from attnload.attention import BandwidthLookup, no_bandwidth
from attnload.config.model import ModelTarget
from attnload.results.microscope.fit import TOKENS_PER_1K
from attnload.results.microscope.schema import DecodeFitSummary, KvRead

MEMORY_BOUND_MAX_RATIO = 1.6
"""measured / predicted up to this: the KV read explains the slope (80 % effective bandwidth gives 1.25)."""
UNCLEAR_BELOW_RATIO = 0.6
"""Below this the slope is smaller than reading the KV would make it: not a lockstep, bandwidth-bound batch."""


def bandwidth(
    target: ModelTarget, facts: Mapping[str, object], lookup: BandwidthLookup = no_bandwidth
) -> tuple[float | None, str | None, str | None]:
    """(GB/s, where it came from, what is missing): the model's ``memory_bandwidth_gbps``, its ``gpu_type``'s
    preset, or the simulator's preset deployment in ``attention_info``."""
    if target.memory_bandwidth_gbps is not None:
        return target.memory_bandwidth_gbps, "memory_bandwidth_gbps", None
    if target.gpu_type is not None:
        value = lookup(target.gpu_type)
        if value is not None:
            return value, "gpu_type", None
        return None, None, f"gpu_type {target.gpu_type!r} is no GPU preset attnload knows (e.g. h100, h200, a100)"
    preset = facts.get("memory_bandwidth_gbps")
    if isinstance(preset, int | float):
        return float(preset), "attention_info", None
    return None, None, 'no memory bandwidth: set the model\'s gpu_type (e.g. "h200") or memory_bandwidth_gbps'


def kv_read(
    target: ModelTarget,
    facts: Mapping[str, object],
    lockstep: list[tuple[int, int, DecodeFitSummary]],
    lookup: BandwidthLookup = no_bandwidth,
) -> KvRead:
    """From the lockstep stages' fits ((stage index, sequences, fit)); the largest batch with a line is used."""
    predicted = facts.get("kv_bytes_per_token_per_gpu")
    predicted_bytes = float(predicted) if isinstance(predicted, int | float) and predicted > 0 else None
    usable = [(i, n, f) for i, n, f in lockstep if f.slope_ms_per_1k is not None and n > 0]
    if not usable:
        why = "only a lockstep batch ties the slope to the KV read"
        note = f"needs a decode sweep (--shape decode:A-B) with a fitted line: {why}"
        return KvRead(predicted_bytes_per_token_per_gpu=predicted_bytes, note=note)
    index, sequences, fit = max(usable, key=lambda u: (u[1], u[2].samples))
    assert fit.slope_ms_per_1k is not None
    dp = facts.get("dp_attention")
    ranks = int(dp) if isinstance(dp, int | float) and dp >= 1 else 1
    per_gpu = float(math.ceil(sequences / ranks))
    gbps, source, missing = bandwidth(target, facts, lookup)
    base = KvRead(
        stage=index,
        slope_ms_per_1k=fit.slope_ms_per_1k,
        sequences_per_gpu=per_gpu,
        predicted_bytes_per_token_per_gpu=predicted_bytes,
        bandwidth_gbps=gbps,
        bandwidth_source=source,
    )
    if gbps is None:
        return base.model_copy(update={"note": f"slope only: {missing}"})
    seconds_per_token = fit.slope_ms_per_1k / 1e3 / TOKENS_PER_1K
    measured = seconds_per_token * gbps * 1e9 / per_gpu
    if predicted_bytes is None:
        note = "no KV math for this model (not a preset attnload knows): measured bytes only"
        return base.model_copy(update={"measured_bytes_per_token_per_gpu": round(measured, 1), "note": note})
    ratio = measured / predicted_bytes
    bound = "memory" if UNCLEAR_BELOW_RATIO <= ratio <= MEMORY_BOUND_MAX_RATIO else "compute"
    if ratio < UNCLEAR_BELOW_RATIO:
        bound = "unclear"
    note = f"{per_gpu:g} sequences per GPU ({sequences} in the batch" + (
        f" over {ranks} DP ranks)" if ranks > 1 else ")"
    )
    return base.model_copy(
        update={
            "measured_bytes_per_token_per_gpu": round(measured, 1),
            "ratio": round(ratio, 3),
            "bound": bound,
            "note": note,
        }
    )
