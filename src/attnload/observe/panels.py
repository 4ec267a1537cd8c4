"""Building blocks of the Grafana dashboards: the panel model, selectors, query shapes, colours,
the MLA/GQA ratio stats and the "server view" row (vLLM and SGLang names).

Every query filters on the ``$namespace`` and ``$job`` variables, so two attnload stacks
scraped by one Prometheus (two namespaces, or two jobs) never mix on a panel; per-model
queries also filter on ``$model``, ``$attention``, ``$profile`` and ``$target`` (the
config key, which keeps one model id served by two engines apart).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from attnload.metrics import names

SCOPE = 'namespace=~"$namespace", job=~"$job"'
"""Which stack: every query carries it (``.*`` also matches a series without the label)."""
SEL = f'model=~"$model", attention=~"$attention", profile=~"$profile", target=~"$target", {SCOPE}'
"""Every per-model series of the master carries these labels (DESIGN.md "Prometheus metrics")."""
SEL_USERS = f'model=~"$model", attention=~"$attention", target=~"$target", {SCOPE}'
"""``attnload_users`` counts users per model (profile ``all``), so it is not filtered on the profile."""
SEL_NO_ATTENTION = f'model=~"$model", profile=~"$profile", target=~"$target", {SCOPE}'
"""The MLA/GQA ratios pick the attention themselves."""
SEL_SERVER = f'model_name=~"$model", {SCOPE}'
"""vLLM and SGLang label their series ``model_name`` (the served model id)."""
SPLIT = "target, model, attention"
RATE = "$__rate_interval"
LEGEND = "{{attention}} {{model}} [{{target}}]"
SERVER_LEGEND = "{{model_name}}"

ATTENTION_COLORS = (("GQA", "blue"), ("MLA", "orange"), ("MHA", "green"), ("MQA", "purple"))
"""One fixed colour per attention type, matched on the legend by regex (case-insensitive)."""

SERVER_NOTE = ("From the inference server's own /metrics: vLLM (`vllm:*`) and SGLang (`sglang:*`) names, one "
               "query per engine. attnload's simulator exports the vLLM names; its numbers are simulated, "
               "not a measurement of a real server.")


@dataclass(frozen=True)
class Target:
    expr: str
    legend: str = LEGEND


@dataclass(frozen=True)
class Panel:
    """One panel; ``unit`` applies to all its series unless ``right_unit`` moves some to a right axis."""

    title: str
    unit: str
    targets: tuple[Target, ...]
    description: str = ""
    kind: str = "timeseries"
    """``timeseries``, ``stat``, or ``row`` (a section header: no targets)."""
    width: int = 12
    height: int = 8
    right_axis_legend: str | None = None
    """Legend regex of series drawn on a right axis (e.g. target users under a latency)."""
    right_unit: str = "short"
    thresholds: tuple[tuple[str, float | None], ...] = ()
    max_value: float | None = None
    dashed_legend: str | None = None
    """Legend regex of series drawn dashed (p99 beside p50 in one panel)."""
    decimals: int | None = None


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    panels: tuple[Panel, ...]
    tags: tuple[str, ...] = field(default=("attnload",))


TOKENS_PER_S = "suffix: tok/s"
"""Grafana's custom-unit syntax (``suffix:<text>``): a valid unit id, unlike ``tokens/s``."""
RATIO = "none"


def row(title: str) -> Panel:
    return Panel(title, RATIO, (), kind="row", width=24, height=1)


def quantile(q: float, metric: str, sel: str = SEL, by: str = SPLIT) -> str:
    """Percentile from summed bucket rates: mergeable across workers and series, never averaged."""
    return f"histogram_quantile({q}, sum by (le, {by}) (rate({metric}_bucket{{{sel}}}[{RATE}])))"


def rate_sum(metric: str, sel: str = SEL, by: str = SPLIT) -> str:
    return f"sum by ({by}) (rate({metric}{{{sel}}}[{RATE}]))"


def _attention(name: str) -> str:
    return f'attention=~"(?i){name}", {SEL_NO_ATTENTION}'


def mla_over_gqa_quantile(q: float, metric: str) -> str:
    """One number: MLA's percentile over GQA's, each merged over its models (``on()``: no labels left)."""
    def one(name: str) -> str:
        return f"histogram_quantile({q}, sum by (le) (rate({metric}_bucket{{{_attention(name)}}}[{RATE}])))"
    return f"{one('MLA')} / on() {one('GQA')}"


def mla_over_gqa_rate(metric: str) -> str:
    def one(name: str) -> str:
        return f"sum(rate({metric}{{{_attention(name)}}}[{RATE}]))"
    return f"{one('MLA')} / on() {one('GQA')}"


def ratio_panels() -> tuple[Panel, ...]:
    """MLA/GQA as numbers: below 1 MLA is faster (latency) or above 1 MLA produces more (tok/s)."""
    how = (" MLA series over GQA series, each merged over all models of that attention type in the "
           "selection (buckets summed before the quantile).")
    return (
        Panel("MLA / GQA: ITL p50", RATIO,
              (Target(mla_over_gqa_quantile(0.5, names.ITL_SECONDS), "MLA/GQA ITL p50"),),
              "Below 1: MLA decodes faster per token." + how, kind="stat", width=8, height=5, decimals=2),
        Panel("MLA / GQA: TTFT p99", RATIO,
              (Target(mla_over_gqa_quantile(0.99, names.TTFT_SECONDS), "MLA/GQA TTFT p99"),),
              "Below 1: MLA's slowest first tokens come sooner." + how, kind="stat", width=8, height=5,
              decimals=2),
        Panel("MLA / GQA: output tokens/s", RATIO,
              (Target(mla_over_gqa_rate(f"{names.COMPLETION_TOKENS}_total"), "MLA/GQA output tok/s"),),
              "Above 1: MLA produces more tokens per second." + how, kind="stat", width=8, height=5,
              decimals=2),
    )


def _server(expr_vllm: str, expr_sglang: str) -> tuple[Target, Target]:
    return Target(expr_vllm, f"vLLM {SERVER_LEGEND}"), Target(expr_sglang, f"SGLang {SERVER_LEGEND}")


def server_view() -> tuple[Panel, ...]:
    """The server's state, from its own metrics; each panel has one query per engine flavour."""
    by = "model_name"
    return (
        row("Server view (vLLM / SGLang metrics)"),
        Panel("Server: KV cache usage", "percentunit",
              _server(f"max by ({by}) (vllm:kv_cache_usage_perc{{{SEL_SERVER}}})",
                      f"max by ({by}) (sglang:token_usage{{{SEL_SERVER}}})"),
              "Share of KV cache blocks (vLLM) or token slots (SGLang) in use. " + SERVER_NOTE, max_value=1.0),
        Panel("Server: requests running / waiting", "short",
              (Target(f"sum by ({by}) (vllm:num_requests_running{{{SEL_SERVER}}})", f"running vLLM {SERVER_LEGEND}"),
               Target(f"sum by ({by}) (vllm:num_requests_waiting{{{SEL_SERVER}}})", f"waiting vLLM {SERVER_LEGEND}"),
               Target(f"sum by ({by}) (sglang:num_running_reqs{{{SEL_SERVER}}})", f"running SGLang {SERVER_LEGEND}"),
               Target(f"sum by ({by}) (sglang:num_queue_reqs{{{SEL_SERVER}}})", f"waiting SGLang {SERVER_LEGEND}")),
              "Waiting > 0: admission is bound by KV capacity (or the batch limit). " + SERVER_NOTE,
              dashed_legend="^waiting"),
        Panel("Server: preemptions/s", "short",
              _server(f"sum by ({by}) (rate(vllm:num_preemptions_total{{{SEL_SERVER}}}[{RATE}]))",
                      f"sum by ({by}) (rate(sglang:num_retracted_requests_total{{{SEL_SERVER}}}[{RATE}]))"),
              "Requests preempted (vLLM) or retracted (SGLang) because a decode needed KV space. " + SERVER_NOTE),
        Panel("Server: prefix cache hit ratio", "percentunit",
              _server(f"sum by ({by}) (rate(vllm:prefix_cache_hits_total{{{SEL_SERVER}}}[{RATE}]))"
                      f" / sum by ({by}) (rate(vllm:prefix_cache_queries_total{{{SEL_SERVER}}}[{RATE}]))",
                      f"sum by ({by}) (rate(sglang:cached_tokens_total{{{SEL_SERVER}}}[{RATE}]))"
                      f" / sum by ({by}) (rate(sglang:prompt_tokens_total{{{SEL_SERVER}}}[{RATE}]))"),
              "Prompt tokens found in the prefix cache over prompt tokens looked up. " + SERVER_NOTE,
              max_value=1.0),
    )


def latency_pair(title: str, metric: str, description: str, qs: Sequence[float] = (0.5, 0.99),
                 width: int = 12) -> tuple[Panel, ...]:
    """One panel per percentile, so a line's colour only ever means its attention type."""
    return tuple(Panel(f"{title} p{round(q * 100)}", "s", (Target(quantile(q, metric)),), description, width=width)
                 for q in qs)


def expr_requirements(expr: str) -> frozenset[str]:
    """What a query needs before it can return data, for the non-empty test.

    ``errors``: only failing requests create error series. ``open_loop``: dispatch lag is
    measured against a fixed schedule (``--shape rate:``). ``sim``: the simulator is scraped
    (it exports the vLLM names). ``prefix_cache``: the simulator exports prefix-cache counters
    in roofline mode only. ``sglang``: an SGLang server (or the fixture exporter) is scraped.
    """
    needs: set[str] = set()
    if f"{names.REQUEST_ERRORS}_total" in expr or 'outcome="failed"' in expr:
        needs.add("errors")
    if names.DISPATCH_LAG_SECONDS in expr:
        needs.add("open_loop")
    if names.SIM_PREFIX in expr or "vllm:" in expr:
        needs.add("sim")
    if "vllm:prefix_cache" in expr:
        needs.add("prefix_cache")
    if "sglang:" in expr:
        needs.add("sglang")
    if "attnload_gpu_" in expr:  # GPU telemetry: the roofline simulator's DCGM fields (or dcgm-exporter)
        needs.add("gpu")
    return frozenset(needs)
