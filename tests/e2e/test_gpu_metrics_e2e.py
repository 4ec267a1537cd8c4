"""Issue 26 end to end: `attnload run` reads the models' GPUs into ``stages[].gpu``.

(a) A dcgm-exporter-format server on its own port (four H100s, two pods, one per model,
tests/data/dcgm/) given as ``gpu_metrics_url`` with a ``pod`` selector per model: each
model's stage block has that exporter's values for its own GPUs only (activity constant,
so means are exact), energy = counter delta (the exporter advances each GPU's counter by a
fixed step per scrape, so the total is known), joules per output token = that over the
client's tokens, ``gpus`` = 2 each. A third model's exporter 404s: ``gpu: null``, one
warning line, exit 0; (b) an HTML body likewise.
(c) `attnload sim` with the default pair under a decode-heavy load: its /metrics carries the
DCGM fields per virtual GPU, GQA's decode stage is ``bandwidth``-bound and MLA's tensor
activity exceeds GQA's.
"""

from __future__ import annotations

import http.server
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from attnload.scrape.dcgm import parse_dcgm
from helpers import ROOT, Processes, attnload, http_text, latest_results, serve_in_thread, start_sim

DATA = ROOT / "tests" / "data" / "dcgm"
WARNING = "gpu metrics off"
STEP_MJ = (400_000, 500_000, 600_000, 700_000)
"""Each scrape advances GPU i's energy counter by STEP_MJ[i] mJ."""
_ENERGY = re.compile(r'^(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION\{gpu="(\d)".*\}) (\d+)$', re.M)


class _Exporter(http.server.BaseHTTPRequestHandler):
    """/metrics: the t0 body with energy advanced per hit; /missing: 404; /html: an HTML page."""

    hits = 0

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.path == "/missing":
            self.send_error(404)
            return
        if self.path == "/html":
            body = b"<!doctype html><html><body><h1>Grafana</h1></body></html>"
            kind = "text/html"
        else:
            n = _Exporter.hits
            _Exporter.hits += 1
            text = (DATA / "h100x4_two_pods_t0.prom").read_text(encoding="utf-8")
            body = _ENERGY.sub(
                lambda m: f"{m.group(1)} {int(m.group(3)) + n * STEP_MJ[int(m.group(2))]}", text
            ).encode()
            kind = "text/plain; version=0.0.4"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture(scope="module")
def exporter() -> Iterator[str]:
    with serve_in_thread(_Exporter) as url:
        yield url


def _run(tmp: Path, models: dict[str, Any], *args: str) -> tuple[dict[str, Any], str]:
    tmp.mkdir(parents=True, exist_ok=True)
    processes = Processes(tmp)
    try:
        sim = start_sim(
            processes,
            "--mode",
            "fixed",
            "--ttft-ms",
            "30",
            "--itl-ms",
            "5",
            "--models",
            "llama-3-70b,deepseek-v3,llama-3-8b",
        )
        config = tmp / "config.json"
        config.write_text(json.dumps({"base_url": sim + "/v1", "models": models, "benchmark": {"max_tokens": 32}}))
        run = processes.start(
            attnload(
                "run",
                "-c",
                str(config),
                "--results",
                str(tmp / "results"),
                "--metrics-port",
                "0",
                "--server-metrics-interval",
                "1",
                "--stop-timeout",
                "10",
                *args,
            ),
            name="run",
        )
        assert run.wait(timeout=120) == 0, processes.log_of(run)[-3000:]
        return latest_results(tmp / "results"), processes.log_of(run)
    finally:
        processes.stop_all()


def test_exporter_values_per_model_and_a_404(exporter: str, tmp_path: Path) -> None:
    _Exporter.hits = 0
    url = exporter + "/metrics"
    data, log = _run(
        tmp_path,
        {
            "llama": {
                "id": "llama-3-70b",
                "attention_type": "GQA",
                "gpu_metrics_url": url,
                "gpu_selector": {"namespace": "vllm", "pod": "llama-70b-.*"},
            },
            "deepseek": {
                "id": "deepseek-v3",
                "attention_type": "MLA",
                "gpu_metrics_url": url,
                "gpu_selector": {"pod": "deepseek-v3-.*"},
            },
            "broken": {"id": "llama-3-8b", "attention_type": "GQA", "gpu_metrics_url": exporter + "/missing"},
        },
        "--shape",
        "concurrency:3,6",
        "--stage-duration",
        "5s",
        "--spawn-rate",
        "20",
    )
    served = parse_dcgm((DATA / "h100x4_two_pods_t0.prom").read_text(encoding="utf-8"))
    scrapes = _Exporter.hits
    assert scrapes >= 8, scrapes
    for model, gpus in zip(data["models"][:2], ((0, 1), (2, 3)), strict=True):
        rows = [r for r in served.readings if int(r.labels["gpu"]) in gpus]
        total = model["gpu"]
        # Energy: the exporter's own delta from the first to the last scrape, for this model's GPUs only.
        step_j = sum(STEP_MJ[i] for i in gpus) / 1000
        # (a scrape served while the master stopped may go unrecorded: then one step less)
        assert any(total["energy_j"] == pytest.approx(n * step_j) for n in (scrapes - 1, scrapes - 2)), total
        assert total["energy_from"] == "counter" and total["source"] == "dcgm"
        stages = [s["gpu"] for s in model["stages"]]
        assert sum(s["energy_j"] for s in stages) == pytest.approx(total["energy_j"])  # stages split it exactly
        for stage, block in zip(model["stages"], stages, strict=True):
            assert block["gpus"] == 2 and block["samples"] >= 3, block
            for field in ("dram_active", "tensor_active", "gpu_util"):
                want = [r.values[field] for r in rows]
                assert block[field]["mean"] == pytest.approx(sum(want) / 2) and block[field]["max"] == max(want)
            assert block["sm_active"] is None  # not served: null, not 0
            assert block["power_w"] == pytest.approx(sum(r.values["power_w"] for r in rows))
            assert block["fb_used_gib"] == pytest.approx(sum(r.values["fb_used_mib"] for r in rows) / 1024)
            assert stage["completion_tokens"] > 0
            assert block["joules_per_output_token"] == pytest.approx(block["energy_j"] / stage["completion_tokens"])
    assert data["models"][0]["stages"][0]["gpu"]["bound"] == "bandwidth"  # DRAM 78 %, tensor 12 %
    broken = data["models"][2]
    assert broken["gpu"] is None and all(s["gpu"] is None for s in broken["stages"]) and broken["requests"]["ok"] > 0
    warnings = [line for line in log.splitlines() if WARNING in line]
    assert len(warnings) == 1 and "/missing" in warnings[0] and "404" in warnings[0], warnings
    assert "Traceback" not in log


def test_an_html_page_is_no_exporter(exporter: str, tmp_path: Path) -> None:
    data, log = _run(
        tmp_path,
        {"m": {"id": "llama-3-8b", "attention_type": "GQA", "gpu_metrics_url": exporter + "/html"}},
        "--users",
        "2",
        "--duration",
        "4s",
    )
    model = data["models"][0]
    assert model["gpu"] is None and model["stages"][0]["gpu"] is None and model["requests"]["ok"] > 0
    warnings = [line for line in log.splitlines() if WARNING in line]
    assert len(warnings) == 1 and "/html" in warnings[0], warnings
    assert "Traceback" not in log


def test_gpu_metrics_off_and_a_guess_without_dcgm(exporter: str, tmp_path: Path) -> None:
    """``--gpu-metrics off`` reads nothing; in auto, a fixed-mode sim's /metrics has no DCGM: null, no warning."""
    _Exporter.hits = 0
    data, log = _run(
        tmp_path / "off",
        {"m": {"id": "llama-3-8b", "attention_type": "GQA", "gpu_metrics_url": exporter + "/metrics"}},
        "--users",
        "1",
        "--duration",
        "2s",
        "--gpu-metrics",
        "off",
    )
    assert data["models"][0]["gpu"] is None and _Exporter.hits == 0
    data, log = _run(
        tmp_path / "auto", {"m": {"id": "llama-3-8b", "attention_type": "GQA"}}, "--users", "1", "--duration", "2s"
    )
    assert data["models"][0]["gpu"] is None and WARNING not in log


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Any], str]]:
    tmp = tmp_path_factory.mktemp("gpu_sim")
    processes = Processes(tmp)
    try:
        sim = start_sim(processes, "--kv-capacity-scale", "0.05", "--tokens-per-event", "4")
        config = tmp / "config.json"
        config.write_text(
            json.dumps(
                {
                    "base_url": sim + "/api",
                    "models": {
                        "gqa_model": {"id": "llama-3-70b", "attention_type": "GQA"},
                        "mla_model": {"id": "deepseek-chat", "attention_type": "MLA"},
                    },
                    "workload": {"decode-heavy": {"prompt_tokens": 200, "max_tokens": 512}},
                }
            )
        )
        run = processes.start(
            attnload(
                "run",
                "-c",
                str(config),
                "--shape",
                "concurrency:16,64",
                "--stage-duration",
                "12s",
                "--spawn-rate",
                "50",
                "--server-metrics-interval",
                "1",
                "--results",
                str(tmp / "results"),
                "--metrics-port",
                "0",
            ),
            name="run",
        )
        assert run.wait(timeout=150) == 0, processes.log_of(run)[-3000:]
        yield latest_results(tmp / "results"), http_text(sim + "/metrics")
    finally:
        processes.stop_all()


def test_sim_serves_dcgm_fields_per_virtual_gpu(sim_run: tuple[dict[str, Any], str]) -> None:
    _data, metrics = sim_run
    exposition = parse_dcgm(metrics)
    assert exposition.source == "attnload-sim"
    pods = [r.labels["pod"] for r in exposition.readings]
    assert pods.count("llama-3-70b") == 8 and pods.count("deepseek-v3") == 8  # TP8 each: 16 virtual GPUs
    assert len({r.labels["UUID"] for r in exposition.readings}) == 16
    for name in ("DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"):
        assert len(re.findall(rf"^{name}\{{", metrics, re.M)) == 16, name
    assert all(r.labels["modelName"] == "NVIDIA H200" and r.labels["Hostname"] for r in exposition.readings)


def test_sim_gqa_decode_is_bandwidth_bound_and_mla_uses_more_tensor(sim_run: tuple[dict[str, Any], str]) -> None:
    data, _metrics = sim_run
    gqa, mla = data["models"]
    heavy_gqa = gqa["stages"][-1]["gpu"]
    assert heavy_gqa["source"] == "attnload-sim" and heavy_gqa["gpus"] == 8 and heavy_gqa["samples"] >= 5
    assert heavy_gqa["bound"] == "bandwidth", heavy_gqa
    assert mla["gpu"]["tensor_active"]["mean"] > gqa["gpu"]["tensor_active"]["mean"], (mla["gpu"], gqa["gpu"])
    for model in (gqa, mla):
        for stage in model["stages"]:
            block = stage["gpu"]
            assert 0 < block["dram_active"]["mean"] <= block["dram_active"]["max"] <= 1, block
            assert block["energy_from"] == "counter" and block["energy_j"] > 0
            # Power stays between the idle floor and TDP (90-700 W per H200, 8 of them).
            assert 8 * 90 <= block["power_w"] <= 8 * 700, block
            assert block["joules_per_output_token"] == pytest.approx(block["energy_j"] / stage["completion_tokens"])


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (("--gpu-metrics", "sometimes"), {}, "invalid choice"),
    ],
)
def test_bad_gpu_metrics_value_is_one_line_exit_2(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str], expected: str
) -> None:
    import os
    import subprocess

    processes = Processes(tmp_path)
    try:
        sim = start_sim(processes, "--mode", "fixed", "--ttft-ms", "5", "--itl-ms", "1")
        config = tmp_path / "c.json"
        config.write_text(
            json.dumps(
                {
                    "base_url": sim,
                    "models": {"m": {"id": "llama-3-70b", "attention_type": "GQA"}},
                    "benchmark": {"max_tokens": 4},
                }
            )
        )
        result = subprocess.run(
            attnload(
                "run",
                "-c",
                str(config),
                "--users",
                "1",
                "--duration",
                "2s",
                "--results",
                str(tmp_path / "r"),
                "--metrics-port",
                "0",
                *args,
            ),
            capture_output=True,
            text=True,
            timeout=90,
            env={**os.environ, **env},
        )
    finally:
        processes.stop_all()
    assert result.returncode == 2 and "Traceback" not in result.stderr + result.stdout, result.stderr[-2000:]
    lines = [line for line in result.stderr.strip().splitlines() if "error" in line]
    assert lines and expected in lines[-1], result.stderr
