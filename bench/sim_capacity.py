"""Simulator capacity: does one core of ``attnload sim`` hold N streams on schedule?

The simulator is pinned to one core, attnload's client (``client_proc.py``) to the other;
after a warm-up the simulator's truth is read, and read again after a window. Two modes:

- ``sim`` (``--mode fixed --itl-ms 10``): the schedule is 10 ms per token; the pass mark
  is an *emitted* ITL p99 (server-side, ``GET /stats``) within 2 ms
  of it at 256 streams, on at most one core.
- ``sim-roofline`` (the default roofline engine, llama-3-70b on 8×H200, 256 streams = one
  full batch, ~10 ms decode steps): the schedule is the engine's own per-token ITL
  (``itl_schedule_s`` in ``/stats``); emitted p99 must stay within 2 ms of the schedule's
  p99. Its CPU per token is printed as a ratio to fixed mode at the same stream count.

``--before-src DIR`` also runs the simulator imported from another source tree (an A/B in
one invocation, e.g. a checkout of the previous commit's ``src``); ``--reference`` also
runs ``reference_server.py`` (a raw asyncio ``Protocol`` server, the floor for one
process). Targets alternate per stream count, so a noisy neighbour hits all of them; on a
shared machine compare rows of one run. ``--profile FILE`` runs this tree's fixed-mode
simulator under cProfile.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from client_cost import PYTHON, cores, cpu_seconds, free_port, http, pinned

HERE = Path(__file__).resolve().parent
MODEL = "llama-3-70b"


class Target:
    """One server under test as a child process (always stopped)."""

    def __init__(
        self,
        name: str,
        core: int | None,
        itl_ms: float,
        *,
        src: str | None = None,
        profile: str | None = None,
        reference: bool = False,
        roofline: bool = False,
    ) -> None:
        self.name = name
        self.reference = reference
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        timings = ["--ttft-ms", "50", "--itl-ms", str(itl_ms), "--output-tokens", "128"]
        if reference:
            args = [PYTHON, str(HERE / "reference_server.py"), "--port", str(port), *timings]
        else:
            mode = ["--mode", "roofline"] if roofline else ["--mode", "fixed", *timings]
            args = [
                PYTHON,
                *(["-m", "cProfile", "-o", profile] if profile else []),
                "-m",
                "attnload",
                "sim",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--models",
                MODEL,
                *mode,
            ]
        env = dict(os.environ)
        if src:
            env["PYTHONPATH"] = os.pathsep.join([str(Path(src).resolve()), *filter(None, [env.get("PYTHONPATH")])])
        self.process = subprocess.Popen(
            pinned(core, args), start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                http(self.url + "/health", timeout=1)
                return
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"{name} did not start") from None
                time.sleep(0.1)

    def truth(self) -> dict[str, Any]:
        stats = http(self.url + "/stats")
        return dict(stats if self.reference else stats["models"][MODEL])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()  # SIGTERM: the simulator shuts down cleanly (cProfile writes its file)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def measure(target: Target, streams: int, client_core: int | None, window_s: float, itl_s: float) -> dict[str, float]:
    """Sim CPU (share of one core), emitted tokens/s, emitted ITL and the schedule's ITL (fixed: ``itl_s``)."""
    out = f"/tmp/sim-cap-{os.getpid()}.json"
    client = subprocess.Popen(
        pinned(
            client_core,
            [
                PYTHON,
                str(HERE / "client_proc.py"),
                "--kind",
                "attnload",
                "--url",
                target.url,
                "--model",
                MODEL,
                "--users",
                str(streams),
                "--run-s",
                str(window_s + 3),
                "--out",
                out,
            ],
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        assert client.stdout is not None
        while "SPAWNED" not in client.stdout.readline():
            if client.poll() is not None:
                raise RuntimeError("client exited early")
        time.sleep(2.0)
        before = target.truth()
        cpu0, t0, load0 = cpu_seconds(target.process.pid), time.perf_counter(), os.getloadavg()[0]
        time.sleep(window_s)
        after = target.truth()
        elapsed = time.perf_counter() - t0
        cpu = (cpu_seconds(target.process.pid) - cpu0) / elapsed
        client.wait(60)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
        Path(out).unlink(missing_ok=True)
    itl = after["itl_s"]  # since start: cumulative, dominated by the window
    schedule = after.get("itl_schedule_s") or {"p50": itl_s, "p99": itl_s}
    tokens_s = (after["completion_tokens"] - before["completion_tokens"]) / elapsed
    return {
        "cpu": cpu,
        "tokens_s": tokens_s,
        "us_per_token": cpu / tokens_s * 1e6 if tokens_s else 0.0,
        "p50_ms": itl["p50"] * 1000,
        "p99_ms": itl["p99"] * 1000,
        "schedule_p50_ms": schedule["p50"] * 1000,
        "schedule_p99_ms": schedule["p99"] * 1000,
        "load": (load0 + os.getloadavg()[0]) / 2,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default="64,256")
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--window-s", type=float, default=6.0)
    parser.add_argument("--before-src", metavar="DIR", help="also run the simulator imported from DIR (A/B)")
    parser.add_argument("--reference", action="store_true", help="also run bench/reference_server.py")
    parser.add_argument("--profile", metavar="FILE", help="run this tree's simulator under cProfile, stats to FILE")
    args = parser.parse_args(argv)
    client_core, sim_core = cores()
    specs: list[dict[str, Any]] = [{"name": "sim", "profile": args.profile}]
    if args.before_src:
        specs.append({"name": "sim-before", "src": args.before_src})
    if args.reference:
        specs.append({"name": "reference", "reference": True})
    specs.append({"name": "sim-roofline", "roofline": True})
    ok = True
    print(
        f"{'server':<12} {'streams':>7} {'CPU':>5} {'tok/s':>7} {'µs/tok':>7} {'vs fixed':>8} {'ITL p50':>8} "
        f"{'p99':>6} {'schedule p50':>12} {'p99':>6} {'p99 excess':>10} {'load':>5}"
    )
    for streams in [int(s) for s in args.streams.split(",")]:
        fixed_us: float | None = None
        for spec in specs:
            # A fresh server per row: the ITL histogram is cumulative since the server started.
            target = Target(
                spec["name"],
                sim_core,
                args.itl_ms,
                src=spec.get("src"),
                profile=spec.get("profile"),
                reference=spec.get("reference", False),
                roofline=spec.get("roofline", False),
            )
            try:
                row = measure(target, streams, client_core, args.window_s, args.itl_ms / 1000)
            finally:
                target.stop()
            excess = row["p99_ms"] - row["schedule_p99_ms"]
            if spec["name"] in ("sim", "sim-roofline"):
                ok &= streams != 256 or excess <= 2.0
            if spec["name"] == "sim":
                fixed_us = row["us_per_token"]
            ratio = f"{row['us_per_token'] / fixed_us:.2f}x" if fixed_us else "—"
            print(
                f"{spec['name']:<12} {streams:>7} {row['cpu']:>5.0%} {row['tokens_s']:>7.0f} "
                f"{row['us_per_token']:>7.1f} {ratio:>8} {row['p50_ms']:>5.1f} ms {row['p99_ms']:>6.1f} "
                f"{row['schedule_p50_ms']:>9.1f} ms {row['schedule_p99_ms']:>6.1f} {excess:>+10.1f} "
                f"{row['load']:>5.2f}",
                flush=True,
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
