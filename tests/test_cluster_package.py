"""`attnload cluster up` works from an installed wheel, without a checkout.

deploy/ is committed once; the build copies it into the package (setup.py). So the wheel
is built the way a release is, from a clean copy of the tree (the files git tracks or would
add: nothing ignored, so no stale copy of the manifests in src/ can stand in) with
`python -m build`, which makes the sdist and then the wheel from the sdist. The wheel is
installed into a temp directory and Python runs from a directory without deploy/: the
manifest loader must find every deploy/ file inside the installed package, and
`cluster up` must apply every object from there (against the fake API server of
test_cluster.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from attnload import __version__
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


def _tree_files() -> list[str]:
    """What a commit of this tree holds: tracked files plus untracked ones git does not ignore."""
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    return sorted(name for name in set(listing.split("\0")) if name and (ROOT / name).is_file())


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """sdist and wheel of a clean copy of the tree."""
    tmp = tmp_path_factory.mktemp("build")
    clean = tmp / "tree"
    for name in _tree_files():
        (clean / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, clean / name)
    subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(tmp / "dist"), str(clean)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    return tmp / "dist"


@pytest.fixture(scope="module")
def site(dist: Path) -> Path:
    (wheel,) = dist.glob("attnload-*.whl")
    target = dist.parent / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", str(target), str(wheel)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    return target


def _deploy_files() -> dict[str, str]:
    """Relative path -> text of every deploy/ file in the tree."""
    deploy = ROOT / "deploy"
    return {
        str((ROOT / name).relative_to(deploy)): (ROOT / name).read_text(encoding="utf-8")
        for name in _tree_files()
        if name.startswith("deploy/")
    }


def _python(site: Path, code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site)}  # ahead of any editable install of the checkout
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_the_manifests_are_not_committed_inside_the_package() -> None:
    assert not [name for name in _tree_files() if name.startswith(f"src/attnload/cluster/{packaged.DATA_DIR}/")]


def test_the_sdist_carries_deploy_and_the_version(dist: Path) -> None:
    (sdist,) = dist.glob("attnload-*.tar.gz")
    assert sdist.name == f"attnload-{__version__}.tar.gz"
    prefix = f"attnload-{__version__}/deploy/"
    with tarfile.open(sdist) as tar:
        carried = {m.name.removeprefix(prefix) for m in tar.getmembers() if m.isfile() and m.name.startswith(prefix)}
    assert carried == set(_deploy_files())


def test_the_installed_package_carries_every_deploy_file(site: Path, tmp_path: Path) -> None:
    proc = _python(site, PROBE, tmp_path)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    assert found["module"].startswith(str(site)) and found["dir"] == found["packaged"]
    assert found["dir"].startswith(str(site / "attnload" / "cluster" / packaged.DATA_DIR))
    expected = _deploy_files()
    assert found["files"] == expected
    assert {"05-network-policy.yaml", "15-api-key-secret.yaml.template", "extras/headless-job.yaml"} <= set(expected)
    checkout = [[o["kind"], o["metadata"]["name"]] for o in manifests.load(ROOT / "deploy")]
    assert found["objects"] == checkout and len(checkout) >= 20
    (dist_info,) = site.glob("attnload-*.dist-info")
    assert dist_info.name == f"attnload-{__version__}.dist-info"


def test_cluster_up_applies_from_the_installed_package(
    site: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    api: FakeKube = request.getfixturevalue("fake")  # sets KUBECONFIG to the fake API server
    up = "import sys; from attnload.commands.cli import main; sys.exit(main(['cluster', 'up', '--no-wait']))"
    proc = _python(site, up, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"manifests: {site / 'attnload' / 'cluster' / packaged.DATA_DIR}\n")
    applied = {(o["kind"], o["metadata"]["name"]) for o in api.objects.values()}
    assert {(o["kind"], o["metadata"]["name"]) for o in manifests.load(ROOT / "deploy")} <= applied
    assert ("Secret", "attnload-grafana") in applied


def test_an_editable_install_run_elsewhere_reads_the_checkout_deploy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no ./deploy here, and the checkout's package has no deploy_data/
    assert not packaged.packaged_dir().exists()
    assert manifests.default_directory() == ROOT / "deploy"
