"""Read deploy/ the way ``kubectl apply -f deploy/`` does, and apply ``cluster up`` overrides.

kubectl reads the directory's .yaml/.yml/.json files in name order (so the namespace,
``00-``, comes first) and ignores everything else, which is why the Secret template
(``*.yaml.template``) never overwrites a real key. ``attnload cluster up`` applies the
same objects, optionally with a different image, worker count, config or load shape.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from attnload import __version__
from attnload.cluster import names, packaged
from attnload.errors import UsageError

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
# the image deploy/ names (tests/test_deploy.py holds deploy/ to it): tagged with the package version
ATTNLOAD_IMAGE = f"attnload:{__version__}"


@dataclass(frozen=True)
class Overrides:
    """What ``cluster up`` may change without editing the YAML; None keeps the manifest's value."""

    image: str | None = None
    workers: int | None = None
    config: str | None = None  # a file name inside the attnload-config ConfigMap
    shape: str | None = None
    stage_duration: str | None = None
    profile: str | None = None


def default_directory() -> Path:
    """./deploy when the working directory has one (local edits apply), else the installed or checkout copy.

    The whole lookup order is in packaged.py's docstring.
    """
    local = Path("deploy")
    return local if local.is_dir() else packaged.installed_or_checkout_dir()


def manifest_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        raise UsageError(f"no manifests at {directory}: run from the attnload checkout or pass --manifests DIR")
    files = sorted(p for p in directory.iterdir() if p.is_file() and p.suffix in MANIFEST_SUFFIXES)
    if not files:
        raise UsageError(f"no .yaml manifests in {directory}")
    return files


def load(directory: Path) -> list[dict[str, Any]]:
    """Every object in apply order."""
    objects: list[dict[str, Any]] = []
    for path in manifest_files(directory):
        try:
            docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        except yaml.YAMLError as exc:
            raise UsageError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from None
        objects.extend(doc for doc in docs if doc)
    return objects


def containers(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if obj.get("kind") == "Deployment":
        yield from obj["spec"]["template"]["spec"]["containers"]


def _set_env(container: dict[str, Any], name: str, value: str) -> None:
    env = container.setdefault("env", [])
    for item in env:
        if item["name"] == name:
            item["value"] = value
            item.pop("valueFrom", None)
            return
    env.append({"name": name, "value": value})


def customise(
    objects: list[dict[str, Any]], overrides: Overrides, config_keys: set[str] | None = None
) -> list[dict[str, Any]]:
    """Apply ``overrides`` in place (the objects are fresh copies from :func:`load`)."""
    if overrides.config is not None and config_keys is not None and overrides.config not in config_keys:
        raise UsageError(
            f"--config {overrides.config} is not in ConfigMap {names.CONFIG_MAP}; "
            f"choose one of: {', '.join(sorted(config_keys))}"
        )
    env = {
        "ATTNLOAD_CONFIG": f"{names.CONFIG_DIR}/{overrides.config}" if overrides.config else None,
        "ATTNLOAD_SHAPE": overrides.shape,
        "ATTNLOAD_STAGE_DURATION": overrides.stage_duration,
        "ATTNLOAD_PROFILE": overrides.profile,
    }
    for obj in objects:
        name = obj.get("metadata", {}).get("name")
        if name == names.WORKER_DEPLOYMENT and overrides.workers is not None:
            obj["spec"]["replicas"] = overrides.workers
        for container in containers(obj):
            if overrides.image and container["image"] == ATTNLOAD_IMAGE:
                container["image"] = overrides.image
            if name in (names.MASTER_DEPLOYMENT, names.WORKER_DEPLOYMENT) and container["name"] != "results":
                for key, value in env.items():
                    if value is not None:
                        _set_env(container, key, value)
    return objects


def config_keys(objects: list[dict[str, Any]]) -> set[str]:
    for obj in objects:
        if obj.get("kind") == "ConfigMap" and obj["metadata"]["name"] == names.CONFIG_MAP:
            return set(obj.get("data") or {})
    return set()
