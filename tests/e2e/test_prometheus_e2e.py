"""A real Prometheus scraping attnload: totals, percentiles, every dashboard query, cardinality.

Three layers, each with real processes on 127.0.0.1 free ports, all stopped in ``finally``:

1. Fixture exporter (no load generator): every dashboard expr returns finite data and the
   recording rules evaluate. Guards the PromQL independently of the core.
2. Core run: simulator in fixed mode (3 models), ``attnload run`` with 2 workers and
   3 profiles, Prometheus scraping master and sim every second. After the run, PromQL
   totals equal the simulator's ``/stats`` and the results JSON, TTFT/ITL p50 lie within
   one bucket of the fixed values, every dashboard expr has data, and the master's series
   count for 3 models × 3 profiles stays under :data:`SERIES_BOUND`.
3. Error run: one model id the simulator does not serve (404 → ``not_found``), open-loop
   ``rate:`` shape, simulator in roofline mode: the error, dispatch-lag and engine-step
   panels get data too.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from attnload.dashboards.generate import expr_requirements
from attnload.dashboards.prometheus import PrometheusError, start_local_prometheus
from helpers import free_port, wait_http
from helpers.exposition import samples
from helpers.observe import (
    Prom,
    annotation_exprs,
    engine_exposition,
    finite_values,
    fixture_exporter,
    http_get,
    panel_exprs,
    running_prometheus,
    stop_process,
    substitute,
)

CORE_READY = all(importlib.util.find_spec(m) is not None for m in ("attnload.runner", "attnload.sim.cli"))
needs_core = pytest.mark.skipif(not CORE_READY, reason="core not built yet: attnload.runner / attnload.sim.cli missing")

MODELS = (("llama-3-70b", "GQA"), ("deepseek-v3", "MLA"), ("llama-3-8b", "GQA"))
PROFILES = {
    "short": "Explain attention in one line.",
    "medium": "Compare grouped-query attention with multi-head latent attention. " * 4,
    "long": "Why does the KV cache bound concurrency on one GPU? " * 16,
}
TTFT_S, ITL_S, OUTPUT_TOKENS = 0.050, 0.010, 32
SERIES_PER_COMBINATION = 400
"""Per (model, attention, profile): 5 histograms × (55 buckets + sum + count [+ created]) + counters."""
SERIES_FIXED = 500
"""Series without model labels: stage/target gauges, per-worker CPU, process and platform collectors."""
SERIES_BOUND = len(MODELS) * len(PROFILES) * SERIES_PER_COMBINATION + SERIES_FIXED
ALLOWED_LABELS = {
    "model",
    "attention",
    "profile",
    "target",
    "outcome",
    "error",
    "worker",
    "le",
    "quantile",
    "stage",
    "target_users",
    "target_rate",
    "context",  # a context ladder's rung on attnload_stage_info: one value per stage
}
RUN_TIMEOUT_S = 180


# -- process plumbing -----------------------------------------------------------------------


def _attnload(*args: str) -> list[str]:
    return [sys.executable, "-m", "attnload", *args]


@contextlib.contextmanager
def running_sim(tmp: Path, models: str, *extra: str) -> Iterator[str]:
    """The simulator on a free port; yields ``host:port``."""
    port = free_port()
    log = (tmp / f"sim-{port}.log").open("wb")
    process = subprocess.Popen(
        _attnload("sim", "--host", "127.0.0.1", "--port", str(port), "--models", models, *extra),
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/v1/models", timeout_s=60, process=process)
        yield f"127.0.0.1:{port}"
    finally:
        stop_process(process)
        log.close()


class MetricsPoller:
    """Keeps the master's last ``/metrics`` body while the run goes (the master may exit with the run)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.last = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="metrics-poller", daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            with contextlib.suppress(OSError):
                self.last = http_get(self.url, timeout_s=2.0).decode("utf-8")

    def __enter__(self) -> MetricsPoller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@dataclass
class Run:
    """What one finished load run left behind, for the assertions."""

    prom: Prom
    at: float
    """Time of the master's last scraped sample: instant queries are evaluated there."""
    results: dict[str, Any]
    stats: dict[str, Any]
    exposition: str
    capabilities: frozenset[str] = field(default_factory=frozenset)


def write_config(path: Path, sim: str, models: tuple[tuple[str, str], ...], slo: bool = True) -> Path:
    config: dict[str, Any] = {
        "base_url": f"http://{sim}/api",
        "models": {mid: {"id": mid, "attention_type": attention, "max_context": 8192} for mid, attention in models},
        "test_prompts": PROFILES,
        "benchmark": {"repeat": 1, "max_tokens": OUTPUT_TOKENS, "temperature": 0},
    }
    if slo:
        config["slo"] = {"ttft_p99_s": 5.0}
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    return path


def load_run(tmp: Path, sim: str, config: Path, run_args: list[str], capabilities: set[str]) -> Iterator[Run]:
    """Prometheus scraping master + sim, then ``attnload run`` to completion; yields the evidence."""
    metrics_port = free_port()
    results_dir = tmp / "results"
    with running_prometheus({"attnload": f"127.0.0.1:{metrics_port}", "attnload-sim": sim}, tmp / "prom") as prom:
        command = _attnload(
            "run",
            "-c",
            str(config),
            "--workers",
            "2",
            "--metrics-port",
            str(metrics_port),
            "--results",
            str(results_dir),
            "--headless",
            *run_args,
        )
        log_path = tmp / "run.log"
        with log_path.open("wb") as log, MetricsPoller(f"http://127.0.0.1:{metrics_port}/metrics") as poller:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            try:
                rc = process.wait(timeout=RUN_TIMEOUT_S)
            finally:
                stop_process(process)
        log_tail = log_path.read_text(encoding="utf-8", errors="replace")[-3000:]
        assert rc == 0, f"attnload run exited {rc}:\n{log_tail}"
        time.sleep(2.5)  # two rule evaluations after the last scrape
        files = sorted(results_dir.glob("*.json"))
        assert len(files) == 1, f"expected one results file in {results_dir}: {files}\n{log_tail}"
        stats = json.loads(http_get(f"http://{sim}/stats"))
        at = prom.last_sample_time('attnload_workers{job="attnload"}')
        yield Run(
            prom, at, json.loads(files[0].read_text(encoding="utf-8")), stats, poller.last, frozenset(capabilities)
        )


# -- server truth and results lookups -------------------------------------------------------


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix.rstrip("."): value}


def sim_truth(stats: dict[str, Any], model_id: str) -> dict[str, int]:
    """Requests and tokens the simulator served for ``model_id`` (``/stats`` shapes: dict by id or list)."""
    models = stats.get("models", stats)
    entry: Any = None
    if isinstance(models, dict):
        entry = models.get(model_id)
    elif isinstance(models, list):
        entry = next((m for m in models if model_id in (m.get("model"), m.get("id"), m.get("key"))), None)
    assert isinstance(entry, dict), f"/stats has no entry for {model_id}: {json.dumps(stats)[:2000]}"
    flat = _flatten(entry)

    def pick(*names: str) -> int:
        for name in names:
            for key, value in flat.items():
                if (key == name or key.endswith(f".{name}")) and isinstance(value, int | float):
                    return int(value)
        raise AssertionError(f"/stats entry for {model_id} lacks {names}: {entry}")

    truth = {
        "requests": pick("received", "requests", "requests.total", "requests_total"),
        "prompt_tokens": pick("prompt_tokens"),
        "completion_tokens": pick("completion_tokens"),
    }
    with contextlib.suppress(AssertionError):  # finished-request counts, where /stats splits them out
        truth["completed"] = pick("completed")
        truth["completed_completion_tokens"] = pick("completed_completion_tokens")
    return truth


def result_model(results: dict[str, Any], model_id: str) -> dict[str, Any]:
    for entry in results["models"]:
        if model_id in (entry.get("model"), entry.get("key")):
            return dict(entry)
    raise AssertionError(f"results JSON has no model {model_id}")


def prom_totals(run: Run, metric: str, by: str = "model", extra: str = "") -> dict[str, float]:
    """Final value of a counter per ``by``: counters never reset within a run, so max_over_time is the total."""
    return run.prom.scalar_by(f'sum by ({by}) (max_over_time({metric}{{job="attnload"{extra}}}[30m]))', by, at=run.at)


def bucket_bounds(run: Run, metric: str) -> list[float]:
    result = run.prom.query(f'count by (le) (last_over_time({metric}_bucket{{job="attnload"}}[30m]))', at=run.at)
    return sorted(float(r["metric"]["le"]) for r in result if r["metric"]["le"] != "+Inf")


def bucket_index(bounds: list[float], value: float) -> int:
    return next((i for i, b in enumerate(bounds) if value <= b), len(bounds))


# -- layer 1: the fixture exporter ----------------------------------------------------------


def test_launcher_reports_a_taken_port(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(PrometheusError, match="prometheus"):
            start_local_prometheus({"attnload": "127.0.0.1:1"}, tmp_path, port, ready_timeout_s=15)


def test_dashboard_queries_against_fixture_exporter(tmp_path: Path) -> None:
    with (
        fixture_exporter(errors=True) as exporter,
        running_prometheus(
            {"attnload": f"127.0.0.1:{exporter.master_port}", "attnload-sim": f"127.0.0.1:{exporter.sim_port}"},
            tmp_path,
        ) as prom,
    ):
        prom.wait_for("count_over_time(attnload_workers[1m]) >= 8", timeout_s=30)
        empty = []
        for panel_expr in panel_exprs():
            if not finite_values(prom.query(substitute(panel_expr.expr, "10s"))):
                empty.append(str(panel_expr))
        assert not empty, "queries without data:\n" + "\n".join(empty)
        for expr in annotation_exprs():
            # Stages step every 3 s: over the last minute the annotation marks changes, each with its stage.
            marks = prom.query(f"last_over_time(({substitute(expr)})[1m:1s])")
            assert marks and all(m["metric"]["stage"] and m["metric"]["target_users"] for m in marks), marks
        recorded = prom.wait_for("target_profile:attnload_time_to_first_token_seconds:p99_rate1m", 15)
        assert len(recorded) == 9  # 3 models × 3 profiles
        assert prom.wait_for("target_profile:attnload_requests_failed:ratio_rate1m > 0", 15)


# -- layers 2 and 3: the core ---------------------------------------------------------------


@pytest.fixture(scope="module")
def fixed_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    tmp = tmp_path_factory.mktemp("fixed")
    models = ",".join(m for m, _ in MODELS)
    with running_sim(
        tmp,
        models,
        "--mode",
        "fixed",
        "--ttft-ms",
        str(round(TTFT_S * 1000)),
        "--itl-ms",
        str(round(ITL_S * 1000)),
        "--output-tokens",
        str(OUTPUT_TOKENS),
    ) as sim:
        config = write_config(tmp / "config.json", sim, MODELS)
        yield from load_run(tmp, sim, config, ["--users", "6", "--spawn-rate", "6", "--duration", "20s"], {"sim"})


@pytest.fixture(scope="module")
def error_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    tmp = tmp_path_factory.mktemp("errors")
    with running_sim(tmp, "llama-3-70b,deepseek-v3", "--mode", "roofline", "--spec-tokens", "2") as sim:
        config = write_config(tmp / "config.json", sim, (("llama-3-70b", "GQA"), ("no-such-model", "MLA")))
        yield from load_run(
            tmp,
            sim,
            config,
            ["--shape", "rate:2", "--stage-duration", "10s", "--exit-code-on-error", "0"],
            {"sim", "errors", "open_loop", "prefix_cache", "gpu", "speculation"},
        )


@pytest.fixture(scope="module")
def decode_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """Answers of 192 tokens, long enough for the decode fit to settle and draw its line, with a 1k prompt
    injected among them (``--shape interference:1k``: 2 s in, then every 5 s) for the prefill stall."""
    tmp = tmp_path_factory.mktemp("decode")
    with running_sim(tmp, "llama-3-70b", "--mode", "fixed", "--ttft-ms", "20", "--itl-ms", "2") as sim:
        config = write_config(tmp / "config.json", sim, (("llama-3-70b", "GQA"),))
        data = json.loads(config.read_text(encoding="utf-8"))
        data["benchmark"]["max_tokens"] = 192
        config.write_text(json.dumps(data), encoding="utf-8")
        yield from load_run(
            tmp,
            sim,
            config,
            ["--shape", "interference:1k", "--users", "2", "--stage-duration", "8s"],
            {"sim", "decode_fit", "interference"},
        )


@needs_core
def test_request_and_token_totals_match_sim_and_results(fixed_run: Run) -> None:
    requests = prom_totals(fixed_run, "attnload_requests_total")
    prompt = prom_totals(fixed_run, "attnload_prompt_tokens_total")
    completion = prom_totals(fixed_run, "attnload_completion_tokens_total")
    for model_id, _ in MODELS:
        truth = sim_truth(fixed_run.stats, model_id)
        result = result_model(fixed_run.results, model_id)
        assert truth["requests"] > 0, f"{model_id}: the simulator served nothing"
        counted = sum(result["requests"].values())
        assert requests[model_id] == counted == truth["requests"], (model_id, requests, result["requests"], truth)
        assert prompt[model_id] == result["prompt_tokens"] == truth["prompt_tokens"], model_id
        assert completion[model_id] == result["completion_tokens"], model_id
        if result["requests"]["cancelled"] == 0:
            assert completion[model_id] == truth["completion_tokens"], (model_id, truth)
        else:  # a stream cut at the stop may lose tokens the server already wrote: bounded, not exact
            assert truth.get("completed_completion_tokens", 0) <= completion[model_id] <= truth["completion_tokens"]
        if "completed" in truth:  # a stream the server finished as the client stopped reads as cancelled there
            ok, cancelled = result["requests"]["ok"], result["requests"]["cancelled"]
            assert truth["completed"] - cancelled <= ok <= truth["completed"], (model_id, result["requests"], truth)


@needs_core
@pytest.mark.parametrize(
    ("metric", "summary", "known_s"),
    [
        ("attnload_time_to_first_token_seconds", "ttft_s", TTFT_S),
        ("attnload_inter_token_latency_seconds", "itl_s", ITL_S),
    ],
)
def test_median_within_one_bucket(fixed_run: Run, metric: str, summary: str, known_s: float) -> None:
    bounds = bucket_bounds(fixed_run, metric)
    assert len(bounds) >= 50 and bounds[0] == pytest.approx(0.001), bounds[:3]
    p50 = fixed_run.prom.scalar_by(
        f'histogram_quantile(0.5, sum by (le, model) (max_over_time({metric}_bucket{{job="attnload"}}[30m])))',
        "model",
        at=fixed_run.at,
    )
    for model_id, _ in MODELS:
        value = p50[model_id]
        assert math.isfinite(value), (model_id, p50)
        assert abs(bucket_index(bounds, value) - bucket_index(bounds, known_s)) <= 1, (model_id, value, known_s)
        reported = result_model(fixed_run.results, model_id)[summary]["p50"]
        assert abs(bucket_index(bounds, value) - bucket_index(bounds, reported)) <= 1, (model_id, value, reported)


@needs_core
def test_every_dashboard_query_has_data(fixed_run: Run, error_run: Run, decode_run: Run) -> None:
    """Every target of every panel of every dashboard file (read from grafana/, so a panel added later is
    covered) returns data in a run against the simulator alone: a clean closed-loop run, or the open-loop
    run with a failing model. A query whose needs neither run meets is reported, never skipped."""
    exprs = panel_exprs()
    assert len({(p.dashboard, p.panel) for p in exprs}) >= 30, "the dashboards lost their panels"
    missing = []
    for panel_expr in exprs:
        needs = expr_requirements(panel_expr.expr)
        runs = [r for r in (fixed_run, error_run, decode_run) if needs <= r.capabilities]
        if not any(finite_values(r.prom.query(substitute(panel_expr.expr), at=r.at)) for r in runs):
            missing.append(f"{panel_expr} (needs {sorted(needs) or 'nothing'})")
    assert not missing, "dashboard queries without data:\n" + "\n".join(missing)


def test_server_view_answers_an_sglang_exposition(tmp_path: Path) -> None:
    """SGLang's names in place of the simulator's: every server-view target returns data, labelled with
    the attention type that the master's series give the same model id."""
    with (
        fixture_exporter(errors=False) as exporter,
        engine_exposition(("sglang_dp2_t0.prom",), "deepseek-v3") as port,
        running_prometheus(
            {"attnload": f"127.0.0.1:{exporter.master_port}", "attnload-sim": f"127.0.0.1:{port}"}, tmp_path
        ) as prom,
    ):
        prom.wait_for('count_over_time(sglang:num_running_reqs{job="attnload-sim"}[1m]) >= 8', timeout_s=30)
        # the recorded SGLang server does not speculate: its acceptance panels are the fixture exporter's
        server = [p for p in panel_exprs() if "sglang:" in p.expr and "speculation" not in expr_requirements(p.expr)]
        assert {p.panel for p in server} >= {
            "Server: KV cache usage",
            "Server: requests running",
            "Server: requests waiting",
            "Server: preemptions/s",
            "Server: prefix cache hit ratio",
            "Server: TTFT (p99 dashed)",
        }
        empty = []
        for panel_expr in server:
            result = prom.query(substitute(panel_expr.expr, "10s"))
            if not finite_values(result):
                empty.append(str(panel_expr))
            elif panel_expr.panel == "Server: KV cache usage":
                (series,) = result
                assert series["metric"] == {"model_name": "deepseek-v3", "attention": "MLA"}, result
                assert float(series["value"][1]) == pytest.approx(0.8)  # the file's max over DP ranks
        assert not empty, "server-view queries without data on SGLang names:\n" + "\n".join(empty)


@needs_core
def test_recording_rules_evaluate_on_real_series(fixed_run: Run) -> None:
    recorded = fixed_run.prom.query("target_profile:attnload_time_to_first_token_seconds:p50_rate1m", at=fixed_run.at)
    assert {r["metric"]["model"] for r in recorded} == {m for m, _ in MODELS}
    assert {r["metric"]["target"] for r in recorded} == {m for m, _ in MODELS}  # config keys = ids here
    assert fixed_run.prom.query("target_profile:attnload_completion_tokens:rate1m > 0", at=fixed_run.at)


def assert_series_bounded(exposition: str) -> int:
    """No per-request labels, at most 3 models × 3 profiles, and the total under :data:`SERIES_BOUND`."""
    series = 0
    models: set[str] = set()
    profiles: set[str] = set()
    for sample in samples(exposition):
        series += 1
        if sample.name.startswith("attnload_"):
            assert set(sample.labels) <= ALLOWED_LABELS, f"unbounded label on {sample.name}: {sample.labels}"
            models.add(sample.labels.get("model", ""))
            profiles.add(sample.labels.get("profile", ""))
    assert series <= SERIES_BOUND, f"{series} series for 3 models × 3 profiles, bound {SERIES_BOUND}"
    assert models - {""} == {m for m, _ in MODELS}
    assert profiles - {"", "all"} <= set(PROFILES)
    return series


def test_series_count_bounded_with_every_error_class() -> None:
    """The core's exporter, worst case: every model × profile × stage × outcome × error class seen."""
    metrics = pytest.importorskip("attnload.exporter.exposition")
    measure = pytest.importorskip("attnload.measure.recorder")
    from prometheus_client import CollectorRegistry, generate_latest

    recorder = measure.Recorder()
    state = metrics.FleetState(
        model_labels={m: (m, a) for m, a in MODELS},
        users={m: 2 for m, _ in MODELS},
        workers=64,
        worker_cpu_ratio={f"worker-{i}": 0.5 for i in range(64)},
    )
    classes = (
        "auth",
        "not_found",
        "rate_limited",
        "quota",
        "context_length",
        "bad_request",
        "server",
        "timeout",
        "connection",
        "proxy",
        "bad_response",
        "truncated",
        "cancelled",
    )
    for request_id in range(2000):  # many requests and stages must not add series
        model, _ = MODELS[request_id % 3]
        error = classes[request_id % len(classes)] if request_id % 2 else None
        recorder.add(
            measure.RequestRecord(
                model_key=model,
                profile=list(PROFILES)[(request_id // 3) % 3],
                stage=request_id % 7,
                outcome="failed" if error else ("cancelled" if request_id % 10 == 0 else "ok"),
                error=error,
                ttft_s=0.001 * (1 + request_id % 997),
                itl_samples=((0.01, 1), (0.02, 3)),
                e2e_s=1.0 + request_id,
                prompt_tokens=100,
                completion_tokens=32,
                cached_prompt_tokens=16,
                tokens_estimated=False,
                dispatch_lag_s=0.001,
                good=True,
            )
        )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics.FleetCollector(recorder, state))
    series = assert_series_bounded(generate_latest(registry).decode("utf-8"))
    assert series > len(MODELS) * len(PROFILES) * 5 * 50  # the histograms are really there


@needs_core
def test_series_count_bounded_for_three_models_three_profiles(fixed_run: Run) -> None:
    assert fixed_run.exposition, "never read the master's /metrics during the run"
    assert_series_bounded(fixed_run.exposition)
    scraped = fixed_run.prom.query('count({job="attnload"})', at=fixed_run.at)
    assert scraped and float(scraped[0]["value"][1]) <= SERIES_BOUND


@needs_core
def test_error_run_counts_not_found(error_run: Run) -> None:
    errors = prom_totals(error_run, "attnload_request_errors_total", extra=', error="not_found"')
    reported = result_model(error_run.results, "no-such-model")
    assert errors.get("no-such-model", 0) > 0
    assert errors["no-such-model"] == reported["errors"].get("not_found", 0)
    failed = prom_totals(error_run, "attnload_requests_total", extra=', outcome="failed"')
    assert failed["no-such-model"] == reported["requests"]["failed"]
    assert "llama-3-70b" not in errors or errors["llama-3-70b"] == 0
    lag = error_run.prom.query(
        'sum(max_over_time(attnload_dispatch_lag_seconds_count{job="attnload"}[30m])) > 0', at=error_run.at
    )
    assert lag, "open-loop run exported no dispatch lag"
    alerts = error_run.prom.query('ALERTS{alertname="AttnloadErrorRateHigh", model="no-such-model"}', at=error_run.at)
    assert alerts, "error-rate alert neither pending nor firing with half the requests failing"
