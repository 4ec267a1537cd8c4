"""``attnload run``'s check of the traffic-realism flags (``--burstiness``, ``--abandon-*``), before any
process starts: what they combine with, and the environment that hands them to every Locust process."""

from __future__ import annotations

import argparse

from attnload.errors import UsageError
from attnload.workload.abandon import parse_abandon
from attnload.workload.arrivals import parse_burstiness
from attnload.workload.shapes import RateSpec, ShapeSpec, SweepSpec


def check_arrival_flags(args: argparse.Namespace, shape: ShapeSpec) -> dict[str, str]:
    """The validated flags as option name -> text (only those given); bad combinations are usage errors."""
    burstiness_text = getattr(args, "burstiness", None)
    rate_text, after_text = getattr(args, "abandon_rate", None), getattr(args, "abandon_after", None)
    burstiness = parse_burstiness(burstiness_text)
    parse_abandon(rate_text, after_text)
    if burstiness is not None:
        if not isinstance(shape, RateSpec | SweepSpec):
            raise UsageError(
                f"--burstiness shapes open-loop arrivals: use it with --shape rate:... or sweep, not {shape.kind}"
            )
        if getattr(args, "arrivals", None) == "constant":  # over the config's law, the flag wins
            raise UsageError("--burstiness and --arrivals constant both set the arrival law: pass one of them")
    given = {"burstiness": burstiness_text, "abandon-rate": rate_text, "abandon-after": after_text}
    return {name: str(value).strip() for name, value in given.items() if value is not None and str(value).strip()}
