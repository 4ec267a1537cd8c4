"""The master's ``attnload_gpu_*`` series: each model's GPUs as its GPU poller last saw them.

dcgm-exporter labels GPUs by node, index and (with pod mapping) pod, never by model or
attention type; the master knows which GPUs are whose (``gpu_selector``), so it re-exports
them per model with the ``model``/``attention``/``target`` labels every other attnload
series has. Grafana's GPU row reads only these, so it works the same against the simulator
and a real fleet (docs/gpu-metrics.md, "Grafana"). Activity is the mean over the model's
GPUs (a field no GPU reports is not exported, never 0), power the sum, energy a counter of
joules since the master started (reset-safe, from DCGM's mJ counter or power × time).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from attnload.exporter import names
from attnload.scrape.gpuwindow import GpuSample, GpuWindow


class GpuGauges:
    """Latest sample and a never-closed energy window per model key (thread-safe)."""

    def __init__(self) -> None:
        self._latest: dict[str, GpuSample] = {}
        self._energy: dict[str, GpuWindow] = {}
        self._lock = threading.Lock()

    def record(self, key: str, sample: GpuSample) -> None:
        with self._lock:
            self._latest[key] = sample
            self._energy.setdefault(key, GpuWindow()).add(sample)

    def families(self, model_labels: Mapping[str, tuple[str, str]]) -> Iterator[Metric]:
        labels = names.GPU_LABELS
        dram = GaugeMetricFamily(
            names.GPU_DRAM_ACTIVE,
            "Mean DRAM activity (0-1) of the model's GPUs (DCGM_FI_PROF_DRAM_ACTIVE).",
            labels=labels,
        )
        tensor = GaugeMetricFamily(
            names.GPU_TENSOR_ACTIVE,
            "Mean tensor-pipe activity (0-1) of the model's GPUs (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE).",
            labels=labels,
        )
        power = GaugeMetricFamily(names.GPU_POWER_WATTS, "Power summed over the model's GPUs, W.", labels=labels)
        energy = CounterMetricFamily(
            names.GPU_ENERGY_JOULES, "Energy of the model's GPUs since the master started, J.", labels=labels
        )
        count = GaugeMetricFamily(names.GPU_COUNT, "GPUs the model's gpu_selector matched.", labels=labels)
        with self._lock:
            latest = dict(self._latest)
            joules = {k: w.summary().energy_j for k, w in self._energy.items()}
        for key, sample in latest.items():
            model_id, attention = model_labels.get(key, (key, "unknown"))
            values = [model_id, attention, key]
            rows = sample.readings
            for family, field in ((dram, "dram_active"), (tensor, "tensor_active")):
                present = [r.values[field] for r in rows if field in r.values]
                if present:
                    family.add_metric(values, sum(present) / len(present))
            if (watts := sample.total("power_w")) is not None:
                power.add_metric(values, watts)
            if (energy_j := joules.get(key)) is not None:
                energy.add_metric(values, energy_j)
            count.add_metric(values, len(rows))
        yield from (dram, tensor, power, energy, count)
