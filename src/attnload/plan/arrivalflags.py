"""``attnload run``'s check of how the traffic-realism options combine (``--burstiness``, ``--arrivals``),
before any process starts; each option's own value is checked where it is read (``plan/options.py``)."""

from __future__ import annotations

from attnload.errors import UsageError
from attnload.plan.options import RunOptions


def check_arrival_flags(options: RunOptions) -> None:
    """A bad combination is a one-line usage error."""
    shape = options.shape
    if options.burstiness is None or shape is None:
        return
    if not shape.takes_burstiness:
        raise UsageError(
            f"--burstiness shapes open-loop arrivals: use it with --shape rate:... or sweep, not {shape.kind}"
        )
    if options.arrivals == "constant":  # over the config's law, the flag wins
        raise UsageError("--burstiness and --arrivals constant both set the arrival law: pass one of them")
