"""Backoff on connection errors: a dead or restarting server is not hammered.

A request that fails with ``connection`` (refused, reset before a response, a DNS failure) takes
no time, so a user that simply tried again would send thousands of requests a second at a server
that is down: the failure ratio buries the real answers, the client saturates its CPU, and the load
may prolong the outage it is measuring. After such a failure the next try waits: exponential with
"equal jitter" (between half and all of ``initial · 2^(n-1)``, capped at ``max``), reset by the first
success. A closed-loop user sleeps through the wait (not part of any latency); the open loop keeps its
schedule and counts each arrival that falls inside the wait as ``dropped``, never silently skipped.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

DEFAULT_INITIAL_S = 0.1
"""First wait after a connection failure (``[request] connect_backoff_s``)."""
DEFAULT_MAX_S = 5.0
"""The longest wait (``[request] connect_backoff_max_s``)."""


class Backoff:
    """One user's (or one open-loop model's) backoff state; ``initial_s`` 0 turns it off."""

    __slots__ = ("initial_s", "max_s", "failures", "resume_at", "_random")

    def __init__(
        self,
        initial_s: float = DEFAULT_INITIAL_S,
        max_s: float = DEFAULT_MAX_S,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.initial_s = initial_s
        self.max_s = max(max_s, initial_s)
        self.failures = 0
        """Connection failures since the last success."""
        self.resume_at = 0.0
        """``perf_counter`` time before which the next try waits (or is dropped)."""
        self._random = rng

    @property
    def enabled(self) -> bool:
        return self.initial_s > 0

    def failed(self, now: float | None = None) -> float:
        """A connection failure: the wait before the next try (seconds), from ``now``."""
        if not self.enabled:
            return 0.0
        self.failures += 1
        ceiling = min(self.max_s, self.initial_s * 2.0 ** min(self.failures - 1, 60))
        wait = ceiling * (0.5 + 0.5 * self._random())
        self.resume_at = (time.perf_counter() if now is None else now) + wait
        return wait

    def succeeded(self) -> None:
        """Any answer from the server (even an HTTP error): the endpoint is reachable again."""
        self.failures = 0
        self.resume_at = 0.0

    def wait_s(self, now: float | None = None) -> float:
        """How long the next try must still wait (0: go)."""
        if not self.resume_at:
            return 0.0
        return max(0.0, self.resume_at - (time.perf_counter() if now is None else now))
