"""``--csv PREFIX``: attnload's LLM columns as ``PREFIX_llm.csv``, beside the CSVs Locust itself writes.

Locust's ``PREFIX_stats.csv``/``_stats_history.csv``/``_failures.csv``/``_exceptions.csv`` hold one
response time per request; the numbers that tell GQA from MLA (TTFT, ITL, TPOT, output tokens/s) live
only in the results model, so this file renders them in Locust's CSV habits: a header row in Title
Case, one row per model and stage, then the model's whole run as ``Aggregated``, milliseconds for
times, ``N/A`` for a value the run could not measure.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

from attnload.measure.metrics import METRICS, Metric
from attnload.results.model import ModelSummary, Results, Totals

_HEAD = (
    "Target",
    "Model",
    "Attention",
    "Stage",
    "Users",
    "Rate (req/s)",
    "Requests OK",
    "Requests Failed",
    "Requests Cancelled",
    "Requests Abandoned",
)
_RATES = ("Output Tokens/s", "Requests/s", "Goodput Requests/s")
_REASONING = ("Reasoning Tokens", "Reasoning Share", "Server Reasoning Tokens")


def _metrics(first: bool) -> list[Metric]:
    """The table's metrics with CSV columns: the first release's (before the rates) or the later ones."""
    return [m for m in METRICS if m.csv and m.results_field is not None and m.csv_first == first]


def _titles(metrics: list[Metric]) -> tuple[str, ...]:
    return tuple(f"{m.title} {q} ({'ms' if m.unit == 's' else m.unit})" for m in metrics for q in m.csv)


def llm_csv_columns() -> tuple[str, ...]:
    """The header: each metric's quantiles where the table puts them (``measure.metrics``), around
    the counts, the rates and the reasoning columns."""
    return (*_HEAD, *_titles(_metrics(True)), *_RATES, *_titles(_metrics(False)), *_REASONING)


LLM_CSV_COLUMNS = llm_csv_columns()
AGGREGATED = "Aggregated"
"""Locust's name for the total row."""
NA = "N/A"


def llm_csv_path(prefix: str | Path) -> Path:
    return Path(f"{prefix}_llm.csv")


def write_llm_csv(results: Results, prefix: str | Path) -> Path:
    """Write ``PREFIX_llm.csv`` (folders in the prefix are created, as Locust does for its own)."""
    path = llm_csv_path(prefix)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(llm_csv_columns())
        writer.writerows(llm_rows(results))
    return path


def llm_rows(results: Results) -> Iterator[list[str]]:
    for model in results.models:
        for stage in model.stages:
            yield _row(model, str(stage.index), stage.users, stage.rate, stage)
        yield _row(model, AGGREGATED, None, None, model)


def _row(model: ModelSummary, stage: str, users: int | None, rate: float | None, t: Totals) -> list[str]:
    return [
        model.key,
        model.model,
        model.attention,
        stage,
        _plain(users),
        _plain(rate),
        str(t.requests.ok),
        str(t.requests.failed),
        str(t.requests.cancelled),
        str(t.requests.abandoned),
        *_cells(_metrics(True), t),
        _num(t.output_tokens_per_s),
        _num(t.requests_per_s),
        _plain(t.goodput_rps),
        *_cells(_metrics(False), t),
        str(t.reasoning_tokens),
        NA if t.reasoning_share is None else f"{t.reasoning_share:.4f}",
        NA if t.server_reasoning_tokens is None else str(t.server_reasoning_tokens),
    ]


def _cells(metrics: list[Metric], t: Totals) -> list[str]:
    cells = []
    for m in metrics:
        summary = t.summary_of(m.results_field or "")
        for q in m.csv:
            value: float | None = getattr(summary, q)
            cells.append(_ms(value) if m.unit == "s" else NA if value is None else _num(value))
    return cells


def _ms(seconds: float | None) -> str:
    return NA if seconds is None else f"{seconds * 1000:.3f}"


def _num(value: float) -> str:
    return f"{value:.3f}"


def _plain(value: float | None) -> str:
    return "" if value is None else f"{value:g}" if isinstance(value, int) else f"{value:.3f}"
