"""Helpers for the Prometheus tests: a real Prometheus, PromQL over its HTTP API, dashboard exprs.

Also a fixture exporter that serves every master and simulator series name from
docs/design.md / docs/cost-model.md §4.6 with synthetic, moving values, so the dashboards'
queries run against a real Prometheus without the load generator (a unit-level check
of the dashboards that does not depend on the core).
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import re
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, start_http_server

from attnload.dashboards.prometheus import start_local_prometheus, stop_prometheus
from attnload.errors import ErrorClass
from attnload.exporter.names import BUCKETS_S, LABELS  # the master's buckets (1 ms … 120 s) and labels
from helpers import ROOT, free_port

DASHBOARD_DIR = ROOT / "grafana" / "dashboards"
RULES = ROOT / "grafana" / "prometheus" / "rules.yml"

ERROR_CLASSES = tuple(error.label for error in ErrorClass)
FIXTURE_MODELS = (("llama-3-70b", "GQA"), ("deepseek-v3", "MLA"), ("llama-3-8b", "GQA"))
FIXTURE_PROFILES = ("short", "long", "shared")


def http_get(url: str, timeout_s: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 (local test URL)
        return bytes(response.read())


def stop_process(process: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL: every process a test starts goes through here in a finally."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=timeout_s)


# -- Prometheus -----------------------------------------------------------------------------


@dataclass
class Prom:
    """A running Prometheus and the PromQL HTTP API over it."""

    url: str
    process: subprocess.Popen[bytes]
    data_dir: Path

    def api(self, path: str, **params: str) -> Any:
        body = json.loads(http_get(f"{self.url}{path}?{urllib.parse.urlencode(params)}", timeout_s=10.0))
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """Instant vector (or matrix for a range selector) at ``at`` (default: now)."""
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self.api("/api/v1/query", **params)
        result: list[dict[str, Any]] = data["result"]
        return result

    def scalar_by(self, expr: str, label: str, at: float | None = None) -> dict[str, float]:
        """``label`` value → sample value of an instant-vector query."""
        return {r["metric"].get(label, ""): float(r["value"][1]) for r in self.query(expr, at)}

    def last_sample_time(self, selector: str, window: str = "30m") -> float:
        """Timestamp of the newest real sample of ``selector``: the moment to evaluate a finished run at."""
        matrix = self.query(f"{selector}[{window}]")
        stamps = [float(v[0]) for series in matrix for v in series["values"]]
        assert stamps, f"Prometheus has no samples of {selector}"
        return max(stamps)

    def wait_for(self, expr: str, timeout_s: float, predicate: Any = bool) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        result: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            result = self.query(expr)
            if predicate(result):
                return result
            time.sleep(0.5)
        raise AssertionError(f"{expr!r} did not return the expected data within {timeout_s}s: {result}")


@contextlib.contextmanager
def running_prometheus(targets: dict[str, str], data_dir: Path) -> Iterator[Prom]:
    """Prometheus scraping ``targets`` every second, with the project's rules, always stopped."""
    port = free_port()
    process = start_local_prometheus(
        targets, data_dir, port, scrape_interval_s=1.0, rules_file=RULES, ready_timeout_s=30.0
    )
    try:
        yield Prom(f"http://127.0.0.1:{port}", process, data_dir)
    finally:
        stop_prometheus(process)


# -- dashboards -----------------------------------------------------------------------------


@dataclass(frozen=True)
class PanelExpr:
    dashboard: str
    panel: str
    ref_id: str
    expr: str

    def __str__(self) -> str:
        return f"{self.dashboard} / {self.panel} / {self.ref_id}: {self.expr}"


def load_dashboards() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text(encoding="utf-8")) for p in sorted(DASHBOARD_DIR.glob("*.json"))}


def panel_exprs() -> list[PanelExpr]:
    """Every ``expr`` of every panel target in every dashboard file."""
    out = []
    for name, dashboard in load_dashboards().items():
        for panel in dashboard["panels"]:
            for target in panel.get("targets", []):
                if target.get("expr"):
                    out.append(PanelExpr(name, panel["title"], target["refId"], target["expr"]))
    return out


def annotation_exprs() -> list[str]:
    return [a["expr"] for d in load_dashboards().values() for a in d["annotations"]["list"] if a.get("expr")]


def substitute(expr: str, rate_interval: str = "1m") -> str:
    """Grafana's template expansion with every variable on "All" (regex ``.*``)."""
    out = expr.replace("$__rate_interval", rate_interval).replace("$__interval", "5s")
    out = out.replace("$__range", "10m")
    for var in ("model", "attention", "profile", "target", "namespace", "job"):
        out = out.replace(f"${{{var}}}", ".*").replace(f"${var}", ".*")
    # ``$1`` is label_replace's capture group, not a variable (Grafana leaves unknown names alone)
    assert not re.search(r"\$(?!\d)", out), f"unsubstituted variable in {out}"
    return out


def finite_values(result: list[dict[str, Any]]) -> list[float]:
    return [v for v in (float(r["value"][1]) for r in result) if math.isfinite(v)]


# -- the fixture exporter -------------------------------------------------------------------


@dataclass
class FixtureExporter:
    """Master- and simulator-shaped series with synthetic moving values (no load generator)."""

    master_port: int
    sim_port: int
    _stop: threading.Event
    _servers: list[Any]
    _thread: threading.Thread

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for server, thread in self._servers:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)


def _master_registry() -> tuple[CollectorRegistry, dict[str, Any]]:
    reg = CollectorRegistry(auto_describe=True)
    hist = {
        name: Histogram(name, doc, LABELS, registry=reg, buckets=BUCKETS_S)
        for name, doc in (
            ("attnload_time_to_first_token_seconds", "TTFT"),
            ("attnload_ttfat_seconds", "TTFAT"),
            ("attnload_inter_token_latency_seconds", "ITL"),
            ("attnload_time_per_output_token_seconds", "TPOT"),
            ("attnload_request_duration_seconds", "e2e"),
            ("attnload_dispatch_lag_seconds", "dispatch lag"),
        )
    }
    metrics: dict[str, Any] = {
        "hist": hist,
        "requests": Counter("attnload_requests", "requests", (*LABELS, "outcome"), registry=reg),
        "errors": Counter("attnload_request_errors", "errors", (*LABELS, "error"), registry=reg),
        "prompt": Counter("attnload_prompt_tokens", "prompt tokens", LABELS, registry=reg),
        "completion": Counter("attnload_completion_tokens", "completion tokens", LABELS, registry=reg),
        "cached": Counter("attnload_cached_prompt_tokens", "cached", LABELS, registry=reg),
        "reasoning": Counter("attnload_reasoning_tokens", "reasoning tokens", LABELS, registry=reg),
        "goodput": Counter("attnload_goodput_requests", "goodput", LABELS, registry=reg),
        "users": Gauge("attnload_users", "users", LABELS, registry=reg),
    }
    for name in (
        "attnload_target_users",
        "attnload_target_rate",
        "attnload_stage",
        "attnload_workers",
        "attnload_client_saturated",
    ):
        metrics[name] = Gauge(name, name, registry=reg)
    metrics["cpu"] = Gauge("attnload_worker_cpu_ratio", "worker cpu", ("worker",), registry=reg)
    gpu_labels = ("model", "attention", "target")  # the master's re-export of each model's DCGM fields
    for name in ("attnload_gpu_dram_active", "attnload_gpu_tensor_active", "attnload_gpu_power_watts"):
        metrics[name] = Gauge(name, name, gpu_labels, registry=reg)
    metrics["gpu_energy"] = Counter("attnload_gpu_energy_joules", "energy", gpu_labels, registry=reg)
    metrics["decode_slope"] = Gauge(  # the decode fit's slope per model and stage (docs/microscope.md)
        "attnload_decode_slope_ms_per_ktok", "decode slope", (*gpu_labels, "stage"), registry=reg
    )
    metrics["prefill_stall"] = Gauge(  # --shape interference:L: decode stall per 1K injected prompt tokens
        "attnload_prefill_stall_ms_per_ktok", "prefill stall", gpu_labels, registry=reg
    )
    metrics["stage_info"] = Gauge(
        "attnload_stage_info", "stage info", ("stage", "target_users", "target_rate"), registry=reg
    )
    return reg, metrics


def _sim_registry() -> tuple[CollectorRegistry, dict[str, Any]]:
    reg = CollectorRegistry(auto_describe=True)
    sim_labels = ("model", "attention")
    metrics: dict[str, Any] = {
        name: Gauge(name, name, sim_labels, registry=reg)
        for name in ("attnload_sim_requests_running", "attnload_sim_requests_waiting", "attnload_sim_kv_usage_ratio")
    }
    metrics["step"] = Histogram("attnload_sim_step_seconds", "step", sim_labels, registry=reg, buckets=BUCKETS_S)
    for name in ("requests", "prompt_tokens", "completion_tokens", "preemptions"):
        metrics[name] = Counter(f"attnload_sim_{name}", name, sim_labels, registry=reg)
    # The server view's names: vLLM's (the simulator exports them too) and SGLang's, labelled model_name.
    for name in SERVER_GAUGES:
        metrics[name] = Gauge(name, name, ("model_name",), registry=reg)
    for name in SERVER_COUNTERS:
        metrics[name] = Counter(name.removesuffix("_total"), name, ("model_name",), registry=reg)
    for name in SERVER_HISTOGRAMS:
        metrics[name] = Histogram(name, name, ("model_name",), registry=reg, buckets=BUCKETS_S)
    return reg, metrics


SERVER_GAUGES = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
    "sglang:token_usage",
    "sglang:spec_accept_rate",
    "sglang:spec_accept_length",
)
SERVER_COUNTERS = (
    "vllm:num_preemptions_total",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "sglang:num_retracted_requests_total",
    "sglang:prompt_tokens_total",
    "sglang:cached_tokens_total",
    "vllm:spec_decode_num_drafts_total",
    "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total",
)
SERVER_HISTOGRAMS = ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds")


def _tick(master: dict[str, Any], sim: dict[str, Any], rng: random.Random, errors: bool, stage: int) -> None:
    master["attnload_target_users"].set(8 * (stage + 1))
    master["attnload_target_rate"].set(0)
    master["attnload_stage"].set(stage)
    master["stage_info"].clear()
    master["stage_info"].labels(str(stage + 1), str(8 * (stage + 1)), "0").set(1)
    master["attnload_workers"].set(2)
    master["attnload_client_saturated"].set(0)
    for w in ("w0", "w1"):
        master["cpu"].labels(worker=w).set(0.3 + 0.1 * rng.random())
    for model, attention in FIXTURE_MODELS:
        slow = 2.0 if attention == "GQA" else 1.0
        master["users"].labels(model, attention, "all", model).set(8 * (stage + 1) / len(FIXTURE_MODELS))
        master["attnload_gpu_dram_active"].labels(model, attention, model).set(0.7 if attention == "GQA" else 0.4)
        master["attnload_gpu_tensor_active"].labels(model, attention, model).set(0.1 if attention == "GQA" else 0.5)
        master["attnload_gpu_power_watts"].labels(model, attention, model).set(4000 + 100 * stage)
        master["gpu_energy"].labels(model, attention, model).inc(800)
        master["decode_slope"].labels(model, attention, model, str(stage + 1)).set(
            0.175 if attention == "GQA" else 0.058
        )
        master["prefill_stall"].labels(model, attention, model).set(27.9 if attention == "GQA" else 121.4)
        for name in SERVER_GAUGES:
            sim[name].labels(model).set(0.1 * (stage + 1))
        for name in SERVER_COUNTERS:
            sim[name].labels(model).inc(50 if "queries" in name or "prompt" in name else 10)
        for name in SERVER_HISTOGRAMS:
            sim[name].labels(model).observe(0.04 * slow * rng.uniform(0.8, 1.5))
        sim["attnload_sim_requests_running"].labels(model, attention).set(5 + stage)
        sim["attnload_sim_requests_waiting"].labels(model, attention).set(stage)
        sim["attnload_sim_kv_usage_ratio"].labels(model, attention).set(min(1.0, 0.2 * (stage + 1)))
        sim["step"].labels(model, attention).observe(0.01 * slow * rng.uniform(0.8, 1.2))
        sim["requests"].labels(model, attention).inc(3)
        sim["prompt_tokens"].labels(model, attention).inc(300)
        sim["completion_tokens"].labels(model, attention).inc(96)
        sim["preemptions"].labels(model, attention).inc(0)
        for profile in FIXTURE_PROFILES:
            key = (model, attention, profile, model)
            master["hist"]["attnload_time_to_first_token_seconds"].labels(*key).observe(
                0.05 * slow * rng.uniform(0.8, 1.5)
            )
            # the MLA fixture reasons: its answer begins 8 decode steps after its first token
            reasoning = 8 if attention == "MLA" else 0
            master["hist"]["attnload_ttfat_seconds"].labels(*key).observe(0.05 * slow + reasoning * 0.01)
            master["reasoning"].labels(*key).inc(reasoning)
            master["hist"]["attnload_request_duration_seconds"].labels(*key).observe(0.4 * slow)
            master["hist"]["attnload_time_per_output_token_seconds"].labels(*key).observe(0.01 * slow)
            master["hist"]["attnload_dispatch_lag_seconds"].labels(*key).observe(0.002 * rng.random())
            for _ in range(4):
                master["hist"]["attnload_inter_token_latency_seconds"].labels(*key).observe(
                    0.01 * slow * rng.uniform(0.9, 1.3)
                )
            master["requests"].labels(*key, "ok").inc()
            master["requests"].labels(*key, "cancelled").inc(0)
            master["goodput"].labels(*key).inc()
            master["prompt"].labels(*key).inc(100)
            master["completion"].labels(*key).inc(32)
            master["cached"].labels(*key).inc(10)
            if errors:
                master["requests"].labels(*key, "failed").inc()
                master["errors"].labels(*key, "not_found").inc()
                master["errors"].labels(*key, "timeout").inc(rng.randint(0, 1))


def _text_format_server(port: int, registry: CollectorRegistry) -> tuple[ThreadingHTTPServer, threading.Thread]:
    """Always the 0.0.4 text format, as vLLM and SGLang serve it.

    prometheus_client 0.26 turns ``vllm:x`` into ``vllm_x`` on its OpenMetrics path (which
    Prometheus 3 asks for), so its own server would rename the server-view series.
    """

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            body = generate_latest(registry)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, name="fixture-sim", daemon=True)
    thread.start()
    return server, thread


@contextlib.contextmanager
def fixture_exporter(errors: bool = True, period_s: float = 0.2) -> Iterator[FixtureExporter]:
    """Serve the fixture series on two free ports; values move every ``period_s``; stage steps every 3 s."""
    master_reg, master = _master_registry()
    sim_reg, sim = _sim_registry()
    master_port, sim_port = free_port(), free_port()
    servers = [start_http_server(master_port, "127.0.0.1", registry=master_reg), _text_format_server(sim_port, sim_reg)]
    stop = threading.Event()
    rng = random.Random(0)
    started = time.monotonic()

    def loop() -> None:
        while not stop.wait(period_s):
            _tick(master, sim, rng, errors, stage=int((time.monotonic() - started) // 3) % 4)

    thread = threading.Thread(target=loop, name="fixture-exporter", daemon=True)
    thread.start()
    exporter = FixtureExporter(master_port, sim_port, stop, servers, thread)
    try:
        yield exporter
    finally:
        exporter.close()


# -- a real engine's exposition ------------------------------------------------------------

SERVER_METRICS_DATA = ROOT / "tests" / "data" / "server_metrics"
_CUMULATIVE = re.compile(r"^(?P<name>[a-z_:]+?(?:_total|_bucket|_count|_sum))(?P<labels>\{[^}]*\})? (?P<value>\S+)$")


@contextlib.contextmanager
def engine_exposition(files: tuple[str, ...], model_name: str) -> Iterator[int]:
    """Serve recorded engine expositions (tests/data/scrape/*.prom) as that engine would, on a free port.

    The files are one scrape each; a real engine's counters and histogram buckets grow, so every
    cumulative sample is multiplied by the scrape number (rates stay positive, ratios and quantiles
    stay those of the file) and the served ``model_name`` is replaced by ``model_name``.
    """
    text = "".join((SERVER_METRICS_DATA / f).read_text(encoding="utf-8") for f in files)
    text = re.sub(r'model_name="[^"]*"', f'model_name="{model_name}"', text)
    scrapes = [0]
    lock = threading.Lock()

    def body() -> bytes:
        with lock:
            scrapes[0] += 1
            n = scrapes[0]
        out = []
        for line in text.splitlines():
            match = _CUMULATIVE.match(line)
            if match and not line.startswith("#") and not match["name"].endswith("_created"):
                value = float(match["value"]) * n
                line = f"{match['name']}{match['labels'] or ''} {value!r}"
            out.append(line)
        return ("\n".join(out) + "\n").encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            payload = body()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass

    port = free_port()
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, name="engine-exposition", daemon=True)
    thread.start()
    try:
        yield port
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


METRIC_NAME = re.compile(r"\battnload_[a-z0-9_]+\b")
