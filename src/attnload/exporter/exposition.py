"""Prometheus exposition of the fleet's merged measurements (the metric names of docs/design.md).

The master (or a single-process run) registers :class:`FleetCollector` on its own
``CollectorRegistry``; at scrape time it folds the recorder's series across stages and
renders histograms from already-merged bucket counts (``HistogramMetricFamily``), so
one scrape target holds the fleet's exact totals without replaying samples. Labels are
bounded: model, attention, profile and target, the config key (plus outcome/error/worker
where named).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from attnload.exporter import names
from attnload.exporter.gpu import GpuGauges
from attnload.exporter.names import (
    BUCKETS_S,
    CACHED_PROMPT_TOKENS,
    COMPLETION_TOKENS,
    GOODPUT_REQUESTS,
    LABELS,
    PROMPT_TOKENS,
    REASONING_TOKENS,
    REQUEST_ERRORS,
    REQUESTS,
)
from attnload.measure.decodefit import DecodeFit
from attnload.measure.histogram import LogHistogram
from attnload.measure.interference import InterferenceRecorder, stall_ms_per_1k_prefill_tokens
from attnload.measure.metrics import METRICS
from attnload.measure.recorder import Recorder, Series


@dataclass
class FleetState:
    """Gauges the collector reads besides the recorder; the runtime keeps them current."""

    model_labels: dict[str, tuple[str, str]] = field(default_factory=dict)
    """model key -> (model id, attention)."""
    users: dict[str, int] = field(default_factory=dict)
    """model key -> running users across the fleet."""
    target_users: int = 0
    target_rate: float = 0.0
    context: int | None = None
    """A context ladder's rung (prompt tokens) of the current stage; None for other shapes."""
    stage: int = -1
    workers: int = 0
    worker_cpu_ratio: dict[str, float] = field(default_factory=dict)
    worker_loop_lag: dict[str, tuple[float, float, int, float]] = field(default_factory=dict)
    """worker -> (p50, p99) seconds its event loop ran a timer late over its latest report, and the
    test's sample count and sum (``measure.looplag.FleetLoopLag.gauges``)."""
    client_saturated: bool = False
    gpu: GpuGauges = field(default_factory=GpuGauges)
    """The GPU poller's latest per-model readings (``attnload_gpu_*``, metrics/gpu.py)."""
    interference: InterferenceRecorder = field(default_factory=InterferenceRecorder)
    """``--shape interference:L``: the run's merged recorder (the collector passes its own; read, never written)."""


class FleetCollector(Collector):
    """Builds every ``attnload_*`` family from the merged recorder at scrape time."""

    def __init__(self, recorder: Recorder, state: FleetState) -> None:
        self.recorder = recorder
        self.state = state

    def collect(self) -> Iterator[Any]:
        merged = self._by_labels()
        yield from self._histograms(merged)
        yield from self._counters(merged)
        yield from self._gauges()
        yield self._slopes()
        yield self._prefill_stalls()

    def _by_labels(self) -> dict[tuple[str, ...], Series]:
        merged: dict[tuple[str, ...], Series] = {}
        for (model_key, profile, _stage), series in list(self.recorder.series.items()):
            model_id, attention = self.state.model_labels.get(model_key, (model_key, "unknown"))
            key = (model_id, attention, profile, model_key)
            if key not in merged:
                merged[key] = Series()
            merged[key].merge(series)
        return merged

    def _histograms(self, merged: dict[tuple[str, ...], Series]) -> Iterator[HistogramMetricFamily]:
        for metric in METRICS:  # every exported metric of the table (``measure.metrics``)
            if metric.prometheus is None:
                continue
            family = HistogramMetricFamily(metric.prometheus, metric.help, labels=LABELS)
            for labels, series in merged.items():
                hist = series.hists[metric.key]
                family.add_metric(list(labels), _buckets(hist), hist.total)
            yield family

    def _counters(self, merged: dict[tuple[str, ...], Series]) -> Iterator[CounterMetricFamily]:
        requests = CounterMetricFamily(REQUESTS, "Finished requests by outcome.", labels=(*LABELS, "outcome"))
        errors = CounterMetricFamily(
            REQUEST_ERRORS, "Failed or cancelled requests by error class.", labels=(*LABELS, "error")
        )
        tokens = [
            CounterMetricFamily(PROMPT_TOKENS, "Prompt tokens (server usage, else estimated).", labels=LABELS),
            CounterMetricFamily(COMPLETION_TOKENS, "Completion tokens; rate() is token throughput.", labels=LABELS),
            CounterMetricFamily(CACHED_PROMPT_TOKENS, "Prompt tokens served from the prefix cache.", labels=LABELS),
            CounterMetricFamily(
                REASONING_TOKENS, "Completion tokens streamed as reasoning deltas (client count).", labels=LABELS
            ),
        ]
        good = CounterMetricFamily(GOODPUT_REQUESTS, "Requests that met every configured SLO.", labels=LABELS)
        for labels, series in merged.items():
            counts = series.counts
            for outcome in ("ok", "failed", "cancelled", "abandoned"):
                requests.add_metric([*labels, outcome], counts.get(outcome, 0))
            for error, n in series.errors.items():
                errors.add_metric([*labels, error], n)
            tokens[0].add_metric(list(labels), counts.get("prompt_tokens", 0))
            tokens[1].add_metric(list(labels), counts.get("completion_tokens", 0))
            tokens[2].add_metric(list(labels), counts.get("cached_prompt_tokens", 0))
            tokens[3].add_metric(list(labels), counts.get("reasoning_tokens", 0))
            good.add_metric(list(labels), counts.get("good", 0))
        yield requests
        yield errors
        yield from tokens
        yield good

    def _slopes(self) -> Metric:
        """The decode fit's slope per model and stage (a stage without a line yet has no sample)."""
        fits: dict[tuple[str, int], DecodeFit] = {}
        for (model_key, _profile, stage), series in list(self.recorder.series.items()):
            fits.setdefault((model_key, stage), DecodeFit()).merge(series.fit)
        family = GaugeMetricFamily(
            names.DECODE_SLOPE,
            "ms the decode step grows per 1K tokens of context (ITL against position), per stage.",
            labels=("model", "attention", "target", "stage"),
        )
        for (model_key, stage), fit in sorted(fits.items()):
            slope = fit.slope_ms_per_1k
            if slope is not None:
                model_id, attention = self.state.model_labels.get(model_key, (model_key, "unknown"))
                family.add_metric([model_id, attention, model_key, str(stage + 1)], slope)
        return family

    def _prefill_stalls(self) -> Metric:
        """Each model's decode stall per injected prefill (a model with no window over a decode gap has no sample)."""
        family = GaugeMetricFamily(
            names.PREFILL_STALL,
            "ms a decode stream lost per injected prefill, per 1K prompt tokens (--shape interference:L).",
            labels=("model", "attention", "target"),
        )
        for model_key, series in sorted(self.state.interference.series.items()):
            stall = stall_ms_per_1k_prefill_tokens(series)
            if stall is not None:
                model_id, attention = self.state.model_labels.get(model_key, (model_key, "unknown"))
                family.add_metric([model_id, attention, model_key], stall)
        return family

    def _gauges(self) -> Iterator[Metric]:
        state = self.state
        users = GaugeMetricFamily(names.USERS, "Running users per model across the fleet.", labels=LABELS)
        for model_key, (model_id, attention) in state.model_labels.items():
            users.add_metric([model_id, attention, "all", model_key], state.users.get(model_key, 0))
        yield users
        yield GaugeMetricFamily(names.TARGET_USERS, "Users the current stage asks for.", value=state.target_users)
        yield GaugeMetricFamily(
            names.TARGET_RATE, "Open-loop arrival rate (req/s per model) of the stage.", value=state.target_rate
        )
        yield GaugeMetricFamily(names.STAGE, "Current stage index (0-based; -1 before the test).", value=state.stage)
        # The stage's number, load and ladder context as labels, so a Grafana annotation can say "stage 3: 64 users".
        info = GaugeMetricFamily(
            names.STAGE_INFO,
            "1, labelled with the current stage number and its target load.",
            labels=("stage", "target_users", "target_rate", "context"),
        )
        context = "" if state.context is None else str(state.context)  # empty: not a ladder (no label)
        info.add_metric([str(state.stage + 1), str(state.target_users), f"{state.target_rate:g}", context], 1.0)
        yield info
        yield GaugeMetricFamily(names.WORKERS, "Connected load-generating workers.", value=state.workers)
        cpu = GaugeMetricFamily(names.WORKER_CPU_RATIO, "Worker CPU use, 1.0 = one core.", labels=("worker",))
        for worker, ratio in state.worker_cpu_ratio.items():
            cpu.add_metric([worker], ratio)
        yield cpu
        yield _loop_lag(state.worker_loop_lag)
        yield GaugeMetricFamily(
            names.CLIENT_SATURATED,
            "1 when a worker exceeded 90% CPU during the run.",
            value=float(state.client_saturated),
        )
        yield from state.gpu.families(state.model_labels)


def _loop_lag(lags: dict[str, tuple[float, float, int, float]]) -> Metric:
    """A summary per worker: p50 and p99 over its latest report (~3 s), count and sum over the test."""
    name = names.WORKER_LOOP_LAG_SECONDS
    family = Metric(name, "How late each worker's event loop ran a 50 ms timer.", "summary")
    for worker, (p50, p99, count, total) in list(lags.items()):
        family.add_sample(name, {"worker": worker, "quantile": "0.5"}, p50)
        family.add_sample(name, {"worker": worker, "quantile": "0.99"}, p99)
        family.add_sample(name + "_count", {"worker": worker}, float(count))
        family.add_sample(name + "_sum", {"worker": worker}, total)
    return family


def _buckets(hist: LogHistogram) -> list[tuple[str, float]]:
    counts = hist.cumulative_counts(BUCKETS_S)
    buckets = [(repr(bound), float(n)) for bound, n in zip(BUCKETS_S, counts, strict=True)]
    buckets.append(("+Inf", float(hist.count)))
    return buckets


def serve_metrics(recorder: Recorder, state: FleetState, port: int, host: str = "127.0.0.1") -> CollectorRegistry:
    """Serve ``/metrics`` on ``port`` from a fresh registry (never the global one)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FleetCollector(recorder, state))
    start_http_server(port, addr=host, registry=registry)
    return registry
