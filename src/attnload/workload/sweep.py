"""``--shape sweep``: find each model's throughput knee, then measure the highest rate it sustains.

The algorithm (a capacity study, bounded in time):

1. **Probe** (closed loop): 1, 2, 4, … users *per model* (users split evenly over the
   models), one stage each. A model's knee is found at stage ``i`` when its output tok/s
   grew by less than :data:`GROWTH` (10 %) over stage ``i − 1``, or its TTFT p99 broke the
   SLO: the knee is stage ``i − 1``, the last one where doubling paid and the SLO held.
   The probe stops when every model has a knee or the per-model user cap (``sweep:CAP``,
   default 256) is reached; a model without a knee then takes its last stage.
2. **Rates** (open loop): one stage per fraction in :data:`FRACTIONS` of each model's
   knee request rate (requests/s completed at the knee), all models at once, each at
   its own rate. Open loop so that a model past its capacity queues visibly.
3. **Report**: per model, the knee and the **max sustainable rate**: the highest rate
   stage in which the model met every SLO at p99 (``ttft_p99_s``, ``itl_p99_s``,
   ``e2e_p99_s``) and completed ≥ 95 % of the target rate with no failures; without
   SLOs only the completion test applies.

At most ``log2(CAP) + 1 + len(FRACTIONS)`` stages (13 with the defaults). Decisions use
the master's merged measurements, which trail by one worker report (≈ 3 s): stages
of 30 s or more keep that error small and equal across stages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

GROWTH = 0.10
FRACTIONS = (0.5, 0.7, 0.85, 1.0)
COMPLETION_RATIO = 0.95


@dataclass(frozen=True)
class ModelStageStats:
    """What the sweep needs from one model in one stage (computed by the runtime)."""

    output_tokens_per_s: float
    requests_per_s: float
    """Completed (ok) requests per second."""
    ttft_p99_s: float | None
    itl_p99_s: float | None
    e2e_p99_s: float | None
    failed: int = 0


@dataclass(frozen=True)
class SweepStage:
    """The next stage to run: closed-loop users (total) or per-model open-loop rates."""

    kind: Literal["concurrency", "rate"]
    users: int | None = None
    rates_rps: dict[str, float] | None = None
    fraction: float | None = None


@dataclass
class _ModelState:
    probe: list[ModelStageStats] = field(default_factory=list)
    knee: int | None = None
    rates: list[tuple[float, ModelStageStats, int]] = field(default_factory=list)
    """(target rate, stats at decision time, stage index) per rate stage."""


@dataclass(frozen=True)
class Slo:
    ttft_p99_s: float | None = None
    itl_p99_s: float | None = None
    e2e_p99_s: float | None = None

    def met(self, stats: ModelStageStats) -> bool:
        checks = (
            (self.ttft_p99_s, stats.ttft_p99_s),
            (self.itl_p99_s, stats.itl_p99_s),
            (self.e2e_p99_s, stats.e2e_p99_s),
        )
        return all(limit is None or (value is not None and value <= limit) for limit, value in checks)


class SweepPlan:
    """The sweep's state machine: feed it each finished stage's stats, it names the next stage."""

    def __init__(self, models: list[str], max_users_per_model: int, slo: Slo) -> None:
        self.models = list(models)
        self.max_users_per_model = max(1, max_users_per_model)
        self.slo = slo
        self.state = {key: _ModelState() for key in self.models}
        self.users_per_model = 1
        self.phase = "probe"
        self._fraction_index = 0
        self._knee_rps: dict[str, float] = {}

    def first(self) -> SweepStage:
        return SweepStage(kind="concurrency", users=len(self.models))

    def advance(self, stats: dict[str, ModelStageStats], stage_index: int = -1) -> SweepStage | None:
        """Record the stage that just ended; return the next one, or None when the sweep is done."""
        if self.phase == "probe":
            return self._after_probe(stats)
        fraction = FRACTIONS[self._fraction_index]
        for key in self.models:
            if key in stats:
                self.state[key].rates.append((fraction * self._knee_rps[key], stats[key], stage_index))
        self._fraction_index += 1
        return self._rate_stage()

    def _after_probe(self, stats: dict[str, ModelStageStats]) -> SweepStage | None:
        for key in self.models:
            state = self.state[key]
            current = stats.get(key)
            if current is None or state.knee is not None:
                continue
            state.probe.append(current)
            if len(state.probe) >= 2:
                previous = state.probe[-2]
                if current.output_tokens_per_s < (1.0 + GROWTH) * previous.output_tokens_per_s:
                    state.knee = len(state.probe) - 2
            if state.knee is None and not self.slo.met(current):
                state.knee = max(0, len(state.probe) - 2)
        done = all(s.knee is not None for s in self.state.values())
        if not done and self.users_per_model * 2 <= self.max_users_per_model:
            self.users_per_model *= 2
            return SweepStage(kind="concurrency", users=self.users_per_model * len(self.models))
        for state in self.state.values():
            if state.knee is None:
                state.knee = max(0, len(state.probe) - 1)
        self._knee_rps = {
            key: (s.probe[s.knee].requests_per_s if s.probe else 0.0)
            for key, s in self.state.items()
            if s.knee is not None
        }
        self.phase = "rate"
        return self._rate_stage()

    def _rate_stage(self) -> SweepStage | None:
        if self._fraction_index >= len(FRACTIONS):
            self.phase = "done"
            return None
        fraction = FRACTIONS[self._fraction_index]
        rates = {key: fraction * rps for key, rps in self._knee_rps.items() if rps > 0}
        if not rates:
            self.phase = "done"
            return None
        return SweepStage(kind="rate", rates_rps=rates, fraction=fraction)

    def report(self, final: dict[int, dict[str, ModelStageStats]] | None = None) -> dict[str, dict[str, Any]]:
        """Per model: knee users/tok/s/req/s and the max sustainable rate (None if no rate stage held).

        ``final`` (stage index → stats after the run) replaces the decision-time stats of
        rate stages, which missed the requests still in flight when the stage ended.
        """
        out: dict[str, dict[str, Any]] = {}
        final = final or {}
        for key, state in self.state.items():
            knee = state.probe[state.knee] if state.probe and state.knee is not None else None
            judged = [(rate, final.get(index, {}).get(key, stats)) for rate, stats, index in state.rates]
            sustained = [
                rate
                for rate, stats in judged
                if stats.failed == 0 and stats.requests_per_s >= COMPLETION_RATIO * rate and self.slo.met(stats)
            ]
            out[key] = {
                "knee_users": 2**state.knee if state.knee is not None else None,
                "knee_output_tokens_per_s": knee.output_tokens_per_s if knee else None,
                "knee_requests_per_s": knee.requests_per_s if knee else None,
                "probe_output_tokens_per_s": [s.output_tokens_per_s for s in state.probe],
                "rates_tried_rps": [rate for rate, _, _ in state.rates],
                "max_sustainable_rps": max(sustained) if sustained else None,
            }
        return out
