"""Backoff on failures that trying again at once cannot fix: a dead server, a refusing proxy, a wrong
model id or key are not hammered.

A request that fails with ``connection`` (refused, reset before a response, a DNS failure) takes
no time, so a user that simply tried again would send thousands of requests a second at a server
that is down: the failure ratio buries the real answers, the client saturates its CPU, and the load
may prolong the outage it is measuring. After such a failure the next try waits: exponential with
"equal jitter" (between half and all of ``initial · 2^(n-1)``, capped at ``max``), reset by the first
success. A closed-loop user sleeps through the wait (not part of any latency); the open loop keeps its
schedule and counts each arrival that falls inside the wait as ``dropped``, never silently skipped.

The same holds for the proxy classes and for answers that say the request itself is wrong
(``DETERMINISTIC``: a 404 for the model, a refused key, a rejected body, a prompt over the context
window, a proxy refusing the login): at once they come back in well under a millisecond, so one
user would send thousands a second of requests that cannot succeed at a gateway that rate-limits
or bans the key for it. And before a user's first success every failure backs off: nothing has
shown yet that the endpoint can answer at all. Other failures with an answer (a 5xx, a 429 with
its own Retry-After, a timeout) reset the wait, as before: the server is there and may recover.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from attnload.errors import ErrorClass

DEFAULT_INITIAL_S = 0.1
"""First wait after a connection failure (``[request] connect_backoff_s``)."""
DEFAULT_MAX_S = 5.0
"""The longest wait (``[request] connect_backoff_max_s``)."""
DETERMINISTIC = frozenset(
    {ErrorClass.NOT_FOUND, ErrorClass.AUTH, ErrorClass.BAD_REQUEST, ErrorClass.CONTEXT_LENGTH, ErrorClass.PROXY_AUTH}
)
"""Failures the same request gets every time it is sent: fixed by the user, never by trying again."""
UNREACHED = frozenset({ErrorClass.CONNECTION, ErrorClass.PROXY})
"""Failures before any answer from the server: back off unless a response had begun."""


class Backoff:
    """One user's (or one open-loop model's) backoff state; ``initial_s`` 0 turns it off."""

    __slots__ = ("initial_s", "max_s", "failures", "resume_at", "answered_ok", "_random")

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
        self.answered_ok = False
        """A request has succeeded: from then on only ``backs_off`` failures wait."""
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

    def after(self, error: ErrorClass | None, answered: bool) -> None:
        """After one request: ``error`` its class (None: it succeeded, or was abandoned mid-stream on
        purpose), ``answered`` whether a response head came back."""
        if error is None:
            self.answered_ok = True
            self.succeeded()
        elif error is ErrorClass.CANCELLED:
            return  # the test stopped it: says nothing about the endpoint
        elif backs_off(error, answered) or not self.answered_ok:
            self.failed()
        elif answered:
            self.succeeded()

    def wait_s(self, now: float | None = None) -> float:
        """How long the next try must still wait (0: go)."""
        if not self.resume_at:
            return 0.0
        return max(0.0, self.resume_at - (time.perf_counter() if now is None else now))


def backs_off(error: ErrorClass, answered: bool) -> bool:
    """Whether a failure of class ``error`` makes the next try wait (``answered``: a response head came back)."""
    return error in DETERMINISTIC or (error in UNREACHED and not answered)
