"""One client under test, in its own process: N Locust users streaming from the reference server.

``client_cost.py`` starts this once per (client kind, stream count), pinned to one core,
and reads its CPU from ``/proc/PID/stat``. Three kinds share the request body and the
way timings are stamped, so only the client stack differs:

- ``attnload``: ``attnload.users.ChatUser`` with the real ``Runtime`` (workload, recorder,
  saturation check) and Prometheus ``/metrics`` served from this process; the compiled
  per-chunk path unless ``ATTNLOAD_PURE_PYTHON=1`` (``client_cost.py``'s ``attnload-py`` row).
- ``naive``: Locust ``FastHttpUser`` with a hand SSE parser (``readline(b"\\n")`` +
  ``json.loads`` per line), the usual first attempt.
- ``openai``: a Locust user driving the openai SDK's streaming client (one shared
  ``OpenAI`` client: building one per user costs ~47 ms CPU each, docs/design.md, pitfalls).

The process prints ``SPAWNED`` when every user runs, keeps going for ``--run-s``, stops
the users and writes its measured TTFT/ITL histograms (attnload's ``LogHistogram``
wire format, so they compare bucket for bucket with the server's truth) to ``--out``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import gevent
from locust import FastHttpUser, User, constant, events, task
from locust.env import Environment

from attnload.measure.histogram import LogHistogram

TTFT = LogHistogram()
ITL = LogHistogram()
FIRST_TOKENS: list[tuple[float, float]] = []
"""(perf_counter at the first content token, TTFT) per request: exact, so ``client_cost.py`` takes the
median over its window (perf_counter is CLOCK_MONOTONIC, one clock for the server and the client)."""
COUNTS = {"ok": 0, "failed": 0}
ERRORS: dict[str, int] = {}
ARGS: argparse.Namespace


def _body(model: str, max_tokens: int) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": "Explain the transformer architecture."}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def _fail(kind: str) -> None:
    COUNTS["failed"] += 1
    ERRORS[kind] = ERRORS.get(kind, 0) + 1


class NaiveUser(FastHttpUser):
    """FastHttpUser + hand SSE parser: one ``json.loads`` per ``data:`` line, stamps per content chunk."""

    wait_time = constant(0)
    host = ""

    @task
    def chat(self) -> None:
        body = _body(ARGS.model, ARGS.max_tokens)
        start = time.perf_counter()
        first = last = 0.0
        try:
            response = self.client.post("/v1/chat/completions", json=body, stream=True)
            raw = response._response  # geventhttpclient response: readline splits as bytes arrive
            if raw is None or response.status_code != 200:
                _fail(f"status {response.status_code}")
                return
            done = False
            while not done:
                line = raw.readline(b"\n")
                if not line:
                    break
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    done = True
                    break
                chunk = json.loads(data)
                choices = chunk.get("choices")
                if choices and choices[0].get("delta", {}).get("content"):
                    now = time.perf_counter()
                    if first:
                        ITL.record(now - last)
                    else:
                        first = now
                        TTFT.record(now - start)
                        FIRST_TOKENS.append((now, now - start))
                    last = now
        except Exception as exc:  # noqa: BLE001 - a baseline: count and carry on
            _fail(type(exc).__name__)
            return
        if not done:
            _fail("no [DONE]")
            return
        COUNTS["ok"] += 1
        self.environment.events.request.fire(
            request_type="POST",
            name="chat",
            response_time=(last - start) * 1000,
            response_length=0,
            exception=None,
            context={},
        )


_OPENAI: Any = None


class OpenAIUser(User):
    """The openai SDK's streaming client inside a Locust user (the usual "just use the SDK")."""

    wait_time = constant(0)

    @task
    def chat(self) -> None:
        start = time.perf_counter()
        first = last = 0.0
        try:
            stream = _OPENAI.chat.completions.create(**_body(ARGS.model, ARGS.max_tokens))
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    now = time.perf_counter()
                    if first:
                        ITL.record(now - last)
                    else:
                        first = now
                        TTFT.record(now - start)
                        FIRST_TOKENS.append((now, now - start))
                    last = now
        except Exception as exc:  # noqa: BLE001 - a baseline: count and carry on
            _fail(type(exc).__name__)
            return
        COUNTS["ok"] += 1
        self.environment.events.request.fire(
            request_type="POST",
            name="chat",
            response_time=(last - start) * 1000,
            response_length=0,
            exception=None,
            context={},
        )


def _attnload_env(env_users: int) -> tuple[type[User], Any]:
    """attnload's own user and runtime, wired as ``register(events)`` wires a local run."""
    from attnload.config.load import load_config
    from attnload.exporter.exposition import serve_metrics
    from attnload.plan.options import RunOptions
    from attnload.runner.gcpolicy import quiet_full_collections
    from attnload.runner.runtime import Runtime
    from attnload.runner.sender.users import ChatUser

    config = Path(ARGS.out).with_suffix(".config.json")
    config.write_text(
        json.dumps(
            {
                "base_url": ARGS.url,
                "models": {"ref": {"id": ARGS.model, "attention_type": "GQA"}},
                "benchmark": {"max_tokens": ARGS.max_tokens, "temperature": 0},
            }
        ),
        encoding="utf-8",
    )
    runtime = Runtime.local(load_config(config), RunOptions(config_path=str(config), metrics_port=ARGS.metrics_port))
    sender, collector = runtime.sender, runtime.collector
    assert sender is not None and collector is not None
    if ARGS.metrics_port:
        serve_metrics(runtime.state.recorder, collector.fleet, ARGS.metrics_port, host="127.0.0.1")
    observe = sender.observe

    def observe_first_token(record: Any, *args: Any, **kwargs: Any) -> None:
        if record.ttft_s is not None:  # closed loop: latencies count from started_perf
            FIRST_TOKENS.append((record.started_perf + record.ttft_s, record.ttft_s))
        observe(record, *args, **kwargs)

    sender.observe = observe_first_token  # type: ignore[method-assign]
    from attnload.measure.looplag import watch_loop

    gevent.spawn(watch_loop, sender.loop_lag)  # the event-loop lateness that attributes the ITL signature
    runtime.begin_test()
    runtime.enter_stage(0, env_users, None)
    quiet_full_collections()
    return type("BenchChat", (ChatUser,), {"abstract": False}), runtime


def main() -> int:
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=("attnload", "naive", "openai"), required=True)
    parser.add_argument("--url", required=True, help="server root, e.g. http://127.0.0.1:8800")
    parser.add_argument("--model", default="ref-model")
    parser.add_argument("--users", type=int, required=True)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--run-s", type=float, required=True, help="seconds to run after every user spawned")
    parser.add_argument("--metrics-port", type=int, default=0)
    parser.add_argument("--ramp-s", type=float, default=1.5, help="seconds over which users start")
    parser.add_argument("--out", required=True)
    parser.add_argument("--profile", default="", help="write cProfile stats of the whole run here")
    ARGS = parser.parse_args()
    if ARGS.profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
        try:
            return _run()
        finally:
            profiler.disable()
            profiler.dump_stats(ARGS.profile)
    return _run()


class _GcPauses:
    """Cyclic-GC pause times of this process (a stalled hub shows up as ITL p99 error)."""

    def __init__(self) -> None:
        self.started = 0.0
        self.pauses: list[float] = []
        gc.callbacks.append(self.callback)

    def callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self.started = time.perf_counter()
        else:
            self.pauses.append(time.perf_counter() - self.started)

    def summary(self) -> dict[str, float]:
        pauses = sorted(self.pauses)
        return {"count": len(pauses), "total_s": sum(pauses), "max_s": pauses[-1] if pauses else 0.0}


def _run() -> int:
    global _OPENAI
    gc_pauses = _GcPauses()
    from reference_server import raise_fd_limit  # same directory

    raise_fd_limit()
    runtime = None
    if ARGS.kind == "attnload":
        user_class, runtime = _attnload_env(ARGS.users)
    elif ARGS.kind == "naive":
        user_class = NaiveUser
        NaiveUser.host = ARGS.url
    else:
        from openai import OpenAI

        try:  # this openai release ships its own fork of httpx
            import httpx2 as httpx  # type: ignore[import-not-found]
        except ImportError:
            import httpx  # type: ignore[no-redef]

        platform.processor()  # cached once here: 1000 users forking `uname -p` at once stalls everything
        _OPENAI = OpenAI(
            base_url=ARGS.url + "/v1",
            api_key="bench",
            max_retries=0,
            http_client=httpx.Client(
                limits=httpx.Limits(max_connections=ARGS.users + 16, max_keepalive_connections=ARGS.users + 16),
                timeout=600.0,
                trust_env=False,
            ),
        )
        user_class = OpenAIUser
    env = Environment(user_classes=[user_class], events=events)
    if runtime is not None:
        env.attnload = runtime  # type: ignore[attr-defined]
    runner = env.create_local_runner()
    if runtime is not None:
        from attnload.runner.collector.fleet import watch_fleet

        gevent.spawn(watch_fleet, env, runtime.collector)
    # Spread over ~1.5 s so streams do not all tick in the same millisecond forever after (one
    # synchronized burst of N events every ITL measures burst draining, not per-token cost).
    runner.start(ARGS.users, spawn_rate=max(ARGS.users / ARGS.ramp_s, 1.0))
    deadline = time.monotonic() + 60 + ARGS.ramp_s
    while runner.user_count < ARGS.users and time.monotonic() < deadline:
        gevent.sleep(0.05)
    print("SPAWNED", flush=True)
    gevent.sleep(ARGS.run_s)
    runner.quit()
    out: dict[str, Any] = {
        "kind": ARGS.kind,
        "users": ARGS.users,
        "pid": os.getpid(),
        "gc": gc_pauses.summary(),
        "first_tokens": FIRST_TOKENS,
    }
    if runtime is not None:
        from attnload import native

        out["impl"] = native.implementation()  # compiled, or python (ATTNLOAD_PURE_PYTHON=1 / not built)
    if runtime is not None:
        from attnload.results.summarize import client_info, summary

        runtime.test_stopped()
        cpu_max_ratio = runtime.collector.cpu_max_ratio if runtime.collector is not None else 0.0
        series = runtime.state.recorder.combined()
        assert runtime.sender is not None
        lag = runtime.sender.loop_lag.run
        info = client_info(1, 0, cpu_max_ratio, runtime.state.recorder, loop_lag={"local": summary(lag)})
        out.update(
            ttft=series.hists["ttft"].to_wire(),
            itl=series.hists["itl"].to_wire(),
            ok=series.counts["ok"],
            failed=series.counts["failed"],
            errors=series.errors,
            saturated=info.client_saturated,
            saturation_reasons=info.saturation_reasons,
            cpu_max_ratio=cpu_max_ratio,
            loop_lag_p50_ms=(lag.quantile(0.5) or 0.0) * 1000,
            loop_lag_p99_ms=(lag.quantile(0.99) or 0.0) * 1000,
        )
    else:
        out.update(
            ttft=TTFT.to_wire(),
            itl=ITL.to_wire(),
            ok=COUNTS["ok"],
            failed=COUNTS["failed"],
            errors=ERRORS,
            saturated=None,
            saturation_reasons=[],
            cpu_max_ratio=runner.current_cpu_usage / 100.0,
        )
    Path(ARGS.out).write_text(json.dumps(out), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
