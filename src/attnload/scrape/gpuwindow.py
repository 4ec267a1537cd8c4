"""Turn successive scrapes of one model's GPUs into a stage's ``stages[].gpu`` summary.

Activity fields (DRAM, tensor, SM activity, GPU utilisation) are mean and max over every
GPU of every scrape in the stage. Power is the per-scrape sum over the model's GPUs,
averaged. Energy is the increase of each GPU's ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``
counter (mJ) between consecutive scrapes, with Prometheus' reset rule (a counter that went
down restarted from zero: the new value is the delta), summed; where a pair of scrapes
lacks the counter the energy is the power sum integrated over the interval (trapezoid),
and ``energy_from`` says ``power``. ``close()`` starts the next stage with the last scrape
as its baseline, so consecutive stages split the energy exactly. ``bound`` is
:func:`classify_bound` on the stage's mean DRAM and tensor activity (docs/gpu-metrics.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from attnload.scrape.dcgm import GpuReading
from attnload.scrape.source import Gauge, StageWindow, counter_delta
from attnload.scrape.summary import Bound, GpuSummary

ACTIVITY_FIELDS = ("dram_active", "tensor_active", "sm_active", "gpu_util")
BUSY_MIN = 0.25
"""A stage is bound by a unit only if that unit was active at least this share of the cycles."""
DOMINANCE = 2.0
"""...and at least this many times as active as the other unit."""
MIB_PER_GIB = 1024.0


def classify_bound(dram_active: float | None, tensor_active: float | None) -> Bound | None:
    """``bandwidth``, ``compute`` or ``neither`` from mean DRAM and tensor-pipe activity (0–1).

    ``bandwidth``: DRAM ≥ 25 % active and ≥ 2× the tensor pipes (decode streaming weights and KV);
    ``compute``: tensor pipes ≥ 25 % and ≥ 2× DRAM (prefill, absorbed MLA attention at large
    batch); ``neither`` otherwise: both low (launch overhead, communication, idle GPUs) or both
    busy (near the roofline ridge). None when either field was not read.
    """
    if dram_active is None or tensor_active is None:
        return None
    if dram_active >= BUSY_MIN and dram_active >= DOMINANCE * tensor_active:
        return "bandwidth"
    if tensor_active >= BUSY_MIN and tensor_active >= DOMINANCE * dram_active:
        return "compute"
    return "neither"


@dataclass(frozen=True)
class GpuSample:
    """One scrape of one model's GPUs (``at_s``: the poller's monotonic clock)."""

    source: str
    at_s: float
    readings: tuple[GpuReading, ...]

    def total(self, name: str) -> float | None:
        """Sum of ``name`` over the GPUs; None unless every GPU carries it."""
        values = [r.values.get(name) for r in self.readings]
        if not values or any(v is None for v in values):
            return None
        return float(sum(v for v in values if v is not None))


class GpuWindow(StageWindow[GpuSample, GpuSummary]):
    """One stage of one model's GPU telemetry; ``add`` each scrape, ``close`` at the stage end."""

    def _start(self) -> None:
        self.gpus = 0
        self._activity = {name: Gauge() for name in ACTIVITY_FIELDS}
        self._power = Gauge()
        self._fb = Gauge()
        self._energy_mj = 0.0
        self._energy_read = False
        self._from_power = False

    def _fold(self, sample: GpuSample) -> None:
        self.gpus = max(self.gpus, len(sample.readings))
        for reading in sample.readings:
            for name in ACTIVITY_FIELDS:
                value = reading.values.get(name)
                if value is not None:
                    self._activity[name].add(value)
        for gauge, name in ((self._power, "power_w"), (self._fb, "fb_used_mib")):
            value = sample.total(name)
            if value is not None:
                gauge.add(value)

    def _difference(self, previous: GpuSample, sample: GpuSample) -> None:
        before = {r.uid: r.values.get("energy_mj") for r in previous.readings}
        now = {r.uid: r.values.get("energy_mj") for r in sample.readings}
        if now and all(v is not None for v in now.values()) and all(before.get(u) is not None for u in now):
            self._energy_mj += sum(counter_delta(before[u] or 0.0, v or 0.0) for u, v in now.items())
            self._energy_read = True
            return
        p0, p1 = previous.total("power_w"), sample.total("power_w")
        dt = sample.at_s - previous.at_s
        if p0 is not None and p1 is not None and dt > 0:
            self._energy_mj += 1000.0 * dt * (p0 + p1) / 2.0
            self._energy_read = True
            self._from_power = True

    def summary(self) -> GpuSummary:
        """The results file's ``stages[].gpu`` object (``joules_per_output_token`` is the results' to fill)."""
        activity = {name: gauge.summary() if gauge.n else None for name, gauge in self._activity.items()}
        dram, tensor = activity["dram_active"], activity["tensor_active"]
        fb = self._fb.mean()
        return GpuSummary(
            source=self.source,
            gpus=self.gpus,
            samples=self.samples,
            dram_active=dram,
            tensor_active=tensor,
            sm_active=activity["sm_active"],
            gpu_util=activity["gpu_util"],
            power_w=self._power.mean(),
            energy_j=self._energy_mj / 1000.0 if self._energy_read else None,
            energy_from=("power" if self._from_power else "counter") if self._energy_read else None,
            fb_used_gib=fb / MIB_PER_GIB if fb is not None else None,
            bound=classify_bound(dram.mean if dram else None, tensor.mean if tensor else None),
        )
