"""The HTML report's ITL-against-position plot: per model and stage the binned medians of the decode fit's
windows and its fitted line (dashed), in the attention type's colour; a grid's batch sizes are lines of their own."""

from __future__ import annotations

from attnload.report.ladder.html import attention_colors
from attnload.report.svg import Series, line_chart
from attnload.results.model import Results

MIN_BINS = 3
"""A stage plots once its fit has this many position bins (fewer draw no shape)."""


def itl_position_chart(results: Results) -> str | None:
    """The chart's SVG, or None when no stage has a line over enough positions."""
    colors = attention_colors(results)
    series: list[Series] = []
    for model in results.models:
        color = colors[model.attention.upper()]
        fitted = [s for s in model.stages if s.decode_fit is not None and len(s.decode_fit.bins) >= MIN_BINS]
        for stage in fitted:
            fit = stage.decode_fit
            assert fit is not None
            label = f"{model.key} ({model.attention.upper()})" + (f", {stage.users} users" if len(fitted) > 1 else "")
            series.append(Series(label, [(b[0], b[1]) for b in fit.bins], color))
            if fit.slope_ms_per_1k is not None and fit.intercept_ms is not None and len(fit.positions) == 2:
                ends = [float(p) for p in fit.positions]
                line = [(x, fit.intercept_ms + fit.slope_ms_per_1k * x / 1024) for x in ends]
                series.append(Series(f"{label} fit: {fit.slope_ms_per_1k:.3f} ms per 1K", line, color, dashed=True))
    if not series:
        return None
    return line_chart(
        "plot-itl-position",
        series,
        "position (prompt + token index)",
        "ITL ms (window median)",
        log_y=False,
        x_from_zero=False,
        describe=lambda s, x, y: f"{s.name}: {y:,.3f} ms at position {x:,.0f}",
    )


def capacity_chart(results: Results) -> str | None:
    """A capacity probe's stages: sequences the server ran (solid) and requests waiting (dashed) against users."""
    colors = attention_colors(results)
    series: list[Series] = []
    for model in (m for m in results.models if m.kv_capacity is not None):
        color, name = colors[model.attention.upper()], f"{model.key} ({model.attention.upper()})"
        seen = [(s.users or 0, s.server) for s in model.stages if s.server is not None]
        running = [(float(u), v.requests_running.max) for u, v in seen if v.requests_running.max is not None]
        waiting = [(float(u), v.requests_waiting.mean) for u, v in seen if v.requests_waiting.mean is not None]
        series += [Series(f"{name} running", running, color), Series(f"{name} waiting", waiting, color, dashed=True)]
    if not any(s.points for s in series):
        return None
    return line_chart(
        "plot-kv-capacity",
        [s for s in series if s.points],
        "users per model",
        "sequences (server view)",
        log_y=False,
        describe=lambda s, x, y: f"{s.name}: {y:,.1f} at {x:,.0f} users",
    )


def microscope_charts(results: Results) -> list[tuple[str, str, str]]:
    """(title, caption, svg) of each plot that has data (the decode fit's, a capacity probe's)."""
    charts = []
    if (chart := itl_position_chart(results)) is not None:
        caption = (
            "Inter-token gap against the token's position in its context (prompt tokens + its index in the "
            "answer): medians per position bin of 32-token windows, and the least-squares line (dashed) whose "
            "slope is each stage's decode_fit. The steeper line reads more KV per token of context "
            "(docs/microscope.md)."
        )
        charts.append(("ITL vs position (the decode step against context)", caption, chart))
    if (chart := capacity_chart(results)) is not None:
        caption = (
            "The capacity probe's stages: the most sequences each model's server ran at once (solid) and the "
            "requests waiting on average (dashed), against users per model. Where running stops rising and "
            "requests wait is the KV capacity at this context (kv_capacity)."
        )
        charts.append(("KV capacity probe: running and waiting against users", caption, chart))
    return charts
