"""Bounds on the numeric ``attnload run`` flags, checked before any process starts.

argparse's ``type=float`` accepts ``inf`` and ``nan``, and ``nan < 0`` is false, so a
plain sign check lets them through to the scheduler, where they crash it mid-run. Every
number here is checked finite and within the limits of :mod:`attnload.config.limits`.
Shapes (``--shape``) and durations are bounded where they are parsed (``workload/shapes.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attnload.config import limits
from attnload.config.limits import check_number


def check_flag_limits(flags: Mapping[str, Any]) -> None:
    """Raise a one-line ``UsageError`` for the first out-of-range flag (``flags``: the command line by
    argparse attribute); absent flags (None) are skipped."""
    bounds: tuple[tuple[str, str, float, float, bool, str], ...] = (
        ("users", "--users", 0, limits.MAX_USERS, False, "give a whole number of users"),
        ("spawn_rate", "--spawn-rate", 0, limits.MAX_SPAWN_RATE, False, "users started per second"),
        ("stop_timeout", "--stop-timeout", 0, limits.MAX_TIMEOUT_S, True, "seconds in-flight requests may finish"),
        ("max_in_flight", "--max-in-flight", 1, limits.MAX_IN_FLIGHT, True, "connections per model and worker"),
        ("metrics_port", "--metrics-port", 0, 65535, True, "a TCP port, or 0 for off"),
        ("web_port", "--web-port", 1, 65535, True, "a TCP port"),
        ("prometheus", "--prometheus", 1, 65535, True, "a TCP port"),
    )
    for name, spelled, low, high, inclusive, fix in bounds:
        value = flags.get(name)
        if value is not None:
            check_number(spelled, float(value), low=low, high=high, low_inclusive=inclusive, fix=fix)
