"""A context ladder's long rungs run longer by themselves (``--ladder-stretch auto``, the default).

At a long context a small server's first token can take a sizable share of the stage: the CPU build's MLA took
29 s at 6K, so a 60 s rung finished one request and cut the rest, and its figures were one sample. When a rung
ends, the master reads the TTFT of the requests that began in it (the merged histograms: first tokens so far);
if the median exceeds a third of the rung's length (or no first token came and nothing failed), the rung runs
one more ``--stage-duration``, up to ``MAX_STRETCH`` times its planned length. Every later stage moves by as
much; the results' stage windows are the real ones. ``--ladder-stretch off`` keeps the planned durations.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

from attnload.measure.recorder import Recorder
from attnload.workload.shapes import Stage, StagedSpec

log = logging.getLogger(__name__)

MAX_STRETCH = 4
"""A rung runs at most this many times its planned duration."""
TTFT_SHARE = 1 / 3
"""A rung whose TTFT p50 exceeds this share of its length so far is lengthened (``ttft_long`` in the results)."""


class RungStretch:
    """Which stage runs at ``elapsed_s``, given the rungs lengthened so far."""

    def __init__(self, spec: StagedSpec) -> None:
        self.spec = spec
        self.shift_s = 0.0
        """Seconds added to the rungs so far: later stages start that much later."""
        self.index: int | None = None
        self.added_s = 0.0
        """Seconds added to the current rung."""

    def stage_at(self, elapsed_s: float, ttft_p50_s: Callable[[int], float]) -> Stage | None:
        """The stage at ``elapsed_s``; ``ttft_p50_s(index)`` is a stage's TTFT p50 so far (``inf``: none yet)."""
        stage = self.spec.stage_at(elapsed_s - self.shift_s)
        if self.index is None or (stage is not None and stage.index == self.index):
            self.index = stage.index if stage is not None else None
            return stage
        duration_s = self.spec.stage_duration_s
        length_s = duration_s + self.added_s
        p50 = ttft_p50_s(self.index)
        if self.added_s + duration_s <= (MAX_STRETCH - 1) * duration_s and p50 > TTFT_SHARE * length_s:
            self.added_s += duration_s
            self.shift_s += duration_s
            waited = "no first token yet" if math.isinf(p50) else f"TTFT p50 {p50:.1f} s"
            log.warning(
                "context ladder: stage %d runs %.0f s more (%s, over a third of its %.0f s); "
                "--ladder-stretch off keeps the stage duration",
                self.index + 1,
                duration_s,
                waited,
                length_s,
            )
            return self.spec.stage_at(elapsed_s - self.shift_s)
        self.index, self.added_s = (stage.index if stage is not None else None), 0.0
        return stage


def stage_ttft_p50_s(recorder: Recorder, index: int) -> float:
    """TTFT p50 of the first tokens of a stage's requests so far; ``inf`` when none came and none failed
    (every request still waiting), 0 when they failed (a longer stage would not help)."""
    series = recorder.combined(stage=index)
    ttft = series.hists["ttft"]
    if ttft.count == 0:
        return 0.0 if series.counts.get("failed", 0) else math.inf
    return ttft.quantile(0.5) or 0.0
