"""The master's GPU view: dcgm-exporter's per-GPU gauges per model and stage.

A ``ScrapeView`` (``scrape/view.py``) over the GPU source (``scrape/gpu.py``), beside the
server view at its cadence, with its fetch and its stage boundaries. A model's source is its
``gpu_metrics_url``; without one, ``--gpu-metrics auto`` tries the model server's own
/metrics (the simulator publishes DCGM names there; vLLM does not, which is quietly no
GPU view). Each scrape also updates the master's ``attnload_gpu_*`` series, so Grafana's
GPU row reads per model and attention whatever labels the exporter uses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from attnload.attention import FactsLookup, no_facts
from attnload.config.model import TestConfig
from attnload.runner.collector.serverview import model_names
from attnload.scrape import default_metrics_url
from attnload.scrape.dcgm import GpuExposition
from attnload.scrape.gpu import GPU, GpuTarget
from attnload.scrape.gpuwindow import GpuSample
from attnload.scrape.poller import Fetch
from attnload.scrape.summary import GpuSummary
from attnload.scrape.view import ScrapeView


def gpu_targets(config: TestConfig, attention_facts: FactsLookup = no_facts, guess: bool = True) -> list[GpuTarget]:
    """One target per model: ``gpu_metrics_url`` (explicit), else the model server's metrics URL (a guess;
    none with ``guess=False``: ``--server-metrics off`` says not to read the servers' /metrics at all)."""
    targets = []
    for m in config.models:
        if m.gpu_metrics_url is None and not guess:
            continue
        url = m.gpu_metrics_url or m.metrics_url or default_metrics_url(m.base_url)
        targets.append(
            GpuTarget(
                key=m.key,
                url=url,
                names=model_names(m, attention_facts),
                selector=tuple(sorted((m.gpu_selector or {}).items())),
                explicit=m.gpu_metrics_url is not None,
            )
        )
    return targets


class GpuView(ScrapeView[GpuTarget, GpuExposition, GpuSample, GpuSummary]):
    """Per test: a GPU poller, the finished stages' GPU summaries and the whole-run ones."""

    def __init__(
        self,
        targets: Sequence[GpuTarget],
        interval_s: float,
        fetch: Fetch | None = None,
        on_sample: Callable[[str, GpuSample], None] | None = None,
    ) -> None:
        super().__init__(GPU, targets, interval_s, fetch, on_sample)
