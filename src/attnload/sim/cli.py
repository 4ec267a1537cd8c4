"""``attnload sim``: serve the attention-aware OpenAI-compatible simulator, or explain it.

Every docs/cost-model.md §2/§4.6 default is a flag of the same name with dashes
(``kv_capacity_scale`` → ``--kv-capacity-scale``), applied to all served models; a
``--config`` file overrides them per model. Without ``--models`` the default demo pair
is served (or the config file's entries). Models are served under the ids given, and
their preset key and aliases route to the same engine (``/v1/models`` lists each served
id once, with ``attention``, ``preset`` and capacity ``details``).

``--list`` and ``--explain`` print and exit 0; a model that does not fit, a
``dp_attention`` that does not divide ``tp`` or an unknown id is a ``UsageError``
(one line, exit 2, no traceback).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from attnload.errors import UsageError
from attnload.sim.costmodel import EngineConfig, engine_profile

_DEFAULTS = EngineConfig()


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer ≥ 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer ≥ 0, got {text!r}")
    return value


def _float_range(low: float, high: float, *, low_open: bool = False) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not (low < value if low_open else low <= value) or value > high or value != value:
            bound = "(" if low_open else "["
            raise argparse.ArgumentTypeError(f"expected a number in {bound}{low:g}, {high:g}], got {text!r}")
        return value

    return parse


def _dp_attention(text: str) -> int | str:
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return _positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected auto or a positive integer, got {text!r}") from None


def _port(text: str) -> int:
    value = _non_negative_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"expected a port in 0..65535, got {text!r}")
    return value


def _int_list(text: str) -> list[int]:
    return [_positive_int(part) for part in text.split(",") if part.strip()]


def _id_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",")]


_INF = float("inf")


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``attnload sim`` flags (defaults: docs/cost-model.md §2 and §4.6)."""
    d = _DEFAULTS
    serve = parser.add_argument_group("serving")
    serve.add_argument(
        "--models",
        type=_id_list,
        default=None,
        metavar="IDS",
        help="comma-separated ids to serve (presets or aliases; default: llama-3-70b,deepseek-v3, "
        "or the --config entries)",
    )
    serve.add_argument(
        "--config", metavar="FILE", help="sim config (JSON/TOML/YAML): per-model preset, attention_type and overrides"
    )
    serve.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    serve.add_argument("--port", type=_port, default=8000, help="listen port (default 8000)")
    _access_flags(serve)
    serve.add_argument(
        "--mode",
        choices=("roofline", "fixed"),
        default="roofline",
        help="roofline: attention-aware cost model (default); fixed: exact --ttft-ms/--itl-ms",
    )
    serve.add_argument(
        "--clock",
        choices=("wall", "virtual"),
        default="wall",
        help="wall (default); virtual: simulated time runs as fast as the CPU allows "
        "(engine tests only: client-measured timings become meaningless)",
    )
    serve.add_argument("--ttft-ms", type=_float_range(0, _INF), default=200.0, help="fixed mode TTFT (default 200)")
    serve.add_argument("--itl-ms", type=_float_range(0, _INF), default=20.0, help="fixed mode ITL (default 20)")
    serve.add_argument(
        "--jitter",
        type=_float_range(0, 0.999),
        default=0.0,
        help="fixed mode: gaps ×(1 + j·U[-1,1]), seeded by --seed and the request body",
    )
    serve.add_argument(
        "--output-tokens",
        type=_positive_int,
        default=256,
        help="tokens generated when a request sets no max_tokens (default 256)",
    )
    serve.add_argument(
        "--tokens-per-event",
        type=_positive_int,
        default=1,
        help="tokens per SSE event after the first (default 1; ≥ 4 cuts client CPU)",
    )
    serve.add_argument(
        "--reasoning-ratio",
        type=_float_range(0, 1),
        default=0.0,
        metavar="R",
        help="share of each answer's tokens sent first as reasoning, in each API's reasoning field "
        "(chat: delta.reasoning as vLLM 0.32; usage reports reasoning_tokens; default 0)",
    )
    serve.add_argument(
        "--max-waiting",
        type=_non_negative_int,
        default=None,
        help="queue length beyond which requests get 429 + Retry-After (default unbounded)",
    )
    serve.add_argument("--seed", type=_non_negative_int, default=d.seed, help="seed (default 0)")
    _configure_deployment(parser)
    _configure_scheduler(parser)
    _configure_offline(parser)


def _configure_deployment(parser: argparse.ArgumentParser) -> None:
    d = _DEFAULTS
    hw = parser.add_argument_group("deployment (all models; --config entries override per model)")
    hw.add_argument(
        "--gpu", type=str.lower, choices=("h100", "h200", "a100"), default=d.gpu, help="GPU preset (default h200)"
    )
    hw.add_argument("--tp", type=_positive_int, default=d.tp, help="GPUs per served model (default 8)")
    hw.add_argument(
        "--dp-attention",
        type=_dp_attention,
        default=d.dp_attention,
        metavar="auto|N",
        help="attention groups D (must divide tp; auto: tp for MLA, 1 otherwise)",
    )
    hw.add_argument("--weight-dtype", type=str.lower, choices=("fp8", "bf16"), default=d.weight_dtype)
    hw.add_argument("--kv-dtype", type=str.lower, choices=("bf16", "fp8"), default=d.kv_dtype)
    hw.add_argument(
        "--kv-capacity-scale",
        type=_float_range(0, 1, low_open=True),
        default=d.kv_capacity_scale,
        help="scale free KV bytes (< 1 brings the KV knee into a short laptop run)",
    )
    hw.add_argument(
        "--gpu-memory-utilization",
        type=_float_range(0, 1, low_open=True),
        default=None,
        help="KV memory fraction (default from --engine: 0.90; of HBM, or of what weights leave for trtllm)",
    )
    hw.add_argument(
        "--ep",
        type=_positive_int,
        default=d.ep,
        help="expert-parallel size for MoE models (must divide tp; default 1: experts split by TP)",
    )
    hw.add_argument(
        "--engine",
        choices=("vllm", "sglang", "trtllm"),
        default=d.engine,
        help="engine profile: memory basis, preemption, chunked prefill, prefill/decode mixing "
        "(default vllm; explicit flags win)",
    )
    hw.add_argument("--reserve-gb", type=_float_range(0, _INF), default=d.reserve_gb)


def _configure_scheduler(parser: argparse.ArgumentParser) -> None:
    d = _DEFAULTS
    eng = parser.add_argument_group("scheduler")
    eng.add_argument("--block-size", type=_positive_int, default=d.block_size)
    eng.add_argument(
        "--max-num-seqs",
        type=_positive_int,
        default=None,
        help="sequences per served model, split over DP groups (default from --engine: 256)",
    )
    eng.add_argument(
        "--max-num-batched-tokens",
        type=_positive_int,
        default=None,
        help="tokens per step per served model, split over DP groups (default from --engine: 8192)",
    )
    eng.add_argument(
        "--preemption",
        choices=("recompute", "none"),
        default=None,
        help="recompute (vllm, sglang) or none: reserve prompt + output at admission (trtllm)",
    )
    eng.add_argument(
        "--chunked-prefill",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="split prompts over steps (default from --engine: on; trtllm off)",
    )
    eng.add_argument(
        "--mix-prefill-decode",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="prefill chunks share steps with decodes (default from --engine: on; sglang off)",
    )
    eng.add_argument(
        "--kv-memory-basis",
        choices=("total", "free"),
        default=None,
        help="--gpu-memory-utilization of total HBM or of what weights leave (default from --engine)",
    )
    eng.add_argument(
        "--prefix-cache",
        action=argparse.BooleanOptionalAction,
        default=d.prefix_cache,
        help="per-group prefix cache (default on)",
    )
    eng.add_argument("--moe-weight-traffic", choices=("coverage", "active"), default=d.moe_weight_traffic)
    eng.add_argument(
        "--dp-replicates-dense",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="attention DP holds the dense MLPs, shared experts and lm_head whole in every group "
        "(default from --engine: off; trtllm on)",
    )
    _configure_speculation(eng)

    eff = parser.add_argument_group("efficiency")
    eff.add_argument("--eff-gemm", type=_float_range(0, 1, low_open=True), default=d.eff_gemm)
    eff.add_argument("--eff-attn", type=_float_range(0, 1, low_open=True), default=d.eff_attn)
    eff.add_argument("--eff-bw", type=_float_range(0, 1, low_open=True), default=d.eff_bw)
    eff.add_argument("--step-overhead-ms", type=_float_range(0, _INF), default=d.step_overhead_ms)
    eff.add_argument("--allreduce-latency-us", type=_float_range(0, _INF), default=d.allreduce_latency_us)
    eff.add_argument("--dp-gather-latency-us", type=_float_range(0, _INF), default=d.dp_gather_latency_us)
    eff.add_argument(
        "--gemm-knee",
        type=_float_range(0, _INF),
        default=d.gemm_knee,
        help="GEMM-phase roofline knee exponent (default 1.5, calibrated; 0: sharp max)",
    )
    eff.add_argument("--a2a-latency-us", type=_float_range(0, _INF), default=d.a2a_latency_us)
    eff.add_argument("--moe-gemm-tile-tokens", type=_positive_int, default=d.moe_gemm_tile_tokens)
    eff.add_argument("--moe-bw-small-batch", type=_float_range(0, 1, low_open=True), default=d.moe_bw_small_batch)
    eff.add_argument(
        "--moe-kernel-rate",
        type=_float_range(0, 1, low_open=True),
        default=None,
        help="expert GEMM compute rate ÷ the dense GEMM rate (default from --engine: 1; trtllm 0.54)",
    )


def _configure_speculation(eng: argparse._ArgumentGroup) -> None:
    d = _DEFAULTS
    eng.add_argument(
        "--spec-tokens",
        type=_non_negative_int,
        default=d.spec_tokens,
        metavar="K",
        help="speculative decoding: draft tokens verified per sequence per decode step; each step reads "
        "weights and KV once for K+1 query tokens; fixed mode: each --itl-ms gap is one such step (default 0: off)",
    )
    eng.add_argument(
        "--spec-acceptance",
        type=_float_range(0, 1),
        default=d.spec_acceptance,
        metavar="A",
        help="probability each draft token is accepted, stopping at the first rejection (default 0.7)",
    )


def _configure_offline(parser: argparse.ArgumentParser) -> None:
    off = parser.add_argument_group("offline throughput (--throughput: virtual clock, prints and exits)")
    off.add_argument(
        "--throughput",
        action="store_true",
        help="run --num-prompts identical requests on the virtual clock and print throughput "
        "and latency (the counterpart of `vllm bench throughput`)",
    )
    off.add_argument("--input-len", type=_positive_int, default=1024, help="prompt tokens (default 1024)")
    off.add_argument("--output-len", type=_positive_int, default=1024, help="output tokens (default 1024)")
    off.add_argument(
        "--num-prompts", type=_positive_int, default=None, help="requests (default: 5 × --max-concurrency, else 1000)"
    )
    off.add_argument(
        "--max-concurrency",
        type=_positive_int,
        default=None,
        help="requests in flight; the next is sent when one finishes (default: all at t=0)",
    )
    off.add_argument("--json", action="store_true", help="print one JSON object instead of text")

    info = parser.add_argument_group("information (print and exit)")
    info.add_argument("--list", action="store_true", help="presets with KV bytes/token at this parallelism")
    info.add_argument("--explain", metavar="MODEL", help="step-time breakdown of MODEL (id, alias or config entry)")
    info.add_argument(
        "--batch",
        type=_int_list,
        default=[1, 16, 64, 256],
        metavar="B[,B...]",
        help="--explain batch sizes (default 1,16,64,256)",
    )
    info.add_argument(
        "--context",
        type=_positive_int,
        default=8192,
        metavar="L",
        help="--explain context tokens per sequence (default 8192)",
    )


def engine_config(args: argparse.Namespace) -> EngineConfig:
    """The flags as an :class:`EngineConfig` (the base every served model starts from): flags left
    unset take the ``--engine`` profile's value."""
    flags = vars(args)
    fields: dict[str, Any] = {name: flags[name] for name in EngineConfig.__dataclass_fields__}
    for name, value in engine_profile(fields["engine"]).items():
        if fields[name] is None:
            fields[name] = value
    return EngineConfig(**fields)


def _access_flags(serve: argparse._ArgumentGroup) -> None:
    """What the simulator demands beyond the body, as Azure OpenAI does (serving/access.py)."""
    serve.add_argument(
        "--require-header",
        action="append",
        metavar="NAME=VALUE",
        help="answer 401 to a request without this header and value, e.g. api-key=KEY (Azure OpenAI's key "
        "header; repeatable)",
    )
    serve.add_argument(
        "--require-query",
        action="append",
        metavar="NAME=VALUE",
        help="answer 400 to a request without this query parameter, e.g. api-version=2024-10-21 (repeatable)",
    )


def run(args: argparse.Namespace) -> int:
    """List, explain, or serve until SIGINT/SIGTERM."""
    from attnload.sim.explain import render_explain, render_list
    from attnload.sim.factory import build_engines, resolve_models
    from attnload.sim.simconfig import load_sim_config

    cfg = engine_config(args)
    sim_config = load_sim_config(args.config) if args.config else None
    if args.list:
        print(render_list(cfg))
        return 0
    if args.explain:
        (spec,) = resolve_models([args.explain], cfg, sim_config)
        print(render_explain(spec, args.batch, args.context))
        return 0
    if args.throughput:
        return _throughput(args, cfg, sim_config)
    specs = resolve_models(args.models, cfg, sim_config)
    # max_waiting goes to the server alone: it answers 429 + Retry-After from the engine's snapshot.
    from attnload.sim.engine import VirtualClock

    engines = build_engines(
        specs,
        mode=args.mode,
        ttft_s=args.ttft_ms / 1e3,
        itl_s=args.itl_ms / 1e3,
        jitter=args.jitter,
        clock=VirtualClock() if args.clock == "virtual" else None,
    )
    from attnload.sim.serving.access import Demands, parse_pairs
    from attnload.sim.serving.server import serve

    try:
        demands = Demands(
            parse_pairs(args.require_header, "--require-header"), parse_pairs(args.require_query, "--require-query")
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    extra: dict[str, Any] = {"reasoning_ratio": args.reasoning_ratio} if args.reasoning_ratio else {}
    if demands.headers or demands.query:
        extra["demands"] = demands
    serve(
        engines,
        host=args.host,
        port=args.port,
        tokens_per_event=args.tokens_per_event,
        default_output_tokens=args.output_tokens,
        max_waiting=args.max_waiting,
        **extra,
    )
    return 0


def _throughput(args: argparse.Namespace, cfg: EngineConfig, sim_config: Any) -> int:
    """``--throughput``: one offline run per model, printed as text or one JSON object per model."""
    import json

    from attnload.sim.costmodel import deploy
    from attnload.sim.factory import resolve_models
    from attnload.sim.throughput import render_throughput, run_throughput

    specs = resolve_models(args.models, cfg, sim_config)
    prompts = args.num_prompts or (5 * args.max_concurrency if args.max_concurrency else 1000)
    results = []
    for spec in specs:
        dep = deploy(spec.preset, spec.cfg)
        results.append(
            (dep, run_throughput(dep, args.input_len, args.output_len, prompts, args.max_concurrency, model=spec.id))
        )
    for dep, result in results:
        print(json.dumps(result.as_dict(), sort_keys=True) if args.json else render_throughput(dep, result))
    return 0
