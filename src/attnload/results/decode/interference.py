"""``models[].prefill_interference`` from what the interference recorder classified (``--shape interference:L``)."""

from __future__ import annotations

from attnload.measure.interference import (
    TIMELINE_BUCKET_S,
    InterferenceRecorder,
    during_itl_p50_s,
    stall_ms_per_1k_prefill_tokens,
)
from attnload.results.model import PrefillInterference


def prefill_interference(recorder: InterferenceRecorder, key: str) -> PrefillInterference | None:
    """One model's summary; None when nothing was injected into it."""
    series = recorder.series.get(key)
    if series is None or series.injections == 0:
        return None
    return PrefillInterference(
        prefill_tokens=round(series.prefill_tokens / series.injections),
        injections=series.injections,
        itl_p50_baseline_s=series.baseline.quantile(0.5),
        itl_p50_during_s=during_itl_p50_s(series),
        itl_max_during_s=series.during.max if series.during.count else None,
        ms_per_1k_prefill_tokens=stall_ms_per_1k_prefill_tokens(series),
        injected_ttft_p50_s=series.ttft.quantile(0.5),
        itl_timeline=[
            ((bucket + 0.5) * TIMELINE_BUCKET_S, gap / tokens)
            for bucket, (gap, tokens) in sorted(series.timeline.items())
            if tokens
        ],
        windows_s=sorted(series.windows_s),
    )
