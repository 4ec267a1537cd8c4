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


def microscope_charts(results: Results) -> list[tuple[str, str, str]]:
    """(title, caption, svg) of the plot (none without a fitted stage)."""
    chart = itl_position_chart(results)
    if chart is None:
        return []
    caption = (
        "Inter-token gap against the token's position in its context (prompt tokens + its index in the answer): "
        "medians per position bin of 32-token windows, and the least-squares line (dashed) whose slope is each "
        "stage's decode_fit. The steeper line reads more KV per token of context (docs/microscope.md)."
    )
    return [("ITL vs position (the decode step against context)", caption, chart)]
