"""Which models are unreachable now, said on the console while they are.

While a model's server refuses or resets connections its users back off (``client/backoff.py``) and
the open loop drops arrivals; the counts alone would show only a climbing ``failed``. Every second
the collector compares each model's merged counts with the previous second's: connection failures
(or dropped arrivals) and no success mean the model is unreachable, and the first success after that
means it is back. Each change is one log line on the console, and the progress line names the
models that are unreachable now.
"""

from __future__ import annotations

import logging
import time
from collections import Counter

from attnload.errors import ErrorClass
from attnload.measure.recorder import Recorder

log = logging.getLogger(__name__)

CONNECTION = ErrorClass.CONNECTION.label


class Reachability:
    """Per model: unreachable since when (``perf_counter``), from the merged counts' changes."""

    def __init__(self) -> None:
        self.since: dict[str, float] = {}
        """Models unreachable now, and since when."""
        self._last: dict[str, tuple[int, int]] = {}

    def unreachable(self) -> list[str]:
        return sorted(self.since)

    def tick(self, recorder: Recorder, now: float | None = None) -> None:
        """Compare each model's (successes, connection failures + drops) with the last tick's."""
        now = time.perf_counter() if now is None else now
        answered: Counter[str] = Counter()
        refused: Counter[str] = Counter()
        for (model_key, _profile, _stage), series in list(recorder.series.items()):
            counts = series.counts
            answered[model_key] += counts.get("ok", 0) + counts.get("failed", 0) - series.errors.get(CONNECTION, 0)
            refused[model_key] += series.errors.get(CONNECTION, 0) + counts.get("dropped", 0)
        for key in set(answered) | set(refused):
            before_answered, before_refused = self._last.get(key, (0, 0))
            more_answered = answered[key] > before_answered
            more_refused = refused[key] > before_refused
            self._last[key] = (answered[key], refused[key])
            if more_answered and key in self.since:
                log.warning("%s: reachable again after %.0f s unreachable", key, now - self.since.pop(key))
            elif more_refused and not more_answered and key not in self.since:
                self.since[key] = now
                log.warning("%s: unreachable (connections refused or reset): its users back off until it answers", key)

    def reset(self) -> None:
        """A new test: counts restart from zero."""
        self.since.clear()
        self._last.clear()
