"""What attnload reads from other exporters during a run: model servers' and GPUs' metrics per stage.

Every scraped source goes one way (``source``): fetch a page, parse it, pick each model's
sample, fold samples into a per-stage window whose summary the results carry as it is
(``summary``). The model servers' /metrics (vLLM, SGLang, attnload sim: ``server``,
``parse``, ``window``) and dcgm-exporter's GPUs (``gpu``, ``dcgm``, ``gpuwindow``) are its two
sources; ``poller`` is the one scrape loop and ``view`` the master's per-test driver of it
(docs/server-metrics.md, docs/gpu-metrics.md). Besides ``view`` (gevent) it imports only
prometheus_client, pydantic and the standard library, so every stage of the run can use it.
"""

from attnload.scrape.parse import (
    SGLANG,
    SIM,
    VLLM,
    Exposition,
    ServerMetricsError,
    ServerSample,
    parse_exposition,
)
from attnload.scrape.poller import (
    DEFAULT_INTERVAL_S,
    ScrapePoller,
    default_metrics_url,
    fetch_text,
)
from attnload.scrape.source import ScrapeTarget, counter_delta
from attnload.scrape.window import ServerWindow, histogram_quantile

__all__ = [
    "DEFAULT_INTERVAL_S",
    "SGLANG",
    "SIM",
    "VLLM",
    "Exposition",
    "ScrapePoller",
    "ScrapeTarget",
    "ServerMetricsError",
    "ServerSample",
    "ServerWindow",
    "counter_delta",
    "default_metrics_url",
    "fetch_text",
    "histogram_quantile",
    "parse_exposition",
]
