"""Parse an NVIDIA dcgm-exporter exposition into per-GPU readings, and pick a model's GPUs.

dcgm-exporter serves one gauge (or counter) per DCGM field and GPU, named after the field
(``DCGM_FI_PROF_DRAM_ACTIVE``), labelled ``gpu``, ``UUID``, ``pci_bus_id``, ``device``,
``modelName``, ``Hostname`` (and ``DCGM_FI_DRIVER_VERSION``), plus ``namespace``/``pod``/
``container`` when its Kubernetes pod mapping is on. Units follow the exporter's counter
lists (``etc/default-counters.csv``, ``etc/dcp-metrics-included.csv``): profiling fields
(``DCGM_FI_PROF_*``) are ratios 0–1, ``DCGM_FI_DEV_GPU_UTIL`` is a percent (normalised here
to a fraction), power is W, ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` is a counter in mJ since
boot and ``DCGM_FI_DEV_FB_USED`` is MiB. The stock list leaves ``SM_ACTIVE``, ``SM_OCCUPANCY``
and the NVLink byte counters out, so every field is optional: absent stays None, never 0.
Pure functions of the text, so recorded bodies test it exactly (``tests/data/dcgm/``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from attnload.scrape.parse import ServerMetricsError, read_series

DCGM, SIM = "dcgm", "attnload-sim"

FIELDS: Mapping[str, tuple[str, float]] = {
    # results field -> (DCGM field, factor to the results unit)
    "dram_active": ("DCGM_FI_PROF_DRAM_ACTIVE", 1.0),
    "tensor_active": ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 1.0),
    "sm_active": ("DCGM_FI_PROF_SM_ACTIVE", 1.0),
    "gr_engine_active": ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 1.0),
    "gpu_util": ("DCGM_FI_DEV_GPU_UTIL", 0.01),  # percent -> fraction
    "power_w": ("DCGM_FI_DEV_POWER_USAGE", 1.0),
    "energy_mj": ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 1.0),
    "fb_used_mib": ("DCGM_FI_DEV_FB_USED", 1.0),
    "nvlink_tx_bytes": ("DCGM_FI_PROF_NVLINK_TX_BYTES", 1.0),
    "nvlink_rx_bytes": ("DCGM_FI_PROF_NVLINK_RX_BYTES", 1.0),
}
"""What attnload reads; every other DCGM field in the body is ignored."""

_POD_LABELS = ("namespace", "pod", "container")
MAX_SELECTOR_LABELS = 16


@dataclass(frozen=True)
class GpuReading:
    """One GPU in one scrape: its identity, its labels and the fields it carries (results units)."""

    uid: str
    """``UUID`` when the exporter sends it, else ``Hostname/gpu``: what tells GPUs apart."""
    labels: Mapping[str, str]
    values: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class GpuExposition:
    """A parsed body: where it came from (``dcgm`` or ``attnload-sim``) and one row per GPU and label set."""

    source: str
    readings: tuple[GpuReading, ...]

    def select(self, selector: Mapping[str, str] | None, names: frozenset[str] = frozenset()) -> list[GpuReading]:
        """The GPUs a model runs on: those whose labels fully match every ``selector`` regex (a
        missing label is "", as in PromQL). Without a selector: the GPUs whose ``pod`` is one of
        the model's ``names`` (the simulator's labelling); if none is, every GPU when the body has
        no pod labels at all (an exporter serving one model's node), else none (a pod-mapped
        exporter: which pod is the model's is for ``gpu_selector`` to say, not a guess).
        One GPU listed under several pods counts once."""
        if selector:
            patterns = {label: re.compile(pattern) for label, pattern in selector.items()}
            rows = [
                r for r in self.readings if all(p.fullmatch(r.labels.get(label, "")) for label, p in patterns.items())
            ]
        else:
            wanted = {n.lower() for n in names}
            rows = [r for r in self.readings if r.labels.get("pod", "").lower() in wanted]
            if not rows and not any(r.labels.get("pod") for r in self.readings):
                rows = list(self.readings)
        unique: dict[str, GpuReading] = {}
        for row in rows:
            unique.setdefault(row.uid, row)
        return list(unique.values())


def parse_dcgm(text: str) -> GpuExposition:
    """Parse ``text``; ``ServerMetricsError`` if it is not Prometheus text (``not_prometheus``) or
    carries no DCGM field attnload reads (``no_dcgm``)."""
    series = read_series(text)
    rows: dict[tuple[str, tuple[tuple[str, str], ...]], dict[str, float]] = {}
    labels_of: dict[tuple[str, tuple[tuple[str, str], ...]], dict[str, str]] = {}
    for name, (metric, factor) in FIELDS.items():
        # prometheus_client's parser names a counter's samples ``<name>_total``; dcgm-exporter writes none.
        for labels, value in [*series.get(metric, ()), *series.get(metric + "_total", ())]:
            if math.isnan(value):
                continue
            uid = labels.get("UUID") or f"{labels.get('Hostname', '')}/{labels.get('gpu', '')}"
            key = (uid, tuple(sorted((k, labels.get(k, "")) for k in _POD_LABELS)))
            rows.setdefault(key, {})[name] = value * factor
            labels_of.setdefault(key, dict(labels))
    if not rows:
        raise ServerMetricsError(
            "no_dcgm", "no DCGM_FI_* field attnload reads (DRAM/tensor activity, power, energy, framebuffer)"
        )
    source = SIM if any(n.startswith("attnload_sim_") for n in series) else DCGM
    readings = tuple(GpuReading(uid=key[0], labels=labels_of[key], values=values) for key, values in rows.items())
    return GpuExposition(source=source, readings=readings)


def check_selector(selector: Mapping[str, str]) -> dict[str, str]:
    """A config's ``gpu_selector``: label names as Prometheus spells them, values that compile as
    regular expressions (matched in full); else a one-line ``ValueError``."""
    if len(selector) > MAX_SELECTOR_LABELS:
        raise ValueError(
            f"gpu_selector has {len(selector)} labels; at most {MAX_SELECTOR_LABELS} (pod, namespace, "
            "Hostname, gpu, ... pick the GPUs)"
        )
    checked = {}
    for label, pattern in selector.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", label):
            raise ValueError(
                f"gpu_selector label {label!r} is not a Prometheus label name (e.g. pod, namespace, Hostname, gpu)"
            )
        if not isinstance(pattern, str) or len(pattern) > 512:
            raise ValueError(f"gpu_selector.{label} must be a regular expression string of at most 512 characters")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(
                f'gpu_selector.{label} {pattern!r} is not a valid regular expression ({exc}); fix it, e.g. "llama-.*"'
            ) from None
        checked[label] = pattern
    return checked
