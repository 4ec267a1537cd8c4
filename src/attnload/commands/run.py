"""``attnload run``: validate everything up front, then start real Locust processes."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from attnload.plan.launch import execute_run, plan_from_args
from attnload.plan.options import add_load_arguments
from attnload.results.exitcodes import make_policy, run_status
from attnload.results.outcome import exit_status


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-c", "--config", required=True, help="benchmark_config.json or taotoken_config.toml")
    parser.add_argument(
        "--seed-script",
        action="store_true",
        help="instead of a load test, the seed's section-4 latency script: per model, each "
        "test prompt, medians over benchmark.repeat (one request at a time)",
    )
    add_load_arguments(parser)


def run(args: argparse.Namespace) -> int:
    if args.seed_script:
        from attnload.commands.seedscript import run_seed_script

        return run_seed_script(Path(args.config), profiles=args.profile, results_dir=Path(args.results))
    if args.workers == -1:  # Locust's `--processes -1`: one per CPU core
        args.workers = os.cpu_count() or 1
    plan = plan_from_args(args, Path(args.config))
    policy = make_policy(args.exit_code_on_error, args.fail_on, plan.config.slo)
    outcome = execute_run(plan)
    code, message = exit_status(outcome.results, outcome.signal_received, outcome.signalled)
    if message is not None:
        print(f"attnload run: {'error: ' if outcome.signal_received is None else ''}{message}", file=sys.stderr)
    if code != 0 or outcome.results is None:
        return code
    code, reasons = run_status(outcome.results, policy)  # the request-failure policy: --exit-code-on-error, --fail-on
    for reason in reasons:
        print(f"attnload run: {reason}", file=sys.stderr)
    return code
