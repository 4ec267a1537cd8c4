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

from attnload.exporter import names

SCOPE = 'namespace=~"$namespace", job=~"$job"'
"""Which stack: every query carries it (``.*`` also matches a series without the label)."""
SEL = f'model=~"$model", attention=~"$attention", profile=~"$profile", target=~"$target", {SCOPE}'
"""Every per-model series of the master carries these labels (docs/design.md, "Prometheus metrics")."""
SEL_USERS = f'model=~"$model", attention=~"$attention", target=~"$target", {SCOPE}'
"""``attnload_users`` counts users per model (profile ``all``), so it is not filtered on the profile."""
SEL_NO_ATTENTION = f'model=~"$model", profile=~"$profile", target=~"$target", {SCOPE}'
"""The MLA/GQA ratios pick the attention themselves."""
SEL_SERVER = f'model_name=~"$model", {SCOPE}'
"""vLLM and SGLang label their series ``model_name`` (the served model id)."""
SPLIT = "target, model, attention"
RATE = "$__rate_interval"
LEGEND = "{{attention}} {{model}} [{{target}}]"

ATTENTION_COLORS = (("GQA", "blue"), ("MLA", "orange"), ("MHA", "green"), ("MQA", "purple"))
"""One fixed colour per attention type, matched on the legend by regex (case-insensitive)."""

SERVER_NOTE = (
    "From the inference server's own /metrics: one query over vLLM's (`vllm:*`) and SGLang's "
    "(`sglang:*`) names, so whichever engine is scraped answers; the attention type comes from "
    "attnload's own series for the same model id. attnload's simulator exports the vLLM names; "
    "its numbers are simulated, not a measurement of a real server (docs/simulator.md)."
)


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
    how = (
        " MLA series over GQA series, each merged over all models of that attention type in the "
        "selection (buckets summed before the quantile)."
    )

    def stat(what: str, expr: str, meaning: str, legend: str | None = None) -> Panel:
        target = Target(expr, f"MLA/GQA {legend or what}")
        return Panel(f"MLA / GQA: {what}", RATIO, (target,), meaning + how, kind="stat", width=8, height=5, decimals=2)

    return (
        stat("ITL p50", mla_over_gqa_quantile(0.5, names.ITL_SECONDS), "Below 1: MLA decodes faster per token."),
        stat(
            "TTFT p99",
            mla_over_gqa_quantile(0.99, names.TTFT_SECONDS),
            "Below 1: MLA's slowest first tokens come sooner.",
        ),
        stat(
            "output tokens/s",
            mla_over_gqa_rate(f"{names.COMPLETION_TOKENS}_total"),
            "Above 1: MLA produces more tokens per second.",
            legend="output tok/s",
        ),
    )


ATTENTION_OF = (
    f"topk by (model_name) (1, group by (model_name, attention) "
    f'(label_replace(attnload_users{{{SEL_USERS}}}, "model_name", "$1", "model", "(.*)")))'
)
"""The attention type of each served model id, from the master's ``attnload_users`` (its ``model``
label is the id the server names ``model_name``); one per id (``topk``), so the join never fails."""
SERVER_LEGEND = "{{attention}} {{model_name}}"


def with_attention(expr: str) -> str:
    """``expr`` (one series per ``model_name``) labelled with the model's attention type for legend and colour.

    Why the ``or``: a server series whose id the master does not use (an alias the server resolves,
    or no run going) still shows, labelled by model only, instead of vanishing from the panel.
    """
    return f"({expr}) * on (model_name) group_left (attention) {ATTENTION_OF} or on (model_name) ({expr})"


def engines(*exprs: str) -> str:
    """One query over every engine's names (vLLM v1, vLLM v0, SGLang): whichever server is scraped answers."""
    return " or ".join(f"({e})" for e in exprs)


def _gauge(agg: str, *metrics: str) -> str:
    return engines(*(f"{agg} by (model_name) ({m}{{{SEL_SERVER}}})" for m in metrics))


def _per_s(*metrics: str) -> str:
    return engines(*(f"sum by (model_name) (rate({m}{{{SEL_SERVER}}}[{RATE}]))" for m in metrics))


def _share(*pairs: tuple[str, str]) -> str:
    return engines(
        *(
            f"sum by (model_name) (rate({num}{{{SEL_SERVER}}}[{RATE}]))"
            f" / sum by (model_name) (rate({den}{{{SEL_SERVER}}}[{RATE}]))"
            for num, den in pairs
        )
    )


def _server_quantile(q: float) -> str:
    return (
        f"histogram_quantile({q}, "
        + engines(
            *(
                f"sum by (le, model_name) (rate({m}_bucket{{{SEL_SERVER}}}[{RATE}]))"
                for m in ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds")
            )
        )
        + ")"
    )


def _one(expr: str, legend: str = SERVER_LEGEND) -> tuple[Target]:
    return (Target(with_attention(expr), legend),)


def _server_panel(title: str, unit: str, expr: str, description: str, max_value: float | None = None) -> Panel:
    """One third of a row: one query over vLLM's and SGLang's names, the attention joined from attnload's series."""
    return Panel(title, unit, _one(expr), f"{description} {SERVER_NOTE}", max_value=max_value, width=8)


def server_view() -> tuple[Panel, ...]:
    """The server's state, from its own metrics: one panel per quantity, one query per panel covering
    vLLM's and SGLang's names together, so no panel is empty whichever engine serves."""
    kv_usage = _gauge("max", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage")
    prefix_hits = _share(
        ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),
        ("vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_queries_total"),
        ("sglang:cached_tokens_total", "sglang:prompt_tokens_total"),
    )
    return (
        row("Server view (vLLM / SGLang metrics)"),
        _server_panel(
            "Server: KV cache usage",
            "percentunit",
            kv_usage,
            "Share of KV cache blocks (vLLM) or token slots (SGLang) in use.",
            max_value=1.0,
        ),
        _server_panel(
            "Server: requests running",
            "short",
            _gauge("sum", "vllm:num_requests_running", "sglang:num_running_reqs"),
            "Requests in the server's running batch.",
        ),
        _server_panel(
            "Server: requests waiting",
            "short",
            _gauge("sum", "vllm:num_requests_waiting", "sglang:num_queue_reqs"),
            "Waiting > 0: admission is bound by KV capacity (or the batch limit).",
        ),
        _server_panel(
            "Server: preemptions/s",
            "short",
            _per_s("vllm:num_preemptions_total", "sglang:num_retracted_requests_total"),
            "Requests preempted (vLLM) or retracted (SGLang) because a decode needed KV space.",
        ),
        _server_panel(
            "Server: prefix cache hit ratio",
            "percentunit",
            prefix_hits,
            "Prompt tokens found in the prefix cache over prompt tokens looked up.",
            max_value=1.0,
        ),
        Panel(
            "Server: TTFT (p99 dashed)",
            "s",
            tuple(
                Target(with_attention(_server_quantile(q)), f"p{round(q * 100)} {SERVER_LEGEND}") for q in (0.5, 0.99)
            ),
            "Time to first token as the server measures it (queueing and prefill, no network). " + SERVER_NOTE,
            dashed_legend="^p99",
            width=8,
        ),
        *speculation_panels(),
    )


def latency_pair(
    title: str, metric: str, description: str, qs: Sequence[float] = (0.5, 0.99), width: int = 12
) -> tuple[Panel, ...]:
    """One panel per percentile, so a line's colour only ever means its attention type."""
    return tuple(
        Panel(f"{title} p{round(q * 100)}", "s", (Target(quantile(q, metric)),), description, width=width) for q in qs
    )


def reasoning_share() -> Panel:
    """Reasoning tokens over all output tokens per model (0 for a model that does not reason)."""
    share = f"{rate_sum(f'{names.REASONING_TOKENS}_total')} / {rate_sum(f'{names.COMPLETION_TOKENS}_total')}"
    return Panel(
        "Reasoning share of output",
        "percentunit",
        (Target(share),),
        "Output tokens streamed as reasoning deltas over all output tokens (client count; ITL and TPOT count both).",
    )


def speculation_panels() -> tuple[Panel, ...]:
    """Speculative decoding from the server's counters (vLLM) or gauges (SGLang): empty where nothing speculates."""
    accepted, drafts, draft_tokens = (
        f"sum by (model_name) (rate(vllm:spec_decode_num_{name}_total{{{SEL_SERVER}}}[{RATE}]))"
        for name in ("accepted_tokens", "drafts", "draft_tokens")
    )
    return (
        _server_panel(
            "Server: draft acceptance",
            "percentunit",
            engines(f"{accepted} / {draft_tokens}", f"avg by (model_name) (sglang:spec_accept_rate{{{SEL_SERVER}}})"),
            "Speculative decoding: accepted draft tokens over proposed ones (vLLM's and SGLang's ratio; the "
            "results' spec_decode.acceptance_rate is the per-token one, higher for long drafts).",
            max_value=1.0,
        ),
        _server_panel(
            "Server: tokens per decode step",
            "short",
            engines(f"1 + {accepted} / {drafts}", f"avg by (model_name) (sglang:spec_accept_length{{{SEL_SERVER}}})"),
            "Speculative decoding: tokens one sequence gets per verify step (1 + accepted drafts), what a "
            "speculating server writes per event.",
        ),
    )


def expr_requirements(expr: str) -> frozenset[str]:
    """What a query needs before it can return data, for the non-empty test.

    ``errors``: only failing requests create error series. ``open_loop``: dispatch lag is
    measured against a fixed schedule (``--shape rate:``). ``sim``: the simulator is scraped
    (it exports the vLLM names; a server-view query covers vLLM and SGLang names together, so any
    engine satisfies it). ``prefix_cache``: the simulator exports prefix-cache counters in roofline
    mode only. ``sglang``: a query with SGLang names only (the server view has none). ``speculation``: the
    simulator speculates (``--spec-tokens``). ``decode_fit``: answers of a few hundred tokens.
    ``interference``: a ``--shape interference:L`` run (prefills injected among decodes).
    """
    needs: set[str] = set()
    if (f"{names.REQUEST_ERRORS}_total" in expr or 'outcome="failed"' in expr) and "(0 * sum" not in expr:
        needs.add("errors")  # an error query with a 0-per-model fallback shows data in a clean run
    if names.DISPATCH_LAG_SECONDS in expr:
        needs.add("open_loop")
    if names.SIM_PREFIX in expr or "vllm:" in expr or "sglang:" in expr:
        needs.add("sim")
    if "prefix_cache" in expr:
        needs.add("prefix_cache")
    if "sglang:" in expr and "vllm:" not in expr:
        needs.add("sglang")
    if "spec_decode" in expr or "spec_accept" in expr:
        needs.add("speculation")
    if "attnload_gpu_" in expr:  # GPU telemetry: the roofline simulator's DCGM fields (or dcgm-exporter)
        needs.add("gpu")
    if names.DECODE_SLOPE in expr:  # a decode fit needs answers long enough to settle (measure/decodefit.py)
        needs.add("decode_fit")
    if names.PREFILL_STALL in expr:  # only --shape interference:L injects prefills
        needs.add("interference")
    return frozenset(needs)


def decode_slope() -> Panel:
    """The decode fit's slope per model and stage: how much the step grows per 1K tokens of context."""
    sel = SEL_USERS  # one slope per model and stage, over every profile (like attnload_users)
    return Panel(
        "Decode slope: ms per 1K tokens of context, per stage",
        "suffix: ms/1K",
        (
            Target(
                f"max by ({SPLIT}, stage) ({names.DECODE_SLOPE}{{{sel}}})",
                "{{attention}} {{model}} [{{target}}] stage {{stage}}",
            ),
        ),
        "How much the decode step grows per 1K tokens of context: the line through ITL against position "
        "(prompt + token index). With a decode sweep (--shape decode:A-B) it is the KV read per token "
        "(docs/microscope.md); a steeper line reads more KV per token.",
        decimals=3,
    )


def prefill_stall() -> Panel:
    """The interference shape's decode stall per injected prefill, per model: the attention's prefill cost."""
    sel = SEL_USERS
    return Panel(
        "Prefill interference: decode stall per 1K prefill tokens",
        "suffix: ms/1K",
        (Target(f"max by ({SPLIT}) ({names.PREFILL_STALL}{{{sel}}})", "{{attention}} {{model}} [{{target}}]"),),
        "What a decoding stream lost while a long prompt was prefilled beside it (--shape interference:L), per "
        "1K prompt tokens: a compute-heavy prefill (MLA's) stalls its decoders more (docs/workloads.md).",
        decimals=2,
    )
