"""The master's view of one scraped source over a test: a polling greenlet, stage summaries, totals.

The master (or a single process) runs one poller per source and test in a greenlet,
closes a window at every stage boundary (one scrape there, so counter deltas end exactly
at the boundary) and hands the results a ``StageSummaries``. Workers never scrape: one
poller per run keeps the servers' load and the counter deltas single. The server view
(``runner/collector/serverview.py``) and the GPU view (``runner/collector/gpuview.py``) are this with their source.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic

import gevent

from attnload.scrape.poller import Fetch, ScrapePoller
from attnload.scrape.source import ExpositionT, SampleT, Source, SummaryT, TargetT
from attnload.scrape.summary import StageSummaries


class ScrapeView(Generic[TargetT, ExpositionT, SampleT, SummaryT]):
    """Per test: a poller, the finished stages' summaries, and the whole-run totals."""

    def __init__(
        self,
        source: Source[TargetT, ExpositionT, SampleT, SummaryT],
        targets: Sequence[TargetT],
        interval_s: float,
        fetch: Fetch | None = None,
        on_sample: Callable[[str, SampleT], None] | None = None,
    ) -> None:
        self.source = source
        self.targets = list(targets)
        self.interval_s = interval_s
        self._fetch = fetch
        self._on_sample = on_sample
        self.poller: ScrapePoller[TargetT, ExpositionT, SampleT, SummaryT] | None = None
        self._greenlet: gevent.Greenlet | None = None
        self.stages: dict[str, dict[int, SummaryT | None]] = {}
        self._final: dict[str, SummaryT | None] | None = None

    def start(self) -> None:
        """A new test: fresh windows (the first scrape is the baseline) and a polling greenlet."""
        self.stop()
        self.poller = ScrapePoller(
            self.source, self.targets, interval_s=self.interval_s, fetch=self._fetch, on_sample=self._on_sample
        )
        self.stages = {t.key: {} for t in self.targets}
        self._final = None
        self._greenlet = gevent.spawn(self.poller.run)

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

    def results(self, running_stage: int | None = None) -> StageSummaries[SummaryT]:
        """Finished stages, plus the running one so far (live views) when ``running_stage`` is given."""
        stages = {key: dict(by_index) for key, by_index in self.stages.items()}
        poller = self.poller
        if poller is not None and running_stage is not None and running_stage >= 0:
            for key, summary in poller.peek().items():
                stages.setdefault(key, {}).setdefault(running_stage, summary)
        totals = self._final if poller is None else poller.total()
        return StageSummaries(stages=stages, totals=dict(totals or {}))
