"""Parse a model server's Prometheus exposition into one typed sample per served model.

It owns the knowledge of what vLLM, SGLang and the attnload simulator call their
scheduler and cache metrics, and how their per-rank series add up. Everything here is
a pure function of the body text, so recorded expositions test it exactly
(``tests/data/scrape/``). Rank aggregation (docs/server-metrics.md):

- series that differ by a *partition* label (``engine``, ``dp_rank``, or any label not
  known as a shard label) are independent schedulers: counts and counters add up,
  usage fractions are averaged (DP engines have equal KV pools);
- series that differ only by a *shard* label (``tp_rank``, ``pp_rank``, ...) describe one
  scheduler seen from several ranks (SGLang with ``--enable-metrics-for-all-schedulers``):
  they are copies, so counts take the largest and fractions the mean, never the sum.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from prometheus_client.parser import text_string_to_metric_families

VLLM, SGLANG, SIM = "vllm", "sglang", "attnload-sim"
SHARD_LABELS = frozenset({"tp_rank", "pp_rank", "moe_ep_rank", "attn_tp_rank", "ep_rank", "cp_rank"})
"""Ranks of one scheduler (tensor/pipeline/expert shards): their series are copies, not parts."""
_IGNORED_LABELS = frozenset({"le"})

Kind = Literal["count", "fraction"]


class ServerMetricsError(Exception):
    """The body is not a Prometheus exposition of a server we know; ``reason`` says which.

    Reasons: ``not_prometheus`` (the text parser refused it), ``unknown_server`` (it parses,
    but carries no vLLM, SGLang or attnload-sim series), ``too_large``, ``http``, ``connection``.
    """

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class ServerSample:
    """One scrape of one served model, ranks aggregated; None where the server has no such series.

    Counters are raw cumulative values (``ServerWindow`` turns them into deltas); the TTFT
    histogram is kept as cumulative ``(upper_bound_s, count)`` pairs ending in ``+Inf``.
    """

    source: str
    model_name: str
    running: float | None = None
    waiting: float | None = None
    kv_cache_usage: float | None = None
    """Fraction 0–1 of the KV cache in use, as the servers export it (not a percentage)."""
    preemptions: float | None = None
    prefix_cache_queries: float | None = None
    """Prompt tokens looked up in the prefix cache (counter)."""
    prefix_cache_hits: float | None = None
    """Prompt tokens found in the prefix cache (counter)."""
    prefix_cache_hit_rate: float | None = None
    """A server-computed hit ratio gauge (SGLang, vLLM V0), used only when no counters exist."""
    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    ttft_buckets: tuple[tuple[float, float], ...] = ()
    queue_time_sum_s: float | None = None
    queue_time_count: float | None = None
    aborted: float | None = None
    """Requests the server aborted, e.g. because the client closed the stream (counter)."""
    spec_drafts: float | None = None
    """Speculative decoding (vLLM counters): verify steps that carried drafts, per sequence."""
    spec_draft_tokens: float | None = None
    spec_accepted_tokens: float | None = None
    spec_accepted_all: float | None = None
    """Drafts accepted in full: vLLM's accepted-tokens-per-position counter at the last position."""
    spec_accept_length: float | None = None
    """SGLang's gauges: accepted drafts + the bonus token per verify step, and accepted ÷ draft tokens."""
    spec_accept_rate: float | None = None


ABORTED = ("vllm:request_success_total", "finished_reason", "abort")
"""vLLM's count of aborted requests: one series of its finished-request counter (the simulator's too)."""


@dataclass(frozen=True)
class _Names:
    """One flavour's metric names for each ``ServerSample`` field (first present wins)."""

    model_label: str
    running: tuple[str, ...]
    waiting: tuple[str, ...]
    kv_cache_usage: tuple[str, ...]
    preemptions: tuple[str, ...]
    prefix_cache_queries: tuple[str, ...]
    prefix_cache_hits: tuple[str, ...]
    prefix_cache_hit_rate: tuple[str, ...]
    prompt_tokens: tuple[str, ...]
    generation_tokens: tuple[str, ...]
    ttft: tuple[str, ...]
    queue_time: tuple[str, ...]
    spec_drafts: tuple[str, ...] = ()
    spec_draft_tokens: tuple[str, ...] = ()
    spec_accepted_tokens: tuple[str, ...] = ()
    spec_accepted_per_pos: tuple[str, ...] = ()
    spec_accept_length: tuple[str, ...] = ()
    spec_accept_rate: tuple[str, ...] = ()


VLLM_NAMES = _Names(
    model_label="model_name",
    running=("vllm:num_requests_running",),
    waiting=("vllm:num_requests_waiting",),
    kv_cache_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),  # renamed in 0.9
    preemptions=("vllm:num_preemptions_total",),
    prefix_cache_queries=("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    prefix_cache_hits=("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    prefix_cache_hit_rate=("vllm:gpu_prefix_cache_hit_rate",),  # V0 engine
    prompt_tokens=("vllm:prompt_tokens_total",),
    generation_tokens=("vllm:generation_tokens_total",),
    ttft=("vllm:time_to_first_token_seconds",),
    queue_time=("vllm:request_queue_time_seconds",),
    spec_drafts=("vllm:spec_decode_num_drafts_total",),
    spec_draft_tokens=("vllm:spec_decode_num_draft_tokens_total",),
    spec_accepted_tokens=("vllm:spec_decode_num_accepted_tokens_total",),
    spec_accepted_per_pos=("vllm:spec_decode_num_accepted_tokens_per_pos_total",),
)
SGLANG_NAMES = _Names(
    model_label="model_name",
    running=("sglang:num_running_reqs",),
    waiting=("sglang:num_queue_reqs",),
    kv_cache_usage=("sglang:token_usage",),
    preemptions=("sglang:num_retracted_requests_total",),  # retraction is SGLang's preemption
    # Counters give a ratio over the window; the cache_hit_rate gauge is the server's own estimate.
    prefix_cache_queries=("sglang:prompt_tokens_total",),
    prefix_cache_hits=("sglang:cached_tokens_total",),
    prefix_cache_hit_rate=("sglang:cache_hit_rate",),
    prompt_tokens=("sglang:prompt_tokens_total",),
    generation_tokens=("sglang:generation_tokens_total",),
    ttft=("sglang:time_to_first_token_seconds",),
    queue_time=("sglang:queue_time_seconds",),
    spec_accept_length=("sglang:spec_accept_length",),
    spec_accept_rate=("sglang:spec_accept_rate",),
)
SIM_NAMES = _Names(  # the simulator's own names; what it lacks comes from its vLLM names (_merge)
    model_label="model",
    running=("attnload_sim_requests_running",),
    waiting=("attnload_sim_requests_waiting",),
    kv_cache_usage=("attnload_sim_kv_usage_ratio",),
    preemptions=("attnload_sim_preemptions_total",),
    prefix_cache_queries=(),
    prefix_cache_hits=(),
    prefix_cache_hit_rate=(),
    prompt_tokens=("attnload_sim_prompt_tokens_total",),
    generation_tokens=("attnload_sim_completion_tokens_total",),
    ttft=(),
    queue_time=(),
)
FLAVOURS: Mapping[str, _Names] = {VLLM: VLLM_NAMES, SGLANG: SGLANG_NAMES, SIM: SIM_NAMES}
_PREFIXES = {VLLM: "vllm:", SGLANG: "sglang:", SIM: "attnload_sim_"}

Series = list[tuple[dict[str, str], float]]


@dataclass(frozen=True)
class Exposition:
    """A parsed body: its flavour and one ``ServerSample`` per served model name."""

    source: str
    samples: Mapping[str, ServerSample]

    def sample_for(self, names: Collection[str]) -> ServerSample | None:
        """The sample of the model called any of ``names`` (its id or a known alias), else the
        only model served, else None (several models served, none of them ours)."""
        wanted = {_name_key(n) for n in names if n}
        for model_name, sample in self.samples.items():
            if _name_key(model_name) in wanted:
                return sample
        if len(self.samples) == 1:
            return next(iter(self.samples.values()))
        return None


def parse_exposition(text: str, flavour: str | None = None) -> Exposition:
    """Parse ``text``; ``flavour`` forces one (tests compare the simulator's two name sets).

    Raises ``ServerMetricsError`` for a body that is not Prometheus text or not a known server.
    """
    series = _read_series(text)
    source = flavour or detect_flavour(series)
    if source is None:
        raise ServerMetricsError("unknown_server", "no vllm:*, sglang:* or attnload_sim_* series")
    names = FLAVOURS[source]
    models = _model_names(series, names)
    samples = {model: _sample(series, names, source, model) for model in models}
    if source == SIM:  # TTFT, prefix cache: the simulator publishes them under vLLM's names only
        samples = {model: _merge(sample, _sample(series, VLLM_NAMES, SIM, model)) for model, sample in samples.items()}
    return Exposition(source=source, samples=samples)


def detect_flavour(series: Mapping[str, Series]) -> str | None:
    """vLLM, SGLang or the simulator by metric names; the simulator also speaks vLLM, so its
    own names win (its ``attnload_sim_*`` series are the reference the vLLM ones copy)."""
    present = {flavour for flavour, prefix in _PREFIXES.items() if any(n.startswith(prefix) for n in series)}
    for flavour in (SIM, VLLM, SGLANG):
        if flavour in present:
            return flavour
    return None


def _read_series(text: str) -> dict[str, Series]:
    """Every sample by its sample name (``x_total``, ``x_bucket``), whatever family it came in:
    robust to exporters that declare ``# TYPE`` under a different name than the samples use."""
    series: dict[str, Series] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                series.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    except (ValueError, IndexError, KeyError, TypeError) as exc:  # what the text parser raises on garbage
        raise ServerMetricsError("not_prometheus", str(exc)[:120]) from None
    return series


read_series = _read_series
"""The same reader for other exporters' bodies (dcgm-exporter's, ``scrape/dcgm.py``)."""


def _model_names(series: Mapping[str, Series], names: _Names) -> list[str]:
    found: dict[str, None] = {}
    for field in (names.running, names.waiting, names.kv_cache_usage, names.generation_tokens):
        for name in field:
            for labels, _ in series.get(name, ()):
                found.setdefault(labels.get(names.model_label, ""), None)
    return list(found)


def _sample(series: Mapping[str, Series], names: _Names, source: str, model: str) -> ServerSample:
    def value(candidates: tuple[str, ...], kind: Kind) -> float | None:
        for name in candidates:
            picked = _of_model(series.get(name, ()), names.model_label, model)
            if picked:
                return combine(picked, kind, names.model_label)
        return None

    queue_sum = value(tuple(n + "_sum" for n in names.queue_time), "count")
    return ServerSample(
        source=source,
        model_name=model,
        running=value(names.running, "count"),
        waiting=value(names.waiting, "count"),
        kv_cache_usage=value(names.kv_cache_usage, "fraction"),
        preemptions=value(names.preemptions, "count"),
        prefix_cache_queries=value(names.prefix_cache_queries, "count"),
        prefix_cache_hits=value(names.prefix_cache_hits, "count"),
        prefix_cache_hit_rate=value(names.prefix_cache_hit_rate, "fraction"),
        prompt_tokens=value(names.prompt_tokens, "count"),
        generation_tokens=value(names.generation_tokens, "count"),
        ttft_buckets=_histogram(series, names.ttft, names.model_label, model),
        queue_time_sum_s=queue_sum,
        queue_time_count=value(tuple(n + "_count" for n in names.queue_time), "count")
        if queue_sum is not None
        else None,
        aborted=_aborted(series, names.model_label, model) if names is VLLM_NAMES else None,
        spec_drafts=value(names.spec_drafts, "count"),
        spec_draft_tokens=value(names.spec_draft_tokens, "count"),
        spec_accepted_tokens=value(names.spec_accepted_tokens, "count"),
        spec_accepted_all=_last_position(series, names.spec_accepted_per_pos, names.model_label, model),
        spec_accept_length=value(names.spec_accept_length, "fraction"),
        spec_accept_rate=value(names.spec_accept_rate, "fraction"),
    )


def _last_position(series: Mapping[str, Series], candidates: tuple[str, ...], label: str, model: str) -> float | None:
    """A per-position counter at its last ``position`` (vLLM: drafts whose every token was accepted)."""
    for name in candidates:
        rows = [(labels, v) for labels, v in _of_model(series.get(name, ()), label, model) if "position" in labels]
        if rows:
            last = max(int(labels["position"]) for labels, _ in rows)
            return combine([(labels, v) for labels, v in rows if int(labels["position"]) == last], "count", label)
    return None


def _aborted(series: Mapping[str, Series], label: str, model: str) -> float | None:
    name, reason_label, reason = ABORTED
    rows = [
        (labels, v) for labels, v in _of_model(series.get(name, ()), label, model) if labels.get(reason_label) == reason
    ]
    return combine(rows, "count", label) if rows else None


def _merge(primary: ServerSample, fallback: ServerSample) -> ServerSample:
    """``primary`` with each missing field taken from ``fallback``."""
    fields = {name: getattr(primary, name) for name in primary.__dataclass_fields__}
    for name, current in fields.items():
        if current is None or current == ():
            fields[name] = getattr(fallback, name)
    return ServerSample(**fields)


def _of_model(rows: Iterable[tuple[dict[str, str], float]], label: str, model: str) -> Series:
    return [(labels, v) for labels, v in rows if labels.get(label, "") == model and not math.isnan(v)]


def combine(rows: Series, kind: Kind, model_label: str = "model_name") -> float:
    """One value from per-rank series of one metric and model (module docstring's rules)."""
    groups: dict[tuple[tuple[str, str], ...], list[float]] = {}
    for labels, v in rows:
        key = tuple(
            sorted(
                (k, val)
                for k, val in labels.items()
                if k not in SHARD_LABELS and k not in _IGNORED_LABELS and k != model_label
            )
        )
        groups.setdefault(key, []).append(v)
    if kind == "fraction":
        per_group = [sum(vs) / len(vs) for vs in groups.values()]
        return sum(per_group) / len(per_group)
    return sum(max(vs) for vs in groups.values())


def _histogram(
    series: Mapping[str, Series], candidates: tuple[str, ...], label: str, model: str
) -> tuple[tuple[float, float], ...]:
    for name in candidates:
        rows = _of_model(series.get(name + "_bucket", ()), label, model)
        if not rows:
            continue
        by_bound: dict[float, Series] = {}
        for labels, v in rows:
            by_bound.setdefault(float(labels.get("le", "nan")), []).append((labels, v))
        bounds = sorted(b for b in by_bound if not math.isnan(b))
        return tuple((b, combine(by_bound[b], "count", label)) for b in bounds)
    return ()


def _name_key(name: str) -> str:
    """Model names match case-insensitively, by the last path part too (``org/Model`` ≡ ``model``),
    as the simulator routes them."""
    return name.strip().lower().rsplit("/", 1)[-1]
