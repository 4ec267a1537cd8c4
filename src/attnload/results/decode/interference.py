"""``models[].prefill_interference`` from what the interference recorder classified (``--shape interference:L``)."""

from __future__ import annotations

from attnload.measure.interference import (
    TIMELINE_BUCKET_S,
    InterferenceRecorder,
    during_itl_p50_s,
    stall_per_window_s,
)
from attnload.results.model import PrefillInterference


def prefill_interference(recorder: InterferenceRecorder, key: str) -> PrefillInterference | None:
    """One model's summary; None when nothing was injected into it."""
    series = recorder.series.get(key)
    if series is None or series.injections == 0:
        return None
    per_injection = round(series.prefill_tokens / series.injections)
    baseline = series.baseline.quantile(0.5)
    stall = stall_per_window_s(series, baseline) if baseline is not None else None
    return PrefillInterference(
        prefill_tokens=per_injection,
        injections=series.injections,
        itl_p50_baseline_s=baseline,
        itl_p50_during_s=during_itl_p50_s(series),
        itl_max_during_s=series.during.max if series.during.count else None,
        ms_per_1k_prefill_tokens=stall * 1e3 / (per_injection / 1000) if stall is not None and per_injection else None,
        injected_ttft_p50_s=series.ttft.quantile(0.5),
        itl_timeline=[
            ((bucket + 0.5) * TIMELINE_BUCKET_S, gap / tokens)
            for bucket, (gap, tokens) in sorted(series.timeline.items())
            if tokens
        ],
        windows_s=sorted(series.windows_s),
    )
