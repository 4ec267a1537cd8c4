"""The master's server-side view: scrape each model server's /metrics during a test.

A ``ScrapeView`` (``scrape/view.py``) over the model servers' source (``scrape/server.py``):
one poller per test, a window closed at every stage boundary, ``ServerResults`` for the
results. This module says which URL and names each model is scraped by.
"""

from __future__ import annotations

from collections.abc import Sequence

from attnload.attention import FactsLookup, no_facts
from attnload.config.model import ModelTarget, TestConfig
from attnload.scrape import ScrapeTarget, default_metrics_url
from attnload.scrape.parse import Exposition, ServerSample
from attnload.scrape.poller import Fetch
from attnload.scrape.server import SERVER
from attnload.scrape.summary import ServerSummary
from attnload.scrape.view import ScrapeView


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


class ServerView(ScrapeView[ScrapeTarget, Exposition, ServerSample, ServerSummary]):
    """Per test: a poller of the model servers' /metrics, the finished stages' summaries and the totals."""

    def __init__(self, targets: Sequence[ScrapeTarget], interval_s: float, fetch: Fetch | None = None) -> None:
        super().__init__(SERVER, targets, interval_s, fetch)
