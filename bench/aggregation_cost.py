"""Master aggregation cost: merging histogram deltas from N workers every report interval.

Each worker ships ``Recorder.take_delta()`` inside Locust's ``report_to_master`` message
every ``WORKER_REPORT_INTERVAL`` (3 s); the master unpacks the message (msgpack, as
Locust's RPC does) and folds it in with ``Recorder.merge_delta``. This builds realistic
deltas — a worker at ``--streams`` streams for one interval: every request's TTFT, ITL per
token, TPOT, e2e and dispatch lag, over ``--models`` models and two profiles — and
measures the master's CPU for one interval's worth of messages, as a share of one core.
It also times one Prometheus scrape of the merged series (``FleetCollector``).
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from locust.rpc.protocol import Message
from locust.runners import WORKER_REPORT_INTERVAL
from prometheus_client import CollectorRegistry, generate_latest

from attnload.exporter.exposition import FleetCollector, FleetState
from attnload.measure.recorder import Recorder, RequestRecord


def worker_delta(streams: int, models: int, tokens: int, rng: random.Random, worker: int) -> bytes:
    """One worker's serialized report for one interval (what crosses the wire)."""
    recorder = Recorder()
    request_s = 0.05 + (tokens - 1) * 0.01
    requests = int(streams * WORKER_REPORT_INTERVAL / request_s)
    for i in range(requests):
        gaps = tuple((rng.lognormvariate(-4.6, 0.15), 1) for _ in range(tokens - 1))
        recorder.add(
            RequestRecord(
                model_key=f"model{i % models}",
                profile=("short", "long")[i % 2],
                stage=1,
                outcome="ok",
                error=None,
                ttft_s=rng.lognormvariate(-3.0, 0.2),
                itl_samples=gaps,
                e2e_s=request_s * rng.uniform(0.95, 1.1),
                prompt_tokens=40,
                completion_tokens=tokens,
                cached_prompt_tokens=0,
                tokens_estimated=False,
                dispatch_lag_s=rng.expovariate(1000),
            )
        )
    return Message("stats", {"attnload": {"delta": recorder.take_delta(), "users": {}}}, f"worker{worker}").serialize()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--streams", type=int, default=256, help="streams per worker")
    parser.add_argument("--models", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--intervals", type=int, default=20, help="report intervals to merge")
    args = parser.parse_args(argv)
    rng = random.Random(7)
    messages = [worker_delta(args.streams, args.models, args.tokens, rng, w) for w in range(args.workers)]
    master = Recorder()
    started = time.process_time()
    for _ in range(args.intervals):
        for raw in messages:
            message = Message.unserialize(raw)
            master.merge_delta(message.data["attnload"]["delta"])
    per_interval_s = (time.process_time() - started) / args.intervals
    state = FleetState(model_labels={f"model{i}": (f"model{i}", "GQA") for i in range(args.models)})
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FleetCollector(master, state))
    started = time.process_time()
    body = generate_latest(registry)
    scrape_s = time.process_time() - started
    sizes = sorted(len(m) for m in messages)
    print(
        f"{args.workers} workers × {args.streams} streams, {args.models} models × 2 profiles, "
        f"report every {WORKER_REPORT_INTERVAL:g} s; message size median {sizes[len(sizes) // 2]} bytes"
    )
    print(
        f"master merge CPU per interval: {per_interval_s * 1000:.1f} ms = "
        f"{per_interval_s / WORKER_REPORT_INTERVAL:.2%} of one core (goal < 5%)"
    )
    print(f"one Prometheus scrape of the merged series: {scrape_s * 1000:.1f} ms CPU, {len(body)} bytes")
    return 0 if per_interval_s / WORKER_REPORT_INTERVAL < 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())
