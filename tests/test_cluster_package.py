"""`attnload cluster up` works from an installed wheel, without a checkout.

Builds the wheel from this tree, installs it into a temp directory, and runs Python from
a directory that has no deploy/: the manifest loader must find every deploy/ file inside
the installed package, and `cluster up` must apply every object from there (against the
fake API server of test_cluster.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnload.cluster import manifests, packaged
from test_cluster import FakeKube, fake  # noqa: F401  (the fixture, requested by name below)

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import json, attnload
from attnload.cluster import manifests, packaged
d = manifests.default_directory()
files = {str(p.relative_to(d)): p.read_text() for p in sorted(d.rglob("*")) if p.is_file()}
print(json.dumps({"module": attnload.__file__, "dir": str(d), "packaged": str(packaged.packaged_dir()),
                  "files": files, "objects": [[o["kind"], o["metadata"]["name"]] for o in manifests.load(d)]}))
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp / "dist"), str(ROOT)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    (wheel,) = (tmp / "dist").glob("attnload-*.whl")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "-q",
            "--target",
            str(tmp / "site"),
            str(wheel),
        ],
        check=True,
        timeout=300,
        capture_output=True,
    )
    return tmp / "site"


def _python(site: Path, code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site)}  # ahead of any editable install of the checkout
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_the_installed_package_carries_every_deploy_file(site: Path, tmp_path: Path) -> None:
    proc = _python(site, PROBE, tmp_path)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    assert found["module"].startswith(str(site)) and found["dir"] == found["packaged"]
    assert found["dir"].startswith(str(site / "attnload" / "cluster" / "deploy_data"))
    deploy = ROOT / "deploy"
    expected = {
        str(p.relative_to(deploy)): p.read_text()
        for p in sorted(deploy.rglob("*"))
        if p.is_file() and p.name.endswith(packaged.SUFFIXES)
    }
    assert found["files"] == expected
    assert {"05-network-policy.yaml", "15-api-key-secret.yaml.template", "extras/headless-job.yaml"} <= set(expected)
    checkout = [[o["kind"], o["metadata"]["name"]] for o in manifests.load(deploy)]
    assert found["objects"] == checkout and len(checkout) >= 20


def test_cluster_up_applies_from_the_installed_package(
    site: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    api: FakeKube = request.getfixturevalue("fake")  # sets KUBECONFIG to the fake API server
    up = "import sys; from attnload.commands.cli import main; sys.exit(main(['cluster', 'up', '--no-wait']))"
    proc = _python(site, up, tmp_path)
    assert proc.returncode == 0, proc.stderr
    applied = {(o["kind"], o["metadata"]["name"]) for o in api.objects.values()}
    assert {(o["kind"], o["metadata"]["name"]) for o in manifests.load(ROOT / "deploy")} <= applied
    assert ("Secret", "attnload-grafana") in applied
