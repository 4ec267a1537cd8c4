"""deploy/'s pod-discovery job, run by a real Prometheus against a real simulator and a recorded SGLang.

No cluster here, so Kubernetes SD is the one part swapped out: each "pod" becomes a static
target carrying the ``__meta_kubernetes_*`` labels Kubernetes SD would give it (same names,
same values), and everything after that (the generated relabel and metric-relabel rules,
verbatim from deploy/40-prometheus-config.generated.yaml) runs in Prometheus itself. It must
scrape the annotated simulator once, as ``job="attnload-sim"`` with its own numbers; a
SGLang pod in another namespace at its annotated port and path, keeping its ``model_name``
series and dropping ``python_*``/``process_*``; and neither an unannotated nor a Pending pod.
"""

from __future__ import annotations

import http.server
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from attnload.cluster import manifests, names
from helpers import ROOT, Processes, free_port, http_json, http_text, require_binary, start_sim, wait_http

# A recorded SGLang exposition plus the runtime series prometheus_client's default registry
# adds in every real server process (no model_name: the job must drop them).
SGLANG = (ROOT / "tests" / "data" / "server_metrics" / "sglang_dp2_t0.prom").read_text(encoding="utf-8") + (
    "# HELP python_gc_objects_collected_total Objects collected during gc\n"
    "# TYPE python_gc_objects_collected_total counter\n"
    'python_gc_objects_collected_total{generation="0"} 18532.0\n'
    "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
    "# TYPE process_resident_memory_bytes gauge\n"
    "process_resident_memory_bytes 4.312662016e+09\n"
)


def _pod(
    address: str, namespace: str, name: str, labels: dict[str, str], annotations: dict[str, str], phase: str = "Running"
) -> dict[str, Any]:
    """One target as Kubernetes SD (role: pod) describes a pod's container port."""
    meta = {
        "__meta_kubernetes_namespace": namespace,
        "__meta_kubernetes_pod_name": name,
        "__meta_kubernetes_pod_ip": address.rsplit(":", 1)[0],
        "__meta_kubernetes_pod_phase": phase,
    }
    for key, value in labels.items():
        meta["__meta_kubernetes_pod_label_" + key.replace(".", "_").replace("/", "_").replace("-", "_")] = value
    for key, value in annotations.items():
        meta["__meta_kubernetes_pod_annotation_" + key.replace(".", "_").replace("/", "_")] = value
    return {"targets": [address], "labels": meta}


@pytest.fixture
def sglang_server() -> Iterator[int]:
    """A recorded SGLang exposition at /sglang-metrics (a non-default path, so the annotation matters)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            body = SGLANG.encode() if self.path == "/sglang-metrics" else b"not here\n"
            self.send_response(200 if self.path == "/sglang-metrics" else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _discovery_config(sim_port: int, sglang_port: int) -> dict[str, Any]:
    objects = manifests.load(ROOT / "deploy")
    config_map = next(
        o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == names.PROMETHEUS_CONFIG_MAP
    )
    config = yaml.safe_load(config_map["data"]["prometheus.yml"])
    job = next(j for j in config["scrape_configs"] if j["job_name"] == names.MODEL_SERVERS_JOB)
    sim = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == names.SIM_DEPLOYMENT)
    sim_meta = sim["spec"]["template"]["metadata"]
    # The Deployment's annotations name port 8000; here the simulator listens on a free port.
    sim_annotations = {**sim_meta["annotations"], "prometheus.io/port": str(sim_port)}
    sglang_annotations = {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(sglang_port),
        "prometheus.io/path": "/sglang-metrics",
    }
    del job["kubernetes_sd_configs"]
    job["static_configs"] = [
        # The container port SD reports is the declared one (8000); the annotation redirects it.
        _pod("127.0.0.1:8000", names.NAMESPACE, "attnload-sim-abc", sim_meta["labels"], sim_annotations),
        _pod("127.0.0.1:30000", "vllm", "sglang-0", {"app": "sglang"}, sglang_annotations),
        _pod(f"127.0.0.1:{sglang_port}", "vllm", "unannotated-0", {"app": "other"}, {}),
        _pod(f"127.0.0.1:{sglang_port}", "vllm", "pending-0", {"app": "sglang"}, sglang_annotations, "Pending"),
    ]
    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [job],
    }


def _query(url: str, expr: str) -> list[dict[str, Any]]:
    body = http_json(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}")
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def _wait(url: str, expr: str, count: int, timeout_s: float = 60.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    result: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        result = _query(url, expr)
        if len(result) >= count:
            return result
        time.sleep(0.5)
    raise AssertionError(f"{expr}: {len(result)} series after {timeout_s}s, want {count}: {result}")


def test_generated_discovery_job_scrapes_annotated_pods_once(
    processes: Processes, tmp_path: Path, sglang_server: int
) -> None:
    prometheus = require_binary("prometheus")
    sim_url = start_sim(
        processes, "--models", "llama-3-70b,deepseek-chat", "--mode", "fixed", "--ttft-ms", "10", "--itl-ms", "5"
    )
    sim_port = int(sim_url.rsplit(":", 1)[1])
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump(_discovery_config(sim_port, sglang_server), sort_keys=False), encoding="utf-8")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = processes.start(
        [
            prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        name="prometheus",
    )
    wait_http(f"{url}/-/ready", proc, timeout_s=60)

    up = _wait(url, "up == 1", 2)
    assert {
        (r["metric"]["job"], r["metric"]["namespace"], r["metric"]["pod"], r["metric"]["instance"]) for r in up
    } == {
        ("attnload-sim", "attnload", "attnload-sim-abc", f"127.0.0.1:{sim_port}"),
        ("model-servers", "vllm", "sglang-0", f"127.0.0.1:{sglang_server}"),
    }
    targets = http_json(f"{url}/api/v1/targets")["data"]
    assert len(targets["activeTargets"]) == 2  # the unannotated and the Pending pod were dropped
    assert {t["scrapeUrl"] for t in targets["activeTargets"]} == {
        f"http://127.0.0.1:{sim_port}/metrics",
        f"http://127.0.0.1:{sglang_server}/sglang-metrics",
    }

    # The simulator: both its vLLM names and attnload_sim_* kept, each series once.
    sim_exposition = http_text(f"{sim_url}/metrics")
    vllm = _wait(url, 'vllm:num_requests_running{job="attnload-sim"}', 2)
    assert sorted(r["metric"]["model_name"] for r in vllm) == ["deepseek-chat", "llama-3-70b"]
    assert len(_wait(url, "attnload_sim_requests_running", 2)) == 2
    assert _query(url, "count(vllm:num_requests_running) by (model_name) > 1") == []  # not scraped twice
    # SGLang: the recorded values, per rank; the runtime series it also exports are dropped.
    usage = _wait(url, 'sglang:token_usage{namespace="vllm"}', 2)
    assert sorted(float(r["value"][1]) for r in usage) == [0.4, 0.8]
    assert {r["metric"]["model_name"] for r in usage} == {"deepseek-ai/DeepSeek-V3"}
    assert _query(url, '{__name__=~"python_.+|process_.+"}') == []
    assert _query(url, 'scrape_samples_post_metric_relabeling{pod="sglang-0"} < scrape_samples_scraped')
    # Every series kept from the simulator is one the dashboards or attnload read.
    kept = {r["metric"]["__name__"] for r in _query(url, '{job="attnload-sim"}')}
    assert kept and all(n.startswith(("vllm:", "attnload_sim_", "up", "scrape_")) for n in kept), kept
    served = {
        line.split("{")[0].split(" ")[0]
        for line in sim_exposition.splitlines()
        if line.startswith(("vllm:", "attnload_sim_"))
    }
    assert served and served <= kept, served - kept  # ... and none of those is lost
