"""`kubectl apply -f deploy/` (or `kubectl apply -k .`) is the only step: nothing a pod needs is missing.

Renders deploy/ as kubectl reads it (and the root kustomization with `kubectl kustomize`), then
walks every pod template: each ConfigMap, Secret, PersistentVolumeClaim and ServiceAccount it
names, each key it picks out of them, and each volume its containers mount must be one of the
rendered objects, or be marked ``optional``. A referenced object that only a human would create
(the old Grafana password Secret) fails here, as the pod would wait in CreateContainerConfigError.
No manifest or template holds a password, literal or placeholder.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from attnload.cluster import manifests, names

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
K8S_VERSION = "1.31.0"
POD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}


def _kustomized() -> list[dict[str, Any]]:
    proc = subprocess.run(["kubectl", "kustomize", "."], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def _renders() -> Iterator[Any]:
    yield pytest.param(manifests.load(DEPLOY), id="deploy")
    extras = [
        doc
        for p in sorted((DEPLOY / names.EXTRAS_DIR).glob("headless-job.yaml"))
        for doc in yaml.safe_load_all(p.read_text(encoding="utf-8"))
        if doc
    ]
    yield pytest.param(manifests.load(DEPLOY) + extras, id="deploy+headless-job")
    if shutil.which("kubectl"):
        yield pytest.param(_kustomized(), id="kustomize")


def pod_specs(objects: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for obj in objects:
        if obj.get("kind") in POD_KINDS:
            template = obj["spec"]["template"]
            yield f"{obj['kind']}/{obj['metadata']['name']}", template["spec"]
        elif obj.get("kind") == "CronJob":
            yield f"CronJob/{obj['metadata']['name']}", obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        elif obj.get("kind") == "Pod":
            yield f"Pod/{obj['metadata']['name']}", obj["spec"]


def references(spec: dict[str, Any]) -> Iterator[tuple[str, str, str | None, bool]]:
    """(kind, name, key or None, optional) for everything ``spec`` needs from the API server."""
    for volume in spec.get("volumes", []):
        if "configMap" in volume:
            ref = volume["configMap"]
            for item in ref.get("items") or [{"key": None}]:
                yield "ConfigMap", ref["name"], item["key"], bool(ref.get("optional"))
        if "secret" in volume:
            ref = volume["secret"]
            for item in ref.get("items") or [{"key": None}]:
                yield "Secret", ref["secretName"], item["key"], bool(ref.get("optional"))
        if "persistentVolumeClaim" in volume:
            yield "PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"], None, False
        for source in (volume.get("projected") or {}).get("sources", []):
            for kind, field in (("ConfigMap", "configMap"), ("Secret", "secret")):
                if field in source:
                    ref = source[field]
                    for item in ref.get("items") or [{"key": None}]:
                        yield kind, ref["name"], item["key"], bool(ref.get("optional"))
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        for env in container.get("env", []):
            source = env.get("valueFrom") or {}
            for kind, field in (("ConfigMap", "configMapKeyRef"), ("Secret", "secretKeyRef")):
                if field in source:
                    ref = source[field]
                    yield kind, ref["name"], ref["key"], bool(ref.get("optional"))
        for env_from in container.get("envFrom", []):
            for kind, field in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
                if field in env_from:
                    yield kind, env_from[field]["name"], None, bool(env_from[field].get("optional"))
    account = spec.get("serviceAccountName")
    if account and account != "default":
        yield "ServiceAccount", account, None, False
    for pull in spec.get("imagePullSecrets", []):
        yield "Secret", pull["name"], None, False


def _keys(obj: dict[str, Any]) -> set[str]:
    return {*(obj.get("data") or {}), *(obj.get("stringData") or {}), *(obj.get("binaryData") or {})}


@pytest.mark.parametrize("objects", list(_renders()))
def test_every_reference_exists_or_is_optional(objects: list[dict[str, Any]]) -> None:
    present = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    specs = list(pod_specs(objects))
    assert len(specs) >= 5, [name for name, _ in specs]  # sim, master, worker, prometheus, grafana
    problems = []
    for pod, spec in specs:
        for kind, name, key, optional in references(spec):
            obj = present.get((kind, name))
            if optional:
                continue
            if obj is None:
                problems.append(f"{pod} needs {kind} {name}, which the manifests do not create")
            elif key is not None and key not in _keys(obj):
                problems.append(f"{pod} needs key {key} of {kind} {name}, which it does not hold")
        volumes = {v["name"] for v in spec.get("volumes", [])}
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            for mount in container.get("volumeMounts", []):
                if mount["name"] not in volumes:
                    problems.append(f"{pod}/{container['name']} mounts undefined volume {mount['name']}")
    assert not problems, "\n".join(problems)


def test_the_walk_sees_what_a_pod_needs() -> None:
    """The checker is not vacuous: a required Secret reference the manifests lack is caught."""
    spec = {
        "containers": [
            {"name": "c", "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "nowhere", "key": "k"}}}]}
        ],
        "volumes": [{"name": "v", "secret": {"secretName": "maybe", "optional": True}}],
    }
    assert list(references(spec)) == [("Secret", "maybe", None, True), ("Secret", "nowhere", "k", False)]


GRAFANA_PASSWORD_FILE = "/run/grafana-admin/admin-password"


def _grafana(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == names.GRAFANA_DEPLOYMENT)


def test_grafana_makes_its_password_in_the_pod_and_a_secret_still_wins() -> None:
    grafana = _grafana(manifests.load(DEPLOY))
    kubernetes_validate.validate(grafana, K8S_VERSION, strict=True)
    spec = grafana["spec"]["template"]["spec"]
    (main,) = spec["containers"]
    env = {e["name"]: e for e in main["env"]}
    assert env["GF_SECURITY_ADMIN_PASSWORD__FILE"]["value"] == GRAFANA_PASSWORD_FILE
    assert "GF_SECURITY_ADMIN_PASSWORD" not in env and "GF_SECURITY_ADMIN_USER" not in env
    assert (
        env["GF_AUTH_ANONYMOUS_ENABLED"]["value"] == "true" and env["GF_AUTH_ANONYMOUS_ORG_ROLE"]["value"] == "Viewer"
    )
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["admin-password"]["emptyDir"]["medium"] == "Memory"  # never on the node's disk
    secret = volumes["admin-secret"]["secret"]
    assert secret["secretName"] == names.GRAFANA_SECRET and secret["optional"] is True
    assert secret["items"] == [{"key": names.GRAFANA_SECRET_KEY, "path": names.GRAFANA_SECRET_KEY}]
    (init,) = spec["initContainers"]
    script = "\n".join(init["args"])
    assert "/etc/attnload-grafana-secret/admin-password" in script and "/dev/urandom" in script
    assert not re.search(r"\b(echo|printf)\b", script), "the password is never printed (kubectl logs would show it)"
    mounts = {m["name"]: m for m in main["volumeMounts"]}
    assert mounts["admin-password"]["readOnly"] is True


def test_no_manifest_holds_a_password() -> None:
    for path in sorted(DEPLOY.rglob("*")):  # the wheel carries these same files (test_cluster_package.py)
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        assert "REPLACE-WITH-A-RANDOM-PASSWORD" not in text, path
        for doc in (d for d in yaml.safe_load_all(text) if isinstance(d, dict)):
            if doc.get("kind") == "Secret":
                assert not any("password" in k.lower() for k in _keys(doc)), f"{path}: a password Secret"
    assert not (DEPLOY / "16-grafana-secret.yaml.template").exists()


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX sh")
def test_the_init_script_makes_a_password_prints_nothing_and_lets_a_secret_win(tmp_path: Path) -> None:
    """The init container's own script, run by sh with its two paths moved under tmp_path."""
    (init,) = _grafana(manifests.load(DEPLOY))["spec"]["template"]["spec"]["initContainers"]
    run_dir, secret_dir = tmp_path / "run", tmp_path / "secret"
    run_dir.mkdir()
    secret_dir.mkdir()
    script = (
        init["args"][0]
        .replace("/run/grafana-admin", str(run_dir))
        .replace("/etc/attnload-grafana-secret", str(secret_dir))
    )
    out = run_dir / "admin-password"

    def start() -> str:
        proc = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30)
        assert proc.returncode == 0 and proc.stdout == proc.stderr == "", proc  # nothing in `kubectl logs`
        return out.read_text()

    first = start()
    assert re.fullmatch(r"[A-Za-z0-9]{24}", first) and out.stat().st_mode & 0o077 == 0
    assert start() == first  # a restarted pod keeps the password its database was made with
    out.unlink()
    assert start() != first  # a new pod: a new random one
    (secret_dir / "admin-password").write_text("from-the-secret")
    assert start() == "from-the-secret"  # an existing Secret wins
