"""Abandoned streams (``--abandon-rate P --abandon-after SPEC``): clients that give up mid-answer.

A fraction P of streamed requests (a seeded draw per request) closes its connection once it
has read SPEC of the answer; the server sees the connection go and must abort the request and
free its KV blocks, the path a real chat user's closed tab exercises. Such a request ends
``abandoned``: not a failure (the client chose to leave), not a stop-time cancellation.

SPEC, a small grammar:

- ``5``: after 5 content chunks (tokens, on a server that streams one token per chunk);
- ``2s`` or ``500ms``: once that long has passed since the request was due;
- ``uniform:2,10`` / ``uniform:1s,3s``: drawn per request, uniform between the two;
- ``exp:5`` / ``exp:2s``: drawn per request, exponential with that mean (chunks at least 1).

The client checks between reads, after the chunks a read delivered (``client/chat.py``): a
count can be passed by the other chunks of the same read, and a duration is noticed at the
first content that arrives after it.
"""

from __future__ import annotations

import math
import random
import re
import zlib
from dataclasses import dataclass

from attnload.errors import UsageError

_AMOUNT = re.compile(r"^(\d+(?:\.\d+)?)(ms|s)?$")
MAX_CHUNKS = 1_000_000
MAX_SECONDS = 86_400.0
_SYNTAX = "use 5 (content chunks), 2s, uniform:2,10, uniform:1s,3s or exp:5"


@dataclass(frozen=True)
class AbandonSpec:
    """Which requests abandon (``rate``) and after how much (``law`` over chunks, or seconds)."""

    rate: float
    law: str
    """``fixed``, ``uniform`` or ``exp``."""
    low: float
    high: float
    """The fixed amount or mean (``low == high``), or a uniform's bounds."""
    seconds: bool
    """True: an amount of time since the request was due; False: content chunks."""
    text: str = ""

    def amount(self, rng: random.Random) -> float:
        if self.law == "uniform":
            value = rng.uniform(self.low, self.high)
        elif self.law == "exp":
            value = rng.expovariate(1.0 / self.low)
        else:
            value = self.low
        return value if self.seconds else max(1, round(value))


class Abandoner:
    """One process's seeded draws: whether each request abandons, and after how much."""

    def __init__(self, spec: AbandonSpec, seed: int) -> None:
        self.spec = spec
        self.seed = seed
        self._rng: random.Random | None = None

    def draw(self, worker_index: int = 0) -> tuple[int | None, float | None] | None:
        """``(after chunks, after seconds)`` (one of them None) for an abandoning request, else None."""
        rng = self._rng
        if rng is None:  # seeded on first use: the worker index is known by then
            rng = self._rng = random.Random(zlib.crc32(f"{self.seed}:abandon:{worker_index}".encode()))
        if rng.random() >= self.spec.rate:
            return None
        value = self.spec.amount(rng)
        return (None, value) if self.spec.seconds else (int(value), None)


def parse_abandon(rate_text: str | float | None, after_text: str | None) -> AbandonSpec | None:
    """The two flags as one spec (None: nobody abandons); bad input is a one-line usage error."""
    rate_raw = "" if rate_text is None else str(rate_text).strip()
    after = (after_text or "").strip().lower()
    if not rate_raw:
        if after:
            raise UsageError("--abandon-after needs --abandon-rate P (the fraction of requests that abandon)")
        return None
    try:
        rate = float(rate_raw)
    except ValueError:
        raise UsageError(f"--abandon-rate {rate_raw!r} is not a number: use a fraction from 0 to 1, e.g. 0.3") from None
    if not (math.isfinite(rate) and 0.0 <= rate <= 1.0):
        raise UsageError(f"--abandon-rate {rate_raw}: use a fraction from 0 to 1, e.g. 0.3")
    if not after:
        raise UsageError(f"--abandon-rate needs --abandon-after SPEC: {_SYNTAX}")
    if rate == 0.0:
        return None
    law, colon, values = after.partition(":")
    if not colon:
        law, values = "fixed", after
    parts = [p.strip() for p in values.split(",")]
    if law not in ("fixed", "uniform", "exp") or len(parts) != (2 if law == "uniform" else 1):
        raise UsageError(f"--abandon-after {after_text!r}: {_SYNTAX}")
    amounts = [_amount(p, after_text or "") for p in parts]
    if len({seconds for _, seconds in amounts}) > 1:
        raise UsageError(f"--abandon-after {after_text!r}: give both bounds as chunks or both as durations")
    low, high = amounts[0][0], amounts[-1][0]
    if low > high:
        raise UsageError(f"--abandon-after {after_text!r}: the lower bound is above the upper one")
    return AbandonSpec(rate=rate, law=law, low=low, high=high, seconds=amounts[0][1], text=after)


def _amount(text: str, whole: str) -> tuple[float, bool]:
    match = _AMOUNT.match(text)
    if match is None:
        raise UsageError(f"--abandon-after {whole!r}: {text!r} is not a count or duration ({_SYNTAX})")
    value, unit = float(match.group(1)), match.group(2)
    if unit is None:
        if not 1 <= value <= MAX_CHUNKS:
            raise UsageError(f"--abandon-after {whole!r}: chunk counts go from 1 to {MAX_CHUNKS:,}")
        return value, False
    seconds = value / 1000.0 if unit == "ms" else value
    if not 0 < seconds <= MAX_SECONDS:
        raise UsageError(f"--abandon-after {whole!r}: durations go from above 0 to {MAX_SECONDS:g} s")
    return seconds, True
