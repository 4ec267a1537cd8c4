"""``attnload demo``: the seed's GQA-vs-MLA comparison, end to end, with no network, GPU or key.

Starts the simulator with the default pair (llama-3-70b GQA on 8×H200 TP8 vs deepseek-v3
MLA with DP attention, docs/cost-model.md §4.6) scaled for a laptop, runs a short
concurrency sweep through real Locust processes, then a short context ladder (the seed's
"push the prompt past 4K": how each model's per-user decode speed falls with context) and a short
decode sweep (how each decode step grows with context, and the KV bytes it reads; docs/microscope.md), prints
each run's verdict and tables and writes ``results/`` (JSON + HTML). The config it writes uses the
seed's model ids.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from attnload.commands.demoload import run_arguments
from attnload.errors import UsageError
from attnload.plan.launch import execute, free_port, plan_from_args

DEMO_SHAPE = "concurrency:16,64,144"
DEMO_STAGE_S = "20s"
DEMO_PROMPT_TOKENS = 2000
DEMO_MAX_TOKENS = 256
DEMO_SLO = {"ttft_p99_s": 0.5, "itl_p99_s": 0.2}
"""The demo's SLO, so the verdict can name each model's users at it (docs/cost-model.md)."""
DEMO_GPU_HOUR_USD = 3.5
"""An illustrative H200 price per GPU-hour, so the verdict can price a million output tokens."""
DEMO_LADDER = "context:1k,16k"
DEMO_LADDER_USERS = "2"
"""One user per model: the seed's single-stream decode criterion, with nothing else in the batch."""
DEMO_LADDER_STAGE_S = "15s"
DEMO_LADDER_MAX_CONTEXT = 32768
DEMO_DECODE = "decode:1k-2k"
DEMO_DECODE_USERS = "16"
"""Eight sequences per model decoding in lockstep from 1K to 2K tokens: the microscope's slope in ~20 s."""
DEMO_DECODE_STAGE_S = "45s"
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback never goes through a proxy


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--engine",
        choices=("sim", "vllm"),
        default="sim",
        help="sim: the built-in simulator; vllm: two real vLLM CPU servers with tiny GQA/MLA models "
        "(`make vllm-env` first; docs/vllm.md)",
    )
    parser.add_argument(
        "--shape", default=None, help=f"users per stage, both models together ({DEMO_SHAPE}; vllm: concurrency:2,8)"
    )
    parser.add_argument("--stage-duration", default=None, help=f"length of each stage ({DEMO_STAGE_S}; vllm: 60s)")
    parser.add_argument("--spawn-rate", type=float, default=20.0, help="users started per second")
    parser.add_argument("--workers", type=int, default=2, help="local Locust worker processes")
    parser.add_argument(
        "--kv-capacity-scale",
        type=float,
        default=0.05,
        help="shrink simulated KV memory so the capacity knee fits a laptop run",
    )
    parser.add_argument(
        "--tokens-per-event",
        type=int,
        default=1,
        help="tokens per SSE event from the simulator (>1 smooths ITL percentiles toward the mean)",
    )
    parser.add_argument(
        "--kv-cache-bytes",
        type=int,
        default=8 * 2**20,
        help="--engine vllm: KV cache bytes per server, equal for both models (8 MiB)",
    )
    parser.add_argument(
        "--ladder",
        default=None,
        help=f"the context ladder run after the stages ({DEMO_LADDER} at one user per model, "
        f"{DEMO_LADDER_STAGE_S} each; vllm: context:256,2k); off: none",
    )
    parser.add_argument(
        "--decode",
        default=None,
        help=f"the decode sweep run last ({DEMO_DECODE}, {DEMO_DECODE_USERS} users: the KV read per token, "
        "docs/microscope.md; vllm: off); off: none",
    )
    parser.add_argument("--results", default="results", help="directory for results JSON + HTML")
    parser.add_argument("--metrics-port", type=int, default=9646, help="master's /metrics port (0 = off)")
    parser.add_argument(
        "--locust-stats",
        action="store_true",
        default=None,
        help="also print Locust's own request tables (off by default)",
    )


def demo_config(base_url: str) -> dict[str, object]:
    """The seed's benchmark_config.json, pointed at the simulator, with a 2000-token prompt profile."""
    return {
        "base_url": base_url,
        "models": {
            "gqa_model": {
                "id": "llama-3-70b",
                "attention_type": "GQA",
                "max_context": 8192,
                "gpu_hour_usd": DEMO_GPU_HOUR_USD,
            },
            "mla_model": {
                "id": "deepseek-chat",
                "attention_type": "MLA",
                "max_context": 65536,
                "gpu_hour_usd": DEMO_GPU_HOUR_USD,
            },
        },
        "slo": DEMO_SLO,
        "workload": {"prompt-2k": {"prompt_tokens": DEMO_PROMPT_TOKENS, "max_tokens": DEMO_MAX_TOKENS}},
        "benchmark": {"repeat": 1, "max_tokens": DEMO_MAX_TOKENS, "temperature": 0},
    }


def ladder_config(base_url: str) -> dict[str, object]:
    """The demo's config with both models' ``max_context`` room for the ladder's longest rung."""
    config = demo_config(base_url)
    models = config["models"]
    assert isinstance(models, dict)
    for entry in models.values():
        entry["max_context"] = DEMO_LADDER_MAX_CONTEXT
    return config


def run(args: argparse.Namespace) -> int:
    if args.engine == "vllm":
        from attnload.commands import demo_vllm

        return demo_vllm.run(args)
    args.shape = args.shape or DEMO_SHAPE
    args.stage_duration = args.stage_duration or DEMO_STAGE_S
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="attnload-demo-") as tmp:
        config_path = Path(tmp) / "demo_config.json"
        config_path.write_text(json.dumps(demo_config(f"http://127.0.0.1:{port}/api"), indent=2), encoding="utf-8")
        sim = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "attnload",
                "sim",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--kv-capacity-scale",
                str(args.kv_capacity_scale),
                "--tokens-per-event",
                str(args.tokens_per_event),
            ]
        )
        try:
            _wait_ready(f"http://127.0.0.1:{port}/health", sim)
            print(
                f"simulator: llama-3-70b (GQA, TP8) vs deepseek-v3 (MLA, DP attention) on 8×H200, "
                f"KV capacity ×{args.kv_capacity_scale:g} (simulated)"
            )
            load = run_arguments(args, args.shape, args.stage_duration, locust_stats=args.locust_stats)
            results = execute(plan_from_args(load, config_path))
            ladder = args.ladder or DEMO_LADDER
            if results is not None and ladder != "off":
                ladder_path = Path(tmp) / "demo_ladder.json"
                ladder_path.write_text(json.dumps(ladder_config(f"http://127.0.0.1:{port}/api"), indent=2), "utf-8")
                print(f"context ladder: {ladder}, one user per model (the seed's decode criterion)")
                load = run_arguments(
                    args, ladder, DEMO_LADDER_STAGE_S, locust_stats=args.locust_stats, users=DEMO_LADDER_USERS
                )
                results = execute(plan_from_args(load, ladder_path))
            decode = args.decode or DEMO_DECODE
            if results is not None and decode != "off":
                decode_path = Path(tmp) / "demo_decode.json"
                decode_path.write_text(json.dumps(ladder_config(f"http://127.0.0.1:{port}/api"), indent=2), "utf-8")
                print(f"decode sweep: {decode}, {DEMO_DECODE_USERS} users decoding in lockstep (the KV read per token)")
                load = run_arguments(
                    args, decode, DEMO_DECODE_STAGE_S, locust_stats=args.locust_stats, users=DEMO_DECODE_USERS
                )
                results = execute(plan_from_args(load, decode_path))
        finally:
            sim.terminate()
            try:
                sim.wait(timeout=10)
            except subprocess.TimeoutExpired:
                sim.kill()
    return 0 if results is not None else 1


def _wait_ready(url: str, process: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise UsageError(f"the simulator exited with status {process.returncode}; run `attnload sim` to see why")
        try:
            with _DIRECT.open(url, timeout=1.0):
                return
        except OSError:
            time.sleep(0.2)
    raise UsageError(f"the simulator did not answer {url} within {timeout_s:g} s")
