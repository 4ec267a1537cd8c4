"""What a scraped source is: fetch, parse, pick a model's sample, window it per stage, summarise.

attnload reads two kinds of Prometheus page during a run, the model servers' /metrics
(``scrape/server.py``) and dcgm-exporter's GPUs (``scrape/gpu.py``). Both go the same way:
a body is parsed into an exposition, each model's sample is picked from it, samples fold into
a ``StageWindow`` per model and stage, and the window's ``summary()`` is the typed stage
summary the results carry (``scrape/summary.py``). A ``Source`` says how one kind of page
does each step; the poller (``scrape/poller.py``) and the view (``scrape/view.py``) are the
one loop and the one per-test driver for every source.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from attnload.scrape.parse import ServerMetricsError
from attnload.scrape.summary import GaugeSummary, SummaryT


class Sample(Protocol):
    """One scrape of one model's series; ``source`` says which exporter served it."""

    @property
    def source(self) -> str: ...


@dataclass(frozen=True)
class ScrapeTarget:
    """One model whose scraped metrics are wanted: results key, URL, names it may be served as."""

    key: str
    url: str
    names: frozenset[str]
    """The model's id and known aliases, matched against the server's ``model_name`` label."""


TargetT = TypeVar("TargetT", bound=ScrapeTarget)
ExpositionT = TypeVar("ExpositionT")
SampleT = TypeVar("SampleT", bound=Sample)


def counter_delta(previous: float, current: float) -> float:
    """Increase of a counter between two scrapes; a decrease means it restarted from zero."""
    return current if current < previous else current - previous


@dataclass
class Gauge:
    """A gauge over a window's scrapes: mean and max (None before the first sample)."""

    total: float = 0.0
    n: int = 0
    peak: float = -math.inf

    def add(self, value: float) -> None:
        self.total += value
        self.n += 1
        self.peak = max(self.peak, value)

    def summary(self) -> GaugeSummary:
        return GaugeSummary(mean=self.mean(), max=self.peak if self.n else None)

    def mean(self) -> float | None:
        return self.total / self.n if self.n else None


class StageWindow(ABC, Generic[SampleT, SummaryT]):
    """One stage of one model's scrapes; ``add`` each scrape, ``close`` at the stage end.

    Gauges fold in each sample; counters difference consecutive samples, so ``close()`` starts
    the next window with the last sample as its baseline and consecutive stages split them exactly.
    """

    def __init__(self, baseline: SampleT | None = None) -> None:
        self._reset(baseline)

    def _reset(self, baseline: SampleT | None) -> None:
        self.baseline = baseline
        """The previous stage's last sample (None: the first sample added becomes the baseline)."""
        self.samples = 0
        self._last = baseline
        self._start()

    @property
    def last(self) -> SampleT | None:
        return self._last

    @property
    def source(self) -> str | None:
        """The exporter of the latest sample (or of the baseline before any)."""
        return self._last.source if self._last is not None else None

    def add(self, sample: SampleT) -> None:
        """Fold in one scrape (taken after every sample already added)."""
        previous = self._last
        self.samples += 1
        self._fold(sample)
        if previous is not None:
            self._difference(previous, sample)
        self._last = sample

    def close(self) -> SummaryT:
        """This stage's summary; the window restarts with the last sample as its baseline."""
        result = self.summary()
        self._reset(self._last)
        return result

    @abstractmethod
    def _start(self) -> None:
        """Empty per-stage state (gauges, counter sums)."""

    @abstractmethod
    def _fold(self, sample: SampleT) -> None:
        """Fold one sample's gauges in."""

    @abstractmethod
    def _difference(self, previous: SampleT, sample: SampleT) -> None:
        """Add the counters' increase from ``previous`` to ``sample``."""

    @abstractmethod
    def summary(self) -> SummaryT:
        """The stage so far as the results file carries it (null where the source has no such series)."""


class Source(ABC, Generic[TargetT, ExpositionT, SampleT, SummaryT]):
    """How one kind of metrics page is read: parsed, a model's sample picked, windowed, explained."""

    what: str
    """What the log lines call it (``server metrics``)."""
    hints: Mapping[str, str]
    """A failure reason (``ServerMetricsError.reason``) -> what to do about it."""
    misses_before_off: int = 1
    """Scrapes in a row with no sample for a model never seen before its view turns off."""

    @abstractmethod
    def parse(self, text: str) -> ExpositionT:
        """The body read; ``ServerMetricsError`` when it is not this kind of page."""

    @abstractmethod
    def pick(self, exposition: ExpositionT, target: TargetT, at_s: float) -> SampleT | None:
        """``target``'s sample in ``exposition`` scraped at ``at_s`` (monotonic), None where it has none."""

    @abstractmethod
    def unmatched(self, exposition: ExpositionT, target: TargetT, url: str) -> str:
        """Why ``target``'s view turns off when ``url`` serves nothing of it."""

    @abstractmethod
    def window(self) -> StageWindow[SampleT, SummaryT]:
        """A fresh window (the first sample added is its baseline)."""

    def quiet(self, target: TargetT) -> bool:
        """Whether turning ``target`` off is only a debug line (its URL was a guess), not a warning."""
        return False

    def explain(self, exc: ServerMetricsError) -> str:
        """A failure as a warning reads: what happened and what to do."""
        return f"{exc.detail} ({self.hints.get(exc.reason, exc.reason)})"
