"""Load shapes: ``concurrency:1,8,64`` (closed-loop users per stage), ``rate:0.5,1`` (open loop)
and ``sweep`` (an adaptive capacity study, planned stage by stage in ``sweep.py``).

A shape is parsed once into :class:`ShapeSpec` (bad specs are one-line usage errors);
``stage_at(elapsed_s)`` says which stage a moment belongs to. Locust's ``LoadTestShape``
adapter lives in ``users.py``; this module has no Locust import so tests call it directly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from attnload.errors import UsageError

_DURATION = re.compile(r"^\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m(?!s))?\s*(?:(\d+(?:\.\d+)?)s?)?\s*$")


def parse_duration(text: str | float | int, what: str = "duration") -> float:
    """Seconds from ``90``, ``90s``, ``1m30s`` or ``2h``; a bad value is a usage error."""
    if isinstance(text, int | float):
        seconds = float(text)
    else:
        match = _DURATION.match(str(text))
        if not match or not any(match.groups()):
            raise UsageError(f"{what} {text!r} is not a duration: use e.g. 60s, 2m or 1m30s")
        hours, minutes, secs = (float(g) if g else 0.0 for g in match.groups())
        seconds = hours * 3600 + minutes * 60 + secs
    if seconds <= 0:
        raise UsageError(f"{what} must be positive, got {text!r}")
    return seconds


@dataclass(frozen=True)
class Stage:
    index: int
    start_s: float
    end_s: float
    users: int | None = None
    rate: float | None = None


SWEEP_DEFAULT_MAX_USERS = 256
"""Per model: the sweep's doubling probe stops here at the latest (2^8, so ≤ 9 probe stages)."""


@dataclass(frozen=True)
class ShapeSpec:
    """A sequence of equal-length stages: user counts, arrival rates, or a sweep (planned live).

    For ``sweep`` ``levels`` holds one value, the per-model user cap of the probe.
    """

    kind: str  # "concurrency" | "rate" | "sweep"
    levels: tuple[float, ...]
    stage_duration_s: float

    @property
    def stages(self) -> tuple[Stage, ...]:
        """The fixed stages (none for a sweep, whose stages depend on what it measures)."""
        d = self.stage_duration_s
        if self.kind == "sweep":
            return ()
        if self.kind == "concurrency":
            return tuple(Stage(i, i * d, (i + 1) * d, users=int(v)) for i, v in enumerate(self.levels))
        return tuple(Stage(i, i * d, (i + 1) * d, rate=v) for i, v in enumerate(self.levels))

    @property
    def duration_s(self) -> float:
        return self.stage_duration_s * len(self.levels)

    def stage_at(self, elapsed_s: float) -> Stage | None:
        index = int(elapsed_s // self.stage_duration_s)
        stages = self.stages
        return stages[index] if 0 <= index < len(stages) else None

    def to_text(self) -> str:
        return f"{self.kind}:{','.join(f'{v:g}' for v in self.levels)}"

    @property
    def open_loop(self) -> bool:
        return self.kind == "rate"


def parse_shape(text: str, stage_duration_s: float) -> ShapeSpec:
    """Parse ``concurrency:1,8,64`` or ``rate:0.5,1,2``; errors say what a valid spec looks like."""
    kind, colon, values = text.partition(":")
    kind = kind.strip().lower()
    if kind == "sweep":
        return _parse_sweep(text, values if colon else "", stage_duration_s)
    if kind not in ("concurrency", "rate"):
        raise UsageError(f"unknown shape {text!r}: use concurrency:1,8,64 (users), rate:0.5,1,2 (req/s per model) "
                         "or sweep")
    parts = [p.strip() for p in values.split(",") if p.strip()]
    if not parts:
        raise UsageError(f"shape {text!r} lists no levels: e.g. {kind}:1,8,64")
    levels: list[float] = []
    for part in parts:
        try:
            value = float(part)
        except ValueError:
            raise UsageError(f"shape {text!r}: {part!r} is not a number") from None
        if value <= 0 or (kind == "concurrency" and value != int(value)):
            what = "a positive whole number of users" if kind == "concurrency" else "a positive rate in req/s"
            raise UsageError(f"shape {text!r}: {part!r} must be {what}")
        levels.append(value)
    return ShapeSpec(kind=kind, levels=tuple(levels), stage_duration_s=stage_duration_s)


def _parse_sweep(text: str, values: str, stage_duration_s: float) -> ShapeSpec:
    """``sweep`` or ``sweep:MAX`` (the probe's per-model user cap, a power of two is natural)."""
    value = values.strip()
    if not value:
        return ShapeSpec(kind="sweep", levels=(float(SWEEP_DEFAULT_MAX_USERS),), stage_duration_s=stage_duration_s)
    try:
        cap = int(value)
    except ValueError:
        raise UsageError(f"shape {text!r}: sweep takes one whole number, the per-model user cap (e.g. sweep:128)"
                         ) from None
    if cap < 1:
        raise UsageError(f"shape {text!r}: the sweep's user cap must be at least 1")
    return ShapeSpec(kind="sweep", levels=(float(cap),), stage_duration_s=stage_duration_s)
