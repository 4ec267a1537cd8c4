"""Prefill interference on the wire (``--shape interference:L``): decode gaps during injected prefills.

A model's decode users stream long answers while one extra sender injects a long prompt (answer of
one token) every few seconds. The client knows each injected request's window, from when it was sent
to when its first token came back: the server was prefilling it in there. A decode stream's gap (the
time between two of its events) that overlaps a window counts as *during*, any other as *baseline*.
Windows are kept on the process that injects; decode records are classified when they complete (every
window that could overlap them has opened by then; one still open counts up to now), so only the
decode users of that process are classified (with several workers, worker 0's).

The stall per injection is what a stream lost: Σ over its gaps in a window of (gap − n × baseline ITL
p50), averaged over the (stream, window) pairs, per 1000 injected prompt tokens:
``ms_per_1k_prefill_tokens``, the wire's counterpart of ``attnload sim --explain``'s mixed-step stall.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from attnload.measure.histogram import LogHistogram
from attnload.measure.recorder import RequestRecord

TIMELINE_BUCKET_S = 0.5
"""The decode ITL timeline's resolution (seconds since the test began)."""
INJECTOR_PROFILE = "prefill-injector"
"""The profile name the injected requests carry (they are kept out of the model's own latencies)."""


@dataclass
class InterferenceSeries:
    """One model's decode gaps split by injected-prefill windows, and what was injected."""

    baseline: LogHistogram = field(default_factory=LogHistogram)
    """ITL per token of gaps that overlap no window."""
    during: LogHistogram = field(default_factory=LogHistogram)
    """ITL per token of gaps that overlap a window (its max is the longest stall a token saw)."""
    during_gaps_s: list[tuple[float, int, int]] = field(default_factory=list)
    """(gap seconds, tokens, stream-window pair) of each during-gap: the stall needs the final baseline p50."""
    injections: int = 0
    prefill_tokens: int = 0
    ttft: LogHistogram = field(default_factory=LogHistogram)
    """The injected requests' TTFT: how long each window lasted."""
    timeline: dict[int, list[float]] = field(default_factory=dict)
    """Per ``TIMELINE_BUCKET_S`` since the test began: [Σ decode gaps ending there, Σ their tokens]."""
    windows_s: list[tuple[float, float]] = field(default_factory=list)
    """Each injected prefill's window, seconds since the test began (the report marks them)."""

    def merge(self, other: InterferenceSeries) -> None:
        self.baseline.merge(other.baseline)
        self.during.merge(other.during)
        self.during_gaps_s.extend(other.during_gaps_s)
        self.injections += other.injections
        self.prefill_tokens += other.prefill_tokens
        self.ttft.merge(other.ttft)
        for bucket, (gap, tokens) in other.timeline.items():
            mine = self.timeline.setdefault(bucket, [0.0, 0.0])
            mine[0] += gap
            mine[1] += tokens
        self.windows_s.extend(other.windows_s)

    def to_wire(self) -> dict[str, Any]:
        return {
            "b": self.baseline.to_wire(),
            "d": self.during.to_wire(),
            "g": self.during_gaps_s,
            "i": self.injections,
            "p": self.prefill_tokens,
            "t": self.ttft.to_wire(),
            "l": [[bucket, gap, tokens] for bucket, (gap, tokens) in self.timeline.items()],
            "w": self.windows_s,
        }

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> InterferenceSeries:
        return cls(
            LogHistogram.from_wire(data["b"]),
            LogHistogram.from_wire(data["d"]),
            [(float(g), int(n), int(w)) for g, n, w in data["g"]],
            int(data["i"]),
            int(data["p"]),
            LogHistogram.from_wire(data["t"]),
            {int(b): [float(g), float(n)] for b, g, n in data.get("l", ())},
            [(float(a), float(b)) for a, b in data.get("w", ())],
        )


class InterferenceRecorder:
    """Windows of injected prefills and the decode gaps around them, per model key (see the module)."""

    def __init__(self) -> None:
        self.series: dict[str, InterferenceSeries] = {}
        self._delta: dict[str, InterferenceSeries] = {}
        self._windows: dict[str, list[tuple[float, float | None]]] = {}
        self._pairs = 0
        """(decode request, window) pairs numbered so far (one process classifies, so numbers are unique)."""
        self.origin_perf = 0.0

    def reset(self, origin_perf: float = 0.0) -> None:
        """A new test beginning at ``origin_perf`` (``perf_counter``): the timeline counts from there."""
        self.origin_perf = origin_perf
        self.series.clear()
        self._delta.clear()
        self._windows.clear()
        self._pairs = 0

    def _both(self, key: str) -> tuple[InterferenceSeries, InterferenceSeries]:
        return self.series.setdefault(key, InterferenceSeries()), self._delta.setdefault(key, InterferenceSeries())

    def open_window(self, key: str, sent_perf: float) -> int:
        """An injected request went on the wire; returns its window's index."""
        windows = self._windows.setdefault(key, [])
        windows.append((sent_perf, None))
        return len(windows) - 1

    def close_window(self, key: str, index: int, record: RequestRecord, prompt_tokens: int) -> None:
        """The injected request's first token came back (or it failed: the window ends at its end)."""
        windows = self._windows[key]
        sent = windows[index][0]
        end = sent + (record.ttft_s if record.ttft_s is not None else record.e2e_s)
        windows[index] = (sent, end)
        for series in self._both(key):
            series.windows_s.append((sent - self.origin_perf, end - self.origin_perf))
            series.injections += 1
            series.prefill_tokens += record.prompt_tokens or prompt_tokens
            if record.ttft_s is not None:
                series.ttft.record(record.ttft_s)

    def observe(self, record: RequestRecord, now_perf: float) -> None:
        """Classify one finished decode request's gaps against its model's windows."""
        windows = self._windows.get(record.model_key)
        if (
            windows is None
            or record.profile == INJECTOR_PROFILE
            or record.stage < 0
            or record.ttft_s is None
            or record.started_perf is None
            or record.outcome not in ("ok", "abandoned")
        ):
            return
        spans = [(start, end if end is not None else now_perf) for start, end in windows]
        both = self._both(record.model_key)
        numbered: dict[int, int] = {}
        at = record.started_perf + record.ttft_s
        for per_token, n in record.itl_samples:
            start, at = at, at + per_token * n
            hit = next((i for i, (ws, we) in enumerate(spans) if start < we and at > ws), None)
            if hit is not None and hit not in numbered:
                numbered[hit] = self._pairs
                self._pairs += 1
            bucket = int((at - self.origin_perf) // TIMELINE_BUCKET_S)
            for series in both:
                point = series.timeline.setdefault(bucket, [0.0, 0.0])
                point[0] += per_token * n
                point[1] += n
                if hit is None:
                    series.baseline.record(per_token, n)
                else:
                    series.during.record(per_token, n)
                    series.during_gaps_s.append((per_token * n, n, numbered[hit]))

    def take_delta(self) -> dict[str, Any]:
        delta, self._delta = self._delta, {}
        return {key: series.to_wire() for key, series in delta.items()}

    def merge_delta(self, delta: dict[str, Any]) -> None:
        for key, wire in delta.items():
            self.series.setdefault(key, InterferenceSeries()).merge(InterferenceSeries.from_wire(wire))


def during_itl_p50_s(series: InterferenceSeries) -> float | None:
    """Median over (stream, window) pairs of the stream's mean ITL in the window: Σ gaps ÷ Σ tokens. A
    mean per pair, not a per-gap p50: a window holds only a few long mixed steps beside ordinary ones at
    its edges, and events the client read together (zero gaps) keep their sum."""
    spans: dict[int, list[float]] = {}
    for gap, n, pair in series.during_gaps_s:
        total = spans.setdefault(pair, [0.0, 0.0])
        total[0] += gap
        total[1] += n
    means = sorted(gap / n for gap, n in spans.values() if n)
    if not means:
        return None
    middle = len(means) // 2
    return means[middle] if len(means) % 2 else (means[middle - 1] + means[middle]) / 2


def stall_per_window_s(series: InterferenceSeries, baseline_itl_s: float) -> float | None:
    """Mean over (stream, window) pairs of what the stream lost in the window: Σ (gap − n × baseline ITL)."""
    by_pair: dict[int, float] = {}
    for gap, n, pair in series.during_gaps_s:
        by_pair[pair] = by_pair.get(pair, 0.0) + gap - n * baseline_itl_s
    return sum(by_pair.values()) / len(by_pair) if by_pair else None


def stall_ms_per_1k_prefill_tokens(series: InterferenceSeries) -> float | None:
    """What a decode stream lost per injected prefill, ms per 1000 injected prompt tokens (None before a window
    overlapped a decode gap): ``prefill_interference.ms_per_1k_prefill_tokens`` and its live gauge."""
    baseline = series.baseline.quantile(0.5)
    if baseline is None or not series.injections:
        return None
    stall = stall_per_window_s(series, baseline)
    per_injection = series.prefill_tokens / series.injections
    return stall * 1e3 / (per_injection / 1000) if stall is not None and per_injection else None
