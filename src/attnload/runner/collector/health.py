"""The fleet's crash counts: each sender's latest health report (``sender/health.py``), summed for
``results.client`` (``users_started``, ``users_crashed``, ``scheduler_error``)."""

from __future__ import annotations

from typing import Any


class FleetHealth:
    """The last health report of each worker (reports are cumulative: the latest replaces)."""

    def __init__(self) -> None:
        self.workers: dict[str, dict[str, Any]] = {}

    def merge(self, worker_id: str, data: Any) -> None:
        if isinstance(data, dict):
            self.workers[worker_id] = data

    def client_fields(self, own: dict[str, Any] | None = None) -> dict[str, Any]:
        """``ClientInfo`` fields over this process's own report (a single process) and every worker's."""
        reports = [*([own] if own is not None else []), *self.workers.values()]
        return {
            "users_started": sum(int(r.get("started") or 0) for r in reports),
            "users_crashed": sum(int(r.get("crashed") or 0) for r in reports),
            "scheduler_error": next((str(r["scheduler"]) for r in reports if r.get("scheduler")), None),
        }
