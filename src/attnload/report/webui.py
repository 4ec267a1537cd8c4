"""The "LLM" tab of Locust's web UI and the ``/attnload/stats`` JSON route, on the master.

Locust 2.4x's React UI renders extra tabs declared in ``template_args["extended_tabs"]``
as tables shaped by ``template_args["extended_tables"]``; their rows come from the
``extended_stats`` list of the ``/stats/requests`` response it polls every 2 s while a
test runs. We add those three things and nothing else, so Locust's own statistics
table, charts and controls are untouched and the tab works offline (it is Locust's own
bundled UI). ``/attnload/stats`` serves the whole live :class:`Results` snapshot.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from attnload.report.fmt import error_total, series_name, stage_label
from attnload.report.server import live_cells
from attnload.results.model import ModelSummary, Results, Totals

logger = logging.getLogger(__name__)

TAB_KEY = "llm"
STATS_ROUTE = "/attnload/stats"
LOCUST_STATS_ROUTE = "/stats/requests"

# Locust camelCases these keys on the client; the row dicts below use the same names.
COLUMNS: tuple[tuple[str, str, int | None], ...] = (
    ("name", "Model", None),
    ("stage", "Stage", None),
    ("ttft_p50_ms", "TTFT p50 (ms)", 1),
    ("ttft_p99_ms", "TTFT p99 (ms)", 1),
    ("itl_p50_ms", "ITL p50 (ms)", 2),
    ("itl_p99_ms", "ITL p99 (ms)", 2),
    ("output_tok_s", "Output tok/s", 1),
    ("in_flight", "In flight", None),
    ("kv_used_pct", "Server KV used (%)", 0),
    ("waiting_mean", "Server waiting", 1),
    ("preemptions", "Preemptions", None),
    ("requests_ok", "OK", None),
    ("errors", "Errors", None),
    ("prompt_tokens", "Prompt tok (mean)", 0),
    ("cached_tokens", "Cached tok (mean)", 0),
)


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1000.0


def _scope(model: ModelSummary) -> tuple[str, Totals]:
    """Live numbers describe the stage now running (the last), or the run when unstaged."""
    if model.stages:
        stage = model.stages[-1]
        return f"{stage.index + 1}: {stage_label(stage)}", stage
    return "run", model


def llm_rows(results: Results) -> list[dict[str, Any]]:
    """One row per model for the LLM tab; latencies in ms (Locust's unit), ``None`` shows blank."""
    rows = []
    for model in results.models:
        stage, totals = _scope(model)
        in_flight = getattr(model, "in_flight", None)  # live-only field; absent from finished results
        rows.append({
            "name": series_name(model),
            "safe_name": model.key,
            "stage": stage,
            "ttft_p50_ms": _ms(totals.ttft_s.p50),
            "ttft_p99_ms": _ms(totals.ttft_s.p99),
            "itl_p50_ms": _ms(totals.itl_s.p50),
            "itl_p99_ms": _ms(totals.itl_s.p99),
            "output_tok_s": totals.output_tokens_per_s,
            "in_flight": in_flight if in_flight is not None else "",
            "requests_ok": totals.requests.ok,
            "errors": error_total(totals),
            **live_cells(totals),
            "prompt_tokens": "", "cached_tokens": "",
        })
        rows += turn_rows(model)
    return rows


def turn_rows(model: ModelSummary) -> list[dict[str, Any]]:
    """Conversation runs: one row per turn index under the model's row (cached tokens rise with the turn)."""
    return [{
        "name": series_name(model), "safe_name": f"{model.key}-turn-{row.turn}", "stage": f"turn {row.turn}",
        "ttft_p50_ms": _ms(row.ttft_s.p50), "ttft_p99_ms": _ms(row.ttft_s.p99), "itl_p50_ms": _ms(row.itl_s.p50),
        "itl_p99_ms": _ms(row.itl_s.p99), "output_tok_s": "", "in_flight": "", "requests_ok": row.requests - row.failed,
        "errors": row.failed, "prompt_tokens": row.prompt_tokens_mean, "cached_tokens": row.cached_tokens_mean,
        "kv_used_pct": "", "waiting_mean": "", "preemptions": "",
    } for row in model.turns]


def _table_structure() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for key, title, digits in COLUMNS:
        column: dict[str, Any] = {"key": key, "title": title}
        if digits is not None:
            column["round"] = digits
        out.append(column)
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

    @web_ui.app.route(STATS_ROUTE)  # type: ignore[untyped-decorator]
    @web_ui.auth_required_if_enabled  # type: ignore[untyped-decorator]
    def attnload_stats() -> Response:
        return Response(snapshot().to_json(), mimetype="application/json")

    @web_ui.app.after_request  # type: ignore[untyped-decorator]
    def add_llm_rows(response: Response) -> Response:
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
