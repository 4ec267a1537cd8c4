"""The master's progress feed: every second, the run's state as a :class:`ProgressState` for the line.

Only the process that merges the fleet's counts (the master, or a single local process) knows the
whole run, so it draws the line, on its stderr (the terminal of ``attnload run``, which the children
inherit). Headless runs only: the web UI has its own view. Counts are summed from the recorder's
series without merging histograms, so a second's tick stays cheap on a busy master.
"""

from __future__ import annotations

import logging
import sys
import time
from collections import Counter
from typing import Any

import gevent
from locust.env import Environment

from attnload.report.live.progress import ProgressPrinter, ProgressState
from attnload.runner.collector.collector import Collector

TICK_S = 1.0
LOCUST_TABLES_LOGGER = "locust.stats_logger"
"""The logger Locust prints its request tables through (periodic stats, final percentiles, error report)."""


def silence_locust_tables() -> None:
    """Locust's request tables off in this process: they time whole streamed requests in ms, which says
    nothing about TTFT or ITL, and buried attnload's own tables. ``--locust-stats`` keeps them."""
    logging.getLogger(LOCUST_TABLES_LOGGER).disabled = True


def progress_state(collector: Collector) -> ProgressState:
    """The run now: stage k of n, users (or rate), elapsed/planned time, ok/failed, tokens per model."""
    state, fleet = collector.state, collector.fleet
    shape = state.options.shape
    planned = shape is not None and not shape.planned_live
    counts: Counter[str] = Counter()
    tokens: dict[str, int] = {m.key: 0 for m in state.config.models}
    for (model_key, _profile, _stage), series in list(state.recorder.series.items()):
        counts["ok"] += series.counts.get("ok", 0)
        counts["failed"] += series.counts.get("failed", 0)
        tokens[model_key] = tokens.get(model_key, 0) + series.counts.get("completion_tokens", 0)
    rates = state.stage.rates
    return ProgressState(
        elapsed_s=time.perf_counter() - state.started_perf if state.started_at is not None else 0.0,
        stage=state.stage.index,
        stages=len(shape.stages) if planned and shape is not None else None,
        total_s=shape.duration_s if planned and shape is not None else None,
        users=sum(fleet.users.values()),
        target_users=fleet.target_users,
        target_rate=max(rates.values()) if rates else None,
        ok=counts["ok"],
        failed=counts["failed"],
        completion_tokens=tokens,
        saturated=fleet.client_saturated,
        unreachable=tuple(collector.reach.unreachable()),
    )


class _ClearBeforeLog(logging.Filter):
    """Erases the live line before this process logs, so a warning starts on a clean line."""

    def __init__(self, printer: ProgressPrinter) -> None:
        super().__init__()
        self.printer = printer

    def filter(self, record: logging.LogRecord) -> bool:
        self.printer.clear()
        return True


def feed_progress(environment: Environment, collector: Collector) -> None:
    """Greenlet of a headless master: update the line each second, end it when the test stops or Locust quits."""
    if not getattr(environment.parsed_options, "headless", False):
        return
    printer = ProgressPrinter(sys.stderr)
    shown = False

    def finish(**_: Any) -> None:
        nonlocal shown
        if shown:
            printer.finish(progress_state(collector))
            shown = False

    environment.events.quitting.add_listener(finish)
    if printer.live:
        for logger in (logging.getLogger(), logging.getLogger("locust")):
            for handler in logger.handlers:
                handler.addFilter(_ClearBeforeLog(printer))
    while True:
        if collector.state.running:
            printer.update(progress_state(collector))
            shown = True
        else:
            finish()
        gevent.sleep(TICK_S)
