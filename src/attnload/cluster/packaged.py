"""The copy of deploy/ that ships inside the wheel, so ``attnload cluster up`` needs no checkout.

deploy/ stays the source of truth (``kubectl apply -f deploy/``, the root
kustomization); ``python -m attnload.cluster.generate`` mirrors it into
``attnload/cluster/deploy_data/`` (package data) and ``--check`` fails when the copy
differs, the same drift check the generated ConfigMaps get.
"""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

from attnload.cluster import names

PACKAGE_DIR = Path("src") / "attnload" / "cluster" / "deploy_data"
SUFFIXES = (".yaml", ".yml", ".json", ".template")


def packaged_dir() -> Path:
    """deploy_data/ of the installed (or checked-out) package, as a real directory."""
    root = resources.files("attnload.cluster") / "deploy_data"
    return Path(str(root))


def _sources(root: Path) -> dict[str, str]:
    """Relative path -> text of every deploy/ file the mirror carries (top level, extras/, gpu-operator/)."""
    deploy = root / "deploy"
    out: dict[str, str] = {}
    for directory in (deploy, deploy / names.EXTRAS_DIR, deploy / names.GPU_OPERATOR_DIR):
        if not directory.is_dir():
            continue
        for path in sorted(directory.iterdir()):
            if path.is_file() and path.name.endswith(SUFFIXES):
                out[str(path.relative_to(deploy))] = path.read_text(encoding="utf-8")
    return out


def _mirrored(root: Path) -> dict[str, str]:
    target = root / PACKAGE_DIR
    if not target.is_dir():
        return {}
    return {
        str(p.relative_to(target)): p.read_text(encoding="utf-8")
        for p in sorted(target.rglob("*"))
        if p.is_file() and p.name.endswith(SUFFIXES)
    }


def stale(root: Path) -> list[str]:
    """Mirror paths that are missing, extra or different from deploy/."""
    want, have = _sources(root), _mirrored(root)
    return sorted(name for name in want.keys() | have.keys() if want.get(name) != have.get(name))


def write(root: Path) -> list[str]:
    changed = stale(root)
    want, target = _sources(root), root / PACKAGE_DIR
    for name in changed:
        path = target / name
        if name in want:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(want[name], encoding="utf-8")
        else:
            path.unlink()
    for sub in (names.EXTRAS_DIR, names.GPU_OPERATOR_DIR):
        if (target / sub).is_dir() and not any((target / sub).iterdir()):
            shutil.rmtree(target / sub)
    return changed
