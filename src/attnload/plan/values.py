"""How each run option's text becomes its value: the readers :data:`~attnload.plan.options.OPTIONS` names.

A reader takes the text an option arrived as (an ``attnload run`` flag turned to text, a Locust
``--attnload-*`` option or an ``ATTNLOAD_*`` variable) and returns the value ``RunOptions`` holds; bad
input is a one-line :class:`UsageError` that names the flag. Both sides of a run read with the same
function, so ``attnload run`` refuses before any process starts what a Locust process would refuse.
"""

from __future__ import annotations

import math

from attnload.errors import UsageError
from attnload.workload.shapes import parse_duration

TRUE_TEXTS = ("1", "true", "yes", "on")
"""What an on/off option's text says for on (any case); anything else is off."""


def truthy(value: object) -> bool:
    """An on/off option's value: ``1``/``true``/``yes``/``on`` (any case) is on."""
    return str(value if value is not None else "").strip().lower() in TRUE_TEXTS


def flag_text(value: object) -> str:
    """A flag's parsed value as the text a Locust process reads: on/off as 1/0, numbers without a trailing .0."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value).strip()


def users_arg(text: str) -> int | str:
    """``--users``: a whole number, or (for a context ladder's grid) the list as given, checked by the planner."""
    try:
        return int(text)
    except ValueError:
        return text.strip()


def text_or_none(text: object) -> str | None:
    """A free-text option: its stripped text, None when empty."""
    value = str(text if text is not None else "").strip()
    return value or None


def profiles(text: object) -> tuple[str, ...]:
    """``--profile a,b``: the names, in order (empty: all the config's profiles)."""
    return tuple(p.strip() for p in str(text or "").split(",") if p.strip())


def warmup(text: object) -> float:
    """``--warmup``: seconds (``0`` or empty: none)."""
    value = str(text if text is not None else "").strip()
    return 0.0 if value in ("", "0") else parse_duration(value, "--warmup")


def arrivals(text: object) -> str | None:
    """``--arrivals``: ``poisson`` or ``constant``; None: the config's law."""
    value = str(text or "").strip().lower()
    if value and value not in ("poisson", "constant"):
        raise UsageError(f"--arrivals {text!r}: use poisson or constant")
    return value or None


def max_in_flight(text: object) -> int:
    return max(1, int(str(text).strip()))


def server_metrics_mode(text: str | None, flag: str = "--server-metrics") -> str:
    value = (text or "auto").strip().lower()
    if value not in ("auto", "off"):
        raise UsageError(f"{flag} {text!r}: use auto or off")
    return value


def gpu_metrics_mode(text: str | None) -> str:
    return server_metrics_mode(text, "--gpu-metrics")


def server_metrics_interval(text: str | float | None) -> float:
    """Seconds between scrapes: a positive number (``2``, ``0.5``) or a duration (``2s``)."""
    raw = str(text if text is not None else "2").strip()
    try:
        value = float(raw)
    except ValueError:
        value = parse_duration(raw, "--server-metrics-interval")
    if not 0.1 <= value <= 3600:
        raise UsageError(f"--server-metrics-interval {raw}: use 0.1 to 3600 seconds (default 2)")
    return value


def parse_start_spread(text: str | float | None, spelled: str = "--start-spread") -> str | float:
    """``auto`` (default), ``off`` or a positive number of seconds (``2`` or ``2s``)."""
    raw = str(text if text is not None else "auto").strip().lower()
    if raw in ("", "auto"):
        return "auto"
    if raw in ("off", "0", "0s", "none"):
        return "off"
    try:
        value = float(raw[:-1] if raw.endswith("s") else raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not 0.1 <= value <= 3600:
        raise UsageError(f"{spelled} {text}: use auto, off, or 0.1 to 3600 seconds (e.g. 3 or 3s)")
    return value


def snapshot_interval(text: object) -> float | None:
    """``--snapshot-interval``: 0 (off) or 1 to 86400 seconds; None when not given (the default applies)."""
    raw = str(text if text is not None else "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and (value == 0 or 1 <= value <= 86400)):
        raise UsageError(f"--snapshot-interval {raw}: use 0 (off) or 1 to 86400 seconds")
    return value
