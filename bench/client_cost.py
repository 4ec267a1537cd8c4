"""Client cost, side by side: attnload vs a naive FastHttpUser vs the openai SDK, in one run.

A load generator that saturates measures itself, not the server, so each client is
measured against the same reference server in the same invocation, and attnload is
reported as a *ratio* to each baseline (the machine is shared and noisy; ratios from one
run survive that, absolute numbers do not).

Method, per (stream count, client): the reference server (``reference_server.py``) runs
pinned to one core, the client process (``client_proc.py``) to another. After every user
is running and a warm-up, a window opens: client CPU is the change in the client
process's ``utime + stime`` from ``/proc/PID/stat`` (so it includes Locust, metrics
recording and, for attnload, Prometheus ``/metrics`` scraped once a second), and tokens
are the change in the server's emitted-token count (truth, not the client's claim).
The TTFT p50 error is the exact median of the TTFTs whose first token came inside the window,
client minus server (both stamp ``perf_counter``, one CLOCK_MONOTONIC for every process): the
histograms' 2 % buckets are 1 ms wide at 50 ms, the size of the goal, and the warm-up's first
requests carry a connect. The ITL p99 error is client histogram minus server histogram over the
whole run, both in attnload's ``LogHistogram`` buckets.

Rows: ``attnload`` (the compiled per-chunk path), ``attnload-py`` (the same client with
``ATTNLOAD_PURE_PYTHON=1``), ``naive`` and, with ``--kinds``, ``openai``. The default ladder,
128/256/384/512/768 streams, ends with the honest-stream capacity per core of each client: the
largest stream count at which it is not flagged saturated and its TTFT p50 is within
``HONEST_TTFT_MS`` of the server's.

``--quick`` (``make bench-quick``) fits in about two minutes; ``--json`` keeps the rows.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from attnload.measure.histogram import LogHistogram

HERE = Path(__file__).resolve().parent
PYTHON = sys.executable
KINDS = ("attnload", "attnload-py", "naive")
OPTIONAL_KINDS = ("openai",)
PURE = "attnload-py"
"""attnload with ``ATTNLOAD_PURE_PYTHON=1``: the fallback when the C extension is not built."""
LADDER = (128, 256, 384, 512, 768)
HONEST_TTFT_MS = 2.0
"""A client is honest at a stream count when not saturated and its TTFT p50 is this close to the server's."""
BEFORE = "attnload-before"
"""The kind name of attnload loaded from ``--before-src`` instead of this tree."""
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass
class Row:
    """One (client, streams) measurement."""

    kind: str
    streams: int
    cpu_s_per_1k_tokens: float | None
    client_cpu_s: float
    window_tokens: int
    client_cpu_ratio: float
    server_cpu_ratio: float
    tokens_per_s: float
    ttft_p50_ms: float | None
    truth_ttft_p50_ms: float | None
    itl_p99_ms: float | None
    truth_itl_p99_ms: float | None
    ok: int
    failed: int
    errors: dict[str, int]
    saturated: bool | None
    saturation_reasons: list[str]
    impl: str = ""
    """attnload's per-chunk path as the client process reported it: ``compiled`` or ``python``."""
    loop_lag_p50_ms: float | None = None
    loop_lag_p99_ms: float | None = None
    """attnload: how late its event loop ran a 50 ms timer over the run (the client's own health)."""

    @property
    def ttft_err_ms(self) -> float | None:
        if self.ttft_p50_ms is None or self.truth_ttft_p50_ms is None:
            return None
        return self.ttft_p50_ms - self.truth_ttft_p50_ms

    @property
    def itl_err_ms(self) -> float | None:
        if self.itl_p99_ms is None or self.truth_itl_p99_ms is None:
            return None
        return self.itl_p99_ms - self.truth_itl_p99_ms


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http(url: str, data: bytes | None = None, timeout: float = 10.0) -> Any:
    with DIRECT.open(urllib.request.Request(url, data=data), timeout=timeout) as response:
        return json.loads(response.read())


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process, from /proc (what the kernel charged it)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def pinned(core: int | None, args: list[str]) -> list[str]:
    """Prefix ``taskset`` when there is a core to pin to and the tool exists."""
    if core is None or shutil.which("taskset") is None:
        return args
    return ["taskset", "-c", str(core), *args]


def cores() -> tuple[int | None, int | None]:
    """(client core, server core): the two lowest CPUs we may run on, or no pinning on one CPU."""
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        return None, None
    return allowed[0], allowed[1]


class ReferenceServer:
    """The reference server as a child process, always stopped."""

    def __init__(self, core: int | None, ttft_ms: float, itl_ms: float, tokens: int) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            pinned(
                core,
                [
                    PYTHON,
                    str(HERE / "reference_server.py"),
                    "--port",
                    str(self.port),
                    "--ttft-ms",
                    str(ttft_ms),
                    "--itl-ms",
                    str(itl_ms),
                    "--output-tokens",
                    str(tokens),
                ],
            ),
            start_new_session=True,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                http(self.url + "/health", timeout=1)
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("reference server did not start")

    def stats(self) -> dict[str, Any]:
        return dict(http(self.url + "/stats"))

    def reset(self) -> None:
        http(self.url + "/reset", data=b"")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _scrape_loop(port: int, stop: threading.Event) -> None:
    """Scrape attnload's /metrics once a second, like Prometheus would (its cost is the client's)."""
    while not stop.wait(1.0):
        try:
            with DIRECT.open(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                response.read()
        except OSError:
            pass


def measure(
    kind: str,
    streams: int,
    server: ReferenceServer,
    core: int | None,
    warmup_s: float,
    window_s: float,
    tokens: int,
    workdir: Path,
    before_src: str = "",
) -> Row:
    """Run one client at ``streams`` concurrent streams and measure it over a steady window."""
    server.reset()
    out = workdir / f"{kind}-{streams}.json"
    metrics_port = free_port() if kind.startswith("attnload") else 0
    run_s = warmup_s + window_s + 0.5
    env = dict(os.environ)
    env.pop("ATTNLOAD_PURE_PYTHON", None)
    if kind == PURE:
        env["ATTNLOAD_PURE_PYTHON"] = "1"
    if kind == BEFORE:  # attnload from another source tree (e.g. `git archive HEAD src`): same run, A/B
        env["PYTHONPATH"] = before_src
    process = subprocess.Popen(
        pinned(
            core,
            [
                PYTHON,
                str(HERE / "client_proc.py"),
                "--kind",
                "attnload" if kind in (BEFORE, PURE) else kind,
                "--url",
                server.url,
                "--users",
                str(streams),
                "--max-tokens",
                str(tokens),
                "--run-s",
                str(run_s),
                "--metrics-port",
                str(metrics_port),
                "--out",
                str(out),
            ],
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=env,
    )
    stop = threading.Event()
    try:
        assert process.stdout is not None
        line = ""
        while "SPAWNED" not in line:
            line = process.stdout.readline()
            if not line and process.poll() is not None:
                raise RuntimeError(f"{kind} client exited: {process.stderr.read()[-2000:] if process.stderr else ''}")
        if metrics_port:
            threading.Thread(target=_scrape_loop, args=(metrics_port, stop), daemon=True).start()
        time.sleep(warmup_s)
        server_cpu0 = cpu_seconds(server.process.pid)
        cpu0, tokens0, t0 = cpu_seconds(process.pid), server.stats()["completion_tokens"], time.perf_counter()
        time.sleep(window_s)
        cpu1, tokens1, t1 = cpu_seconds(process.pid), server.stats()["completion_tokens"], time.perf_counter()
        server_cpu = cpu_seconds(server.process.pid) - server_cpu0
        stop.set()
        process.wait(timeout=60 + streams / 20)
    finally:
        stop.set()
        if process.poll() is None:
            process.kill()
            process.wait()
    client = json.loads(out.read_text())
    truth = server.stats()
    measured_itl = LogHistogram.from_wire(client["itl"])
    truth_itl = LogHistogram.from_wire(truth["itl"])
    emitted = tokens1 - tokens0
    wall = t1 - t0
    return Row(
        kind=kind,
        streams=streams,
        cpu_s_per_1k_tokens=(cpu1 - cpu0) / (emitted / 1000) if emitted else None,
        client_cpu_s=cpu1 - cpu0,
        window_tokens=emitted,
        client_cpu_ratio=(cpu1 - cpu0) / wall,
        server_cpu_ratio=server_cpu / wall,
        tokens_per_s=emitted / wall,
        ttft_p50_ms=window_median_ms(client["first_tokens"], t0, t1),
        truth_ttft_p50_ms=window_median_ms(truth["first_tokens"], t0, t1),
        itl_p99_ms=_ms(measured_itl.quantile(0.99)),
        truth_itl_p99_ms=_ms(truth_itl.quantile(0.99)),
        ok=int(client["ok"]),
        failed=int(client["failed"]),
        errors=dict(client["errors"]),
        saturated=client["saturated"] if client["saturated"] is not None else (cpu1 - cpu0) / wall > 0.9,
        saturation_reasons=list(client["saturation_reasons"]),
        impl=str(client.get("impl", "")),
        loop_lag_p50_ms=client.get("loop_lag_p50_ms"),
        loop_lag_p99_ms=client.get("loop_lag_p99_ms"),
    )


def window_median_ms(first_tokens: list[list[float]], t0: float, t1: float) -> float | None:
    """Median TTFT (ms) of the ``(first token at, TTFT)`` pairs whose first token came in [t0, t1)."""
    values = [ttft for at, ttft in first_tokens if t0 <= at < t1]
    return statistics.median(values) * 1000 if values else None


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1000.0


def _fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def table(rows: list[Row]) -> str:
    """The comparison table, with attnload's CPU ratio to each baseline at the same stream count."""
    head = (
        f"{'client':<15} {'streams':>7} {'CPU-s/1k tok':>12} {'client CPU':>10} {'server CPU':>10} {'tok/s':>8} "
        f"{'TTFT p50 (truth)':>18} {'err ms':>7} {'ITL p99 (truth)':>17} {'err ms':>7} {'ok':>6} "
        f"{'failed':>6} {'saturated':>9}"
    )
    lines = [head, "-" * len(head)]
    for row in rows:
        ttft = f"{_fmt(row.ttft_p50_ms, '.1f')} ({_fmt(row.truth_ttft_p50_ms, '.1f')})"
        itl = f"{_fmt(row.itl_p99_ms, '.1f')} ({_fmt(row.truth_itl_p99_ms, '.1f')})"
        lines.append(
            f"{row.kind:<15} {row.streams:>7} {_fmt(row.cpu_s_per_1k_tokens, '.4f'):>12} "
            f"{row.client_cpu_ratio:>10.0%} {row.server_cpu_ratio:>10.0%} {row.tokens_per_s:>8.0f} {ttft:>18} "
            f"{_fmt(row.ttft_err_ms, '+.2f'):>7} {itl:>17} {_fmt(row.itl_err_ms, '+.2f'):>7} "
            f"{row.ok:>6} {row.failed:>6} {'yes' if row.saturated else 'no':>9}"
        )
    lines.append("")
    for streams in sorted({r.streams for r in rows}):
        per_token = _cpu_per_token(rows, streams)
        ours = per_token.pop("attnload", None)
        if ours is None:
            continue
        ratios = [f"{kind} {ours / theirs:.2f}x" for kind, theirs in per_token.items() if theirs]
        if ratios:
            lines.append(f"attnload CPU per token at {streams} streams, as a fraction of: " + ", ".join(ratios))
        reasons = {
            reason for r in rows if r.kind == "attnload" and r.streams == streams for reason in r.saturation_reasons
        }
        if reasons:
            lines.append(f"attnload at {streams} streams flagged itself saturated: " + "; ".join(sorted(reasons)))
        lags = [r for r in rows if r.kind == "attnload" and r.streams == streams and r.loop_lag_p50_ms is not None]
        if lags:
            shown = ", ".join(f"p50 {r.loop_lag_p50_ms:.1f} ms p99 {r.loop_lag_p99_ms or 0.0:.1f} ms" for r in lags)
            lines.append(f"attnload event-loop lag at {streams} streams: {shown}")
    capacity = honest_capacity(rows)
    if capacity:
        lines.append("")
        lines.append(
            f"honest-stream capacity per core (not saturated, TTFT p50 within {HONEST_TTFT_MS:g} ms of the "
            f"server's), of the counts measured:"
        )
        for kind, count in capacity.items():
            lines.append(f"  {kind:<15} {count if count else f'none (< {min(r.streams for r in rows)})'}")
        ours, naive = capacity.get("attnload"), capacity.get("naive")
        if ours and naive:
            lines.append(f"  attnload / naive: {ours / naive:.1f}x")
        elif ours and naive == 0:
            lowest = min(r.streams for r in rows)
            lines.append(
                f"  attnload / naive: more than {ours / lowest:.1f}x (naive was honest at none of the counts; "
                f"--streams with counts below {lowest} puts a number on it)"
            )
    return "\n".join(lines)


def honest(row: Row) -> bool:
    """Not saturated and TTFT p50 within ``HONEST_TTFT_MS`` of the server's truth, with nothing failed."""
    err = row.ttft_err_ms
    return not row.saturated and err is not None and abs(err) <= HONEST_TTFT_MS and row.failed == 0


def honest_capacity(rows: list[Row]) -> dict[str, int]:
    """Per client: the largest stream count whose every run was honest (0: none was)."""
    out: dict[str, int] = {}
    for kind in dict.fromkeys(r.kind for r in rows):
        counts = sorted({r.streams for r in rows if r.kind == kind})
        good = [n for n in counts if all(honest(r) for r in rows if r.kind == kind and r.streams == n)]
        out[kind] = max(good) if good else 0
    return out


def _cpu_per_token(rows: list[Row], streams: int) -> dict[str, float]:
    """Summed client CPU over summed tokens per client (repeats pooled, so one noisy window weighs less)."""
    totals: dict[str, list[float]] = {}
    for row in rows:
        if row.streams == streams and row.window_tokens:
            total = totals.setdefault(row.kind, [0.0, 0.0])
            total[0] += row.client_cpu_s
            total[1] += row.window_tokens
    return {kind: cpu / tokens for kind, (cpu, tokens) in totals.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="128 and 256 streams, one short run per client (about 2 min)"
    )
    parser.add_argument(
        "--streams", default="", help=f"comma-separated stream counts (default the ladder {','.join(map(str, LADDER))})"
    )
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"of {', '.join(KINDS + OPTIONAL_KINDS)}")
    parser.add_argument("--warmup-s", type=float, default=None)
    parser.add_argument("--window-s", type=float, default=None)
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument(
        "--repeat", type=int, default=None, help="runs per client and stream count, interleaved (default 2; --quick 1)"
    )
    parser.add_argument("--json", default="", help="also write the rows here")
    parser.add_argument(
        "--before-src", default="", help="also run attnload imported from this src/ directory (kind attnload-before)"
    )
    args = parser.parse_args(argv)
    streams = [int(s) for s in (args.streams or ("128,256" if args.quick else ",".join(map(str, LADDER)))).split(",")]
    repeat = args.repeat if args.repeat is not None else (1 if args.quick else 2)
    kinds = [k for k in args.kinds.split(",") if k]
    if args.before_src:
        kinds.insert(1, BEFORE)
    warmup_s = args.warmup_s if args.warmup_s is not None else (2.0 if args.quick else 3.0)
    window_s = args.window_s if args.window_s is not None else (5.0 if args.quick else 10.0)
    client_core, server_core = cores()
    load = os.getloadavg()
    print(
        f"client core {client_core}, server core {server_core}; {os.cpu_count()} CPUs; "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at start",
        flush=True,
    )
    print(
        f"reference server: TTFT {args.ttft_ms:g} ms, ITL {args.itl_ms:g} ms, {args.tokens} tokens per request; "
        f"warm-up {warmup_s:g} s, window {window_s:g} s",
        flush=True,
    )
    rows: list[Row] = []
    server = ReferenceServer(server_core, args.ttft_ms, args.itl_ms, args.tokens)
    try:
        with tempfile.TemporaryDirectory(prefix="attnload-bench-") as tmp:
            for count in streams:
                for kind in [k for _ in range(repeat) for k in kinds]:  # repeats interleaved
                    row = measure(
                        kind, count, server, client_core, warmup_s, window_s, args.tokens, Path(tmp), args.before_src
                    )
                    rows.append(row)
                    print(
                        f"  {kind:<15} {count:>5} streams: {_fmt(row.cpu_s_per_1k_tokens, '.4f')} CPU-s/1k tok, "
                        f"{row.tokens_per_s:.0f} tok/s",
                        flush=True,
                    )
    finally:
        server.stop()
    print()
    print(table(rows))
    load = os.getloadavg()
    print(f"\nload average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at end")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
