"""Agent session traces: recorded tool-calling sessions replayed step by step (``--shape replay:PATH``).

A request trace (Mooncake, Azure) fixes when each request is sent; an agent's next step cannot be
sent before its previous step's answer, so a session trace fixes when each *session* starts and, for
every later step, how long after the previous answer it goes (the tool time, plus any other delay).
The replay then sends a session's steps in order, each after its predecessor's answer and its delay,
and builds each step's prompt as the agent would: the previous messages, the reply as streamed, a tool
call and a tool result sized so the step's prompt has the trace's input tokens.

One JSON object per line (the format is told apart from Mooncake by ``session_id``)::

    {"session_id": "s1", "step": 1, "timestamp": 0, "input_tokens": 1800, "output_tokens": 64,
     "hash_ids": [7, 8]}
    {"session_id": "s1", "step": 2, "tool_time_s": 1.5, "delay_s": 0.0, "input_tokens": 2900,
     "output_tokens": 48}

``timestamp`` (ms from the trace start) places a session's step 1; ``tool_time_s`` and ``delay_s``
(seconds, default 0) are waited after the previous step's answer; ``hash_ids`` name shared 512-token
blocks at the start of the session's first prompt (a system prompt shared across sessions), as in
Mooncake. ``--replay-speed`` divides every time.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnload.errors import UsageError
from attnload.workload.jsonscan import iter_json_lines

SESSION_KEY = "session_id"
"""A line with this key makes the file a session trace."""
MAX_SESSION_STEPS = 1_000


@dataclass(frozen=True)
class SessionStep:
    """One step of a recorded session; ``wait_s`` (tool time + delay) counts from the previous answer."""

    step: int
    input_tokens: int
    output_tokens: int
    wait_s: float = 0.0
    hash_ids: tuple[int, ...] = ()
    line: int = 0


@dataclass(frozen=True)
class TraceSession:
    """A recorded session: when it starts (seconds from the trace start) and its steps in order."""

    session_id: str
    start_s: float
    steps: tuple[SessionStep, ...]

    @property
    def span_s(self) -> float:
        """Start plus every wait: the earliest its last step can go (answers take longer)."""
        return self.start_s + sum(step.wait_s for step in self.steps)


def is_session_trace(path: str | Path) -> bool:
    """Whether the file's first line is an object with ``session_id``."""
    try:
        with open(Path(path).expanduser(), "rb") as handle:
            for raw in handle:
                text = raw.strip().lstrip(b"\xef\xbb\xbf")
                if text:
                    return text.startswith(b"{") and f'"{SESSION_KEY}"'.encode() in text
    except OSError:
        return False
    return False


def load_sessions(path: str | Path, speed: float = 1.0) -> tuple[TraceSession, ...]:
    """Every session of the trace, steps in order, times divided by ``speed``; sorted by start."""
    if not speed > 0:
        raise UsageError(f"--replay-speed {speed}: must be above 0 (2 replays twice as fast)")
    file = Path(path).expanduser()
    lines: dict[str, dict[int, tuple[dict[str, Any], int]]] = defaultdict(dict)
    for span, value in iter_json_lines(file, "trace"):
        where = f"trace {file} line {span.line}"
        if not isinstance(value, dict) or SESSION_KEY not in value:
            raise UsageError(f"{where}: each line of a session trace is an object with session_id and step")
        session = value[SESSION_KEY]
        if isinstance(session, bool) or not isinstance(session, str | int) or str(session) == "":
            raise UsageError(f"{where}: session_id must be a string or an integer, not {session!r}")
        step = _count(value, "step", where)
        if step > MAX_SESSION_STEPS:
            raise UsageError(f"{where}: step {step} is out of range: at most {MAX_SESSION_STEPS:,} steps a session")
        if step in lines[str(session)]:
            raise UsageError(f"{where}: session {session} has step {step} twice; number its steps 1, 2, 3, …")
        lines[str(session)][step] = (value, span.line)
    if not lines:
        raise UsageError(f"trace {file}: no sessions in it; give a trace with at least one line")
    sessions = [_session(file, key, steps, speed) for key, steps in lines.items()]
    return tuple(sorted(sessions, key=lambda s: (s.start_s, s.steps[0].line)))


def _session(file: Path, key: str, found: dict[int, tuple[dict[str, Any], int]], speed: float) -> TraceSession:
    numbers = sorted(found)
    if numbers != list(range(1, len(numbers) + 1)):
        raise UsageError(f"trace {file}: session {key} has steps {numbers}; number them 1, 2, 3, … without gaps")
    first, first_line = found[1]
    where = f"trace {file} line {first_line}"
    timestamp = first.get("timestamp", 0)
    if isinstance(timestamp, bool) or not isinstance(timestamp, int | float) or timestamp < 0:
        raise UsageError(f"{where}: timestamp must be milliseconds (a number >= 0), not {timestamp!r}")
    steps = []
    for number in numbers:
        value, line = found[number]
        where = f"trace {file} line {line}"
        wait = 0.0 if number == 1 else _seconds(value, "tool_time_s", where) + _seconds(value, "delay_s", where)
        hash_ids = value.get("hash_ids", [])
        if not isinstance(hash_ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in hash_ids):
            raise UsageError(f"{where}: hash_ids must be a list of integers (one per 512-token block)")
        steps.append(
            SessionStep(
                number,
                _count(value, "input_tokens", where),
                _count(value, "output_tokens", where),
                round(wait / speed, 6),
                tuple(hash_ids),
                line,
            )
        )
    return TraceSession(key, round(timestamp / 1000.0 / speed, 6), tuple(steps))


def _count(value: dict[str, Any], key: str, where: str) -> int:
    number = value.get(key)
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise UsageError(f"{where}: {key} must be a positive integer, not {number!r}")
    return number


def _seconds(value: dict[str, Any], key: str, where: str) -> float:
    number = value.get(key, 0.0)
    if isinstance(number, bool) or not isinstance(number, int | float) or not 0 <= number <= 86_400:
        raise UsageError(f"{where}: {key} must be seconds from 0 to 86400, not {number!r}")
    return float(number)


def session_steps(sessions: tuple[TraceSession, ...]) -> Iterator[SessionStep]:
    for session in sessions:
        yield from session.steps
