"""Every third-party module ``src/attnload`` imports is a declared dependency, bounded, and pinned for CI.

A module that arrives only through another package (gevent through locust, flask through locust,
httpx2 through openai 3) breaks the day that package drops or moves it; an unbounded dependency
whose internals the client touches breaks on its next major release. The imports are read from
the AST (module level and inside functions), so a lazily imported one counts too.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "src" / "attnload"
BOUNDED = ("gevent", "geventhttpclient", "locust", "openai", "pydantic", "prometheus-client")
"""Internals touched (gevent, geventhttpclient, locust) or APIs written against: capped at the next major."""


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(spec: str) -> str:
    return _normal(re.split(r"[\s<>=!~;\[]", spec, maxsplit=1)[0])


def _project() -> dict[str, object]:
    project: dict[str, object] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project


def _declared() -> dict[str, str]:
    """Distribution name -> its requirement string, over dependencies and every extra."""
    project = _project()
    specs = list(project["dependencies"])  # type: ignore[call-overload]
    for extra in project["optional-dependencies"].values():  # type: ignore[attr-defined]
        specs += extra
    return {_requirement_name(s): s for s in specs}


def _imported_top_level() -> dict[str, str]:
    """Top-level module -> the first file importing it, for every import outside the stdlib and attnload."""
    found: dict[str, str] = {}
    for path in sorted(SOURCE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top != "attnload" and top not in sys.stdlib_module_names and top != "__future__":
                    found.setdefault(top, str(path.relative_to(ROOT)))
    return found


def test_every_imported_module_is_a_declared_distribution() -> None:
    declared = _declared()
    providers = importlib.metadata.packages_distributions()
    imported = _imported_top_level()
    assert {"gevent", "geventhttpclient", "locust", "httpx2", "flask", "kubernetes"} <= set(imported)
    undeclared = []
    for module, where in sorted(imported.items()):
        dists = {_normal(d) for d in providers.get(module, [])}
        assert dists, f"{module} (imported in {where}) is installed by no distribution here"
        if not dists & set(declared):
            undeclared.append(f"{module} ({where}) from {sorted(dists)}")
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"


def test_the_dependencies_whose_internals_or_api_we_use_have_an_upper_bound() -> None:
    declared = _declared()
    for name in BOUNDED:
        assert name in declared, name
        assert "<" in declared[name] and ">=" in declared[name], f"{declared[name]}: needs >=low,<next-major"


def test_the_kubernetes_client_is_an_extra_that_the_test_extra_pulls() -> None:
    project = _project()
    base = {_requirement_name(s) for s in project["dependencies"]}  # type: ignore[attr-defined]
    extras = project["optional-dependencies"]
    assert "kubernetes" not in base
    assert any(_requirement_name(s) == "kubernetes" for s in extras["cluster"])  # type: ignore[index]
    assert "attnload[cluster]" in extras["test"]  # type: ignore[index]


def test_constraints_pin_every_declared_dependency_and_every_install_uses_them() -> None:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not name==version"
            pins[_normal(name)] = version
    for name, spec in _declared().items():
        if name != "attnload":
            assert name in pins, f"{spec} is not pinned in constraints.txt"
    makefile = (ROOT / "Makefile").read_text()
    assert "-c $(CONSTRAINTS) -e '.[test]'" in makefile
    assert "-c constraints.txt ." in (ROOT / "Dockerfile").read_text()
    assert "!constraints.txt" in (ROOT / ".dockerignore").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "step test make test\n" in ci and "make test-latest" in ci and "make test-gateway" in ci
