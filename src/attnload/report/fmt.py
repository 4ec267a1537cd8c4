"""Number formatting and metric lookup shared by the console, HTML and Locust renderings.

One place decides how a latency or a byte count reads, so the terminal table, the
HTML report and the LLM tab show the same figure for the same field.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from attnload.results.model import ModelSummary, Results, StageSummary, Summary, Totals

DASH = "—"


def ms(seconds: float | None, digits: int = 1) -> str:
    """A latency in seconds as milliseconds; ``—`` when the distribution is empty."""
    if seconds is None:
        return DASH
    value = seconds * 1000.0
    if value >= 1000:
        return f"{seconds:,.2f} s"
    return f"{value:,.{digits}f} ms"


def ms_bare(seconds: float | None) -> str:
    """Milliseconds without the unit, for table columns whose header names it."""
    if seconds is None:
        return DASH
    value = seconds * 1000.0
    return f"{value:,.0f}" if value >= 1000 else f"{value:,.1f}"


def rate(value: float | None, unit: str = "") -> str:
    if value is None:
        return DASH
    text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.2f}" if abs(value) < 10 else f"{value:,.1f}"
    return f"{text} {unit}".rstrip()


def kib(n_bytes: float | int | str | None) -> str:
    """Bytes as KiB (1024 B, as docs/cost-model.md counts them)."""
    if n_bytes is None or isinstance(n_bytes, str):
        return DASH if n_bytes is None else str(n_bytes)
    value = float(n_bytes) / 1024.0
    return f"{value:,.0f} KiB" if value >= 100 else f"{value:,.1f} KiB"


def count(n: float | int | str | None) -> str:
    if n is None:
        return DASH
    if isinstance(n, str):
        return n
    if n >= 1e6:
        return f"{n / 1e6:,.2f} M"
    return f"{n:,.0f}"


def percent(fraction: float | None) -> str:
    """A 0–1 share (KV cache used, a hit ratio) as a percentage with one decimal: ``2.3 %``.

    Why: servers export these as fractions (vLLM's ``kv_cache_usage_perc`` is 0–1 despite its
    name); a raw ``0.02309707431366254`` under a percent header reads as 0.02 %.
    """
    if fraction is None:
        return DASH
    return f"{fraction * 100:,.1f} %"


def pct(delta: float | None) -> str:
    if delta is None:
        return DASH
    return f"{delta * 100:+.1f}%"


def stage_label(stage: StageSummary) -> str:
    """``64 users`` for a closed-loop stage, ``2 req/s`` for an open-loop one."""
    if stage.users is not None:
        return f"{stage.users} user" + ("" if stage.users == 1 else "s")
    if stage.rate is not None:
        return f"{stage.rate:g} req/s"
    return f"stage {stage.index + 1}"


def stage_x(stage: StageSummary) -> float | None:
    """The load axis of a stage: users (closed loop) or arrival rate (open loop)."""
    if stage.users is not None:
        return float(stage.users)
    return stage.rate


def load_axis_name(results: Results) -> str:
    for model in results.models:
        for stage in model.stages:
            if stage.users is not None:
                return "concurrent users"
            if stage.rate is not None:
                return "arrival rate (req/s per model)"
    return "stage"


def series_name(model: ModelSummary) -> str:
    return f"{model.key} ({model.attention.upper()})"


def error_total(totals: Totals) -> int:
    return sum(totals.errors.values())


@dataclass(frozen=True)
class Metric:
    """One column of the summary: a value getter, how it reads, and which way is better."""

    key: str
    title: str
    path: str
    """Dotted path of the field in the results JSON (``ttft_s.p50``), for tests and tooltips."""
    get: Callable[[Totals], float | None]
    show: Callable[[float | None], str]
    higher_is_better: bool = False


def _summary(name: str, q: str) -> Callable[[Totals], float | None]:
    def get(totals: Totals) -> float | None:
        summary: Summary = getattr(totals, name)
        value: float | None = getattr(summary, q)
        return value

    return get


METRICS: tuple[Metric, ...] = (
    Metric("ttft_p50", "TTFT p50", "ttft_s.p50", _summary("ttft_s", "p50"), ms),
    Metric("ttft_p99", "TTFT p99", "ttft_s.p99", _summary("ttft_s", "p99"), ms),
    Metric("itl_p50", "ITL p50", "itl_s.p50", _summary("itl_s", "p50"), ms),
    Metric("itl_p99", "ITL p99", "itl_s.p99", _summary("itl_s", "p99"), ms),
    Metric("tpot_p50", "TPOT p50", "tpot_s.p50", _summary("tpot_s", "p50"), ms),
    Metric("output_tps", "out tok/s", "output_tokens_per_s", lambda t: t.output_tokens_per_s, lambda v: rate(v), True),
    Metric("goodput", "goodput req/s", "goodput_rps", lambda t: t.goodput_rps, lambda v: rate(v), True),
)
"""Medians first (the seed's advice), then tails, then throughput."""
