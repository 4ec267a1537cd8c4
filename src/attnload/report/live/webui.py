"""The "LLM" tab of Locust's web UI and the ``/attnload/stats`` JSON route, on the master.

Locust 2.4x's React UI renders extra tabs declared in ``template_args["extended_tabs"]``
as tables shaped by ``template_args["extended_tables"]``; their rows come from the
``extended_stats`` list of the ``/stats/requests`` response it polls every 2 s while a
test runs. We add those three things and nothing else, so Locust's own statistics
table, charts and controls are untouched and the tab works offline (it is Locust's own
bundled UI). ``/attnload/stats`` serves the whole live :class:`Results` snapshot.

Live charts: Locust's extended tabs are tables only, so the master also injects one
script (``live.js``, served from this package at ``/attnload/live.js``) into Locust's
page; it polls ``/attnload/live`` and draws TTFT p50/p99, ITL p50 and output tok/s per
model over time under the LLM tab, one colour per attention type, stage changes marked.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attnload.report import gpu as gpu_view
from attnload.report.clienthealth.render import llm_cell
from attnload.report.fmt import error_total, ms_bare, rate, series_name, stage_label
from attnload.report.reasoning import view as reasoning_view
from attnload.report.server import live_cells
from attnload.results.model import ModelSummary, Results, Totals

logger = logging.getLogger(__name__)

TAB_KEY = "llm"
STATS_ROUTE = "/attnload/stats"
LIVE_ROUTE = "/attnload/live"
LIVE_SCRIPT_ROUTE = "/attnload/live.js"
LIVE_SCRIPT = Path(__file__).with_name("live.js")
LIVE_TAG = '<script src="./attnload/live.js" defer></script>'
"""Relative, so it follows Locust's ``--web-base-path``; same origin, nothing from a CDN."""
LOCUST_STATS_ROUTE = "/stats/requests"

# Locust camelCases these keys on the client; the row dicts below use the same names.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("name", "Model"),
    ("stage", "Stage"),
    ("ttft_p50_ms", "TTFT p50 (ms)"),
    ("ttft_p99_ms", "TTFT p99 (ms)"),
    ("itl_p50_ms", "ITL p50 (ms)"),
    ("itl_p99_ms", "ITL p99 (ms)"),
    ("decode_slope", "Slope (ms per 1K ctx)"),
    *reasoning_view.LIVE_COLUMNS,
    ("output_tok_s", "Output tok/s"),
    ("server_bursts", "Server bursts"),
    ("in_flight", "In flight"),
    ("kv_used_pct", "Server KV used"),
    ("waiting_mean", "Server waiting"),
    ("preemptions", "Preemptions"),
    ("server_ttft_p50_ms", "Server TTFT p50 (ms)"),
    *gpu_view.LIVE_COLUMNS,
    ("requests_ok", "OK"),
    ("errors", "Errors"),
    ("prompt_tokens", "Prompt tok (mean)"),
    ("cached_tokens", "Cached tok (mean)"),
)
"""Every cell is sent as the text a person reads (``fmt``: ``50.1`` ms, ``1,234`` tok/s, ``2.3 %``),
rounded as the console tables round it. Locust's own ``round`` column option is not used: it
skips ``round: 0`` (falsy in its JavaScript) and leaves 17-digit floats on the page."""


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1000.0


def _ms_cell(seconds: float | None) -> str:
    return "" if seconds is None else ms_bare(seconds)


def _rate_cell(value: float | None) -> str:
    return "" if value is None else rate(value)


def _mean_cell(value: float | None) -> str:
    return "" if value is None else f"{value:,.0f}"


def _slope_cell(totals: Totals) -> str:
    """The running stage's decode slope (ms per 1K tokens of context; docs/microscope.md), blank without a line."""
    fit = getattr(totals, "decode_fit", None)  # stages have one; a whole unstaged run does not
    return "" if fit is None or fit.slope_ms_per_1k is None else f"{fit.slope_ms_per_1k:.3f}"


def _scope(model: ModelSummary) -> tuple[str, Totals]:
    """Live numbers describe the stage now running (the last), or the run when unstaged."""
    if model.stages:
        stage = model.stages[-1]
        return f"{stage.index + 1}: {stage_label(stage)}", stage
    return "run", model


def llm_rows(results: Results) -> list[dict[str, Any]]:
    """One row per model for the LLM tab, every number already formatted (latencies in ms, Locust's unit);
    a quantity not measured yet is blank."""
    rows = []
    for model in results.models:
        stage, totals = _scope(model)
        in_flight = getattr(model, "in_flight", None)  # live-only field; absent from finished results
        rows.append(
            {
                "name": series_name(model),
                "safe_name": model.key,
                "stage": stage,
                "ttft_p50_ms": _ms_cell(totals.ttft_s.p50),
                "ttft_p99_ms": _ms_cell(totals.ttft_s.p99),
                "itl_p50_ms": _ms_cell(totals.itl_s.p50),
                "itl_p99_ms": _ms_cell(totals.itl_s.p99),
                "decode_slope": _slope_cell(totals),
                "output_tok_s": _rate_cell(totals.output_tokens_per_s),
                "server_bursts": llm_cell(totals),
                "in_flight": in_flight if in_flight is not None else "",
                "requests_ok": totals.requests.ok,
                "errors": error_total(totals),
                **live_cells(totals),
                **gpu_view.live_cells(totals),
                **reasoning_view.live_cells(totals),
                "prompt_tokens": "",
                "cached_tokens": "",
            }
        )
        rows += turn_rows(model)
    return rows


def turn_rows(model: ModelSummary) -> list[dict[str, Any]]:
    """Conversation runs: one row per turn index under the model's row (cached tokens rise with the turn)."""
    return [
        {
            "name": series_name(model),
            "safe_name": f"{model.key}-turn-{row.turn}",
            "stage": f"turn {row.turn}",
            "ttft_p50_ms": _ms_cell(row.ttft_s.p50),
            "ttft_p99_ms": _ms_cell(row.ttft_s.p99),
            "itl_p50_ms": _ms_cell(row.itl_s.p50),
            "itl_p99_ms": _ms_cell(row.itl_s.p99),
            "decode_slope": "",
            "output_tok_s": "",
            "server_bursts": "",
            "in_flight": "",
            "requests_ok": row.requests - row.failed,
            "errors": row.failed,
            "prompt_tokens": _mean_cell(row.prompt_tokens_mean),
            "cached_tokens": _mean_cell(row.cached_tokens_mean),
            "kv_used_pct": "",
            "waiting_mean": "",
            "preemptions": "",
            "server_ttft_p50_ms": "",
            **dict.fromkeys(gpu_view.LIVE_KEYS, ""),
            **dict.fromkeys(reasoning_view.LIVE_KEYS, ""),
        }
        for row in model.turns
    ]


def live_points(results: Results) -> list[dict[str, Any]]:
    """One point per model for the live charts: the running stage's numbers, as the table shows them."""
    points = []
    for model in results.models:
        stage, totals = _scope(model)
        points.append(
            {
                "key": model.key,
                "name": series_name(model),
                "attention": model.attention,
                "stage": stage,
                "ttft_p50_ms": _ms(totals.ttft_s.p50),
                "ttft_p99_ms": _ms(totals.ttft_s.p99),
                "itl_p50_ms": _ms(totals.itl_s.p50),
                "output_tok_s": totals.output_tokens_per_s,
            }
        )
    return points


def _running(environment: Any) -> bool:
    state = getattr(getattr(environment, "runner", None), "state", "")
    return str(state) in ("spawning", "running")


def inject_live_script(html: str) -> str:
    """Locust's page with the live-charts script before ``</body>`` (once)."""
    if LIVE_TAG in html or "</body>" not in html:
        return html
    return html.replace("</body>", LIVE_TAG + "</body>", 1)


def _table_structure() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for key, title in COLUMNS:
        out.append({"key": key, "title": title})
    return out


def install(environment: Any, snapshot: Callable[[], Results]) -> None:
    """Add the LLM tab and ``/attnload/stats`` to ``environment.web_ui`` (no-op without a web UI).

    Call once on the master (or the local runner) at init; ``snapshot`` returns the live,
    partial :class:`Results` merged from the workers.
    """
    web_ui = getattr(environment, "web_ui", None)
    if web_ui is None:
        return
    from flask import Response, request  # Flask ships with Locust; imported here to keep reports light

    web_ui.template_args["extended_tabs"] = [{"title": "LLM", "key": TAB_KEY}]
    web_ui.template_args["extended_tables"] = [{"key": TAB_KEY, "structure": _table_structure()}]

    @web_ui.app.route(STATS_ROUTE)
    @web_ui.auth_required_if_enabled
    def attnload_stats() -> Response:
        return Response(snapshot().to_json(), mimetype="application/json")

    @web_ui.app.route(LIVE_ROUTE)
    @web_ui.auth_required_if_enabled
    def attnload_live() -> Response:
        body = {"running": _running(environment), "models": live_points(snapshot())}
        return Response(json.dumps(body), mimetype="application/json")

    @web_ui.app.route(LIVE_SCRIPT_ROUTE)
    def attnload_live_script() -> Response:
        return Response(LIVE_SCRIPT.read_text(encoding="utf-8"), mimetype="text/javascript")

    @web_ui.app.after_request
    def add_llm_rows(response: Response) -> Response:
        if (
            response.status_code == 200
            and response.mimetype == "text/html"
            and not response.direct_passthrough
            and request.path.endswith("/")
        ):
            response.set_data(inject_live_script(response.get_data(as_text=True)))
            return response
        if not request.path.endswith(LOCUST_STATS_ROUTE) or response.status_code != 200:
            return response
        try:
            rows = llm_rows(snapshot())
        except Exception:  # noqa: BLE001 - a broken snapshot must not take Locust's own stats table down
            logger.exception("attnload: live snapshot failed; the LLM tab shows no rows this poll")
            rows = []
        body = json.loads(response.get_data())
        body["extended_stats"] = [{"key": TAB_KEY, "data": rows}]
        response.set_data(json.dumps(body))
        return response
