"""A model that only ever fails one way that retrying cannot fix: said once, and its users stop.

A wrong model id, key, body or proxy login fails every request the same way (the deterministic
classes of client/backoff.py). The backoff already slows those requests down; this stops them.
After ``GIVE_UP_AFTER`` requests in a row of one such class with no success between them, the
console says so once, with the fix, and unless the run was told to keep going (``--keep-going``)
the model's users send nothing more: closed-loop users idle, open-loop arrivals count as
``dropped``. A run whose every model stopped this way ends at once instead of waiting out its
stages; its failed requests make it exit 1.

The count is per sending process (one with the default ``--workers 0``; each worker on its own
otherwise, so each says it once).
"""

from __future__ import annotations

from attnload.client.backoff import DETERMINISTIC
from attnload.errors import ErrorClass
from attnload.measure.recorder import RequestRecord

GIVE_UP_AFTER = 20
"""Requests in a row of one deterministic class, with no success, before a model's users stop."""


class GiveUp:
    """Per model: the current run of one deterministic failure class, and the models stopped for it."""

    def __init__(self, keep_going: bool = False, after: int = GIVE_UP_AFTER) -> None:
        self.keep_going = keep_going
        self.after = after
        self._streaks: dict[str, tuple[ErrorClass, int]] = {}
        self._told: set[str] = set()
        self.stopped: set[str] = set()
        """Models whose users send nothing more."""

    def observe(self, record: RequestRecord) -> str | None:
        """Count one request; the console's line the first time its model reaches the limit, else None."""
        key = record.model_key
        if record.outcome == "ok":
            self._streaks.pop(key, None)
            return None
        if record.outcome != "failed" or record.error is None:
            return None  # cancelled or abandoned: says nothing about the endpoint
        kind = ErrorClass.from_label(record.error)
        if kind not in DETERMINISTIC:
            self._streaks.pop(key, None)
            return None
        previous, count = self._streaks.get(key, (kind, 0))
        count = count + 1 if previous is kind else 1
        self._streaks[key] = (kind, count)
        if count < self.after or key in self._told:
            return None
        self._told.add(key)
        said = f"model {key}: {count} requests in a row failed {kind.label}, none succeeded: {kind.value}"
        if self.keep_going:
            return f"{said} (--keep-going: sending on)"
        self.stopped.add(key)
        return f"{said}; its users stop (--keep-going sends on)"

    def is_stopped(self, key: str) -> bool:
        return key in self.stopped
