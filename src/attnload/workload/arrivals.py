"""Bursty open-loop arrivals (``--burstiness B``): one gamma schedule for the whole fleet.

Inter-arrival gaps are gamma(shape B, mean 1/rate), as vLLM's ``--burstiness`` and AIPerf's
gamma arrivals: B = 1 is Poisson (exponential gaps), B < 1 clumps the same mean rate into
bursts, B > 1 smooths it toward constant; the gaps' coefficient of variation is 1/√B.

Why one fleet-wide schedule: K workers each drawing an independent gamma stream at rate/K
would merge into something close to Poisson again (superposition), so a 4-worker run at
B = 0.25 would not be bursty at all. Every worker therefore draws the *same* seeded
schedule of the stage (seeded by run seed, stage and stream, never by worker) and sends
arrivals ``i`` with ``i mod workers == worker index``; their union is the schedule.

Like the default Poisson law, the schedule is conditioned on its count: ``n = round(rate ·
duration)`` arrivals, the n + 1 gamma gaps scaled to sum to the stage (a Dirichlet(B, …, B)
split of it), so the achieved rate is exactly the target and each gap keeps CV ≈ 1/√B
(exactly √(n / (n·B + B + 1))).
"""

from __future__ import annotations

import math
import random
import zlib

from attnload.errors import UsageError

MIN_BURSTINESS = 0.01
"""CV 10: nearly every arrival of a stage in a handful of clumps."""
MAX_BURSTINESS = 100.0
"""CV 0.1: nearly constant spacing (``--arrivals constant`` is exactly that)."""


def parse_burstiness(text: str | float | None) -> float | None:
    """``--burstiness`` / ``ATTNLOAD_BURSTINESS``: None when unset; a bad value is a usage error."""
    raw = "" if text is None else str(text).strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise UsageError(
            f"--burstiness {raw!r} is not a number: use e.g. 0.25 (bursty), 1 (Poisson) or 4 (smoother)"
        ) from None
    if not (math.isfinite(value) and MIN_BURSTINESS <= value <= MAX_BURSTINESS):
        raise UsageError(
            f"--burstiness {raw}: use a gamma shape from {MIN_BURSTINESS:g} to {MAX_BURSTINESS:g} "
            "(1 = Poisson, below 1 burstier)"
        )
    return value


def gamma_offsets(
    rate_rps: float,
    duration_s: float,
    burstiness: float,
    *,
    share_index: int,
    share_count: int,
    seed: int,
    stage: int,
    stream: int,
) -> list[float]:
    """This worker's share of the fleet's gamma schedule, seconds after the stage start, sorted."""
    total = round(rate_rps * duration_s)
    if total <= 0 or duration_s <= 0 or share_count < 1:
        return []
    rng = random.Random(zlib.crc32(f"{seed}:{stage}:{stream}:gamma".encode()))  # no worker in the seed
    gaps = [rng.gammavariate(burstiness, 1.0) for _ in range(total + 1)]
    scale = duration_s / (math.fsum(gaps) or 1.0)
    offsets, at = [], 0.0
    for gap in gaps[:-1]:
        at += gap * scale
        offsets.append(at)
    return offsets[share_index % share_count :: share_count]


def stage_arrivals(arrivals: str, burstiness: float | None) -> tuple[str, float | None]:
    """``(arrivals, burstiness)`` as results report them: gamma with its shape, Poisson as shape 1."""
    if burstiness is not None:
        return "gamma", burstiness
    return arrivals, (1.0 if arrivals == "poisson" else None)
