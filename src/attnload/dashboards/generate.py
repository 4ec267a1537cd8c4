"""The Grafana dashboards, as code: one generator for the JSON under ``grafana/dashboards/``.

Why code and not hand-edited JSON: three dashboards share variables, selectors, units
and the quantile query shape; spelling them once keeps every panel on the metric names
of docs/design.md and makes the "every expr returns data" test possible (it reads the
generated JSON, and :func:`expr_requirements` says what a query needs to show data).

``python -m attnload.dashboards.generate`` rewrites the files; ``--check`` exits 1 on
drift (the test suite does the same comparison).

Queries are plain PromQL over the master's series and the server's own (vLLM/SGLang
names, which the simulator also exports), with no recording rules, so a dashboard works
against any Prometheus that scrapes them. Every panel sets a Grafana unit id; a colour
means one attention type everywhere (GQA blue, MLA orange), so percentiles get their own
panels (or dashed lines) rather than their own colours. Stage changes are annotations
that name the stage and its target load.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from attnload.dashboards.gpupanels import gpu_view
from attnload.dashboards.panels import (
    ATTENTION_COLORS,
    RATE,
    SCOPE,
    SEL,
    SEL_USERS,
    SPLIT,
    TOKENS_PER_S,
    Dashboard,
    Panel,
    Target,
    decode_slope,
    expr_requirements,
    latency_pair,
    prefill_stall,
    quantile,
    rate_sum,
    ratio_panels,
    reasoning_share,
    server_view,
)
from attnload.exporter import names
from attnload.measure.metrics import METRICS

__all__ = ["Dashboard", "Panel", "Target", "expr_requirements", "quantile", "rate_sum", "rendered", "main"]

DATASOURCE_UID = "attnload-prometheus"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SCHEMA_VERSION = 39
"""Grafana 10.4/11 dashboard model; older Grafana migrates down-level JSON, not up-level."""

CLIENT_NOTE = (
    "Measured by the load generator (client side). When the target is attnload's simulator, "
    "the latencies are simulated, not a claim about a real server."
)

DASHBOARD_FILES = {
    "attnload-overview": "attnload-overview.json",
    "attnload-sweep": "attnload-sweep.json",
    "attnload-health": "attnload-health.json",
}


# -- dashboard 1: GQA vs MLA overview ------------------------------------------------------

TTFT = names.TTFT_SECONDS
ITL = names.ITL_SECONDS
ZERO_PER_MODEL = f"(0 * sum by ({SPLIT}) (rate(attnload_requests_total{{{SEL}}}[{RATE}])))"
"""A 0 for each model that sends requests: an error panel of a clean run reads 0, not "No data"."""
TARGET_USERS = Target(f"max({names.TARGET_USERS}{{{SCOPE}}})", "target users")


ERROR_RATIO = (
    f"sum by ({SPLIT}, error) (rate(attnload_request_errors_total{{{SEL}}}[{RATE}]))"
    f" / ignoring (error) group_left"
    f" sum by ({SPLIT}) (rate(attnload_requests_total{{{SEL}}}[{RATE}]))"
    f" or on ({SPLIT}) {ZERO_PER_MODEL}"
)
"""Each error class's share of finished requests per model (0 per model when none fail)."""
FAILED_RATIO = (
    f'sum by ({SPLIT}) (rate(attnload_requests_total{{outcome="failed", {SEL}}}[{RATE}]))'
    f" / sum by ({SPLIT}) (rate(attnload_requests_total{{{SEL}}}[{RATE}]))"
    f" or on ({SPLIT}) {ZERO_PER_MODEL}"
)


def metric_panels() -> Iterator[Panel]:
    """A p50 and a p99 panel for each metric of the table that names a panel (``measure.metrics``)."""
    for metric in METRICS:
        if metric.panel is not None and metric.prometheus is not None:
            note = metric.panel.note + (CLIENT_NOTE if metric.panel.client_side else "")
            yield from latency_pair(metric.panel.title, metric.prometheus, note)


def overview() -> Dashboard:
    panels = (
        *ratio_panels(),
        *metric_panels(),
        decode_slope(),
        prefill_stall(),
        Panel(
            "Output tokens/s",
            TOKENS_PER_S,
            (Target(rate_sum(f"{names.COMPLETION_TOKENS}_total")),),
            "Completion tokens per second (server usage when reported).",
        ),
        reasoning_share(),
        Panel(
            "Prompt tokens/s",
            TOKENS_PER_S,
            (Target(rate_sum(f"{names.PROMPT_TOKENS}_total")),),
            "Prompt tokens per second sent to each model.",
        ),
        Panel(
            "Requests/s by outcome",
            "reqps",
            (
                Target(
                    rate_sum(f"{names.REQUESTS}_total", by=f"{SPLIT}, outcome"),
                    "{{attention}} {{model}} [{{target}}] {{outcome}}",
                ),
            ),
            "Finished requests per second: ok, failed, cancelled (cancelled dashed).",
            dashed_legend="(failed|cancelled)$",
        ),
        Panel(
            "Goodput (requests/s meeting SLOs)",
            "reqps",
            (Target(rate_sum(f"{names.GOODPUT_REQUESTS}_total")),),
            "Requests per second that met every SLO in the config's `slo` section.",
        ),
        Panel(
            "Error rate by class",
            "percentunit",
            (Target(ERROR_RATIO, "{{attention}} {{model}} [{{target}}] {{error}}"),),
            "Share of finished requests failing with each error class (docs/design.md); 0 when none fail.",
        ),
        Panel("Failed request ratio", "percentunit", (Target(FAILED_RATIO),), "Failed / all finished requests."),
        Panel(
            "In-flight users",
            "short",
            (Target(f"sum by ({SPLIT}) (attnload_users{{{SEL_USERS}}})"), TARGET_USERS),
            "Running users per model against the target user count (dashed).",
            dashed_legend="^target users$",
        ),
        *server_view(),
        *gpu_view(),
    )
    return Dashboard(
        "attnload-overview",
        "attnload: GQA vs MLA overview",
        "Client-side latency and throughput per model, split by attention type, and the server's own "
        "state. " + CLIENT_NOTE,
        panels,
        ("attnload", "gqa-vs-mla"),
    )


# -- dashboard 2: concurrency sweep ---------------------------------------------------------


def _against_users(
    title: str, unit: str, targets: tuple[Target, ...], description: str, dashed: str | None = None
) -> Panel:
    """Time-aligned with the sweep: the target user count rides on the right axis."""
    return Panel(
        title,
        unit,
        (*targets, TARGET_USERS),
        description + " Target users (right axis) mark each concurrency step.",
        right_axis_legend="target users",
        dashed_legend=dashed,
    )


def _p50_p99(metric: str) -> tuple[Target, ...]:
    return tuple(
        Target(quantile(q, metric), f"p{round(q * 100)} {{{{attention}}}} {{{{model}}}} [{{{{target}}}}]")
        for q in (0.5, 0.99)
    )


def sweep() -> Dashboard:
    panels = (
        Panel(
            "Stage, target users and target rate",
            "short",
            (
                Target(f"max({names.STAGE}{{{SCOPE}}}) + 1", "stage number"),
                TARGET_USERS,
                Target(f"max({names.TARGET_RATE}{{{SCOPE}}})", "target rate (req/s per model)"),
            ),
            "The shape's current step: stage number (0 before start), closed-loop users, open-loop rate.",
        ),
        _against_users(
            "TTFT vs target users (p99 dashed)",
            "s",
            _p50_p99(TTFT),
            "Where TTFT climbs marks the knee: queueing once KV capacity is full.",
            dashed="^p99",
        ),
        _against_users(
            "ITL vs target users (p99 dashed)",
            "s",
            _p50_p99(ITL),
            "Decode step time grows with the batch; bounded once capacity caps the batch.",
            dashed="^p99",
        ),
        _against_users(
            "Output tokens/s vs target users",
            TOKENS_PER_S,
            (Target(rate_sum(f"{names.COMPLETION_TOKENS}_total")),),
            "Throughput flattens where the server saturates.",
        ),
        _against_users(
            "Requests/s vs target users",
            "reqps",
            (Target(rate_sum(f"{names.REQUESTS}_total")),),
            "All finished requests.",
        ),
        _against_users(
            "Users per model vs target users",
            "short",
            (Target(f"sum by ({SPLIT}) (attnload_users{{{SEL_USERS}}})"),),
            "Running users per model.",
        ),
        *server_view(),
    )
    return Dashboard(
        "attnload-sweep",
        "attnload: concurrency sweep",
        "Latency, throughput and the server's KV/queue state, time-aligned with the shape's steps "
        "(attnload_stage, attnload_target_users). " + CLIENT_NOTE,
        panels,
        ("attnload", "sweep"),
    )


# -- dashboard 3: load generator health -----------------------------------------------------


def health() -> Dashboard:
    panels = (
        Panel(
            "Workers",
            "short",
            (Target(f"max({names.WORKERS}{{{SCOPE}}})", "workers"),),
            "Locust workers connected to the master.",
            kind="stat",
            width=6,
            height=6,
        ),
        Panel(
            "Client saturated",
            "short",
            (Target(f"max({names.CLIENT_SATURATED}{{{SCOPE}}})", "saturated"),),
            "1 when a worker's CPU is above 90% or its cgroup throttled it more than 10% of the time: "
            "results are flagged client_saturated.",
            kind="stat",
            width=6,
            height=6,
            thresholds=(("green", None), ("red", 1.0)),
        ),
        Panel(
            "Users vs target",
            "short",
            (Target(f"sum(attnload_users{{{SEL_USERS}}})", "users"), TARGET_USERS),
            "Spawned users against the shape's target (dashed).",
            width=12,
            height=6,
            dashed_legend="^target users$",
        ),
        Panel(
            "Worker CPU",
            "percentunit",
            (Target(f"{names.WORKER_CPU_RATIO}{{{SCOPE}}}", "{{worker}}"),),
            "Per-worker CPU share. Above 90% the client, not the server, sets the latency: add workers.",
            thresholds=(("green", None), ("red", 0.9)),
            max_value=1.0,
        ),
        Panel(
            "Dispatch lag (p99 dashed)",
            "s",
            tuple(
                Target(
                    quantile(q, names.DISPATCH_LAG_SECONDS),
                    f"p{round(q * 100)} {{{{attention}}}} {{{{model}}}} [{{{{target}}}}]",
                )
                for q in (0.5, 0.99)
            ),
            "Open-loop runs: intended minus actual send time (coordinated omission made visible).",
            dashed_legend="^p99",
        ),
        Panel(
            "Errors/s by class",
            "reqps",
            (
                Target(
                    f"sum by (error) (rate(attnload_request_errors_total{{{SEL}}}[{RATE}]))"
                    f" or on () (0 * sum(rate(attnload_requests_total{{{SEL}}}[{RATE}])))",
                    "{{error}}",
                ),
            ),
            "Error classes (docs/design.md); `attnload check` prints the fix for each.",
        ),
        Panel(
            "Requests/s by outcome",
            "reqps",
            (Target(f"sum by (outcome) (rate(attnload_requests_total{{{SEL}}}[{RATE}]))", "{{outcome}}"),),
            "Cancelled requests come from stopping a stage mid-request.",
        ),
    )
    return Dashboard(
        "attnload-health",
        "attnload: load generator health",
        "Is the client trustworthy? Worker count and CPU, dispatch lag, error classes.",
        panels,
        ("attnload", "health"),
    )


DASHBOARDS = (overview, sweep, health)


# -- rendering ------------------------------------------------------------------------------


def _variable(name: str, label: str, source: str = "attnload_requests_total") -> dict[str, Any]:
    definition = f"label_values({source}, {name})"
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": dict(DATASOURCE),
        "definition": definition,
        "query": {"query": definition, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "options": [],
        "refresh": 2,
        "regex": "",
        "sort": 1,
        "hide": 0,
    }


def _templating() -> dict[str, Any]:
    datasource = {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "current": {"selected": True, "text": "attnload Prometheus", "value": DATASOURCE_UID},
        "options": [],
        "refresh": 1,
        "regex": "",
        "hide": 0,
    }
    # Namespace and job come from `up`: the scrape targets, the simulator's and the server's included.
    return {
        "list": [
            datasource,
            _variable("namespace", "Namespace", "up"),
            _variable("job", "Job", "up"),
            _variable("model", "Model"),
            _variable("attention", "Attention"),
            _variable("target", "Target (config key)"),
            _variable("profile", "Profile"),
        ]
    }


def _color_overrides() -> list[dict[str, Any]]:
    """One colour per attention type, matched on the legend's first word (after a ``p99`` prefix)."""
    return [
        {
            "matcher": {"id": "byRegexp", "options": f"/^(p\\d+ )?{name}\\b/i"},
            "properties": [{"id": "color", "value": {"mode": "fixed", "fixedColor": color}}],
        }
        for name, color in ATTENTION_COLORS
    ]


def _field_config(panel: Panel) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": panel.unit}
    if panel.kind != "stat":
        defaults["min"] = 0
    if panel.max_value is not None:
        defaults["max"] = panel.max_value
    if panel.decimals is not None:
        defaults["decimals"] = panel.decimals
    if panel.kind == "timeseries":
        defaults["custom"] = {
            "drawStyle": "line",
            "lineWidth": 1,
            "fillOpacity": 0,
            "showPoints": "never",
            "spanNulls": False,
            "axisPlacement": "auto",
        }
    if panel.thresholds:
        defaults["thresholds"] = {"mode": "absolute", "steps": [{"color": c, "value": v} for c, v in panel.thresholds]}
        if panel.kind == "timeseries":
            defaults["custom"]["thresholdsStyle"] = {"mode": "line"}
    overrides: list[dict[str, Any]] = _color_overrides() if panel.kind == "timeseries" else []
    if panel.dashed_legend:
        overrides.append(
            {
                "matcher": {"id": "byRegexp", "options": f"/{panel.dashed_legend}/"},
                "properties": [{"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}}],
            }
        )
    if panel.right_axis_legend:
        overrides.append(
            {
                "matcher": {"id": "byName", "options": panel.right_axis_legend},
                "properties": [
                    {"id": "unit", "value": panel.right_unit},
                    {"id": "custom.axisPlacement", "value": "right"},
                    {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
                ],
            }
        )
    return {"defaults": defaults, "overrides": overrides}


def _options(panel: Panel) -> dict[str, Any]:
    if panel.kind == "stat":
        return {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "value",
            "graphMode": "area",
            "justifyMode": "auto",
            "orientation": "auto",
            "textMode": "auto",
        }
    return {
        "legend": {"displayMode": "table", "placement": "bottom", "showLegend": True, "calcs": ["lastNotNull", "max"]},
        "tooltip": {"mode": "multi", "sort": "desc"},
    }


def _layout(panels: Sequence[Panel]) -> Iterator[tuple[int, int, int]]:
    """Left-to-right rows of 24 columns; a panel that does not fit starts a new row."""
    x = y = row_h = 0
    for panel in panels:
        if x + panel.width > 24:
            x, y, row_h = 0, y + row_h, 0
        yield x, y, row_h
        x += panel.width
        row_h = max(row_h, panel.height)


def _panel(panel_id: int, panel: Panel, x: int, y: int) -> dict[str, Any]:
    grid = {"h": panel.height, "w": panel.width, "x": x, "y": y}
    if panel.kind == "row":
        return {"id": panel_id, "type": "row", "title": panel.title, "collapsed": False, "panels": [], "gridPos": grid}
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": dict(DATASOURCE),
        "gridPos": grid,
        "fieldConfig": _field_config(panel),
        "options": _options(panel),
        "targets": [
            {
                "refId": chr(ord("A") + i),
                "datasource": dict(DATASOURCE),
                "expr": t.expr,
                "legendFormat": t.legend,
                "range": True,
                "instant": False,
                "editorMode": "code",
            }
            for i, t in enumerate(panel.targets)
        ],
    }


STAGE_ANNOTATION = f"{names.STAGE_INFO}{{{SCOPE}}} and on() (changes({names.STAGE}{{{SCOPE}}}[15s]) > 0)"
"""A point where the stage changed, carrying the new stage's number and target load as labels."""


def render(dashboard: Dashboard) -> dict[str, Any]:
    """The Grafana dashboard model (schemaVersion 39) for one dashboard."""
    panels = [
        _panel(panel_id, panel, x, y)
        for panel_id, (panel, (x, y, _)) in enumerate(
            zip(dashboard.panels, _layout(dashboard.panels), strict=True), start=1
        )
    ]
    annotations = [
        {
            "builtIn": 1,
            "datasource": {"type": "grafana", "uid": "-- Grafana --"},
            "enable": True,
            "hide": True,
            "iconColor": "rgba(0, 211, 255, 1)",
            "name": "Annotations & Alerts",
            "type": "dashboard",
        },
        {
            "name": "Stage changes",
            "enable": True,
            "hide": False,
            "iconColor": "purple",
            "datasource": dict(DATASOURCE),
            "expr": STAGE_ANNOTATION,
            "step": "5s",
            "titleFormat": "stage {{stage}}",
            "textFormat": "stage {{stage}}: {{target_users}} users, {{target_rate}} req/s per model",
            "tagKeys": "stage,context",  # a context ladder's rung becomes a tag (absent elsewhere)
            "useValueForTime": False,
        },
    ]
    return {
        "uid": dashboard.uid,
        "title": dashboard.title,
        "description": dashboard.description,
        "tags": list(dashboard.tags),
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "timezone": "",
        "refresh": "10s",
        "liveNow": False,
        "time": {"from": "now-30m", "to": "now"},
        "timepicker": {},
        "fiscalYearStartMonth": 0,
        "links": [],
        "annotations": {"list": annotations},
        "templating": _templating(),
        "panels": panels,
    }


def rendered() -> dict[str, str]:
    """File name → JSON text, exactly as committed (sorted keys, 2-space indent, final newline)."""
    out = {}
    for build in DASHBOARDS:
        dashboard = build()
        out[DASHBOARD_FILES[dashboard.uid]] = (
            json.dumps(render(dashboard), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        )
    return out


def default_dir() -> Path:
    """``grafana/dashboards`` of the source checkout this module lives in."""
    return Path(__file__).resolve().parents[3] / "grafana" / "dashboards"


def drift(directory: Path) -> list[str]:
    """Files in ``directory`` that differ from the generator's output (missing counts)."""
    return [
        name
        for name, text in rendered().items()
        if not (directory / name).is_file() or (directory / name).read_text(encoding="utf-8") != text
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m attnload.dashboards.generate", description="Write (or --check) the Grafana dashboards JSON."
    )
    parser.add_argument("--out", type=Path, default=default_dir(), help="directory (default: %(default)s)")
    parser.add_argument("--check", action="store_true", help="exit 1 if the files differ; write nothing")
    args = parser.parse_args(argv)
    if args.check:
        stale = drift(args.out)
        for name in stale:
            print(f"{args.out / name}: out of date; run python -m attnload.dashboards.generate", file=sys.stderr)
        return 1 if stale else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in rendered().items():
        (args.out / name).write_text(text, encoding="utf-8")
        print(args.out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
