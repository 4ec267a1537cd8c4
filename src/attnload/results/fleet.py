"""The fleet's faults in the results: workers lost (with the traffic they never reported), workers that
froze and came back (stalled), workers refused for a foreign config, and a run whose final counts are
incomplete (``partial``).

A cluster loses pods and freezes them; a load generator that says nothing about it reports a gap as
if the server had never seen that traffic, and a freeze as if the server had been slow. These types
carry what the master saw, and :func:`stage_flags` flags the stages it touched, so every reader
(console, JSON, HTML, ``--fail-on worker-lost``) sees the same account.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

WORKER_LOST_FLAG = "worker_lost"
"""Stage flag: a worker went missing during the stage and never came back."""
WORKER_STALLED_FLAG = "worker_stalled"
"""Stage flag: a worker froze (missed heartbeats, then came back): its requests across the freeze carry
the freeze in their latency (each is marked ``worker_stalled_s`` in ``--requests-out``)."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class UnreportedTraffic(_Model):
    """One model's traffic of a lost worker that never reached the master: an estimate from the worker's
    last reported rates, from its last report to its last heartbeat, plus what it had in flight."""

    requests: int = 0
    """Requests the server received from the worker that the results lack (``completed`` + ``in_flight``)."""
    completed: int = 0
    """Requests finished after the worker's last report, at its last rate."""
    in_flight: int = 0
    """Requests in flight when it died (Little's law: its request rate × its mean e2e)."""
    output_tokens: int = 0
    """Output tokens of those requests, at its last token rate."""
    server_minus_client_output_tokens: int | None = None
    """The servers' own view over the stage of the loss: the server's generation tokens minus the client's
    (None: server metrics off or unread)."""


class LostWorker(_Model):
    """A worker that went missing (no heartbeat) and did not come back before the end."""

    worker: str
    pid: int | None = None
    """Its process id on its host (from its hello), to match it with ``ps`` or a pod's logs."""
    lost_at_s: float
    """Run time of its last heartbeat (when it was last heard from)."""
    detected_at_s: float
    """Run time the master marked it missing (heartbeats stop counting after ~4 s)."""
    last_report_s: float | None = None
    """Run time of its last merged report; the traffic after it is estimated in ``unreported``."""
    stage: int | None = None
    users: dict[str, int] = {}
    """Its users per model key at its last report: the load the run lost."""
    unreported: dict[str, UnreportedTraffic] = {}
    """Per model key: what it sent that never reached the results (estimated)."""


class StalledWorker(_Model):
    """A worker that froze (missed heartbeats, or its own loop stood still) and came back: not lost."""

    worker: str
    from_s: float
    """Run time the freeze began."""
    duration_s: float
    stage: int | None = None
    requests: int = 0
    """Its requests in flight across the freeze (marked in ``--requests-out``; their latency holds it)."""


class RefusedWorker(_Model):
    """A joining worker whose config or attnload version differs from the master's: never merged."""

    worker: str
    pid: int | None = None
    config_sha256: str | None = None
    """The worker's config hash (None: it sent none: not an attnload worker, or an older one)."""
    version: str | None = None
    admitted: bool = False
    """True when ``--accept-foreign-workers`` let it in anyway."""


class MissingWindow(_Model):
    """A worker whose final counts never arrived: what it did from ``from_s`` to ``to_s`` is missing."""

    worker: str
    from_s: float
    to_s: float


class Partial(_Model):
    """Results that lack some worker's final counts (lost, or silent at the end)."""

    workers: list[str]
    windows: list[MissingWindow] = []
    """Per worker, the run time its last report covered up to, and the end."""


class FleetFaults(_Model):
    """What the master saw of its fleet, for :func:`with_fleet_faults`."""

    lost: list[LostWorker] = []
    stalled: list[StalledWorker] = []
    refused: list[RefusedWorker] = []
    partial: Partial | None = None


def stage_flags(
    flags: list[str], start_s: float, end_s: float, index: int, faults: FleetFaults, last: bool
) -> list[str]:
    """A stage's flags with the fleet faults that fell in it (``start_s``/``end_s``: its window; a fault
    after the last stage's end belongs to the last stage)."""

    def inside(at_s: float, stage: int | None) -> bool:
        if stage is not None:
            return stage == index
        return start_s <= at_s < end_s or (last and at_s >= end_s)

    out = list(flags)
    if any(inside(w.detected_at_s, w.stage) for w in faults.lost) and WORKER_LOST_FLAG not in out:
        out.append(WORKER_LOST_FLAG)
    stalled = any(
        (w.stage == index) if w.stage is not None else (w.from_s < end_s and w.from_s + w.duration_s > start_s)
        for w in faults.stalled
    )
    if stalled and WORKER_STALLED_FLAG not in out:
        out.append(WORKER_STALLED_FLAG)
    return out
