"""``no_data``: a model or stage where no request finished, said loudly and in words.

A run against a server slower than the run (or a proxy that stalls every request) finishes nothing;
its tables of dashes look like a clean run's with nothing to say. Here the model or stage gets the
flag ``no_data`` and the reason — nothing was answered, every request was still waiting for its first
token after N s, or all failed with class X — which the console prints first, ``attnload run`` turns into
exit 1 (for a model; ``--fail-on no-data`` for a stage), and the verdict never compares.
"""

from __future__ import annotations

from attnload.measure.recorder import Series
from attnload.results.truth.fields import NO_DATA_FLAG

__all__ = ["NO_DATA_FLAG", "no_data_reason", "with_flag"]


def no_data_reason(series: Series) -> str | None:
    """Why no request finished in ``series`` (None: some did). Abandoned requests count as finished: what
    they measured (TTFT, ITL) is real."""
    counts = series.counts
    if counts.get("ok", 0) or counts.get("abandoned", 0):
        return None
    failed, waiting, streaming = (counts.get(k, 0) for k in ("failed", "censored_waiting", "censored_streaming"))
    if not failed + waiting + streaming:
        return "nothing answered: no request was sent, or none came back before the end"
    wait_s = series.hists["ttft_censored"].max
    if failed == 0 and streaming == 0:
        return (
            f"every request ({waiting:,}) was still waiting for its first token when it was cut, "
            f"after up to {wait_s:.1f} s: the server is slower than the run; run longer or check the server"
        )
    parts = []
    if failed:
        ranked = sorted(series.errors.items(), key=lambda kv: (-kv[1], kv[0]))
        classes = ", ".join(f"{name} {n:,}" for name, n in ranked if name != "cancelled")
        parts.append(
            f"all {failed:,} failed ({classes})" if not waiting + streaming else f"{failed:,} failed ({classes})"
        )
    if waiting:
        parts.append(f"{waiting:,} still waiting for a first token after up to {wait_s:.1f} s")
    if streaming:
        parts.append(f"{streaming:,} cut while streaming")
    return "; ".join(parts)


def with_flag(flags: list[str], reason: str | None) -> list[str]:
    """``flags`` with ``no_data`` added when there is a reason."""
    return [*flags, NO_DATA_FLAG] if reason is not None and NO_DATA_FLAG not in flags else list(flags)
