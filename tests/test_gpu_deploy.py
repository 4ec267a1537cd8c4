"""Issue 26 on Kubernetes: deploy/'s Prometheus scrapes dcgm-exporter where the GPU Operator runs it.

The scrape job, its egress and the RBAC come from one namespace list (cluster/gpumonitor.py);
the RBAC lives in the exporter's namespace, so it is in deploy/gpu-operator/, never in the
objects `kubectl apply -f deploy/` creates on a cluster without GPUs.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from attnload.cluster import generate, gpumonitor, manifests, names

ROOT = Path(__file__).resolve().parents[1]


def _prometheus_yml(text: str) -> dict:
    docs = [d for d in yaml.safe_load_all(text) if d]
    config = next(d for d in docs if d["kind"] == "ConfigMap")
    return yaml.safe_load(config["data"]["prometheus.yml"])


def test_default_deploy_scrapes_the_gpu_operators_namespace() -> None:
    prom = _prometheus_yml((ROOT / "deploy" / names.GENERATED_PROMETHEUS_FILE).read_text())
    job = next(j for j in prom["scrape_configs"] if j["job_name"] == "dcgm-exporter")
    assert job["kubernetes_sd_configs"] == [{"role": "pod", "namespaces": {"names": ["gpu-operator"]}}]
    assert job["honor_labels"] is True  # the exporter's pod/namespace/container labels survive
    keep = job["relabel_configs"][0]
    assert keep["action"] == "keep" and "nvidia-dcgm-exporter" in keep["regex"] and "dcgm-exporter" in keep["regex"]
    assert any(r.get("regex") == "9400" for r in job["relabel_configs"])
    policy = next(o for o in manifests.load(ROOT / "deploy") if o["metadata"]["name"] == names.PROMETHEUS_DCGM_POLICY)
    assert policy["spec"]["egress"][0]["ports"] == [{"protocol": "TCP", "port": 9400}]
    assert all(
        o["metadata"].get("namespace", names.NAMESPACE) == names.NAMESPACE for o in manifests.load(ROOT / "deploy")
    )


def test_rbac_lives_in_the_exporters_namespace_and_follows_the_flag() -> None:
    rbac = [d for d in yaml.safe_load_all((ROOT / "deploy" / names.GENERATED_DCGM_RBAC_FILE).read_text()) if d]
    assert {(o["kind"], o["metadata"]["namespace"]) for o in rbac} == {
        ("Role", "gpu-operator"),
        ("RoleBinding", "gpu-operator"),
    }
    rendered = generate.render(ROOT, names.MODEL_SERVER_NAMESPACES, ("nvidia-gpu",))
    prom = _prometheus_yml(rendered[names.GENERATED_PROMETHEUS_FILE])
    job = next(j for j in prom["scrape_configs"] if j["job_name"] == "dcgm-exporter")
    assert job["kubernetes_sd_configs"][0]["namespaces"]["names"] == ["nvidia-gpu"]
    assert "namespace: nvidia-gpu" in rendered[names.GENERATED_DCGM_RBAC_FILE]


def test_extras_monitor_the_operators_service_and_the_charts_pods() -> None:
    docs = [d for d in yaml.safe_load_all((ROOT / "deploy" / names.GENERATED_DCGM_MONITOR_FILE).read_text()) if d]
    kinds = {d["kind"]: d for d in docs}
    service = kinds["ServiceMonitor"]["spec"]
    assert service["selector"]["matchLabels"] == {"app": "nvidia-dcgm-exporter"}
    assert service["endpoints"][0]["port"] == "gpu-metrics" and service["endpoints"][0]["honorLabels"]
    pods = kinds["PodMonitor"]["spec"]
    assert pods["selector"]["matchLabels"] == {"app.kubernetes.io/name": "dcgm-exporter"}
    assert service["namespaceSelector"] == pods["namespaceSelector"] == {"matchNames": list(names.DCGM_NAMESPACES)}
    assert gpumonitor.monitors() == docs
