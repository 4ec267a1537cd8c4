"""The master's memory with ``--requests-out`` at many concurrent streams: does the per-request log stay bounded?

Starts the multi-process reference server and ``attnload run --workers K --users N`` (closed loop,
long slow streams as in ``scale.py``, so N streams are in flight at once), with ``--requests-out``,
and samples the Locust master's resident memory (VmRSS of the run's child that is not a worker)
twice a second. Reports the peak, the lines written against the requests of the results, and
the lines dropped. ``--without`` runs the same load without ``--requests-out`` for the ratio.

    python bench/requests_memory.py --streams 10000 --workers 4 --duration-s 40
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from client_cost import PYTHON, free_port, http
from reference_server import raise_fd_limit

HERE = Path(__file__).resolve().parent


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _master_pid(run_pid: int) -> int | None:
    for child in _children(run_pid):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"locust" in b" ".join(cmdline) and b"--worker" not in cmdline:
            return child
    return None


def _rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _sample(run: subprocess.Popen[str], peaks: dict[str, float], stop: threading.Event) -> None:
    while not stop.wait(0.5):
        master = _master_pid(run.pid)
        rss = _rss_mib(master) if master else None
        if rss is not None:
            peaks["master_rss_mib"] = max(peaks.get("master_rss_mib", 0.0), rss)


def measure(args: argparse.Namespace, with_requests: bool) -> dict[str, Any]:
    port = free_port()
    ports = [free_port() for _ in range(args.server_procs)]
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
    result: dict[str, Any] = {"requests_out": with_requests}
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                http(f"http://127.0.0.1:{ports[0]}/stats")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        with tempfile.TemporaryDirectory(prefix="attnload-reqmem-") as tmp:
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
            out = Path(tmp) / "requests.jsonl.gz"
            command = [
                PYTHON,
                "-m",
                "attnload",
                "run",
                "-c",
                str(config),
                "--users",
                str(args.streams),
                "--spawn-rate",
                str(max(args.streams / 10, 1)),
                "--duration",
                f"{args.duration_s:g}s",
                "--workers",
                str(args.workers),
                "--results",
                str(Path(tmp) / "results"),
                "--metrics-port",
                "0",
                *(["--requests-out", str(out)] if with_requests else []),
            ]
            peaks: dict[str, float] = {}
            stop = threading.Event()
            run = subprocess.Popen(
                command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True
            )
            threading.Thread(target=_sample, args=(run, peaks, stop), daemon=True).start()
            _, stderr = run.communicate(timeout=args.duration_s + 180)
            stop.set()
            result.update(peaks, exit_code=run.returncode, stderr_tail=stderr[-800:])
            latest = Path(tmp) / "results" / "latest.txt"
            if latest.exists():
                data = json.loads((Path(tmp) / "results" / latest.read_text().strip()).read_text())
                requests = data["models"][0]["requests"]
                result.update(
                    requests=requests,
                    requests_total=sum(requests.values()),
                    requests_out_summary=data.get("requests_out"),
                    client=data.get("client"),
                )
            if with_requests and out.exists():
                with gzip.open(out, "rt") as handle:
                    result["lines"] = sum(1 for _ in handle)
                result["file_mib"] = out.stat().st_size / 2**20
    finally:
        server.terminate()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=10000, help="closed-loop users: concurrent streams")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--server-procs", type=int, default=2)
    parser.add_argument("--ttft-ms", type=float, default=500.0)
    parser.add_argument("--itl-ms", type=float, default=1000.0)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--duration-s", type=float, default=40.0)
    parser.add_argument("--without", action="store_true", help="also run without --requests-out (the ratio)")
    parser.add_argument("--limit-mib", type=float, default=300.0)
    args = parser.parse_args(argv)
    raise_fd_limit()
    runs = [measure(args, True)] + ([measure(args, False)] if args.without else [])
    print(json.dumps(runs, indent=2, default=str))
    first = runs[0]
    ok = (
        first.get("exit_code") == 0
        and first.get("master_rss_mib", 1e9) < args.limit_mib
        and first.get("lines") == first.get("requests_total")
    )
    print(
        f"master peak RSS {first.get('master_rss_mib', float('nan')):.0f} MiB with --requests-out "
        f"(limit {args.limit_mib:g}); lines {first.get('lines')} = requests {first.get('requests_total')}"
        + (f"; without: {runs[1].get('master_rss_mib', float('nan')):.0f} MiB" if args.without else "")
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
