"""Virtual GPU telemetry under dcgm-exporter's names, derived from the roofline (docs/simulator.md).

Every engine step's ``StepBreakdown`` already says how long the step spends streaming
bytes and doing tensor math; this module turns that into what DCGM would report, once
per *step* (never per token), so it costs a few float additions per step:

- ``DCGM_FI_PROF_DRAM_ACTIVE`` = bytes moved / (peak HBM bandwidth × step time): the
  weight stream ``M_w`` and the KV stream ``M_kv`` at the peak rate, ``(M_w + M_kv)·eff_bw / T``;
- ``DCGM_FI_PROF_PIPE_TENSOR_ACTIVE`` = tensor FLOPs / (peak × step time):
  ``(C_lin·eff_gemm + C_att·eff_attn) / T`` (GEMMs at the weight dtype's peak, attention at BF16's);
- ``DCGM_FI_PROF_SM_ACTIVE``, ``GR_ENGINE_ACTIVE`` and ``DCGM_FI_DEV_GPU_UTIL`` (percent): the
  share of the step with kernels running, ``(T − overhead) / T``;
- power ``P = idle + (TDP − idle)·min(1, 0.25·SM + 0.5·DRAM + 0.75·tensor)``: tensor math costs
  the most energy per cycle, moving HBM bytes less, an SM waiting on memory least; a coarse
  model, not calibrated against a measured board;
- ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` (mJ, a counter): idle power over the time since the
  first observation plus the active power above idle integrated step by step.

Gauges are averaged over the last ``WINDOW_S`` of simulated time (idle time counts as 0), as
DCGM averages a profiling field over its sample period. Every GPU of one model reports the
same values (tensor-parallel ranks run in lock step; DP groups are averaged).
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable, Iterable

from attnload.sim.costmodel import Deployment, StepBreakdown

WINDOW_S = 1.0
"""Profiling gauges average the last second of simulated time."""
_MAX_STEPS = 8192
POWER_WEIGHTS = {"sm": 0.25, "dram": 0.5, "tensor": 0.75}
MIB = 2**20
HOSTNAME = "attnload-sim"

_HELP = {
    "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %)."),
    "DCGM_FI_DEV_FB_USED": ("gauge", "Framebuffer memory used (in MiB)."),
    "DCGM_FI_DEV_FB_FREE": ("gauge", "Framebuffer memory free (in MiB)."),
    "DCGM_FI_DEV_POWER_USAGE": ("gauge", "Power draw (in W)."),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("counter", "Total energy consumption since boot (in mJ)."),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gauge", "Ratio of time the graphics engine is active."),
    "DCGM_FI_PROF_SM_ACTIVE": ("gauge", "The ratio of cycles an SM has at least 1 warp assigned."),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("gauge", "Ratio of cycles the tensor (HMMA) pipe is active."),
    "DCGM_FI_PROF_DRAM_ACTIVE": (
        "gauge",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
    ),
}
"""Types and help texts as dcgm-exporter's etc/dcp-metrics-included.csv gives them."""


def step_activity(dep: Deployment, step: StepBreakdown) -> tuple[float, float, float]:
    """Busy seconds of one step: (DRAM at peak rate, tensor pipes at peak rate, kernels running)."""
    cfg = dep.cfg
    dram_s = (step.m_w_s + step.m_kv_s) * cfg.eff_bw
    tensor_s = step.c_lin_s * cfg.eff_gemm + step.c_att_s * cfg.eff_attn
    total = step.total_s
    return min(dram_s, total), min(tensor_s, total), max(0.0, total - step.overhead_s)


class GpuActivity:
    """One model's virtual GPUs: per-step busy times in a short ring, and the active energy so far."""

    def __init__(self, dep: Deployment, now: Callable[[], float]) -> None:
        self.dep = dep
        self._now = now
        self._steps: deque[tuple[float, float, float, float, float]] = deque(maxlen=_MAX_STEPS)
        self._active_j = 0.0
        """Energy above idle, per GPU, J."""
        self._t0: float | None = None

    def step(self, step: StepBreakdown, end_s: float) -> None:
        """A step of this model ended at ``end_s`` (engine clock): record its busy shares and energy."""
        if self._t0 is None:
            self._t0 = end_s - step.total_s
        dram_s, tensor_s, sm_s = step_activity(self.dep, step)
        total = step.total_s
        self._steps.append((end_s, total, dram_s, tensor_s, sm_s))
        if total > 0:
            self._active_j += self._above_idle_w(sm_s / total, dram_s / total, tensor_s / total) * total

    def _above_idle_w(self, sm: float, dram: float, tensor: float) -> float:
        hw = self.dep.hw
        w = POWER_WEIGHTS
        return (hw.tdp_w - hw.idle_w) * min(1.0, w["sm"] * sm + w["dram"] * dram + w["tensor"] * tensor)

    def gauges(self) -> dict[str, float]:
        """What each of this model's GPUs reports now (DCGM names and units)."""
        now = self._now()
        if self._t0 is None:
            self._t0 = now
        start = now - WINDOW_S
        dram = tensor = sm = 0.0
        for end, total, d, t, s in reversed(self._steps):
            if end <= start:
                break
            overlap = min(end, now) - max(end - total, start)
            if overlap > 0 and total > 0:
                share = overlap / total
                dram, tensor, sm = dram + d * share, tensor + t * share, sm + s * share
        dram, tensor, sm = (min(1.0, x / WINDOW_S) for x in (dram, tensor, sm))
        hw, dep = self.dep.hw, self.dep
        used_mib = (dep.weights_bytes_per_gpu + dep.free_kv_bytes_per_gpu) / MIB
        energy_j = hw.idle_w * max(0.0, now - self._t0) + self._active_j
        return {
            "DCGM_FI_DEV_GPU_UTIL": round(100.0 * sm),
            "DCGM_FI_DEV_FB_USED": round(used_mib),
            "DCGM_FI_DEV_FB_FREE": round(max(0.0, hw.hbm_bytes / MIB - used_mib)),
            "DCGM_FI_DEV_POWER_USAGE": round(hw.idle_w + self._above_idle_w(sm, dram, tensor), 3),
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": round(1000.0 * energy_j),
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": round(sm, 6),
            "DCGM_FI_PROF_SM_ACTIVE": round(sm, 6),
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": round(tensor, 6),
            "DCGM_FI_PROF_DRAM_ACTIVE": round(dram, 6),
        }


def _uuid(preset: str, index: int) -> str:
    h = hashlib.sha256(f"attnload-sim/{preset}/{index}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def dcgm_text(models: Iterable[tuple[str, GpuActivity]]) -> str:
    """dcgm-exporter's exposition for every model's virtual GPUs (``gpu`` numbered across models)."""
    lines: dict[str, list[str]] = {name: [] for name in _HELP}
    index = 0
    for preset, activity in models:
        values = activity.gauges()
        hw = activity.dep.hw
        for _ in range(activity.dep.cfg.tp):
            labels = (
                f'gpu="{index}",UUID="{_uuid(preset, index)}",pci_bus_id="00000000:{index + 1:02X}:00.0",'
                f'device="nvidia{index}",modelName="{hw.name or hw.key}",Hostname="{HOSTNAME}",'
                f'DCGM_FI_DRIVER_VERSION="attnload-sim",container="",namespace="",pod="{preset}"'
            )
            for name, value in values.items():
                lines[name].append(
                    f"{name}{{{labels}}} {value:g}" if isinstance(value, float) else f"{name}{{{labels}}} {value}"
                )
            index += 1
    out = []
    for name, (kind, help_text) in _HELP.items():
        if lines[name]:
            out += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *lines[name]]
    return "\n".join(out) + "\n" if out else ""
