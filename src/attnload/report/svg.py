"""Hand-written static SVG charts for the HTML report: no script, no CDN, readable offline.

Each chart is an ``<svg class="plot">`` whose data marks carry ``class="datum"`` and
``data-series``/``data-x``/``data-y`` attributes, so tests (and curious readers with
devtools) can check what was drawn against the results file.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html import escape

PALETTE = ("#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#0891b2", "#be185d", "#4d7c0f")
WIDTH, HEIGHT = 640, 340
LEFT, RIGHT, TOP, BOTTOM = 70, 36, 20, 52


@dataclass(frozen=True)
class Series:
    name: str
    points: list[tuple[float, float]]
    color: str
    dashed: bool = False
    labels: list[str] = field(default_factory=list)
    """Optional per-point annotation (e.g. the stage's users) drawn beside the marker."""


def _nice_step(span: float, target: int = 5) -> float:
    raw = span / target if span > 0 else 1.0
    power = 10.0 ** math.floor(math.log10(raw))
    for mult in (1, 2, 2.5, 5, 10):
        if raw <= mult * power:
            return mult * power
    return 10 * power


def linear_ticks(lo: float, hi: float) -> list[float]:
    step = _nice_step(hi - lo)
    start = math.floor(lo / step) * step
    ticks, value = [], start
    while value <= hi + step * 1e-9:
        if value >= lo - step * 1e-9:
            ticks.append(round(value, 10))
        value += step
    return ticks


def log_ticks(lo: float, hi: float) -> list[float]:
    ticks = []
    for exp in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        for mult in (1, 2, 5):
            value = mult * 10**exp
            if lo <= value <= hi:
                ticks.append(value)
    return ticks


def _num(value: float) -> str:
    return f"{value:.6g}"


def _axis_fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 10_000:
        return f"{value / 1000:g}k"
    return f"{value:g}"


@dataclass(frozen=True)
class _YScale:
    """The value axis: linear from 0, or log between the powers of ten around the positive values."""

    lo: float
    hi: float
    ticks: list[float]
    log: bool

    @staticmethod
    def of(ys: Sequence[float], log: bool | None) -> _YScale:
        """The axis for ``ys``; ``log=None`` picks a log axis when the values are positive and span more than ×30."""
        positive = [y for y in ys if y > 0]
        if log is None:
            log = bool(positive) and len(positive) == len(ys) and max(positive) / min(positive) > 30
        if log:
            lo, hi = 10 ** math.floor(math.log10(min(positive))), 10 ** math.ceil(math.log10(max(positive) * 1.05))
            return _YScale(lo, hi, log_ticks(lo, hi), True)
        hi = max(ys) * 1.1 if max(ys) > 0 else 1.0
        ticks = linear_ticks(0.0, hi)
        return _YScale(0.0, max(hi, ticks[-1]), ticks, False)

    def to_pixel(self, y: float) -> float:
        plot_h = HEIGHT - TOP - BOTTOM
        if self.log:
            frac = (math.log10(max(y, self.lo)) - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))
        else:
            frac = (y - self.lo) / (self.hi - self.lo)
        return TOP + plot_h - frac * plot_h

    def titled(self, label: str) -> str:
        return label + (" (log)" if self.log else "")


@dataclass(frozen=True)
class _XScale:
    """The load axis: linear, widened to whole ticks (and by 1 each way around a single value)."""

    lo: float
    hi: float
    ticks: list[float]

    @staticmethod
    def of(lo: float, hi: float) -> _XScale:
        if hi <= lo:
            lo, hi = lo - 1, hi + 1
        ticks = linear_ticks(lo, hi)
        return _XScale(lo, max(hi, ticks[-1]), ticks)

    def to_pixel(self, x: float) -> float:
        return LEFT + (x - self.lo) / (self.hi - self.lo) * (WIDTH - LEFT - RIGHT)


def _no_data(plot_id: str) -> str:
    return f'<p class="empty" id="{escape(plot_id)}">no data to plot</p>'


def _chart_start(
    css_class: str, plot_id: str, series: int, x: _XScale, y: _YScale, x_label: str, y_label: str
) -> list[str]:
    """The opening tag (tall enough for two legend entries a row), grid, ticks, frame and axis titles."""
    out = [_svg_open(css_class, plot_id, HEIGHT + 20 * math.ceil(series / 2), f"{y_label} vs {x_label}")]
    return out + _axes(x.ticks, y.ticks, x.to_pixel, y.to_pixel, x_label, y.titled(y_label))


def _svg_open(css_class: str, plot_id: str, height: float, aria_label: str) -> str:
    return (
        f'<svg class="{css_class}" id="{escape(plot_id)}" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-label="{escape(aria_label)}" xmlns="http://www.w3.org/2000/svg">'
    )


def _x_grid_line(x: float, tick: float, plot_h: float) -> str:
    """A vertical grid line at pixel ``x`` with its tick label under the plot."""
    return (
        f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{TOP + plot_h}"/>'
        f'<text class="tick" x="{x:.1f}" y="{TOP + plot_h + 16}" text-anchor="middle">{_axis_fmt(tick)}</text>'
    )


def line_chart(
    plot_id: str,
    series: Sequence[Series],
    x_label: str,
    y_label: str,
    *,
    log_y: bool | None = None,
    x_from_zero: bool = True,
    sort_x: bool = True,
    describe: Callable[[Series, float, float], str] | None = None,
) -> str:
    """Lines with markers; ``log_y=None`` picks a log axis when values span more than ×30.

    ``sort_x=False`` keeps the given point order (a frontier is drawn in stage order, and
    throughput can fall back past the knee).
    """
    drawn = [s for s in series if s.points]
    xs = [x for s in drawn for x, _ in s.points]
    if not xs:
        return _no_data(plot_id)
    x_scale = _XScale.of(0.0 if x_from_zero else min(xs), max(xs))
    y_scale = _YScale.of([y for s in drawn for _, y in s.points], log_y)
    px, py = x_scale.to_pixel, y_scale.to_pixel
    out = _chart_start("plot", plot_id, len(drawn), x_scale, y_scale, x_label, y_label)
    for s in drawn:
        pts = list(zip(s.points, s.labels or [""] * len(s.points), strict=True))
        if sort_x:
            pts.sort(key=lambda p: p[0][0])
        d = " ".join(f"{'M' if i == 0 else 'L'}{px(x):.1f},{py(y):.1f}" for i, ((x, y), _) in enumerate(pts))
        dash = ' stroke-dasharray="6 4"' if s.dashed else ""
        name = escape(s.name)
        out.append(f'<path class="series-line" data-series="{name}" d="{d}" stroke="{s.color}"{dash}/>')
        for (x, y), label in pts:
            tip = describe(s, x, y) if describe else f"{s.name}: {x:g}, {y:g}"
            out.append(
                f'<circle class="datum" data-series="{name}" data-x="{_num(x)}" data-y="{_num(y)}" '
                f'cx="{px(x):.1f}" cy="{py(y):.1f}" r="4" fill="{s.color}"><title>{escape(tip)}</title>'
                "</circle>"
            )
            if label and (x, y) in (pts[0][0], pts[-1][0]):  # ends only: middle labels collide
                out.append(f'<text class="point-label" x="{px(x) + 6:.1f}" y="{py(y) - 6:.1f}">{escape(label)}</text>')
    out += _legend(drawn)
    out.append("</svg>")
    return "".join(out)


def scatter_chart(plot_id: str, series: Sequence[Series], x_label: str, y_label: str) -> str:
    """Dots only (one per request); a log y axis when the values span more than ×30."""
    drawn = [s for s in series if s.points]
    xs = [x for s in drawn for x, _ in s.points]
    if not xs:
        return _no_data(plot_id)
    x_scale = _XScale.of(0.0, max(max(xs), 1.0))
    y_scale = _YScale.of([y for s in drawn for _, y in s.points], None)
    px, py = x_scale.to_pixel, y_scale.to_pixel
    out = _chart_start("plot scatter", plot_id, len(drawn), x_scale, y_scale, x_label, y_label)
    for s in drawn:
        name = escape(s.name)
        out += [
            f'<circle class="datum" data-series="{name}" data-x="{_num(x)}" data-y="{_num(y)}" cx="{px(x):.1f}" '
            f'cy="{py(y):.1f}" r="1.8" fill="{s.color}" fill-opacity="0.5"/>'
            for x, y in s.points
        ]
    out += _legend(drawn)
    out.append("</svg>")
    return "".join(out)


def _axes(
    x_ticks: Sequence[float],
    y_ticks: Sequence[float],
    px: Callable[[float], float],
    py: Callable[[float], float],
    x_label: str,
    y_label: str,
) -> list[str]:
    """Grid lines with tick labels, the plot frame and both axis titles."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    out = []
    for tick in y_ticks:
        y = py(tick)
        out.append(
            f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
            f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{_axis_fmt(tick)}</text>'
        )
    out += [_x_grid_line(px(tick), tick, plot_h) for tick in x_ticks]
    out.append(f'<rect class="frame" x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}"/>')
    out.append(
        f'<text class="axis" x="{LEFT + plot_w / 2:.0f}" y="{TOP + plot_h + 36}" '
        f'text-anchor="middle">{escape(x_label)}</text>'
    )
    out.append(
        f'<text class="axis" transform="translate(16 {TOP + plot_h / 2:.0f}) rotate(-90)" '
        f'text-anchor="middle">{escape(y_label)}</text>'
    )
    return out


def _legend(drawn: Sequence[Series]) -> list[str]:
    """Two legend entries per row under the plot, each a line sample with its marker and name."""
    plot_w = WIDTH - LEFT - RIGHT
    out = []
    for i, s in enumerate(drawn):
        lx, ly = LEFT + (i % 2) * (plot_w / 2), HEIGHT + 20 * (i // 2) - 8
        dash = ' stroke-dasharray="6 4"' if s.dashed else ""
        out.append(
            f'<g class="legend"><line x1="{lx:.0f}" x2="{lx + 22:.0f}" y1="{ly}" y2="{ly}" '
            f'stroke="{s.color}" stroke-width="2.5"{dash}/><circle cx="{lx + 11:.0f}" cy="{ly}" r="3.5" '
            f'fill="{s.color}"/><text x="{lx + 30:.0f}" y="{ly + 4}">{escape(s.name)}</text></g>'
        )
    return out


def stacked_bars(plot_id: str, bars: Sequence[tuple[str, dict[str, int]]], x_label: str) -> str:
    """Horizontal stacked bars, one per category (model), one segment per class (error)."""
    classes = sorted({c for _, parts in bars for c, n in parts.items() if n > 0})
    if not classes:
        return f'<p class="empty" id="{escape(plot_id)}">no errors</p>'
    colors = {c: PALETTE[(i + 1) % len(PALETTE)] for i, c in enumerate(classes)}
    totals = [sum(parts.values()) for _, parts in bars]
    hi = float(max(totals) or 1)
    ticks = linear_ticks(0, hi)
    hi = max(hi, ticks[-1])
    bar_h, gap, left = 26, 12, 150
    plot_w = WIDTH - left - RIGHT
    plot_h = len(bars) * (bar_h + gap) + gap
    height = TOP + plot_h + 44 + 20 * math.ceil(len(classes) / 4)
    out = [_svg_open("plot", plot_id, height, x_label)]
    out += [_x_grid_line(left + tick / hi * plot_w, tick, plot_h) for tick in ticks]
    out.append(
        f'<text class="axis" x="{left + plot_w / 2:.0f}" y="{TOP + plot_h + 34}" '
        f'text-anchor="middle">{escape(x_label)}</text>'
    )
    for row, (name, parts) in enumerate(bars):
        y = TOP + gap + row * (bar_h + gap)
        out.append(
            f'<text class="category" x="{left - 8}" y="{y + bar_h / 2 + 4:.0f}" text-anchor="end">{escape(name)}</text>'
        )
        x = float(left)
        for cls in classes:
            n = parts.get(cls, 0)
            if n <= 0:
                continue
            w = n / hi * plot_w
            out.append(
                f'<rect class="datum" data-series="{escape(name)}" data-x="{escape(cls)}" data-y="{n}" '
                f'x="{x:.1f}" y="{y}" width="{max(w, 1.0):.1f}" height="{bar_h}" fill="{colors[cls]}">'
                f"<title>{escape(f'{name}: {cls} {n}')}</title></rect>"
            )
            x += w
        if not any(parts.values()):
            out.append(f'<text class="tick" x="{left + 6}" y="{y + bar_h / 2 + 4:.0f}">no errors</text>')
    for i, cls in enumerate(classes):
        lx, ly = left + (i % 4) * (plot_w / 4), TOP + plot_h + 52 + 20 * (i // 4)
        out.append(
            f'<g class="legend"><rect x="{lx:.0f}" y="{ly - 9}" width="12" height="12" '
            f'fill="{colors[cls]}"/><text x="{lx + 18:.0f}" y="{ly + 2}">{escape(cls)}</text></g>'
        )
    out.append("</svg>")
    return "".join(out)
