"""The simulator's server-side truth and its Prometheus exposition (``/stats`` and ``/metrics``).

What the server itself saw per served model (requests, tokens, TTFT and ITL as sent) is the
reference that client measurements are checked against. ``/metrics`` exports it twice: under
attnload's own ``attnload_sim_*`` names, and under vLLM's names, labels and buckets so one
dashboard and attnload's server-metrics reader serve the simulator and a real vLLM alike.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from attnload.measure.histogram import LogHistogram
from attnload.sim.api import Engine

STEP_BUCKETS_S = tuple(round(0.0005 * 1.25**i, 6) for i in range(40))


@dataclass
class ModelTruth:
    """Server-side counts and timings for one served model: the reference for client numbers."""

    received: int = 0
    completed: int = 0
    cancelled: int = 0
    rejected: dict[int, int] = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    completed_completion_tokens: int = 0
    reasoning_tokens: int = 0
    """Of the completed answers' tokens, those sent as reasoning (``--reasoning-ratio``)."""
    cached_tokens: int = 0
    ttft: LogHistogram = field(default_factory=LogHistogram)
    itl: LogHistogram = field(default_factory=LogHistogram)
    prompt_digests: deque[str] = field(default_factory=lambda: deque(maxlen=10000))
    itl_backlog: list[float] = field(default_factory=list, repr=False)
    """Single-token gaps not yet in ``itl``: appending is cheaper than ``record`` on the hot
    path; ``flush()`` folds them in (the server flushes at ``ITL_BACKLOG_MAX``) and every read flushes."""

    def flush(self) -> None:
        if self.itl_backlog:
            self.itl.record_pairs(zip(self.itl_backlog, itertools.repeat(1)))
            self.itl_backlog.clear()

    def to_json(self, with_prompts: bool) -> dict[str, Any]:
        self.flush()
        data: dict[str, Any] = {
            "received": self.received,
            "completed": self.completed,
            "cancelled": self.cancelled,
            "rejected": {str(k): v for k, v in self.rejected.items()},
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "completed_completion_tokens": self.completed_completion_tokens,
            "cached_tokens": self.cached_tokens,
            "reasoning_tokens": self.reasoning_tokens,
            "ttft_s": self.ttft.summary(),
            "itl_s": self.itl.summary(),
        }
        if with_prompts:
            data["prompt_sha256"] = list(self.prompt_digests)
        return data


class StepTimes:
    """Engine step durations per served model, as a Prometheus histogram's bucket counts and sum."""

    def __init__(self, model_ids: Iterable[str]) -> None:
        self.counts: dict[str, list[float]] = {m: [0.0] * (len(STEP_BUCKETS_S) + 1) for m in model_ids}
        self.sum_s: dict[str, float] = dict.fromkeys(self.counts, 0.0)

    def drain(self, engines: Sequence[Engine]) -> None:
        """Take the steps each engine ran since the last call."""
        for engine in engines:
            counts = self.counts[engine.model.id]
            for step_s in engine.step_seconds():
                self.sum_s[engine.model.id] += step_s
                counts[_bucket_index(step_s)] += 1

    def buckets(self, model_id: str) -> list[tuple[str, float]]:
        """Cumulative counts by upper bound, ``+Inf`` last."""
        cumulative, buckets = 0.0, []
        for bound, n in zip((*STEP_BUCKETS_S, float("inf")), self.counts[model_id], strict=True):
            cumulative += n
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
        return buckets


def exposition(engines: Sequence[Engine], truth: Mapping[str, ModelTruth], steps: StepTimes) -> bytes:
    """The ``attnload_sim_*`` and ``vllm:*`` families in the Prometheus text format, as of now."""
    registry = CollectorRegistry()
    registry.register(_SimCollector(engines, truth, steps))
    return generate_latest(registry)


class _SimCollector(Collector):
    """Builds the ``attnload_sim_*`` families from engine snapshots and the truth at scrape time."""

    def __init__(self, engines: Sequence[Engine], truth: Mapping[str, ModelTruth], steps: StepTimes) -> None:
        self.engines = engines
        self.truth = truth
        self.steps = steps

    def collect(self) -> Iterator[Any]:
        labels = ("model", "attention")
        running = GaugeMetricFamily(
            "attnload_sim_requests_running", "Sequences in the running batch (simulated).", labels=labels
        )
        waiting = GaugeMetricFamily(
            "attnload_sim_requests_waiting", "Requests queued for KV capacity (simulated).", labels=labels
        )
        kv = GaugeMetricFamily(
            "attnload_sim_kv_usage_ratio", "Fraction of KV blocks in use (simulated).", labels=labels
        )
        steps = HistogramMetricFamily("attnload_sim_step_seconds", "Engine step durations (simulated).", labels=labels)
        requests = CounterMetricFamily("attnload_sim_requests", "Requests accepted by the simulator.", labels=labels)
        prompt = CounterMetricFamily("attnload_sim_prompt_tokens", "Prompt tokens accepted.", labels=labels)
        completion = CounterMetricFamily("attnload_sim_completion_tokens", "Completion tokens emitted.", labels=labels)
        preempt = CounterMetricFamily("attnload_sim_preemptions", "Sequences preempted (recompute).", labels=labels)
        for engine in self.engines:
            values = (engine.model.id, engine.model.attention)
            snap = engine.snapshot()
            truth = self.truth[engine.model.id]
            running.add_metric(values, snap.running)
            waiting.add_metric(values, snap.waiting)
            kv.add_metric(values, snap.kv_usage_ratio)
            requests.add_metric(values, truth.received)
            prompt.add_metric(values, truth.prompt_tokens)
            completion.add_metric(values, truth.completion_tokens)
            preempt.add_metric(values, snap.preemptions_total)
            steps.add_metric(values, self.steps.buckets(engine.model.id), self.steps.sum_s[engine.model.id])
        yield from (running, waiting, kv, steps, requests, prompt, completion, preempt)
        yield from _vllm_families(self.engines, self.truth)


_VLLM_SHARED_S = (0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
"""The bounds from 0.5 s to 80 s, which vLLM's TTFT and inter-token latency histograms share."""
VLLM_TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, *_VLLM_SHARED_S, 160.0, 640.0, 2560.0)
VLLM_ITL_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, *_VLLM_SHARED_S)


def _vllm_families(engines: Sequence[Engine], truths: Mapping[str, ModelTruth]) -> Iterator[Any]:
    """The same truth under vLLM's names, labels and buckets (vllm/v1/metrics/loggers.py), so one
    dashboard and attnload's server-metrics reader serve the simulator and a real vLLM alike.
    ``model_name`` is the served id (vLLM's served_model_name), as the ``model`` label above."""
    labels = ("model_name", "engine")
    gauges = {
        name: GaugeMetricFamily(name, doc, labels=labels)
        for name, doc in (
            ("vllm:num_requests_running", "Number of requests in model execution batches."),
            ("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
            ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."),
        )
    }
    counters = {
        name: CounterMetricFamily(name, doc, labels=labels)
        for name, doc in (
            ("vllm:num_preemptions", "Cumulative number of preemption from the engine."),
            ("vllm:prompt_tokens", "Number of prefill tokens processed."),
            ("vllm:generation_tokens", "Number of generation tokens processed."),
            ("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens."),
            ("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."),
        )
    }
    ttft = HistogramMetricFamily(
        "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", labels=labels
    )
    itl = HistogramMetricFamily(
        "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", labels=labels
    )
    finished = CounterMetricFamily(
        "vllm:request_success", "Count of successfully processed requests.", labels=(*labels, "finished_reason")
    )  # "abort": the client went away
    for engine in engines:
        values = (engine.model.id, "0")
        snap = engine.snapshot()
        truth = truths[engine.model.id]
        truth.flush()
        gauges["vllm:num_requests_running"].add_metric(values, snap.running)
        gauges["vllm:num_requests_waiting"].add_metric(values, snap.waiting)
        gauges["vllm:kv_cache_usage_perc"].add_metric(values, snap.kv_usage_ratio)
        counters["vllm:num_preemptions"].add_metric(values, snap.preemptions_total)
        counters["vllm:prompt_tokens"].add_metric(values, truth.prompt_tokens)
        counters["vllm:generation_tokens"].add_metric(values, truth.completion_tokens)
        hits = getattr(engine, "cached_prompt_tokens_total", None)  # engines with a prefix cache (§4.5)
        if hits is not None:  # queries: prompt tokens accepted, as vLLM counts tokens looked up
            counters["vllm:prefix_cache_queries"].add_metric(values, truth.prompt_tokens)
            counters["vllm:prefix_cache_hits"].add_metric(values, hits)
        finished.add_metric((*values, "length"), truth.completed)
        finished.add_metric((*values, "abort"), truth.cancelled)
        ttft.add_metric(values, _prom_buckets(truth.ttft, VLLM_TTFT_BUCKETS_S), truth.ttft.total)
        itl.add_metric(values, _prom_buckets(truth.itl, VLLM_ITL_BUCKETS_S), truth.itl.total)
    yield from (*gauges.values(), *counters.values(), finished, ttft, itl)
    yield from _spec_families(engines)


def _spec_families(engines: Sequence[Engine]) -> Iterator[Any]:
    """Speculative decoding's counters under vLLM's names (``vllm/v1/spec_decode/metrics.py``), and
    SGLang's two gauges (``sglang:spec_accept_length``, ``sglang:spec_accept_rate``) from the same counts,
    for the models that speculate (``--spec-tokens``); nothing when none does."""
    speculating = [(e, counts) for e in engines if (counts := getattr(e, "spec_counts", None)) is not None]
    if not speculating:
        return
    labels = ("model_name", "engine")
    counters = [
        CounterMetricFamily(f"vllm:spec_decode_num_{name}", doc, labels=labels)
        for name, doc in (
            ("drafts", "Number of spec decoding drafts."),
            ("draft_tokens", "Number of draft tokens."),
            ("accepted_tokens", "Number of accepted tokens."),
        )
    ]
    per_pos = CounterMetricFamily(
        "vllm:spec_decode_num_accepted_tokens_per_pos",
        "Accepted tokens per draft position.",
        labels=(*labels, "position"),
    )
    length = GaugeMetricFamily(
        "sglang:spec_accept_length", "The average acceptance length of speculative decoding.", labels=("model_name",)
    )
    rate = GaugeMetricFamily(
        "sglang:spec_accept_rate", "The average acceptance rate of speculative decoding.", labels=("model_name",)
    )
    for engine, counts in speculating:
        values = (engine.model.id, "0")
        for family, value in zip(counters, (counts.drafts, counts.draft_tokens, counts.accepted_tokens), strict=True):
            family.add_metric(values, value)
        for pos, accepted in enumerate(counts.accepted_per_pos):
            per_pos.add_metric((*values, str(pos)), accepted)
        length.add_metric((engine.model.id,), counts.accept_length)
        rate.add_metric((engine.model.id,), counts.accept_rate)
    yield from (*counters, per_pos, length, rate)


def _prom_buckets(hist: LogHistogram, bounds_s: Sequence[float]) -> list[tuple[str, float]]:
    counts = hist.cumulative_counts(bounds_s)
    return [*((repr(bound), n) for bound, n in zip(bounds_s, counts, strict=True)), ("+Inf", hist.count)]


def _bucket_index(value_s: float) -> int:
    for i, bound in enumerate(STEP_BUCKETS_S):
        if value_s <= bound:
            return i
    return len(STEP_BUCKETS_S)
