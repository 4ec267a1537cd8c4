"""Which charts the report draws, built from the results model (data selection, not drawing)."""

from __future__ import annotations

from collections.abc import Iterator

from attnload.report.agent.steps import step_charts
from attnload.report.fmt import load_axis_name, series_name, stage_label, stage_x
from attnload.report.svg import PALETTE, Series, line_chart, stacked_bars
from attnload.results.model import ModelSummary, Results, StageSummary


def _colors(results: Results) -> dict[str, str]:
    return {m.key: PALETTE[i % len(PALETTE)] for i, m in enumerate(results.models)}


def _loaded(model: ModelSummary) -> list[StageSummary]:
    """Stages that completed at least one request (a zero-request stage has nothing to plot)."""
    return [s for s in model.stages if s.requests.ok > 0 and stage_x(s) is not None]


def _with_baseline(results: Results, baseline: Results | None) -> Iterator[tuple[str, ModelSummary, bool, str]]:
    """Each model's key and summary (solid), then its baseline twin's where the baseline has one (dashed)."""
    for model in results.models:
        yield model.key, model, False, ""
        twin = next((m for m in baseline.models if m.key == model.key), None) if baseline is not None else None
        if twin is not None:
            yield model.key, twin, True, " — baseline"


def throughput_chart(results: Results, baseline: Results | None = None) -> str:
    """Output tok/s per model against the stage load: where each model's throughput stops growing."""
    colors = _colors(results)
    series: list[Series] = []
    for key, run, dashed, suffix in _with_baseline(results, baseline):
        points = [(float(stage_x(s) or 0.0), s.output_tokens_per_s) for s in _loaded(run)]
        series.append(Series(series_name(run) + suffix, points, colors[key], dashed))
    return line_chart(
        "plot-throughput",
        series,
        load_axis_name(results),
        "output tokens/s",
        log_y=False,
        describe=lambda s, x, y: f"{s.name}: {y:,.0f} tok/s at {x:g}",
    )


def frontier_chart(results: Results, field: str = "ttft_s", q: str = "p99", baseline: Results | None = None) -> str:
    """Latency vs throughput per stage: the frontier; lower-right is better."""
    colors = _colors(results)
    series: list[Series] = []
    for key, run, dashed, suffix in _with_baseline(results, baseline):
        points, labels = [], []
        for stage in _loaded(run):
            value = getattr(getattr(stage, field), q)
            if value is not None:
                points.append((stage.output_tokens_per_s, value * 1000.0))
                labels.append(stage_label(stage).replace(" users", "u"))
        series.append(Series(series_name(run) + suffix, points, colors[key], dashed, labels if not dashed else []))
    name = {"ttft_s": "TTFT", "itl_s": "ITL"}[field]
    return line_chart(
        f"plot-frontier-{name.lower()}-{q}",
        series,
        "output tokens/s",
        f"{name} {q} (ms)",
        sort_x=False,
        describe=lambda s, x, y: f"{s.name}: {name} {q} {y:,.1f} ms at {x:,.0f} tok/s",
    )


def percentile_chart(results: Results, field: str) -> str:
    """p50 (solid) and p99 (dashed) of one latency per stage and model."""
    colors = _colors(results)
    name = {"ttft_s": "TTFT", "itl_s": "ITL", "tpot_s": "TPOT"}[field]
    series: list[Series] = []
    for model in results.models:
        for q, dashed in (("p50", False), ("p99", True)):
            points = []
            for stage in _loaded(model):
                value = getattr(getattr(stage, field), q)
                if value is not None:
                    points.append((float(stage_x(stage) or 0.0), value * 1000.0))
            series.append(Series(f"{series_name(model)} {q}", points, colors[model.key], dashed))
    return line_chart(
        f"plot-{name.lower()}-percentiles",
        series,
        load_axis_name(results),
        f"{name} (ms)",
        describe=lambda s, x, y: f"{s.name}: {y:,.1f} ms at {x:g}",
    )


def context_chart(results: Results) -> str:
    """TTFT p50 (solid) and p99 (dashed) against prompt length, per model on one chart (GQA next to MLA):
    where one attention type's KV footprint makes long contexts slow first."""
    colors = _colors(results)
    series: list[Series] = []
    for model in results.models:
        for q, dashed in (("p50", False), ("p99", True)):
            points = [
                (float(b.prompt_tokens_mean or b.max_tokens), getattr(b.ttft_s, q) * 1000.0)
                for b in model.ttft_by_prompt_tokens
                if getattr(b.ttft_s, q) is not None
            ]
            series.append(Series(f"{series_name(model)} {q}", points, colors[model.key], dashed))
    return line_chart(
        "plot-ttft-context",
        series,
        "prompt tokens (bucket mean)",
        "TTFT (ms)",
        describe=lambda s, x, y: f"{s.name}: {y:,.1f} ms at {x:,.0f} prompt tokens",
    )


CANCELLED = "cancelled"
"""Error class of requests the test's stop interrupted: recorded, but not a failure of the server."""


def failures(model: ModelSummary) -> dict[str, int]:
    """Failed requests by error class, stop-time cancellations left out."""
    return {name: n for name, n in model.errors.items() if name != CANCELLED and n > 0}


def errors_chart(results: Results) -> str:
    bars = [(series_name(m), failures(m)) for m in results.models]
    return stacked_bars("plot-errors", bars, "failed requests by error class")


def cancellations_chart(results: Results) -> str:
    """Requests in flight when a stage or the test stopped; kept apart from failures, which they are not."""
    abandoned = any(m.requests.abandoned for m in results.models)
    bars = [
        (
            series_name(m),
            {
                "cancelled at stop": m.requests.cancelled,
                **({"abandoned by the client": m.requests.abandoned} if abandoned else {}),
            },
        )
        for m in results.models
    ]
    return stacked_bars("plot-cancellations", bars, "requests cancelled at stop or abandoned (not failures)")


def charts(results: Results, baseline: Results | None = None) -> list[tuple[str, str, str]]:
    """(title, caption, svg) for every chart the data supports, in reading order."""
    out: list[tuple[str, str, str]] = []
    if any(_loaded(m) for m in results.models):
        out += [
            (
                "Throughput vs load",
                "Output tokens/s per stage. The curve flattens where a model saturates.",
                throughput_chart(results, baseline),
            ),
            (
                "Latency vs throughput frontier (TTFT p99)",
                "Each point is a stage, joined in stage order. Lower and further right is better; a curve that "
                "shoots up is a model past its knee.",
                frontier_chart(results, "ttft_s", "p99", baseline),
            ),
            (
                "Latency vs throughput frontier (ITL p50)",
                "Typical decode speed as throughput grows.",
                frontier_chart(results, "itl_s", "p50", baseline),
            ),
            ("TTFT by stage", "Solid: p50, dashed: p99.", percentile_chart(results, "ttft_s")),
            ("ITL by stage", "Solid: p50, dashed: p99.", percentile_chart(results, "itl_s")),
        ]
    if any(len(m.ttft_by_prompt_tokens) > 1 or m.turns for m in results.models):
        out.append(
            (
                "TTFT vs context length",
                "TTFT by prompt-length bucket (powers of two); solid p50, dashed p99. A conversation's prompt "
                "grows every turn, so this is where KV bytes per token show.",
                context_chart(results),
            )
        )
    out += step_charts(results)
    if any(failures(m) for m in results.models):
        out.append(
            (
                "Failures",
                "Failed requests by error class (see the fix hints in `attnload check`). "
                "Requests cancelled when the test stopped are not counted here.",
                errors_chart(results),
            )
        )
    if any(m.requests.cancelled or m.requests.abandoned for m in results.models):
        out.append(
            (
                "Cancelled at stop",
                "Requests still in flight when a stage or the test stopped, and streams "
                "the client closed on purpose (--abandon-rate): not server failures, shown apart from them.",
                cancellations_chart(results),
            )
        )
    return out
