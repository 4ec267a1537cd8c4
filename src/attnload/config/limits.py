"""Limits on every input, spelled once: the bounds a config or a flag may take, and the raw-file checks.

A load generator that accepts any number believes a typo: ``weight: 1e12`` built a
trillion-entry list, ``prompt_tokens: 10**12`` tried to build terabytes of prompt and a
``concurrency:inf`` stage crashed the scheduler after the run had started. Each bound
here is far beyond any real test and far below what breaks the process, and it is
checked at load, before any load starts. ``docs/limits.md`` lists them; a test reads
this module, so the two cannot drift apart unnoticed.

The raw-file checks run on the parsed-but-unvalidated data (JSON or TOML), because
only there is the key path known for every value and no recursion has happened yet:
:func:`scan_depth` refuses deep nesting from the text before a parser recurses,
:func:`check_tree` walks the parsed tree iteratively (depth, non-finite numbers, names)
and :func:`refuse_duplicates` is the JSON ``object_pairs_hook`` that refuses a key
given twice (TOML's parser already does).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from typing import Any

from attnload.errors import UsageError

MAX_CONFIG_BYTES = 16 * 1024 * 1024
"""A config file beyond this is not a config (a dataset or a log given to -c by mistake)."""
MAX_DEPTH = 32
"""Objects/arrays nested deeper than this are refused; a real config nests at most 5 levels."""
MAX_PROMPT_TOKENS = 2_000_000
"""Prompt tokens per request (fixed or a distribution's bound): above the largest context window served."""
MAX_OUTPUT_TOKENS = 1_000_000
"""``max_tokens`` per request."""
MAX_CONTEXT_TOKENS = 100_000_000
"""A model's ``context_window``."""
MAX_WEIGHT = 1e6
"""A model's or profile's weight (the model weights become a slot list of that length)."""
MAX_USERS = 100_000
"""Closed-loop users (``--users``, ``concurrency:`` levels, ``sweep:CAP``)."""
MAX_RATE = 100_000.0
"""Open-loop arrivals in req/s per model (``rate:`` levels)."""
MAX_SPAWN_RATE = 100_000.0
"""Users started per second."""
MAX_DURATION_S = 30 * 86_400.0
"""Any duration (``--duration``, stage length, warm-up): 30 days."""
MAX_TIMEOUT_S = 86_400.0
"""Any per-request timeout, Retry-After wait or SLO bound: one day."""
MAX_PREFIXES = 10_000
"""Distinct shared prefixes per profile (each is built once and kept)."""
MAX_REPEAT = 100_000
"""``benchmark.repeat`` of the seed script."""
MAX_IN_FLIGHT = 100_000
MAX_SEED = 2**63 - 1

NAME_PATTERN = r"[A-Za-z0-9._:-]{1,64}"
"""Model keys and profile names travel inside ``|``-joined wire keys and Prometheus labels: only these characters."""
_NAME = re.compile(NAME_PATTERN)
NAME_RULE = "use 1-64 of A-Z a-z 0-9 . _ : - (names travel in wire keys and metric labels)"

_BRACKETS = re.compile(r"[\[\]{}]")
_NOT_NEWLINE = re.compile(r"[^\n]")
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_TOML_SKIP = re.compile(r'"""(?:[^\\]|\\.)*?"""|\'\'\'.*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*', re.DOTALL)


class LimitError(ValueError):
    """A raw-file limit broken at ``where`` (a dotted key path, or ``line N``); the loader adds the file."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where


def is_name(value: str) -> bool:
    return bool(_NAME.fullmatch(value))


def scan_depth(text: str, toml: bool) -> None:
    """Refuse nesting deeper than :data:`MAX_DEPTH` before a recursive parser meets it.

    Strings (and TOML comments) are blanked first so brackets inside them do not count;
    an unbalanced text is left to the parser, which reports its own syntax error.
    """
    skip = _TOML_SKIP if toml else _JSON_STRING
    blanked = skip.sub(lambda m: _NOT_NEWLINE.sub(" ", m.group()), text)  # same length: positions still match
    depth = 0
    for match in _BRACKETS.finditer(blanked):
        depth = depth + 1 if match.group() in "[{" else depth - 1
        if depth > MAX_DEPTH:
            line = text.count("\n", 0, match.start()) + 1
            raise LimitError(
                f"line {line}",
                f"nesting deeper than {MAX_DEPTH} levels is refused; a config nests "
                "at most 5 (check for a generated or pasted file)",
            )


def refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads(object_pairs_hook=...)``: a key given twice is an error, not last-wins."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise LimitError(f"key {key!r}", "given twice in one object; JSON would silently keep the last: delete one")
        result[key] = value
    return result


def check_tree(data: Mapping[str, Any]) -> None:
    """Walk the parsed file without recursion: depth, finite numbers, and the names of models and profiles."""
    for path, value, depth in _walk(data):
        if depth > MAX_DEPTH:
            raise LimitError(
                _dotted(path), f"nesting deeper than {MAX_DEPTH} levels is refused; a config nests at most 5"
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise LimitError(
                _dotted(path),
                f"{_number_text(value)} is refused: every number must be finite; "
                "give a number within the limits in docs/limits.md",
            )
        if len(path) == 2 and path[0] in ("models", "workload", "test_prompts") and not is_name(path[1]):
            what = "model key" if path[0] == "models" else "profile name"
            raise LimitError(_dotted(path[:1]), f"{what} {path[1]!r} is refused: {NAME_RULE}")


def _walk(data: Any) -> Iterator[tuple[tuple[str, ...], Any, int]]:
    stack: list[tuple[tuple[str, ...], Any]] = [((), data)]
    while stack:
        path, value = stack.pop()
        yield path, value, len(path)
        if isinstance(value, Mapping):
            stack.extend((path + (str(k),), v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((path + (str(i),), v) for i, v in enumerate(value))


def _dotted(path: tuple[str, ...]) -> str:
    if len(path) > 6:  # a 1000-deep path would not be one readable line
        return ".".join(path[:3]) + "..." + path[-1] + f" ({len(path)} levels)"
    return ".".join(path) or "(top level)"


def _number_text(value: float) -> str:
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


RANGE_ERRORS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal", "finite_number")


def with_value(message: str, error: Mapping[str, Any]) -> str:
    """A pydantic error's message with the offending number and the fix; strings are never echoed (a secret?)."""
    value = error.get("input")
    if not isinstance(value, int | float) or isinstance(value, bool):
        return message
    if error.get("type") in RANGE_ERRORS:
        return f"{value!r} is out of range: {message.replace('Input should be', 'it must be')}; see docs/limits.md"
    return f"{message} (got {value!r})"


def check_number(
    what: str, value: float, *, low: float, high: float, low_inclusive: bool = False, fix: str = ""
) -> float:
    """A flag's number: finite and within (low, high] (or [low, high]); else one-line :class:`UsageError`."""
    ok_low = value >= low if low_inclusive else value > low
    if not math.isfinite(value) or not ok_low or value > high:
        bound = f"{'≥' if low_inclusive else '>'} {low:g} and ≤ {high:g}"
        raise UsageError(f"{what} {value:g} is out of range: it must be finite, {bound}{'; ' + fix if fix else ''}")
    return value
