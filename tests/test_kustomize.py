"""The root kustomization.yaml renders deploy/ with its knobs, and every object is valid.

`kubectl kustomize .` is the real renderer (kustomize's load restrictor included); each
object it prints must pass the Kubernetes 1.31 schema in strict mode, as deploy/ does.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from attnload import __version__
from attnload.cluster import manifests, names

ROOT = Path(__file__).resolve().parents[1]
K8S_VERSION = "1.31.0"
KUSTOMIZATION = yaml.safe_load((ROOT / "kustomization.yaml").read_text())
pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")


def _render() -> list[dict[str, Any]]:
    proc = subprocess.run(["kubectl", "kustomize", "."], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


RENDERED = _render() if shutil.which("kubectl") else []


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


def _find(kind: str, name: str) -> dict[str, Any]:
    return next(o for o in RENDERED if _key(o) == (kind, name))


def test_it_lists_every_plain_manifest_and_nothing_else() -> None:
    plain = [f"deploy/{p.name}" for p in manifests.manifest_files(ROOT / "deploy")]
    assert KUSTOMIZATION["resources"] == plain


def test_it_renders_the_same_objects_as_deploy() -> None:
    assert sorted(map(_key, RENDERED)) == sorted(map(_key, manifests.load(ROOT / "deploy")))
    assert all(o["metadata"].get("namespace") == names.NAMESPACE for o in RENDERED if o["kind"] != "Namespace")


@pytest.mark.parametrize("obj", RENDERED, ids=lambda o: "/".join(_key(o)))
def test_every_rendered_object_validates_strictly(obj: dict[str, Any]) -> None:
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_image_and_replicas_knobs_apply() -> None:
    assert KUSTOMIZATION["images"] == [{"name": "attnload", "newName": "attnload", "newTag": __version__}]
    images = {
        c["image"] for o in RENDERED if o["kind"] == "Deployment" for c in o["spec"]["template"]["spec"]["containers"]
    }
    tagged = f"attnload:{__version__}"
    assert tagged in images and not any(i.startswith("attnload:") and i != tagged for i in images)
    assert _find("Deployment", names.WORKER_DEPLOYMENT)["spec"]["replicas"] == KUSTOMIZATION["replicas"][0]["count"]


def test_the_config_generator_feeds_master_and_workers() -> None:
    generator = KUSTOMIZATION["configMapGenerator"][0]
    key, source = generator["files"][0].split("=")
    data = _find("ConfigMap", names.CONFIG_MAP)["data"]
    assert data[key] == (ROOT / source).read_text()
    assert set(data) > {key, "k8s_sim_config.json"}  # merged into deploy/'s ConfigMap, not replacing it
    for deployment, container in ((names.MASTER_DEPLOYMENT, "master"), (names.WORKER_DEPLOYMENT, "worker")):
        spec = _find("Deployment", deployment)["spec"]["template"]["spec"]
        env = {e["name"]: e.get("value") for c in spec["containers"] if c["name"] == container for e in c["env"]}
        assert env["ATTNLOAD_CONFIG"] == f"{names.CONFIG_DIR}/{key}"
        assert {"name": "config", "configMap": {"name": names.CONFIG_MAP}} in spec["volumes"]
