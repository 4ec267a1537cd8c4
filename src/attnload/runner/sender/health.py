"""Whether a sending process could do what was asked: users that crashed and an open-loop scheduler that died.

A closed-loop user whose ``on_start`` or task raises (a config value no request can be built from,
a bug) stops sending; an open-loop scheduler greenlet that raises ends every later arrival. Neither
is a failed *request*, so neither shows in the request counts: each sending process keeps these
counts and ships them with its deltas; the collector sums the fleet's (``collector/health.py``) into
``results.client`` (``users_started``, ``users_crashed``, ``scheduler_error``) for ``attnload run``'s
exit status.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from attnload.errors import redact


@dataclass
class RunHealth:
    """This process's crash counts."""

    crashed: set[int] = field(default_factory=set)
    """Identities of user instances that raised (a user that raised twice counts once)."""
    scheduler_error: str | None = None

    def user_error(self, user: object) -> None:
        self.crashed.add(id(user))

    def scheduler_died(self, error: BaseException | None) -> None:
        if self.scheduler_error is None:
            self.scheduler_error = redact(f"{type(error).__name__}: {error}")[:300]

    def payload(self, started: int) -> dict[str, Any]:
        """What a worker ships with each report (cumulative, so a lost report loses nothing)."""
        return {"started": started, "crashed": len(self.crashed), "scheduler": self.scheduler_error}
