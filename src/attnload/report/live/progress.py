"""The live progress line of a headless run: one line kept in place on a terminal, sparse lines in logs.

On a terminal the line is redrawn every second (carriage return + erase to end of line), so the
screen holds one line that says how far the run is: stage k/n, users, elapsed and remaining time,
requests ok/failed and output tokens/s per model. In CI, in a pipe or a file (not a TTY, or ``CI``
set, or ``TERM=dumb``) redrawing would fill the log, so a line is written when a stage begins and
otherwise at most once every :data:`LOG_INTERVAL_S` seconds. The final tables are not this module's.

This module only formats and decides when to write; the runner hands it a :class:`ProgressState`
(plain numbers) each second, so it has no Locust import and tests drive it with a fake clock.
"""

from __future__ import annotations

import os
import shutil
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from attnload.report.fmt import rate

LOG_INTERVAL_S = 30.0
"""Not a terminal: at most one line per this many seconds between stage changes."""
RATE_WINDOW_S = 10.0
"""tok/s is measured over the last this many seconds (workers report every ~3 s: one second is too jumpy)."""
ERASE_LINE = "\x1b[K"


@dataclass(frozen=True)
class ProgressState:
    """What the run looks like now, as plain numbers (built by the runner every second)."""

    elapsed_s: float
    stage: int
    """0-based index of the running stage; < 0 before the first one."""
    stages: int | None
    """How many stages the shape has (None: planned live, as a sweep's are)."""
    total_s: float | None
    """The whole run's planned length (None: not known in advance)."""
    users: int
    """Closed-loop users running across the fleet (as last reported by the workers)."""
    target_users: int = 0
    """The stage's closed-loop user target (0: open loop, or none set)."""
    target_rate: float | None = None
    """Open-loop stages: requests/s per model (None in closed-loop stages)."""
    ok: int = 0
    failed: int = 0
    completion_tokens: dict[str, int] = field(default_factory=dict)
    """Per model key: output tokens so far (cumulative; the line shows their rate)."""
    saturated: bool = False
    unreachable: tuple[str, ...] = ()
    """Model keys whose server refuses or resets connections now (their users back off)."""


def clock_text(seconds: float) -> str:
    """``1:05`` or ``1:02:03``: elapsed and remaining times for people."""
    whole = max(0, int(seconds + 0.5))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def format_line(state: ProgressState, token_rates: dict[str, float | None]) -> str:
    """The progress line's text (no newline, no escape codes)."""
    if state.stage < 0:
        where = "starting"
    else:
        where = f"stage {state.stage + 1}/{state.stages}" if state.stages else f"stage {state.stage + 1}"
    if state.target_rate:
        load = f"{rate(state.target_rate)} req/s per model"
    elif state.target_users and state.target_users != state.users:
        load = f"{state.users:,}/{state.target_users:,} users"
    else:
        load = f"{state.users:,} users"
    timing = f"{clock_text(state.elapsed_s)} elapsed"
    if state.total_s is not None:
        timing += f", {clock_text(max(0.0, state.total_s - state.elapsed_s))} left"
    parts = [where, load, timing, f"ok {state.ok:,} failed {state.failed:,}"]
    parts += [f"{key} {rate(value, 'tok/s')}" for key, value in token_rates.items()]
    if state.unreachable:
        parts.append(f"UNREACHABLE {', '.join(state.unreachable)}")
    if state.saturated:
        parts.append("CLIENT SATURATED")
    return " · ".join(parts)


def is_live_terminal(stream: TextIO) -> bool:
    """Whether to redraw in place: a TTY, not a CI job, not a dumb terminal."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        return False
    ci = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
    return tty and not ci and os.environ.get("TERM", "") != "dumb"


class ProgressPrinter:
    """Decides when to write the progress line and writes it (in place on a terminal)."""

    def __init__(
        self, stream: TextIO, *, live: bool | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.stream = stream
        self.live = is_live_terminal(stream) if live is None else live
        self.clock = clock
        self._samples: deque[tuple[float, dict[str, int]]] = deque()
        self._last_stage: int | None = None
        self._last_written: float | None = None
        self._on_screen = False
        self.lines_written = 0

    def update(self, state: ProgressState) -> None:
        """Called every second while the run is on: record a sample, write if it is time."""
        now = self.clock()
        rates = self._rates(now, state.completion_tokens)
        stage_changed = state.stage != self._last_stage and state.stage >= 0
        if self.live:
            self._draw(format_line(state, rates))
        elif state.stage >= 0 and (
            stage_changed or self._last_written is None or now - self._last_written >= LOG_INTERVAL_S
        ):
            self._write(format_line(state, rates) + "\n")
            self._last_written = now
            self.lines_written += 1
        if state.stage >= 0:
            self._last_stage = state.stage

    def finish(self, state: ProgressState | None = None) -> None:
        """The run is over: on a terminal, draw the last state and end the line (the tables follow)."""
        if self.live and state is not None:
            self._draw(format_line(state, self._rates(self.clock(), state.completion_tokens)))
        if self._on_screen:
            self._write("\n")
            self._on_screen = False

    def clear(self) -> None:
        """Erase the line on screen (a log record is about to be written); the next update redraws it."""
        if self.live and self._on_screen:
            self._write("\r" + ERASE_LINE)
            self._on_screen = False

    def _draw(self, text: str) -> None:
        width = self._width()
        if len(text) >= width:
            text = text[: max(width - 2, 10)] + "…"
        self._write("\r" + text + ERASE_LINE)
        self._on_screen = True
        self.lines_written += 1

    def _width(self) -> int:
        try:
            columns = os.get_terminal_size(self.stream.fileno()).columns
        except (AttributeError, OSError, ValueError):
            columns = 0
        return columns if columns > 0 else shutil.get_terminal_size((100, 24)).columns  # 0: a pty with no size

    def _rates(self, now: float, tokens: dict[str, int]) -> dict[str, float | None]:
        """Output tok/s per model over the last :data:`RATE_WINDOW_S` (None until two samples exist)."""
        self._samples.append((now, dict(tokens)))
        while len(self._samples) > 2 and now - self._samples[1][0] >= RATE_WINDOW_S:
            self._samples.popleft()
        then, old = self._samples[0]
        span = now - then
        return {key: (count - old.get(key, 0)) / span if span > 0 else None for key, count in tokens.items()}

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass  # the reader went away (a closed pipe): the run goes on, the results file has everything


__all__ = ["LOG_INTERVAL_S", "ProgressPrinter", "ProgressState", "clock_text", "format_line", "is_live_terminal"]
