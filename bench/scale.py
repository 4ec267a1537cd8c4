"""Many concurrent streams across local workers: does the client side hold without errors?

Starts the multi-process reference server (``--server-procs`` processes on one
``SO_REUSEPORT`` port) and a real ``attnload run --workers K`` against it, open loop
(``rate:``) or closed loop (``--users``), and reports what the *server* saw: peak
concurrent streams, tokens/s, completions, cancellations, plus attnload's own results
(errors by class, dispatch-lag p99, saturation flags) and the file-descriptor limits.

The stream count is reached with long, slow streams (default: 16 tokens, 1 s apart) so
that the token rate stays within what a 2-core machine can serve and generate; the
question here is connection handling, not throughput.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from client_cost import PYTHON, free_port, http
from reference_server import raise_fd_limit

from attnload.measure.histogram import LogHistogram

HERE = Path(__file__).resolve().parent


def _truth(ports: list[int]) -> dict[str, int]:
    totals = {"received": 0, "completed": 0, "cancelled": 0, "completion_tokens": 0}
    for port in ports:
        stats = http(f"http://127.0.0.1:{port}/stats")
        for key in totals:
            totals[key] += int(stats[key])
    return totals


def _truth_latency(ports: list[int]) -> dict[str, Any]:
    """The server's own TTFT/ITL over the whole run, merged across its processes."""
    ttft, itl = LogHistogram(), LogHistogram()
    for port in ports:
        stats = http(f"http://127.0.0.1:{port}/stats")
        ttft.merge(LogHistogram.from_wire(stats["ttft"]))
        itl.merge(LogHistogram.from_wire(stats["itl"]))
    return {"ttft_s": ttft.summary(), "itl_s": itl.summary()}


def _sample(ports: list[int], stop: threading.Event, samples: list[tuple[float, dict[str, int]]]) -> None:
    while not stop.wait(1.0):
        try:
            samples.append((time.monotonic(), _truth(ports)))
        except OSError:
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=10000, help="target concurrent streams")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--server-procs", type=int, default=2)
    parser.add_argument("--ttft-ms", type=float, default=500.0)
    parser.add_argument("--itl-ms", type=float, default=1000.0)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--duration-s", type=float, default=45.0)
    parser.add_argument("--closed", action="store_true", help="closed loop (--users) instead of rate:")
    parser.add_argument("--json", default="")
    args = parser.parse_args(argv)
    soft = raise_fd_limit()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    request_s = args.ttft_ms / 1000 + (args.tokens - 1) * args.itl_ms / 1000
    rate = args.streams / request_s  # Little's law: concurrency = rate × time in system
    print(
        f"fd limit soft {soft} hard {hard}; ephemeral ports "
        f"{Path('/proc/sys/net/ipv4/ip_local_port_range').read_text().split()}; load {os.getloadavg()[0]:.2f}"
    )
    print(
        f"target {args.streams} streams: {'closed loop' if args.closed else f'rate {rate:.0f} req/s'}, "
        f"{request_s:.1f} s per request, {args.workers} workers, {args.server_procs} server processes"
    )
    port = free_port()
    ports = [free_port() for _ in range(args.server_procs)] if args.server_procs > 1 else [port]
    server = subprocess.Popen(
        [
            PYTHON,
            str(HERE / "reference_server.py"),
            "--port",
            str(port),
            "--procs",
            str(args.server_procs),
            "--truth-ports",
            ",".join(map(str, ports)),
            "--ttft-ms",
            str(args.ttft_ms),
            "--itl-ms",
            str(args.itl_ms),
            "--output-tokens",
            str(args.tokens),
        ],
        start_new_session=True,
    )
    samples: list[tuple[float, dict[str, int]]] = []
    stop = threading.Event()
    result: dict[str, Any] = {"streams_target": args.streams, "workers": args.workers, "fd_soft": soft, "fd_hard": hard}
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                _truth(ports)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        with tempfile.TemporaryDirectory(prefix="attnload-scale-") as tmp:
            config = Path(tmp) / "config.json"
            config.write_text(
                json.dumps(
                    {
                        "base_url": f"http://127.0.0.1:{port}",
                        "models": {"ref": {"id": "ref-model", "attention_type": "GQA"}},
                        "benchmark": {"max_tokens": args.tokens, "temperature": 0},
                    }
                )
            )
            per_worker = -(-args.streams // max(args.workers, 1))
            load = (
                [
                    "--users",
                    str(args.streams),
                    "--spawn-rate",
                    str(max(args.streams / 10, 1)),
                    "--duration",
                    f"{args.duration_s:g}s",
                ]
                if args.closed
                else [
                    "--shape",
                    f"rate:{rate:.2f}",
                    "--stage-duration",
                    f"{args.duration_s:g}s",
                    "--arrivals",
                    "constant",
                    "--max-in-flight",
                    str(int(per_worker * 1.5)),
                ]
            )
            command = [
                PYTHON,
                "-m",
                "attnload",
                "run",
                "-c",
                str(config),
                *load,
                "--workers",
                str(args.workers),
                "--results",
                str(Path(tmp) / "results"),
                "--metrics-port",
                "0",
            ]
            threading.Thread(target=_sample, args=(ports, stop, samples), daemon=True).start()
            started = time.monotonic()
            run = subprocess.run(
                command, capture_output=True, text=True, timeout=args.duration_s + 120, start_new_session=True
            )
            result["wall_s"] = time.monotonic() - started
            result["exit_code"] = run.returncode
            result["stderr_tail"] = run.stderr[-1500:]
            stop.set()
            result["server_truth"] = _truth_latency(ports)
            latest = Path(tmp) / "results" / "latest.txt"
            if latest.exists():
                data = json.loads((Path(tmp) / "results" / latest.read_text().strip()).read_text())
                model = data["models"][0]
                result.update(
                    requests=model["requests"],
                    errors=model["errors"],
                    client=data.get("client"),
                    ttft_s=model.get("ttft_s"),
                    itl_s=model.get("itl_s"),
                    output_tokens_per_s=model.get("output_tokens_per_s"),
                    dispatch_lag_s=[s.get("dispatch_lag_s") for s in model.get("stages", [])],
                    flags=[s.get("flags") for s in model.get("stages", [])],
                )
    finally:
        stop.set()
        server.terminate()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    if samples:
        in_flight = [s["received"] - s["completed"] - s["cancelled"] for _, s in samples]
        result["peak_concurrent_streams"] = max(in_flight)
        result["server_cancelled"] = samples[-1][1]["cancelled"]
        rates = [
            (b[1]["completion_tokens"] - a[1]["completion_tokens"]) / (b[0] - a[0])
            for a, b in zip(samples, samples[1:], strict=False)
            if b[0] > a[0]
        ]
        result["peak_tokens_per_s"] = max(rates) if rates else None
    print(json.dumps(result, indent=2, default=str))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, default=str))
    return 0 if result.get("exit_code") == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
