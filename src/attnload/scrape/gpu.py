"""dcgm-exporter as a scraped source: each model's GPUs, picked by its ``gpu_selector``.

The poller's loop and failure rules (``scrape/poller.py``) with the DCGM parser
(``scrape/dcgm.py``) and a ``GpuWindow`` per model. A Service in front of several nodes'
exporters answers from a different node each time, so a model's GPU view turns off only
after a few scrapes in a row match none of its GPUs. A target whose URL was not configured
(``--gpu-metrics auto`` trying the model server's own /metrics, which only the simulator
fills with DCGM names) turns off quietly: a vLLM without GPU series is no warning.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnload.scrape.dcgm import GpuExposition, parse_dcgm
from attnload.scrape.gpuwindow import GpuSample, GpuWindow
from attnload.scrape.source import ScrapeTarget, Source, StageWindow
from attnload.scrape.summary import GpuSummary

MISSES_BEFORE_OFF = 3
"""Scrapes in a row whose GPUs match no model's selector before that model's GPU view turns off."""


@dataclass(frozen=True)
class GpuTarget(ScrapeTarget):
    """One model's GPU source: its URL, the names it may go by, its label selector."""

    selector: tuple[tuple[str, str], ...] = ()
    """``gpu_selector`` as (label, regex) pairs; empty: the simulator's ``pod`` = model, else all GPUs."""
    explicit: bool = True
    """The URL came from ``gpu_metrics_url`` (a failure warns); False: guessed (fails quietly)."""


class GpuSource(Source[GpuTarget, GpuExposition, GpuSample, GpuSummary]):
    """dcgm-exporter's per-GPU fields, the GPUs of each model picked by its selector."""

    what = "gpu metrics"
    hints = {
        "http": "no dcgm-exporter /metrics there; fix gpu_metrics_url or pass --gpu-metrics off",
        "connection": "nothing answered; point gpu_metrics_url at dcgm-exporter (port 9400)",
        "not_prometheus": "the body is not Prometheus text; point gpu_metrics_url at dcgm-exporter",
        "no_dcgm": "Prometheus text, but no DCGM_FI_* fields in it",
        "too_large": "the body is too large for a metrics page",
    }
    misses_before_off = MISSES_BEFORE_OFF

    def parse(self, text: str) -> GpuExposition:
        return parse_dcgm(text)

    def pick(self, exposition: GpuExposition, target: GpuTarget, at_s: float) -> GpuSample | None:
        rows = exposition.select(dict(target.selector), target.names)
        return GpuSample(source=exposition.source, at_s=at_s, readings=tuple(rows)) if rows else None

    def unmatched(self, exposition: GpuExposition, target: GpuTarget, url: str) -> str:
        wanted = ", ".join(f"{k}=~{v!r}" for k, v in target.selector) or "its pod name"
        return f"{url} serves {len(exposition.readings)} GPU series, none matches {wanted} (fix gpu_selector)"

    def window(self) -> StageWindow[GpuSample, GpuSummary]:
        return GpuWindow()

    def quiet(self, target: GpuTarget) -> bool:
        return not target.explicit


GPU = GpuSource()
