"""Server-side view of a run: the model servers' own metrics (vLLM, SGLang, attnload sim).

``parse`` reads one Prometheus exposition into a ``ServerSample`` per served model,
``window`` turns successive samples into a stage's ``stages[].server`` summary, and
``poller`` scrapes the servers during a run. It imports only prometheus_client and the
standard library, so every stage of the run can use it (docs/server-metrics.md).
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
    ScrapeTarget,
    ServerMetricsPoller,
    default_metrics_url,
    fetch_text,
)
from attnload.scrape.window import ServerWindow, counter_delta, histogram_quantile

__all__ = [
    "DEFAULT_INTERVAL_S",
    "SGLANG",
    "SIM",
    "VLLM",
    "Exposition",
    "ScrapeTarget",
    "ServerMetricsError",
    "ServerMetricsPoller",
    "ServerSample",
    "ServerWindow",
    "counter_delta",
    "default_metrics_url",
    "fetch_text",
    "histogram_quantile",
    "parse_exposition",
]
