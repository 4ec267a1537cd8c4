"""The load test of both demos (simulator and vLLM): the ``attnload run`` arguments they hand to the planner.

Both demos run headless with no warm-up over a shape of their own, so the namespace is built here
once rather than in each demo.
"""

from __future__ import annotations

import argparse


def run_arguments(args: argparse.Namespace, shape: str, stage_duration: str, **extra: object) -> argparse.Namespace:
    """The ``attnload run`` arguments of a demo's load test: headless, no warm-up, the demo's shape."""
    fields: dict[str, object] = {"users": None, **extra}
    return argparse.Namespace(
        spawn_rate=args.spawn_rate,
        duration=None,
        shape=shape,
        stage_duration=stage_duration,
        warmup="0",
        profile="",
        workers=args.workers,
        results=args.results,
        metrics_port=args.metrics_port,
        headless=True,
        web_port=8089,
        **fields,
    )
