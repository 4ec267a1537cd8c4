"""The verdict's microscope sentences: how each model's decode step grows with context and what it reads,
and how many sequences and KV tokens it admitted at a context against the KV math."""

from __future__ import annotations

from attnload.results.microscope.schema import KvCapacity, KvRead

_BOUND = {
    "memory": "reading its KV cache sets the step",
    "compute": "faster than reading its KV explains: its attention math, not the KV read, sets the step "
    "(as the seed says of MLA at query length 1)",
    "unclear": "slower than its KV math: the batch was not decoding in lockstep, bandwidth-bound",
}


def kib(value: float) -> str:
    return f"{value / 1024:,.0f} KiB"


def _clause(key: str, read: KvRead) -> str:
    text = f"each decode step of {key} grows {read.slope_ms_per_1k:.3f} ms per 1K tokens of context"
    measured, predicted = read.measured_bytes_per_token_per_gpu, read.predicted_bytes_per_token_per_gpu
    if measured is not None and predicted is not None:
        text += f" — {kib(measured)} read per token per GPU against {kib(predicted)} by the KV math"
        if read.bound in _BOUND:
            text += f": {_BOUND[read.bound]}"
    elif measured is not None:
        text += f" — {kib(measured)} read per token per GPU"
    return text


def mechanism_sentence(reads: dict[str, KvRead]) -> str | None:
    """One sentence over the models with a decode slope, and which slows faster with context."""
    sloped = {k: r for k, r in reads.items() if r.slope_ms_per_1k is not None}
    if not sloped:
        return None
    text = "; ".join(_clause(k, r) for k, r in sloped.items())
    if len(sloped) >= 2:
        steep = max(sloped, key=lambda k: sloped[k].slope_ms_per_1k or 0.0)
        flat = min(sloped, key=lambda k: sloped[k].slope_ms_per_1k or 0.0)
        low = sloped[flat].slope_ms_per_1k or 0.0
        if steep != flat and low > 0:
            ratio = (sloped[steep].slope_ms_per_1k or 0.0) / low
            text += f"; {steep}'s decode slows {ratio:.1f}× as fast with context as {flat}'s"
    return text[0].upper() + text[1:] + "."


def capacity_sentence(capacities: dict[str, KvCapacity]) -> str | None:
    """Sequences and KV tokens each model admitted at the probe's context, against the KV math."""
    parts = []
    for key, cap in capacities.items():
        if cap.max_running is None:
            continue
        plural = "" if cap.max_running == 1 else "s"
        text = f"{key} served {cap.max_running} sequence{plural} at once at {cap.context:,} tokens of context"
        if cap.kv_tokens is not None:
            text += f" ({cap.kv_tokens:,} KV tokens"
            text += f", {cap.per_gpu:,.0f} per GPU" if cap.per_gpu is not None else ""
            text += f", {cap.ratio:.2f}× the KV math's {cap.predicted_tokens:,})" if cap.ratio is not None else ")"
        parts.append(text)
    return ("KV capacity: " + "; ".join(parts) + ".") if parts else None
