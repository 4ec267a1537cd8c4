"""The console lines, HTML section and LLM-tab cell for server bursts, loop lag and start spread.

Why a module of its own: the same three facts appear in every output (console, HTML, the Locust
LLM tab), worded once here so they never disagree.
"""

from __future__ import annotations

from html import escape

from attnload.report.fmt import stage_label
from attnload.results.bursts import any_server_bursts
from attnload.results.model import ModelSummary, Results, StartSpreadInfo, Summary, Totals


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value * 1000:.2f} ms"


def spread_text(info: StartSpreadInfo) -> str:
    """``auto: 4 users, first requests over 0.52 s`` (the mode, then what was measured)."""
    mode = f"fixed {info.seconds:g} s" if info.mode == "fixed" and info.seconds is not None else info.mode
    if info.users == 0:
        return f"{mode}: no new users"
    measured = (
        "" if info.first_requests_spread_s is None else f", first requests over {info.first_requests_spread_s:.2f} s"
    )
    return f"{mode}: {info.users} new user{'s' if info.users != 1 else ''}{measured}"


def loop_lag_text(loop_lag: dict[str, Summary]) -> str:
    """``w1 p50 0.12 ms p99 1.30 ms; ...`` (worker ids shortened to their last 8 characters)."""
    return "; ".join(f"{w[-8:]} p50 {_ms(s.p50)} p99 {_ms(s.p99)}" for w, s in sorted(loop_lag.items()))


def console_notes(results: Results) -> list[str]:
    """Notes under the console tables: the server's bursts (never a warning: the client kept up)."""
    notes = []
    for key, where, bursts in any_server_bursts(results):
        notes.append(f"note: server bursts ({key}, {where}): {bursts.note}")
    if notes and results.client.loop_lag_s:
        notes.append(f"note: client event-loop lag: {loop_lag_text(results.client.loop_lag_s)}")
    return notes


def _spread_rows(model: ModelSummary) -> list[str]:
    rows = []
    scopes = [(stage_label(s), s.start_spread) for s in model.stages] or [("run", model.start_spread)]
    for label, info in scopes:
        if info is None:
            continue
        spread = info.first_requests_spread_s
        value = "" if spread is None else repr(spread)
        shown = "—" if spread is None else f"{spread:.2f} s"
        rows.append(
            f'<tr data-model="{escape(model.key)}"><th scope="row">{escape(model.key)}</th><td>{escape(label)}</td>'
            f'<td>{escape(spread_text(info))}</td><td class="num">{info.users}</td>'
            '<td class="num" data-field="start_spread.first_requests_spread_s" '
            f'data-value="{value}">{shown}</td></tr>'
        )
    return rows


def html_section(results: Results) -> str:
    """Server bursts, the client's event-loop lag and each stage's start spread ('' when none applies)."""
    parts = []
    for key, where, bursts in any_server_bursts(results):
        parts.append(
            f'<div class="callout note" id="server-bursts"><strong>server_bursts</strong> ({escape(key)}, '
            f"{escape(where)}): {escape(bursts.note)}. Not client saturation.</div>"
        )
    lag = results.client.loop_lag_s
    if lag:
        rows = "".join(
            f'<tr><th scope="row">{escape(w)}</th><td class="num">{s.count:,}</td><td class="num">{_ms(s.p50)}</td>'
            f'<td class="num">{_ms(s.p99)}</td><td class="num">{_ms(s.max)}</td></tr>'
            for w, s in sorted(lag.items())
        )
        parts.append(
            '<p class="note">Event-loop lag: how late each sending process ran a 50 ms timer. A p50 above 5 ms '
            "or a p99 above 100 ms means the client was behind.</p>"
            '<table id="loop-lag"><thead><tr><th>worker</th><th>samples</th><th>p50</th><th>p99</th><th>max</th>'
            f"</tr></thead><tbody>{rows}</tbody></table>"
        )
    spread_rows = [row for m in results.models for row in _spread_rows(m)]
    if spread_rows:
        parts.append(
            '<p class="note">Arrival phase: how each closed-loop stage\'s new users were started (start spread, '
            "<code>--start-spread</code>) and the measured time from its first to its last new user's first "
            "request. Users started together stay in phase (lower ITL, higher TTFT) unless spread.</p>"
            '<table id="start-spread"><thead><tr><th>model</th><th class="l">stage</th><th class="l">start spread</th>'
            f"<th>new users</th><th>first requests over</th></tr></thead><tbody>{''.join(spread_rows)}</tbody></table>"
        )
    return "".join(parts)


def llm_cell(totals: Totals) -> str:
    """The LLM tab's "Server bursts" cell: the burst size where the scope is flagged, else blank."""
    bursts = getattr(totals, "server_bursts", None)
    return "" if bursts is None else f"{bursts.tokens_per_read_p50:g} tok/read"
