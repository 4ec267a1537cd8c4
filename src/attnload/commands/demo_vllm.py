"""``attnload demo --engine vllm``: the GQA-vs-MLA demo against two real vLLM (CPU build) servers.

Writes the two tiny random-weight models (``attnload.engines.tiny_models``: llama-3-70b's KV row
against DeepSeek-V3's latent), starts one vLLM server per model, each on its own core with an
equal KV budget small enough that GQA fills its cache within the sweep while MLA, holding 3.6×
the tokens in the same bytes, does not; runs a short concurrency sweep of conversations
(``ignore_eos``, because random weights may emit EOS at once), prints the tables, writes JSON +
HTML, and stops the servers on exit, SIGINT and SIGTERM. Then a short context ladder on a second pair
of servers with room for longer prompts (one user per model; CPU prefill is slow, so the rungs stay
small). Sized for 2 cores (docs/vllm.md).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
from pathlib import Path

from attnload.commands.demoload import run_arguments
from attnload.engines import tiny_models
from attnload.engines.vllm import ServerSpec, VllmServer, complete, require_vllm_env, running
from attnload.errors import UsageError
from attnload.plan.launch import RunOutcome, execute_run, free_port, plan_from_args
from attnload.results.model import Results
from attnload.runner.stops import signal_exit_code

VLLM_SHAPE = "concurrency:2,8"
VLLM_STAGE_S = "60s"
KV_CACHE_BYTES = 8 * 2**20
"""Per server: 480 GQA tokens (15 blocks of 32 at 16 KiB a token; a 16th is vLLM's null block) against
1,808 MLA tokens (4.5 KiB a token): four GQA conversations overflow it from their first turn."""
MAX_MODEL_LEN = 448
USER_TOKENS = 64
MAX_TOKENS = 48
TURNS = 3
GQA_BLOCK = 32
"""The CPU prefix cache's default block is 128 tokens; 32 lets short conversation turns hit it."""


LADDER = "context:256,2k"
LADDER_STAGE_S = "30s"
LADDER_MAX_MODEL_LEN = 2304
"""The longest rung (2,048) plus the answer and the chat template's few tokens."""
LADDER_KV_BYTES = 48 * 2**20
"""One 2,304-token GQA sequence (16 KiB a token) with room to spare, and the same bytes for MLA."""
LADDER_MAX_TOKENS = 32


def ladder_config(gqa: ServerSpec, mla: ServerSpec, tokenizer: Path) -> dict[str, object]:
    """Single prompts sized exactly by the tiny models' tokenizer; the ladder sets their length per stage."""
    config = demo_config(gqa, mla, tokenizer)
    models = config["models"]
    assert isinstance(models, dict)
    for entry in models.values():
        entry["max_context"] = LADDER_MAX_MODEL_LEN
    config["workload"] = {"single": {"prompt_tokens": 256, "max_tokens": LADDER_MAX_TOKENS, "ignore_eos": True}}
    config["request"] = {"max_tokens": LADDER_MAX_TOKENS, "total_timeout_s": 300, "idle_timeout_s": 120}
    return config


def run_ladder(args: argparse.Namespace, root: Path, log_dir: Path) -> RunOutcome:
    """The context ladder on its own pair of servers (longer ``max_model_len``, more KV), one user per model."""
    gqa, mla = server_specs(root / "models", LADDER_KV_BYTES, LADDER_MAX_MODEL_LEN)
    path = root / "demo_vllm_ladder.json"
    path.write_text(json.dumps(ladder_config(gqa, mla, gqa.model_dir / "tokenizer.json"), indent=2), "utf-8")
    ladder = args.ladder or LADDER
    print(f"context ladder: {ladder}, one user per model, on a second pair of servers (starting)", flush=True)
    with running([gqa, mla], log_dir / "ladder") as servers:
        warm_up(servers)
        load = run_arguments(args, ladder, LADDER_STAGE_S, server_metrics_interval="1", users="2")
        return execute_run(plan_from_args(load, path))


def demo_config(gqa: ServerSpec, mla: ServerSpec, tokenizer: Path) -> dict[str, object]:
    """Conversations against both servers; the tiny models' own tokenizer sizes the prompts exactly."""

    def model(spec: ServerSpec, attention: str) -> dict[str, object]:
        return {
            "id": spec.served_name,
            "attention_type": attention,
            "max_context": MAX_MODEL_LEN,
            "base_url": f"{spec.base_url}/v1",
            "tokenizer": str(tokenizer),
        }

    return {
        "base_url": f"{gqa.base_url}/v1",
        "models": {"gqa_model": model(gqa, "GQA"), "mla_model": model(mla, "MLA")},
        "workload": {
            "chat": {
                "conversation": {"turns": TURNS, "user_tokens": USER_TOKENS, "think_time_s": 0.0},
                "max_tokens": MAX_TOKENS,
                "ignore_eos": True,
            }
        },
        "benchmark": {"repeat": 1, "max_tokens": MAX_TOKENS, "temperature": 0},
        "request": {"max_tokens": MAX_TOKENS, "total_timeout_s": 300, "idle_timeout_s": 120},
    }


def server_specs(
    model_root: Path, kv_cache_bytes: int, max_model_len: int = MAX_MODEL_LEN
) -> tuple[ServerSpec, ServerSpec]:
    """One server per model, each on its own core, the same KV bytes for both."""

    def spec(name: str, core: int, block_size: int | None = None) -> ServerSpec:
        return ServerSpec(
            model_root / name,
            name,
            free_port(),
            core=core,
            kv_cache_bytes=kv_cache_bytes,
            max_model_len=max_model_len,
            block_size=block_size,
            max_num_seqs=16,
        )

    return spec(tiny_models.GQA_NAME, 0, GQA_BLOCK), spec(tiny_models.MLA_NAME, 1)


def run(args: argparse.Namespace) -> int:
    require_vllm_env()  # before anything is written: one line saying how to install it
    if args.kv_cache_bytes < KV_CACHE_BYTES:
        raise UsageError(
            f"--kv-cache-bytes {args.kv_cache_bytes}: use at least {KV_CACHE_BYTES} (8 MiB): the GQA "
            f"server must hold one {MAX_MODEL_LEN}-token request plus vLLM's null block"
        )
    shape = args.shape or VLLM_SHAPE
    stage = args.stage_duration or VLLM_STAGE_S
    with tempfile.TemporaryDirectory(prefix="attnload-demo-vllm-") as tmp:
        root = Path(tmp)
        try:
            tiny_models.write_pair(root / "models")
        except ImportError as exc:
            raise UsageError(
                "the demo trains the tiny models' tokenizer with `tokenizers`: pip install 'attnload[tokenizer]'"
            ) from exc
        gqa, mla = server_specs(root / "models", args.kv_cache_bytes)
        config_path = root / "demo_vllm_config.json"
        config_path.write_text(
            json.dumps(demo_config(gqa, mla, gqa.model_dir / "tokenizer.json"), indent=2), encoding="utf-8"
        )
        log_dir = Path(args.results) / "vllm-logs"
        print(
            f"vLLM (CPU build): {gqa.served_name} (GQA, 16 KiB KV/token) on core 0, {mla.served_name} "
            f"(MLA, 4.5 KiB KV/token) on core 1, {args.kv_cache_bytes / 2**20:g} MiB of KV each; "
            f"starting (~1-4 min, logs in {log_dir})",
            flush=True,
        )
        with running([gqa, mla], log_dir) as servers:
            warm_up(servers)
            load = run_arguments(args, shape, stage, server_metrics_interval="1")
            outcome = execute_run(plan_from_args(load, config_path))
        if outcome.results is not None:
            print(kv_line(outcome.results))
        if outcome.results is not None and outcome.signal_received is None and (args.ladder or LADDER) != "off":
            outcome = run_ladder(args, root, log_dir)
    if outcome.signal_received is not None:
        return signal_exit_code(outcome.signal_received)
    return 0 if outcome.results is not None else 1


def warm_up(servers: list[VllmServer]) -> None:
    """One tiny request per server, at once: a CPU server's first forward pass pays one-time kernel
    setup (seconds), which would otherwise land in the first stage's TTFT."""
    threads = [threading.Thread(target=complete, args=(s.spec, "warm up", 2), daemon=True) for s in servers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)


def kv_line(results: Results) -> str:
    """The last stage's KV pressure per model, from vLLM's own gauges: the demo's point in one line."""
    parts = []
    for model in results.models:
        server = model.stages[-1].server if model.stages else None
        if server is None or server.source is None:
            parts.append(f"{model.model}: no server view")
            continue
        usage, waiting = server.kv_cache_usage.max, server.requests_waiting.max
        parts.append(
            f"{model.model} ({model.attention}) KV usage max "
            f"{'n/a' if usage is None else f'{usage:.0%}'}, waiting max {'n/a' if waiting is None else f'{waiting:g}'}"
        )
    return "last stage, vLLM's own gauges: " + "; ".join(parts)
