"""The master's server-side view: scrape each model server's /metrics during a test.

The master (or a single process) runs one ``ServerMetricsPoller`` per test in a
greenlet, closes a window at every stage boundary (one scrape there, so counter deltas
end exactly at the boundary) and hands the results ``ServerResults``. Workers never
scrape: one poller per run keeps the servers' load and the counter deltas single.
A server without Prometheus metrics turns itself off with one warning (the poller's);
the run goes on and its stages say ``server: null``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gevent

from attnload.attention import FactsLookup, no_facts
from attnload.config.model import ModelTarget, TestConfig
from attnload.results.server import ServerResults
from attnload.scrape import ScrapeTarget, ServerMetricsPoller, default_metrics_url

Fetch = Callable[[str], str]


def scrape_targets(config: TestConfig, attention_facts: FactsLookup = no_facts) -> list[ScrapeTarget]:
    """One target per model: its ``metrics_url`` (else ``/metrics`` on its base URL's host), and the
    names a server may call it: its id, the id's last path part, and the simulator preset the id is
    an alias of (the entry point's facts know it; the runner never imports the simulator)."""
    return [
        ScrapeTarget(
            key=m.key, url=m.metrics_url or default_metrics_url(m.base_url), names=model_names(m, attention_facts)
        )
        for m in config.models
    ]


def model_names(target: ModelTarget, attention_facts: FactsLookup = no_facts) -> frozenset[str]:
    names = {target.id, target.id.rsplit("/", 1)[-1]}
    preset = (attention_facts(target.id) or {}).get("preset")
    if isinstance(preset, str) and preset:
        names.add(preset)
    return frozenset(names)


class ServerView:
    """Per test: a poller, the finished stages' summaries, and the whole-run totals."""

    def __init__(self, targets: list[ScrapeTarget], interval_s: float, fetch: Fetch | None = None) -> None:
        self.targets = targets
        self.interval_s = interval_s
        self._fetch = fetch
        self.poller: ServerMetricsPoller | None = None
        self._greenlet: Any = None
        self.stages: dict[str, dict[int, dict[str, Any] | None]] = {}
        self._final: dict[str, dict[str, Any] | None] | None = None

    def start(self) -> None:
        """A new test: fresh windows (the first scrape is the baseline) and a polling greenlet."""
        self.stop()
        self.poller = self._new_poller()
        self.stages = {t.key: {} for t in self.targets}
        self._final = None
        self._greenlet = gevent.spawn(self.poller.run)

    def _new_poller(self) -> ServerMetricsPoller:
        """The poller of one test (the GPU view, ``runner/gpuview.py``, polls dcgm-exporter instead)."""
        return ServerMetricsPoller(self.targets, interval_s=self.interval_s, fetch=self._fetch)

    def stage_ended(self, index: int) -> None:
        """Close stage ``index`` for every model (one scrape now, so its deltas end here)."""
        if self.poller is None or index < 0:
            return
        for key, summary in self.poller.close_stage().items():
            self.stages.setdefault(key, {})[index] = summary

    def stop(self) -> None:
        """The test ended: keep the totals, stop polling."""
        if self.poller is None:
            return
        self._final = self.poller.total()
        self.poller.stop()
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
        self.poller = None
        self._greenlet = None

    def results(self, running_stage: int | None = None) -> ServerResults:
        """Finished stages, plus the running one so far (live views) when ``running_stage`` is given."""
        stages = {key: dict(by_index) for key, by_index in self.stages.items()}
        poller = self.poller
        if poller is not None and running_stage is not None and running_stage >= 0:
            for key, summary in poller.peek().items():
                stages.setdefault(key, {}).setdefault(running_stage, summary)
        totals = self._final if poller is None else poller.total()
        return ServerResults(stages=stages, totals=dict(totals or {}))
