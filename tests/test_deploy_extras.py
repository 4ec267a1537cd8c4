"""deploy/extras/: valid against the Prometheus Operator's CRDs and Kubernetes 1.31, consistent, current.

The CRD schemas in tests/crd_schemas/ are the operator's own openAPIV3Schema (v0.93.0,
descriptions stripped). The API server prunes unknown fields of a custom resource, and
`kubectl apply` (strict field validation) rejects them; the test does the latter by
closing every object schema that lists its properties, so a misspelled field fails here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from attnload.cluster import generate, manifests, names

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = ROOT / "deploy" / names.EXTRAS_DIR
SCHEMAS = Path(__file__).resolve().parent / "crd_schemas"
K8S_VERSION = "1.31.0"
OBJECTS = [doc for p in sorted(EXTRAS.glob("*.yaml")) for doc in yaml.safe_load_all(p.read_text()) if doc]
DEPLOY = manifests.load(ROOT / "deploy")
CRD_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
METADATA_KEYS = {"name", "namespace", "labels", "annotations"}


def _strict(schema: Any) -> Any:
    """Close object schemas that list their properties, as strict field validation does."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def _validator(kind: str) -> jsonschema.Draft7Validator:
    schema = json.loads((SCHEMAS / f"monitoring.coreos.com_v1_{kind.lower()}.json").read_text())
    return jsonschema.Draft7Validator(_strict(schema))


def _of(kind: str, objects: list[dict[str, Any]] = OBJECTS) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def _id(obj: dict[str, Any]) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


def test_extras_hold_every_kind_the_issue_asks_for() -> None:
    kinds = {o["kind"] for o in OBJECTS}
    assert kinds >= CRD_KINDS | {"ConfigMap", "Job", "PersistentVolumeClaim", "NetworkPolicy"}
    for obj in OBJECTS:
        assert obj["metadata"]["namespace"] == names.NAMESPACE, _id(obj)
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "attnload", _id(obj)


@pytest.mark.parametrize("obj", [o for o in OBJECTS if o["kind"] in CRD_KINDS], ids=_id)
def test_custom_resources_validate_against_the_operator_crds(obj: dict[str, Any]) -> None:
    assert obj["apiVersion"] == "monitoring.coreos.com/v1"
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in _validator(obj["kind"]).iter_errors(obj)]
    assert errors == []
    assert set(obj["metadata"]) <= METADATA_KEYS


def test_the_crd_schemas_reject_a_misspelled_field() -> None:
    monitor = json.loads(json.dumps(_of("ServiceMonitor")["attnload-master"]))
    monitor["spec"]["endpoints"][0]["intervall"] = "5s"
    messages = [e.message for e in _validator("ServiceMonitor").iter_errors(monitor)]
    assert any("'intervall' was unexpected" in m for m in messages), messages
    rule = json.loads(json.dumps(next(iter(_of("PrometheusRule").values()))))
    rule["spec"]["groups"][0]["rules"][0].pop("expr")
    assert any("'expr' is a required property" in e.message for e in _validator("PrometheusRule").iter_errors(rule))


@pytest.mark.parametrize("obj", [o for o in OBJECTS if o["kind"] not in CRD_KINDS], ids=_id)
def test_core_objects_validate_strictly(obj: dict[str, Any]) -> None:
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_generated_extras_are_current() -> None:
    assert {names.GENERATED_RULES_FILE, names.GENERATED_DASHBOARDS_FILE} <= set(generate.render(ROOT))
    assert generate.stale(ROOT) == [], "run `python -m attnload.cluster.generate`"


def test_prometheus_rule_is_rules_yml() -> None:
    rules = yaml.safe_load((ROOT / "grafana" / "prometheus" / "rules.yml").read_text())
    (rule,) = _of("PrometheusRule").values()
    assert rule["spec"]["groups"] == rules["groups"] and len(rules["groups"]) >= 2
    in_namespace = yaml.safe_load(_of("ConfigMap", DEPLOY)[names.PROMETHEUS_CONFIG_MAP]["data"]["rules.yml"])
    assert rule["spec"]["groups"] == in_namespace["groups"]  # both Prometheuses record the same series


def test_one_labelled_configmap_per_dashboard() -> None:
    boards = {p.name: p.read_text() for p in (ROOT / "grafana" / "dashboards").glob("*.json")}
    maps = [o for o in OBJECTS if o["kind"] == "ConfigMap"]
    assert sorted(k for m in maps for k in m["data"]) == sorted(boards) and len(maps) == len(boards) >= 3
    for cm in maps:
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert cm["metadata"]["annotations"] == {"grafana_folder": "attnload"}
        ((key, text),) = cm["data"].items()
        assert text == boards[key] and json.loads(text)["uid"]


def test_monitors_select_what_deploy_and_the_job_expose() -> None:
    services = _of("Service", DEPLOY)
    jobs = {"attnload-master": ("metrics", "attnload"), "attnload-sim": ("http", "attnload-sim")}
    for name, monitor in _of("ServiceMonitor").items():
        if "namespaceSelector" in monitor["spec"]:
            continue  # dcgm-exporter's, in the GPU Operator's namespace (tests/test_gpu_deploy.py)
        selector = monitor["spec"]["selector"]["matchLabels"]
        matched = [s for s in services.values() if selector.items() <= s["metadata"]["labels"].items()]
        assert [s["metadata"]["name"] for s in matched] == [name]
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["port"] == jobs[name][0] in {p["name"] for p in matched[0]["spec"]["ports"]}
        assert endpoint["relabelings"] == [{"action": "replace", "targetLabel": "job", "replacement": jobs[name][1]}]
    (pod_monitor,) = [m for m in _of("PodMonitor").values() if "namespaceSelector" not in m["spec"]]
    pod = _of("Job")["attnload-run"]["spec"]["template"]
    assert pod_monitor["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    ports = {p["name"]: p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
    assert ports[pod_monitor["spec"]["podMetricsEndpoints"][0]["port"]] == names.METRICS_PORT


def test_headless_job_keeps_results_on_its_claim() -> None:
    job = _of("Job")["attnload-run"]
    spec = job["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    args = container["args"]
    assert container["command"] == ["attnload"] and args[0] == "run" and "--headless" in args
    assert job["spec"]["backoffLimit"] == 0 and spec["restartPolicy"] == "Never"
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    results = volumes[mounts[args[args.index("--results") + 1]]]
    assert results["persistentVolumeClaim"]["claimName"] in _of("PersistentVolumeClaim")
    config = args[args.index("--config") + 1]
    assert volumes[mounts[names.CONFIG_DIR]]["configMap"]["name"] == names.CONFIG_MAP
    assert config.rsplit("/", 1)[1] in _of("ConfigMap", DEPLOY)[names.CONFIG_MAP]["data"]
    assert int(args[args.index("--metrics-port") + 1]) == names.METRICS_PORT
    # the namespace enforces pod-security "restricted"
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["seccompProfile"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert spec["terminationGracePeriodSeconds"] == 60
