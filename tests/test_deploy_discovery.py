"""deploy/'s Prometheus discovers annotated model-server pods: scrape job, RBAC, egress.

Offline checks of the generated objects. What the relabel rules do to real scrapes is
tested end to end in tests/e2e/test_deploy_discovery_e2e.py; the NetworkPolicy flows in
tests/test_deploy_netpol.py.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from attnload.cluster import discovery, generate, manifests, names

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
OBJECTS = manifests.load(DEPLOY)
K8S_VERSION = "1.31.0"
PROMTOOL = shutil.which("promtool")


def _get(kind: str, name: str, objects: list[dict[str, Any]] = OBJECTS) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]


def _prometheus_yml(objects: list[dict[str, Any]] = OBJECTS) -> dict[str, Any]:
    data = _get("ConfigMap", names.PROMETHEUS_CONFIG_MAP, objects)[0]["data"]
    return dict(yaml.safe_load(data["prometheus.yml"]))


def _job(config: dict[str, Any], name: str) -> dict[str, Any]:
    jobs = [j for j in config["scrape_configs"] if j["job_name"] == name]
    assert len(jobs) == 1, [j["job_name"] for j in config["scrape_configs"]]
    return jobs[0]


def _rendered(namespaces: tuple[str, ...]) -> list[dict[str, Any]]:
    text = generate.render(ROOT, namespaces)[names.GENERATED_PROMETHEUS_FILE]
    return [d for d in yaml.safe_load_all(text) if d]


def test_model_servers_job_discovers_annotated_pods_in_the_listed_namespaces() -> None:
    job = _job(_prometheus_yml(), names.MODEL_SERVERS_JOB)
    assert job["kubernetes_sd_configs"] == [{"role": "pod", "namespaces": {"names": [names.NAMESPACE]}}]
    rules = {(tuple(r["source_labels"]), r["action"]): r for r in job["relabel_configs"]}
    annotation = "__meta_kubernetes_pod_annotation_prometheus_io_"
    assert rules[((f"{annotation}scrape",), "keep")]["regex"] == "true"
    path = rules[((f"{annotation}path",), "replace")]
    assert (path["regex"], path["target_label"]) == ("(.+)", "__metrics_path__")  # absent: Prometheus' /metrics
    ports = [r for r in job["relabel_configs"] if r["source_labels"][0] == f"{annotation}port"]
    assert {r["target_label"] for r in ports} == {"__address__"} and {r["replacement"] for r in ports} == {
        "$2:$1",
        "[$2]:$1",
    }  # IPv4 and bracketed IPv6 pod IPs
    sim = rules[
        (
            (
                "__meta_kubernetes_pod_label_app_kubernetes_io_part_of",
                "__meta_kubernetes_pod_label_app_kubernetes_io_component",
            ),
            "replace",
        )
    ]
    assert (sim["regex"], sim["target_label"], sim["replacement"]) == ("attnload;sim", "job", "attnload-sim")
    assert {r.get("target_label") for r in job["relabel_configs"]} >= {"namespace", "pod"}
    assert job["metric_relabel_configs"] == [discovery.KEEP_SERIES]


def test_the_simulator_is_scraped_once_by_discovery_not_by_a_static_job() -> None:
    config = _prometheus_yml()
    assert len({j["job_name"] for j in config["scrape_configs"]}) == len(config["scrape_configs"])
    static = {t for j in config["scrape_configs"] for s in j.get("static_configs") or [] for t in s["targets"]}
    assert not {t for t in static if t.endswith(f":{names.SIM_PORT}")}, static
    sim = _get("Deployment", names.SIM_DEPLOYMENT)[0]["spec"]["template"]
    annotations = sim["metadata"]["annotations"]
    assert annotations == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(names.SIM_PORT),
        "prometheus.io/path": "/metrics",
    }
    ports = {p["containerPort"] for c in sim["spec"]["containers"] for p in c.get("ports", [])}
    assert int(annotations["prometheus.io/port"]) in ports
    labels = sim["metadata"]["labels"]
    assert f"{labels['app.kubernetes.io/part-of']};{labels['app.kubernetes.io/component']}" == "attnload;sim"
    others = [o for o in OBJECTS if o["kind"] == "Deployment" and o["metadata"]["name"] != names.SIM_DEPLOYMENT]
    assert not [o["metadata"]["name"] for o in others if o["spec"]["template"]["metadata"].get("annotations")]


def test_only_prometheus_mounts_a_token_and_it_may_only_read_pods() -> None:
    for dep in (o for o in OBJECTS if o["kind"] == "Deployment"):
        spec = dep["spec"]["template"]["spec"]
        if dep["metadata"]["name"] == names.PROMETHEUS_DEPLOYMENT:
            assert spec["automountServiceAccountToken"] is True
            assert spec["serviceAccountName"] == names.PROMETHEUS_SERVICE_ACCOUNT
        else:
            assert spec["automountServiceAccountToken"] is False, dep["metadata"]["name"]
            assert "serviceAccountName" not in spec
    account = _get("ServiceAccount", names.PROMETHEUS_SERVICE_ACCOUNT)[0]
    assert account["automountServiceAccountToken"] is False  # the pod opts in; nothing else gets the token
    (role,) = _get("Role", names.PROMETHEUS_DISCOVERY_ROLE)
    assert role["metadata"]["namespace"] == names.NAMESPACE
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    (binding,) = _get("RoleBinding", names.PROMETHEUS_DISCOVERY_ROLE)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": names.PROMETHEUS_DISCOVERY_ROLE,
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": names.PROMETHEUS_SERVICE_ACCOUNT, "namespace": names.NAMESPACE}
    ]
    assert not [o for o in OBJECTS if o["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    # Applied in name order: the account exists before the Deployment that names it.
    order = [(o["kind"], o["metadata"]["name"]) for o in OBJECTS]
    assert order.index(("ServiceAccount", names.PROMETHEUS_SERVICE_ACCOUNT)) < order.index(
        ("Deployment", names.PROMETHEUS_DEPLOYMENT)
    )


def test_more_namespaces_get_a_role_each_and_egress_to_their_pods() -> None:
    objects = _rendered(("attnload", "vllm", "sglang"))
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    sd = _job(_prometheus_yml(objects), names.MODEL_SERVERS_JOB)["kubernetes_sd_configs"]
    assert sd == [{"role": "pod", "namespaces": {"names": ["attnload", "vllm", "sglang"]}}]
    assert {(o["kind"], o["metadata"]["namespace"]) for o in objects if o["kind"].startswith("Role")} == {
        (k, n) for k in ("Role", "RoleBinding") for n in ("attnload", "vllm", "sglang")
    }
    (policy,) = _get("NetworkPolicy", names.PROMETHEUS_MODEL_SERVERS_POLICY, objects)
    assert policy["spec"]["egress"] == [
        {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": n}}} for n in ("vllm", "sglang")]}
    ]
    assert not _get("NetworkPolicy", names.PROMETHEUS_MODEL_SERVERS_POLICY)  # default: attnload only, no policy


def test_generate_cli_takes_namespaces_and_refuses_bad_ones_in_one_line(tmp_path: Path) -> None:
    ok = subprocess.run(
        [*_generate(), "--check", "--model-server-namespace", "attnload"], capture_output=True, text=True, timeout=60
    )
    assert ok.returncode == 0, ok.stderr  # the default, given explicitly: nothing is stale
    other = subprocess.run(
        [*_generate(), "--check", "--model-server-namespace", "vllm"], capture_output=True, text=True, timeout=60
    )
    assert other.returncode == 1 and "40-prometheus-config.generated.yaml" in other.stderr
    bad = subprocess.run(
        [*_generate(), "--model-server-namespace", "Bad_NS"], capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "'Bad_NS'" in bad.stderr, bad.stderr
    assert "Traceback" not in bad.stderr


def _generate() -> list[str]:
    return [sys.executable, "-m", "attnload.cluster.generate", "--root", str(ROOT)]


def test_prometheus_reaches_the_api_server_through_the_placeholder_cluster_up_fills() -> None:
    """`attnload cluster up` replaces the placeholder in both policies (tests/test_cluster.py)."""
    (policy,) = _get("NetworkPolicy", names.PROMETHEUS_APISERVER_POLICY)
    assert policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "prometheus"
    assert policy["spec"]["egress"] == [
        {
            "to": [{"ipBlock": {"cidr": names.APISERVER_PLACEHOLDER_CIDR}}],
            "ports": [{"protocol": "TCP", "port": p} for p in names.APISERVER_PORTS],
        }
    ]


def _promtool_check(config: dict[str, Any], rules: str, directory: Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    config = {**config, "rule_files": ["rules.yml"]}  # /etc/prometheus/rules.yml in the pod
    (directory / "rules.yml").write_text(rules, encoding="utf-8")
    (directory / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return subprocess.run(
        [PROMTOOL, "check", "config", str(directory / "prometheus.yml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)")
def test_promtool_accepts_the_generated_config(tmp_path: Path) -> None:
    """The whole config where promtool knows Kubernetes SD; its relabel rules everywhere.

    Debian's prometheus package is built without Kubernetes service discovery, so its promtool
    rejects ``kubernetes_sd_configs`` as an unknown field. The second check swaps that one
    block for an empty static target list, so every relabel and metric-relabel rule (regexes,
    actions, label names) is still validated by promtool itself.
    """
    data = _get("ConfigMap", names.PROMETHEUS_CONFIG_MAP)[0]["data"]
    config = yaml.safe_load(data["prometheus.yml"])
    full = _promtool_check(config, data["rules.yml"], tmp_path)
    no_k8s_sd = "field kubernetes_sd_configs not found" in full.stdout + full.stderr
    assert full.returncode == 0 or no_k8s_sd, full.stdout + full.stderr
    for job in config["scrape_configs"]:
        if "kubernetes_sd_configs" in job:
            job["static_configs"] = [{"targets": []}]
            del job["kubernetes_sd_configs"]
    static = _promtool_check(config, data["rules.yml"], tmp_path)
    assert static.returncode == 0 and "SUCCESS" in static.stdout + static.stderr, static.stdout + static.stderr
    if no_k8s_sd:
        pytest.skip("this promtool has no Kubernetes SD (Debian build): relabel rules checked, SD block not")
