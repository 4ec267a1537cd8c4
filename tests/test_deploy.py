"""deploy/ is valid Kubernetes, internally consistent, and its generated parts are current.

Offline: the OpenAPI schemas come with kubernetes-validate (strict mode: an unknown or
misspelled field fails). The cross-reference checks catch what a schema cannot: a
Service selecting no pod, a port name nobody exposes, a ConfigMap nobody created, a
process flag that disagrees with its Service port, a scrape target with no Service.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from attnload import __version__
from attnload.cluster import generate, manifests, names

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
K8S_VERSION = "1.31.0"  # oldest Kubernetes release we state support for (docs/kubernetes.md)
OBJECTS = manifests.load(DEPLOY)
TEMPLATES = [doc for p in sorted(DEPLOY.glob("*.template")) for doc in yaml.safe_load_all(p.read_text()) if doc]


def _by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in OBJECTS if o["kind"] == kind}


DEPLOYMENTS, SERVICES, CONFIG_MAPS = _by_kind("Deployment"), _by_kind("Service"), _by_kind("ConfigMap")
SECRETS = {o["metadata"]["name"]: o for o in TEMPLATES if o["kind"] == "Secret"}


def _container(deployment: str, name: str | None = None) -> dict[str, Any]:
    containers = DEPLOYMENTS[deployment]["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if name is None or c["name"] == name)


def _flag(container: dict[str, Any], flag: str) -> str:
    argv = [*container.get("command", []), *container.get("args", [])]
    for i, arg in enumerate(argv):
        if arg == flag:
            return str(argv[i + 1])
        if arg.startswith(flag + "="):
            return str(arg.split("=", 1)[1])
    raise AssertionError(f"{container['name']}: no {flag} in {argv}")


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def _service_port(service: str, name: str) -> int:
    return int(next(p["port"] for p in SERVICES[service]["spec"]["ports"] if p["name"] == name))


def test_generated_configmaps_match_their_sources() -> None:
    assert generate.stale(ROOT) == [], "run `python -m attnload.cluster.generate` (make deploy-gen)"


def test_generate_check_mode_exit_status() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "attnload.cluster.generate", "--check", "--root", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("obj", OBJECTS + TEMPLATES, ids=lambda o: f"{o['kind']}/{o['metadata']['name']}")
def test_every_object_validates_strictly(obj: dict[str, Any]) -> None:
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_namespace_comes_first_and_everything_lives_in_it() -> None:
    assert OBJECTS[0]["kind"] == "Namespace" and OBJECTS[0]["metadata"]["name"] == names.NAMESPACE
    for obj in OBJECTS[1:] + TEMPLATES:
        assert obj["metadata"]["namespace"] == names.NAMESPACE, obj["metadata"]["name"]
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "attnload"


def test_secret_template_is_not_applied_and_holds_no_key() -> None:
    assert not any(o["kind"] == "Secret" for o in OBJECTS), "a re-apply would overwrite the real key"
    assert SECRETS[names.SECRET]["stringData"] == {"TAOTOKEN_API_KEY": "REPLACE-WITH-YOUR-KEY"}


def test_services_select_pods_and_ports_exist() -> None:
    for name, svc in SERVICES.items():
        selector = svc["spec"]["selector"]
        matches = [
            d for d in DEPLOYMENTS.values() if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert len(matches) == 1, f"Service {name} selects {len(matches)} Deployments"
        exposed = {
            p["name"]: p["containerPort"]
            for c in matches[0]["spec"]["template"]["spec"]["containers"]
            for p in c.get("ports", [])
        }
        for port in svc["spec"]["ports"]:
            assert port["targetPort"] in exposed, f"{name}: no container port {port['targetPort']}"
            assert exposed[port["targetPort"]] == port["port"], f"{name}: port {port['name']} differs"


def test_deployment_selectors_match_templates_and_pods_are_locked_down() -> None:
    for name, dep in DEPLOYMENTS.items():
        pod = dep["spec"]["template"]
        assert dep["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items(), name
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True, name
        for c in pod["spec"]["containers"]:
            assert c["securityContext"]["readOnlyRootFilesystem"] is True, (name, c["name"])
            assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
            assert c["resources"]["requests"] and c["resources"]["limits"], (name, c["name"])
            assert "readinessProbe" in c, (name, c["name"])
            if name != names.WORKER_DEPLOYMENT:  # a worker's PID 1 exiting is its liveness signal
                assert "livenessProbe" in c, (name, c["name"])


def test_referenced_configmaps_and_secrets_exist() -> None:
    for name, dep in DEPLOYMENTS.items():
        spec = dep["spec"]["template"]["spec"]
        for vol in spec.get("volumes", []):
            if "configMap" in vol:
                assert vol["configMap"]["name"] in CONFIG_MAPS, (name, vol)
        for c in spec["containers"]:
            for src in c.get("envFrom", []):
                assert src["secretRef"]["name"] in SECRETS and src["secretRef"]["optional"] is True
            for env in c.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref:  # required (no admin/admin fallback): `cluster up` creates it, the template shows it
                    assert ref["name"] in SECRETS and "optional" not in ref, (name, ref)
            mounts = {m["name"] for m in c.get("volumeMounts", [])}
            assert mounts <= {v["name"] for v in spec.get("volumes", [])}, (name, c["name"])


def test_process_flags_match_the_service_ports() -> None:
    master, worker, sim = (
        _container(names.MASTER_DEPLOYMENT, "master"),
        _container(names.WORKER_DEPLOYMENT),
        _container(names.SIM_DEPLOYMENT),
    )
    assert int(_flag(master, "--master-bind-port")) == _service_port(names.MASTER_SERVICE, "master")
    assert int(_flag(master, "--web-port")) == _service_port(names.MASTER_SERVICE, "web")
    assert int(_env(master)["ATTNLOAD_METRICS_PORT"]) == _service_port(names.MASTER_SERVICE, "metrics")
    assert _env(master)["ATTNLOAD_RESULTS"] == names.RESULTS_DIR
    results = _container(names.MASTER_DEPLOYMENT, "results")
    assert int(results["args"][2]) == _service_port(names.MASTER_SERVICE, "results")
    assert _flag(worker, "--master-host") == names.MASTER_SERVICE
    assert int(_flag(worker, "--master-port")) == _service_port(names.MASTER_SERVICE, "master")
    assert int(_flag(sim, "--port")) == _service_port(names.SIM_SERVICE, "http")
    prom = _container(names.PROMETHEUS_DEPLOYMENT)
    assert _flag(prom, "--web.listen-address").endswith(f":{_service_port(names.PROMETHEUS_SERVICE, 'http')}")
    for c in (master, worker):
        assert c["args"][:2] == ["-f", "/app/locustfiles/chat.py"]


def test_configs_named_by_env_exist_and_point_at_the_sim_service() -> None:
    data = CONFIG_MAPS[names.CONFIG_MAP]["data"]
    for dep in (names.MASTER_DEPLOYMENT, names.WORKER_DEPLOYMENT):
        path = _env(_container(dep))["ATTNLOAD_CONFIG"]
        assert path.startswith(names.CONFIG_DIR + "/") and path.rsplit("/", 1)[1] in data
    assert f"http://{names.SIM_SERVICE}:{_service_port(names.SIM_SERVICE, 'http')}/api" in data["k8s_sim_config.json"]
    sim_models = _flag(_container(names.SIM_DEPLOYMENT), "--models").split(",")
    assert {"llama-3-70b", "deepseek-chat"} <= set(sim_models)


def test_prometheus_scrapes_the_services() -> None:
    config = yaml.safe_load(CONFIG_MAPS[names.PROMETHEUS_CONFIG_MAP]["data"]["prometheus.yml"])
    targets = {t for job in config["scrape_configs"] for s in job.get("static_configs") or [] for t in s["targets"]}
    assert f"{names.MASTER_SERVICE}:{_service_port(names.MASTER_SERVICE, 'metrics')}" in targets
    # The simulator is found by pod discovery (job model-servers, tests/test_deploy_discovery.py).
    sim_pod = DEPLOYMENTS[names.SIM_DEPLOYMENT]["spec"]["template"]["metadata"]["annotations"]
    assert int(sim_pod["prometheus.io/port"]) == _service_port(names.SIM_SERVICE, "http")
    for target in targets - {f"localhost:{names.PROMETHEUS_PORT}"}:
        host, port = target.rsplit(":", 1)
        assert host in SERVICES and int(port) in {p["port"] for p in SERVICES[host]["spec"]["ports"]}, target
    assert config["rule_files"] == ["/etc/prometheus/rules.yml"]
    assert "rules.yml" in CONFIG_MAPS[names.PROMETHEUS_CONFIG_MAP]["data"]


def test_grafana_datasource_and_dashboards_are_provisioned() -> None:
    ds_files = CONFIG_MAPS[names.GRAFANA_DATASOURCES_MAP]["data"]
    urls = {
        d["url"] for text in ds_files.values() for d in yaml.safe_load(text)["datasources"] if d["type"] == "prometheus"
    }
    assert urls == {f"http://{names.PROMETHEUS_SERVICE}:{_service_port(names.PROMETHEUS_SERVICE, 'http')}"}
    providers = CONFIG_MAPS[names.GRAFANA_PROVIDERS_MAP]["data"]
    paths = {p["options"]["path"] for text in providers.values() for p in yaml.safe_load(text)["providers"]}
    mounts = {m["mountPath"]: m["name"] for m in _container(names.GRAFANA_DEPLOYMENT)["volumeMounts"]}
    assert paths == {names.GRAFANA_DASHBOARD_DIR} and mounts[names.GRAFANA_DASHBOARD_DIR] == "dashboards"
    dashboards = sorted(p.name for p in (ROOT / "grafana" / "dashboards").glob("*.json"))
    assert sorted(CONFIG_MAPS[names.GRAFANA_DASHBOARDS_MAP]["data"]) == dashboards


def test_k8s_sim_config_loads_without_a_key() -> None:
    from attnload.config.load import load_config

    cfg = load_config(ROOT / "examples" / "k8s_sim_config.json")
    assert {(m.id, m.attention, m.api_key_env) for m in cfg.models} == {
        ("llama-3-70b", "GQA", None),
        ("deepseek-chat", "MLA", None),
    }


def test_every_attnload_image_is_tagged_with_the_package_version() -> None:
    """`cluster up --image` replaces exactly manifests.ATTNLOAD_IMAGE, so deploy/ must name no other tag."""
    assert manifests.ATTNLOAD_IMAGE == f"attnload:{__version__}"
    named = {
        path.relative_to(DEPLOY).as_posix(): set(re.findall(r"image:\s*[\"']?(attnload[^\s\"']*)", path.read_text()))
        for path in sorted(DEPLOY.rglob("*.yaml"))
    }
    assert {image for images in named.values() for image in images} == {manifests.ATTNLOAD_IMAGE}, named
    assert {"20-sim.yaml", "30-master.yaml", "31-worker.yaml", "extras/headless-job.yaml"} <= {
        name for name, images in named.items() if images
    }


def test_the_image_build_context_carries_deploy_for_the_wheel() -> None:
    allowed = [line for line in (ROOT / ".dockerignore").read_text().splitlines() if line.startswith("!")]
    assert "!deploy/" in allowed and "!setup.py" in allowed  # setup.py copies deploy/ into the package


def test_dockerfile_is_pinned_non_root_and_ships_the_locustfiles() -> None:
    text = (ROOT / "Dockerfile").read_text()
    base = re.search(r"^ARG BASE_IMAGE=(\S+)$", text, re.M)
    assert base and not base.group(1).endswith(":latest") and re.search(r"\d{8}", base.group(1))
    assert re.search(r"^USER 10001$", text, re.M)
    assert "COPY locustfiles /app/locustfiles" in text and 'ENTRYPOINT ["attnload"]' in text
    for dep in DEPLOYMENTS.values():
        for c in dep["spec"]["template"]["spec"]["containers"]:
            assert not c["image"].endswith(":latest"), c["image"]
