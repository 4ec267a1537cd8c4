"""The server's view next to the client's, for every output: console, HTML, LLM tab, explanation.

A stage row pairs what the model server's /metrics said (KV cache used, requests
waiting, preemptions, its TTFT and token counts) with the client's TTFT and tokens for
the same stage, so a reader sees *why* the client's numbers moved (docs/server-metrics.md).
One column table drives every renderer, so the console, the HTML and the tab agree.
"""

from __future__ import annotations

from html import escape

from rich.table import Table

from attnload.report.fmt import (
    DASH,
    RowFlag,
    ViewColumn,
    ViewRow,
    ViewTable,
    ms_bare,
    percent,
    series_name,
    stage_label,
)
from attnload.results.model import Results, ServerSummary, Totals
from attnload.results.server import SERVER_GAP_FLAG, bucket_range, is_wide


def _share(value: float | None) -> str:
    return percent(value)


def _number(value: float | None, digits: int = 1) -> str:
    if value is None:
        return DASH
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.{digits}f}"


Column = ViewColumn[ServerSummary]


def server_ttft(seconds: float | None, bucket: tuple[float, float | None] | None) -> str:
    """A server TTFT quantile in ms: the bucket it falls in when the bucket is wide ("100–250"), else
    the interpolated value (docs/server-metrics.md, "Coarse buckets")."""
    if seconds is not None and is_wide(bucket):
        assert bucket is not None
        return bucket_range(bucket)
    return ms_bare(seconds)


COLUMNS: tuple[Column, ...] = (
    Column("KV used mean", "server.kv_cache_usage.mean", lambda t, s: s.kv_cache_usage.mean, _share),
    Column("KV used max", "server.kv_cache_usage.max", lambda t, s: s.kv_cache_usage.max, _share),
    Column("running mean", "server.requests_running.mean", lambda t, s: s.requests_running.mean, _number),
    Column("waiting mean", "server.requests_waiting.mean", lambda t, s: s.requests_waiting.mean, _number),
    Column("waiting max", "server.requests_waiting.max", lambda t, s: s.requests_waiting.max, _number),
    Column("preemptions", "server.preemptions", lambda t, s: s.preemptions, _number),
    Column(
        "TTFT p50 ms server",
        "server.ttft_p50_s",
        lambda t, s: s.ttft_p50_s,
        ms_bare,
        lambda s: server_ttft(s.ttft_p50_s, s.ttft_p50_bucket_s),
    ),
    Column("TTFT p50 ms client", "ttft_s.p50", lambda t, s: t.ttft_s.p50, ms_bare),
    Column("gen tokens server", "server.generation_tokens", lambda t, s: s.generation_tokens, _number),
    Column("tokens client", "completion_tokens", lambda t, s: t.completion_tokens, _number),
)


_CONSOLE_GROUPS: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("KV used\nmean / max", (0, 1)),
    ("running\nmean", (2,)),
    ("waiting\nmean / max", (3, 4)),
    ("preempt-\nions", (5,)),
    ("TTFT p50 ms\nserver / client", (6, 7)),
    ("tokens out\nserver / client", (8, 9)),
)
"""The console pairs columns (``24% / 29%``) so the table fits a terminal; HTML shows each."""


def _gap(row: ViewRow[ServerSummary]) -> str:
    return SERVER_GAP_FLAG if row.stage is not None and SERVER_GAP_FLAG in row.stage.flags else ""


def _gap_note(row: ViewRow[ServerSummary]) -> str:
    reasons = row.stage.server_gap_reasons if row.stage is not None else []
    return f'<span class="flag" title="{escape("; ".join(reasons))}">{SERVER_GAP_FLAG}</span>' if reasons else ""


TABLE: ViewTable[ServerSummary] = ViewTable(
    source="server",
    title="server view (the model servers' /metrics, next to the client's)",
    pick=lambda totals: totals.server,
    columns=COLUMNS,
    groups=_CONSOLE_GROUPS,
    flag=RowFlag("gap", _gap, warn=True),
    stage_note=_gap_note,
)


def has_server(results: Results) -> bool:
    return bool(TABLE.rows(results))


def console_table(results: Results) -> Table | None:
    """The terminal's "server view" table (None when no server metrics were read)."""
    return TABLE.console(results)


def html_section(results: Results) -> str:
    """The HTML "Server view" table, cells carrying ``data-field``/``data-value`` like the others."""
    if not has_server(results):
        return (
            '<p class="note">No server metrics were read (the servers publish no Prometheus /metrics '
            "there, or the run used --server-metrics off).</p>"
        )
    notes = [f"{m.key} {stage_label(s)}: {r}" for m in results.models for s in m.stages for r in s.server_gap_reasons]
    note = (
        f'<div class="callout note"><strong>{SERVER_GAP_FLAG}</strong>: ' + escape("; ".join(notes)) + "</div>"
        if notes
        else ""
    )
    return TABLE.html(results, note)


def live_cells(totals: Totals) -> dict[str, str]:
    """The LLM tab's server cells for a stage or run, formatted as the server table reads them
    (``2.3 %``, ``1.5``, ``12``); blank where no server metrics."""
    server = getattr(totals, "server", None)
    if server is None:
        return {"kv_used_pct": "", "waiting_mean": "", "preemptions": "", "server_ttft_p50_ms": ""}
    return {
        "kv_used_pct": percent(server.kv_cache_usage.mean),
        "waiting_mean": _number(server.requests_waiting.mean),
        "preemptions": _number(server.preemptions),
        "server_ttft_p50_ms": server_ttft(server.ttft_p50_s, server.ttft_p50_bucket_s),
    }


def measured_state(results: Results) -> list[str]:
    """Sentences citing what the servers measured at the heaviest stage, e.g. "At 48 users, GQA's KV
    cache was 99 % full with 8.4 requests waiting and 12 preemptions; MLA's was 76 % full"."""
    parts = []
    for model in results.models:
        staged = [s for s in model.stages if s.server is not None and s.requests.total > 0]
        if not staged:
            continue
        heaviest = staged[-1]
        server = heaviest.server
        assert server is not None
        text = (
            f"{series_name(model)}'s KV cache was {_share(server.kv_cache_usage.max)} full at its peak "
            f"(mean {_share(server.kv_cache_usage.mean)})"
        )
        waiting = server.requests_waiting.mean
        if waiting is not None:
            text += f" with {_number(waiting)} requests waiting on average"
        if server.preemptions:
            text += f" and {_number(server.preemptions)} preemptions"
        parts.append(f"{text} at {stage_label(heaviest)}")
    if not parts:
        return []
    out = ["Server-side (the servers' own /metrics): " + "; ".join(parts) + "."]
    queued = [
        m.key
        for m in results.models
        for s in m.stages[-1:]
        if s.server is not None and (s.server.requests_waiting.mean or 0) >= 1
    ]
    calm = [
        m.key
        for m in results.models
        for s in m.stages[-1:]
        if s.server is not None and (s.server.requests_waiting.mean or 0) < 1
    ]
    if queued and calm:
        out.append(
            f"Requests queued for KV space on {', '.join(queued)} while {', '.join(calm)} admitted "
            "them at once: the queue, not a slower decode, is what the client's TTFT shows."
        )
    return out
