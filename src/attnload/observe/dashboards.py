"""The Grafana dashboards, as code: one generator for the JSON under ``grafana/dashboards/``.

Why code and not hand-edited JSON: three dashboards share variables, selectors, units
and the quantile query shape; spelling them once keeps every panel on the DESIGN.md
metric names and makes the "every expr returns data" test possible (it reads the
generated JSON, and :func:`expr_requirements` says what a query needs to show data).

``python -m attnload.observe.dashboards`` rewrites the files; ``--check`` exits 1 on
drift (the test suite does the same comparison).

Queries are plain PromQL over the master's and the simulator's series (no recording
rules), so a dashboard works against any Prometheus that scrapes them. Every panel
sets a unit; simulator panels say "simulated" because the simulator is a model, not
a measurement of a real server (ATTENTION_MODEL.md §0).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnload.metrics import names

DATASOURCE_UID = "attnload-prometheus"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SCHEMA_VERSION = 39
"""Grafana 10.4/11 dashboard model; older Grafana migrates down-level JSON, not up-level."""

SEL = 'model=~"$model", attention=~"$attention", profile=~"$profile"'
"""Every per-model series carries these labels (DESIGN.md "Prometheus metrics")."""
SEL_USERS = 'model=~"$model", attention=~"$attention"'
"""``attnload_users`` counts users per model; it may not carry ``profile``, so it is not filtered on it."""
SEL_SIM = 'model=~"$model", attention=~"$attention"'
"""The simulator's own series have ``model`` and ``attention`` only (ATTENTION_MODEL.md §4.6)."""
SPLIT = "model, attention"
RATE = "$__rate_interval"
LEGEND = "{{attention}} {{model}}"

SIMULATED_NOTE = ("Simulated: these series come from attnload's simulator, a cost model "
                  "(ATTENTION_MODEL.md), not from a real inference server.")
CLIENT_NOTE = ("Measured by the load generator (client side). When the target is attnload's simulator, "
               "the latencies are simulated, not a claim about a real server.")

DASHBOARD_FILES = {
    "attnload-overview": "attnload-overview.json",
    "attnload-sweep": "attnload-sweep.json",
    "attnload-health": "attnload-health.json",
}


def quantile(q: float, metric: str, sel: str = SEL, by: str = SPLIT) -> str:
    """Percentile from summed bucket rates: mergeable across workers and series, never averaged."""
    return f"histogram_quantile({q}, sum by (le, {by}) (rate({metric}_bucket{{{sel}}}[{RATE}])))"


def rate_sum(metric: str, sel: str = SEL, by: str = SPLIT) -> str:
    return f"sum by ({by}) (rate({metric}{{{sel}}}[{RATE}]))"


def expr_requirements(expr: str) -> frozenset[str]:
    """What a query needs before it can return data, for the non-empty test.

    ``errors``: only failing requests create error series. ``open_loop``: dispatch lag is
    measured against a fixed schedule (``--shape rate:``). ``sim``: the simulator is scraped.
    """
    needs: set[str] = set()
    if f"{names.REQUEST_ERRORS}_total" in expr or 'outcome="failed"' in expr:
        needs.add("errors")
    if names.DISPATCH_LAG_SECONDS in expr:
        needs.add("open_loop")
    if names.SIM_PREFIX in expr:
        needs.add("sim")
    return frozenset(needs)


@dataclass(frozen=True)
class Target:
    expr: str
    legend: str = LEGEND


@dataclass(frozen=True)
class Panel:
    """One panel; ``unit`` applies to all its series unless ``right_unit`` moves some to a right axis."""

    title: str
    unit: str
    targets: tuple[Target, ...]
    description: str = ""
    kind: str = "timeseries"
    width: int = 12
    height: int = 8
    right_axis_legend: str | None = None
    """Legend regex of series drawn on a right axis (e.g. target users under a latency)."""
    right_unit: str = "short"
    thresholds: tuple[tuple[str, float | None], ...] = ()
    max_value: float | None = None


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    panels: tuple[Panel, ...]
    tags: tuple[str, ...] = field(default=("attnload",))


# -- dashboard 1: GQA vs MLA overview ------------------------------------------------------

TTFT = names.TTFT_SECONDS
ITL = names.ITL_SECONDS
TPOT = names.TPOT_SECONDS
E2E = names.REQUEST_DURATION_SECONDS
TARGET_USERS = Target(names.TARGET_USERS, "target users")


def _quantiles(metric: str, qs: Sequence[float]) -> tuple[Target, ...]:
    return tuple(Target(quantile(q, metric), f"p{round(q * 100)} {LEGEND}") for q in qs)


def overview() -> Dashboard:
    error_ratio = (f"sum by ({SPLIT}, error) (rate(attnload_request_errors_total{{{SEL}}}[{RATE}]))"
                   f" / ignoring (error) group_left"
                   f" sum by ({SPLIT}) (rate(attnload_requests_total{{{SEL}}}[{RATE}]))")
    failed_ratio = (f'sum by ({SPLIT}) (rate(attnload_requests_total{{outcome="failed", {SEL}}}[{RATE}]))'
                    f" / sum by ({SPLIT}) (rate(attnload_requests_total{{{SEL}}}[{RATE}]))")
    panels = (
        Panel("TTFT p50 / p95 / p99", "s", _quantiles(TTFT, (0.5, 0.95, 0.99)),
              "Request start to first content chunk (role-only chunks do not count). " + CLIENT_NOTE),
        Panel("ITL p50 / p99", "s", _quantiles(ITL, (0.5, 0.99)),
              "Gap between content chunks per token, one sample per token. A p50 near 0 with a high p99 "
              "is the client-saturation signature: see the load generator health dashboard."),
        Panel("TPOT p50 / p99", "s", _quantiles(TPOT, (0.5, 0.99)),
              "(end-to-end - TTFT) / (output tokens - 1), per request."),
        Panel("End-to-end request duration p50 / p99", "s", _quantiles(E2E, (0.5, 0.99)),
              "Whole request, from the intended send time in open-loop runs."),
        Panel("Output tokens/s", "tokens/s",
              (Target(rate_sum(f"{names.COMPLETION_TOKENS}_total")),),
              "Completion tokens per second (server usage when reported)."),
        Panel("Prompt tokens/s", "tokens/s",
              (Target(rate_sum(f"{names.PROMPT_TOKENS}_total")),),
              "Prompt tokens per second sent to each model."),
        Panel("Requests/s by outcome", "reqps",
              (Target(rate_sum(f"{names.REQUESTS}_total", by=f"{SPLIT}, outcome"), f"{{{{outcome}}}} {LEGEND}"),),
              "Finished requests per second: ok, failed, cancelled."),
        Panel("Goodput (requests/s meeting SLOs)", "reqps",
              (Target(rate_sum(f"{names.GOODPUT_REQUESTS}_total")),),
              "Requests per second that met every SLO in the config's `slo` section."),
        Panel("Error rate by class", "percentunit", (Target(error_ratio, f"{{{{error}}}} {LEGEND}"),),
              "Share of finished requests failing with each DESIGN.md error class."),
        Panel("Failed request ratio", "percentunit", (Target(failed_ratio),),
              "Failed / all finished requests."),
        Panel("In-flight users", "short",
              (Target(f"sum by ({SPLIT}) (attnload_users{{{SEL_USERS}}})"), TARGET_USERS),
              "Running users per model against the target user count."),
    )
    return Dashboard("attnload-overview", "attnload: GQA vs MLA overview",
                     "Client-side latency and throughput per model, split by attention type. " + CLIENT_NOTE,
                     panels, ("attnload", "gqa-vs-mla"))


# -- dashboard 2: concurrency sweep ---------------------------------------------------------

def _against_users(title: str, unit: str, targets: tuple[Target, ...], description: str) -> Panel:
    """Time-aligned with the sweep: the target user count rides on the right axis."""
    return Panel(title, unit, (*targets, TARGET_USERS),
                 description + " Target users (right axis) mark each concurrency step.",
                 right_axis_legend="target users")


def sweep() -> Dashboard:
    panels = (
        Panel("Stage, target users and target rate", "short",
              (Target(names.STAGE, "stage index"), TARGET_USERS,
               Target(names.TARGET_RATE, "target rate (req/s per model)")),
              "The shape's current step: stage index (-1 before start), closed-loop users, open-loop rate."),
        _against_users("TTFT p50 / p99 vs target users", "s", _quantiles(TTFT, (0.5, 0.99)),
                       "Where TTFT climbs marks the knee: queueing once KV capacity is full."),
        _against_users("ITL p50 / p99 vs target users", "s", _quantiles(ITL, (0.5, 0.99)),
                       "Decode step time grows with the batch; bounded once capacity caps the batch."),
        _against_users("Output tokens/s vs target users", "tokens/s",
                       (Target(rate_sum(f"{names.COMPLETION_TOKENS}_total")),),
                       "Throughput flattens where the server saturates."),
        _against_users("Requests/s vs target users", "reqps",
                       (Target(rate_sum(f"{names.REQUESTS}_total")),), "All finished requests."),
        _against_users("Users per model vs target users", "short",
                       (Target(f"sum by ({SPLIT}) (attnload_users{{{SEL_USERS}}})"),),
                       "Running users per model."),
        Panel("Simulated: requests running / waiting", "short",
              (Target(f"sum by ({SPLIT}) (attnload_sim_requests_running{{{SEL_SIM}}})", f"running {LEGEND}"),
               Target(f"sum by ({SPLIT}) (attnload_sim_requests_waiting{{{SEL_SIM}}})", f"waiting {LEGEND}")),
              SIMULATED_NOTE + " Waiting > 0 means admission is KV-capacity bound."),
        Panel("Simulated: KV cache usage", "percentunit",
              (Target(f"max by ({SPLIT}) (attnload_sim_kv_usage_ratio{{{SEL_SIM}}})"),),
              SIMULATED_NOTE + " Share of KV blocks in use over all attention groups.", max_value=1.0),
        Panel("Simulated: engine step time p50 / p99", "s",
              tuple(Target(quantile(q, "attnload_sim_step_seconds", SEL_SIM), f"p{round(q * 100)} {LEGEND}")
                    for q in (0.5, 0.99)),
              SIMULATED_NOTE),
        Panel("Simulated: preemptions/s", "short",
              (Target(rate_sum("attnload_sim_preemptions_total", SEL_SIM)),),
              SIMULATED_NOTE + " Recompute preemptions when a decode needs a block and none is free."),
    )
    return Dashboard("attnload-sweep", "attnload: concurrency sweep",
                     "Latency, throughput and the simulator's KV/queue state, time-aligned with the "
                     "shape's steps (attnload_stage, attnload_target_users). " + SIMULATED_NOTE, panels,
                     ("attnload", "sweep"))


# -- dashboard 3: load generator health -----------------------------------------------------

def health() -> Dashboard:
    panels = (
        Panel("Workers", "short", (Target(names.WORKERS, "workers"),),
              "Locust workers connected to the master.", kind="stat", width=6, height=6),
        Panel("Client saturated", "short", (Target(names.CLIENT_SATURATED, "saturated"),),
              "1 when a worker's CPU is above 90%: results are flagged client_saturated.",
              kind="stat", width=6, height=6, thresholds=(("green", None), ("red", 1.0))),
        Panel("Users vs target", "short",
              (Target(f"sum(attnload_users{{{SEL_USERS}}})", "users"), TARGET_USERS),
              "Spawned users against the shape's target.", width=12, height=6),
        Panel("Worker CPU", "percentunit", (Target(names.WORKER_CPU_RATIO, "{{worker}}"),),
              "Per-worker CPU share. Above 90% the client, not the server, sets the latency: add workers.",
              thresholds=(("green", None), ("red", 0.9)), max_value=1.0),
        Panel("Dispatch lag p50 / p99", "s",
              tuple(Target(quantile(q, names.DISPATCH_LAG_SECONDS), f"p{round(q * 100)} {LEGEND}")
                    for q in (0.5, 0.99)),
              "Open-loop runs: intended minus actual send time (coordinated omission made visible)."),
        Panel("Errors/s by class", "reqps",
              (Target(f"sum by (error) (rate(attnload_request_errors_total{{{SEL}}}[{RATE}]))", "{{error}}"),),
              "DESIGN.md error classes; `attnload check` prints the fix for each."),
        Panel("Requests/s by outcome", "reqps",
              (Target(f"sum by (outcome) (rate(attnload_requests_total{{{SEL}}}[{RATE}]))", "{{outcome}}"),),
              "Cancelled requests come from stopping a stage mid-request."),
    )
    return Dashboard("attnload-health", "attnload: load generator health",
                     "Is the client trustworthy? Worker count and CPU, dispatch lag, error classes.",
                     panels, ("attnload", "health"))


DASHBOARDS = (overview, sweep, health)


# -- rendering ------------------------------------------------------------------------------

def _variable(name: str, label: str) -> dict[str, Any]:
    definition = f"label_values(attnload_requests_total, {name})"
    return {
        "name": name, "label": label, "type": "query", "datasource": dict(DATASOURCE),
        "definition": definition,
        "query": {"query": definition, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "includeAll": True, "multi": True, "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "options": [], "refresh": 2, "regex": "", "sort": 1, "hide": 0,
    }


def _templating() -> dict[str, Any]:
    datasource = {
        "name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
        "current": {"selected": True, "text": "attnload Prometheus", "value": DATASOURCE_UID},
        "options": [], "refresh": 1, "regex": "", "hide": 0,
    }
    return {"list": [datasource, _variable("model", "Model"), _variable("attention", "Attention"),
                     _variable("profile", "Profile")]}


def _field_config(panel: Panel) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": panel.unit, "min": 0}
    if panel.max_value is not None:
        defaults["max"] = panel.max_value
    if panel.kind == "timeseries":
        defaults["custom"] = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 0, "showPoints": "never",
                              "spanNulls": False, "axisPlacement": "auto"}
    if panel.thresholds:
        defaults["thresholds"] = {"mode": "absolute",
                                  "steps": [{"color": c, "value": v} for c, v in panel.thresholds]}
        if panel.kind == "timeseries":
            defaults["custom"]["thresholdsStyle"] = {"mode": "line"}
    overrides: list[dict[str, Any]] = []
    if panel.right_axis_legend:
        overrides.append({
            "matcher": {"id": "byName", "options": panel.right_axis_legend},
            "properties": [{"id": "unit", "value": panel.right_unit},
                           {"id": "custom.axisPlacement", "value": "right"},
                           {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}}],
        })
    return {"defaults": defaults, "overrides": overrides}


def _options(panel: Panel) -> dict[str, Any]:
    if panel.kind == "stat":
        return {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                "colorMode": "value", "graphMode": "area", "justifyMode": "auto", "orientation": "auto",
                "textMode": "auto"}
    return {"legend": {"displayMode": "table", "placement": "bottom", "showLegend": True,
                       "calcs": ["lastNotNull", "max"]},
            "tooltip": {"mode": "multi", "sort": "desc"}}


def _layout(panels: Sequence[Panel]) -> Iterator[tuple[int, int, int]]:
    """Left-to-right rows of 24 columns; a panel that does not fit starts a new row."""
    x = y = row_h = 0
    for panel in panels:
        if x + panel.width > 24:
            x, y, row_h = 0, y + row_h, 0
        yield x, y, row_h
        x += panel.width
        row_h = max(row_h, panel.height)


def render(dashboard: Dashboard) -> dict[str, Any]:
    """The Grafana dashboard model (schemaVersion 39) for one dashboard."""
    panels = []
    for panel_id, (panel, (x, y, _)) in enumerate(zip(dashboard.panels, _layout(dashboard.panels),
                                                      strict=True), start=1):
        panels.append({
            "id": panel_id, "type": panel.kind, "title": panel.title, "description": panel.description,
            "datasource": dict(DATASOURCE),
            "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
            "fieldConfig": _field_config(panel), "options": _options(panel),
            "targets": [{"refId": chr(ord("A") + i), "datasource": dict(DATASOURCE), "expr": t.expr,
                         "legendFormat": t.legend, "range": True, "instant": False, "editorMode": "code"}
                        for i, t in enumerate(panel.targets)],
        })
    annotations = [{
        "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True, "hide": True,
        "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts", "type": "dashboard",
    }, {
        "name": "Stage changes", "enable": True, "hide": False, "iconColor": "purple",
        "datasource": dict(DATASOURCE), "expr": "changes(attnload_stage[1m]) > 0", "step": "5s",
        "titleFormat": "stage change", "textFormat": "", "tagKeys": "",
    }]
    return {
        "uid": dashboard.uid, "title": dashboard.title, "description": dashboard.description,
        "tags": list(dashboard.tags), "schemaVersion": SCHEMA_VERSION, "version": 1, "editable": True,
        "graphTooltip": 1, "timezone": "", "refresh": "10s", "liveNow": False,
        "time": {"from": "now-30m", "to": "now"}, "timepicker": {}, "fiscalYearStartMonth": 0,
        "links": [], "annotations": {"list": annotations}, "templating": _templating(), "panels": panels,
    }


def rendered() -> dict[str, str]:
    """File name → JSON text, exactly as committed (sorted keys, 2-space indent, final newline)."""
    out = {}
    for build in DASHBOARDS:
        dashboard = build()
        out[DASHBOARD_FILES[dashboard.uid]] = json.dumps(render(dashboard), indent=2, sort_keys=True,
                                                         ensure_ascii=False) + "\n"
    return out


def default_dir() -> Path:
    """``grafana/dashboards`` of the source checkout this module lives in."""
    return Path(__file__).resolve().parents[3] / "grafana" / "dashboards"


def drift(directory: Path) -> list[str]:
    """Files in ``directory`` that differ from the generator's output (missing counts)."""
    return [name for name, text in rendered().items()
            if not (directory / name).is_file() or (directory / name).read_text(encoding="utf-8") != text]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnload.observe.dashboards",
                                     description="Write (or --check) the Grafana dashboards JSON.")
    parser.add_argument("--out", type=Path, default=default_dir(), help="directory (default: %(default)s)")
    parser.add_argument("--check", action="store_true", help="exit 1 if the files differ; write nothing")
    args = parser.parse_args(argv)
    if args.check:
        stale = drift(args.out)
        for name in stale:
            print(f"{args.out / name}: out of date; run python -m attnload.observe.dashboards", file=sys.stderr)
        return 1 if stale else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in rendered().items():
        (args.out / name).write_text(text, encoding="utf-8")
        print(args.out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
