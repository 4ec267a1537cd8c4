"""deploy/'s answers to the Kubernetes findings that a schema cannot see.

No lifecycle API on Prometheus, no Grafana admin/admin, a master that outlives its
final-counts wait on SIGTERM, and `kubectl apply -f deploy/` reading exactly the plain
manifests (not deploy/extras/, not the templates, not the root kustomization).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from attnload.cluster import manifests, names
from attnload.runner.collector.fleet import FINAL_COUNTS_WAIT_S

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
OBJECTS = manifests.load(DEPLOY)


def _deployment(name: str) -> dict[str, Any]:
    return next(o for o in OBJECTS if o["kind"] == "Deployment" and o["metadata"]["name"] == name)


def test_prometheus_has_no_lifecycle_api() -> None:
    prom = _deployment(names.PROMETHEUS_DEPLOYMENT)["spec"]["template"]["spec"]["containers"][0]
    argv = [*prom.get("command", []), *prom.get("args", [])]
    assert not [a for a in argv if "lifecycle" in a or "admin-api" in a], argv


def test_grafana_admin_password_is_never_a_default() -> None:
    """Read from a file the init container writes (tests/test_deploy_references.py has the details)."""
    grafana = _deployment(names.GRAFANA_DEPLOYMENT)["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in grafana["env"]}
    assert "GF_SECURITY_ADMIN_PASSWORD" not in env
    assert env["GF_SECURITY_ADMIN_PASSWORD__FILE"]["value"].startswith("/run/")
    assert "GF_SECURITY_ADMIN_USER" not in env or env["GF_SECURITY_ADMIN_USER"].get("value") != "admin"


def test_master_grace_period_outlasts_the_final_counts_wait() -> None:
    spec = _deployment(names.MASTER_DEPLOYMENT)["spec"]["template"]["spec"]
    assert FINAL_COUNTS_WAIT_S == 30.0
    assert spec["terminationGracePeriodSeconds"] == 60
    assert spec["terminationGracePeriodSeconds"] >= FINAL_COUNTS_WAIT_S + 15  # room to write results


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
def test_kubectl_apply_reads_only_the_plain_manifests(tmp_path: Path) -> None:
    """kubectl names each file it reads when it cannot fetch the schema to validate it."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        'clusters: [{name: c, cluster: {server: "http://127.0.0.1:9"}}]\n'
        "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {}}]\n"
    )
    proc = subprocess.run(
        ["kubectl", "apply", "-f", "deploy/", "--dry-run=client"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
    )
    read = re.findall(r'error validating "deploy/([^"]+)"', proc.stdout + proc.stderr)
    plain = sorted(p.name for p in DEPLOY.iterdir() if p.is_file() and p.suffix in (".yaml", ".yml", ".json"))
    assert read == plain and len(plain) == 10, proc.stderr[-500:]
    assert (DEPLOY / names.EXTRAS_DIR).is_dir() and not (DEPLOY / "kustomization.yaml").exists()
    assert [p.name for p in manifests.manifest_files(DEPLOY)] == plain  # `cluster up` reads the same
