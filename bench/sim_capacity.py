"""Simulator capacity: does one core of ``attnload sim --mode fixed`` hold N streams at 10 ms ITL?

The simulator is pinned to one core, attnload's client (``client_proc.py``) to the other;
after a warm-up the simulator's truth is reset and read again after a window. The pass
mark (DESIGN.md): at 256 streams the *emitted* ITL p99 (server-side, ``GET /stats``) is
within 2 ms of the configured ITL, and the simulator used at most one core.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from client_cost import PYTHON, cores, cpu_seconds, free_port, http, pinned

HERE = Path(__file__).resolve().parent
MODEL = "llama-3-70b"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default="64,256")
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--window-s", type=float, default=6.0)
    parser.add_argument("--profile", metavar="FILE", help="run the simulator under cProfile, stats to FILE")
    args = parser.parse_args(argv)
    client_core, sim_core = cores()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    profile = ["-m", "cProfile", "-o", args.profile] if args.profile else []
    sim = subprocess.Popen(pinned(sim_core, [PYTHON, *profile, "-m", "attnload", "sim", "--host", "127.0.0.1", "--port",
                                             str(port), "--models", MODEL, "--mode", "fixed", "--ttft-ms", "50",
                                             "--itl-ms", str(args.itl_ms), "--output-tokens", "128"]),
                           start_new_session=True, stdout=subprocess.DEVNULL)
    ok = True
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                http(url + "/health", timeout=1)
                break
            except OSError:
                if time.monotonic() > deadline or sim.poll() is not None:
                    raise RuntimeError("simulator did not start") from None
                time.sleep(0.1)
        print(f"{'streams':>7} {'sim CPU':>8} {'tok/s':>7} {'emitted ITL p50':>16} {'p99':>7} {'p99 - ITL':>10}")
        for streams in [int(s) for s in args.streams.split(",")]:
            client = subprocess.Popen(pinned(client_core, [
                PYTHON, str(HERE / "client_proc.py"), "--kind", "attnload", "--url", url, "--model", MODEL,
                "--users", str(streams), "--run-s", str(args.window_s + 3), "--out", f"/tmp/sim-cap-{port}.json"]),
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
            try:
                assert client.stdout is not None
                while "SPAWNED" not in client.stdout.readline():
                    if client.poll() is not None:
                        raise RuntimeError("client exited early")
                time.sleep(2.0)
                before = http(url + "/stats")["models"][MODEL]
                cpu0, t0 = cpu_seconds(sim.pid), time.perf_counter()
                time.sleep(args.window_s)
                after = http(url + "/stats")["models"][MODEL]
                cpu = (cpu_seconds(sim.pid) - cpu0) / (time.perf_counter() - t0)
                client.wait(60)
            finally:
                if client.poll() is None:
                    client.kill()
                    client.wait()
            tokens = (after["completion_tokens"] - before["completion_tokens"]) / args.window_s
            itl = after["itl_s"]  # since start: cumulative, dominated by the window
            p99_ms = itl["p99"] * 1000
            excess = p99_ms - args.itl_ms
            ok &= streams != 256 or excess <= 2.0
            print(f"{streams:>7} {cpu:>8.0%} {tokens:>7.0f} {itl['p50'] * 1000:>13.1f} ms {p99_ms:>7.1f} "
                  f"{excess:>+9.1f}")
    finally:
        sim.terminate()
        try:
            sim.wait(10)
        except subprocess.TimeoutExpired:
            sim.kill()
            sim.wait()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
