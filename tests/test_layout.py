"""The package layout of ``src/attnload``, checked by a static walk of its imports.

Every ``import``/``from ... import`` is read from the AST, at module level and inside
functions (lazy imports count too), so the rules hold whatever runs first.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "attnload"
LOAD_GENERATOR = (
    "config",
    "workload",
    "client",
    "plan",
    "runner",
    "results",
    "exporter",
    "report",
    "dashboards",
    "cluster",
    "scrape",
    "commands",
    "native",
    # real engines in the loop (tiny generated models, the vLLM launcher); the
    # simulator stands apart from them too
    "engines",
)
SIM_MAY_IMPORT = ("attnload.attention", "attnload.errors", "attnload.measure.histogram", "attnload.measure.tokens")
MAY_IMPORT_SIM = ("attnload.commands", "attnload.cluster")
MAX_PACKAGE_MODULES = 15
MAX_TYPE_IGNORES = 10
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


SOURCES = _sources()


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not SOURCES[module].name == "__init__.py":
        base = base[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str, *, module_level_only: bool = False) -> list[tuple[str, list[str], int]]:
    """(imported module, names taken from it, line) for every attnload import of ``module``."""
    tree = ast.parse(SOURCES[module].read_text(encoding="utf-8"))
    nodes = tree.body if module_level_only else list(ast.walk(tree))
    found = []
    for node in nodes:
        if module_level_only and isinstance(node, ast.If):  # `if TYPE_CHECKING:` and the like
            nodes.extend(node.body)
        if isinstance(node, ast.Import):
            found += [(a.name, [], node.lineno) for a in node.names if a.name.startswith("attnload")]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            if not target.startswith("attnload"):
                continue
            names = [a.name for a in node.names]
            submodules = [f"{target}.{n}" for n in names if f"{target}.{n}" in SOURCES]
            found.append((target, [n for n in names if f"{target}.{n}" not in SOURCES], node.lineno))
            found += [(sub, [], node.lineno) for sub in submodules]
    return found


def _edges(module: str, *, module_level_only: bool) -> set[str]:
    """Modules that importing ``module`` imports, parent packages included (Python runs their __init__)."""
    out = set()
    for target, _names, _line in _imports(module, module_level_only=module_level_only):
        parts = target.split(".")
        for i in range(2, len(parts) + 1):
            name = ".".join(parts[:i])
            if name in SOURCES and name != module:
                out.add(name)
    return out


def _cycles(*, module_level_only: bool) -> list[list[str]]:
    graph = {m: _edges(m, module_level_only=module_level_only) for m in SOURCES}
    # a package's __init__ is imported before its submodules, which may import siblings: no edge back
    for m in graph:
        graph[m] = {t for t in graph[m] if not m.startswith(t + ".")}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return cycles


def test_no_import_cycles_at_module_level() -> None:
    assert _cycles(module_level_only=True) == []


def test_no_import_cycles_counting_lazy_imports() -> None:
    assert _cycles(module_level_only=False) == []


def test_packages_import_one_way() -> None:
    """The package map of docs/design.md: arrows between packages never form a cycle."""
    graph: dict[str, set[str]] = {}
    for module in SOURCES:
        source = module.split(".")[1] if "." in module else ""
        for target in _edges(module, module_level_only=False):
            if "." in target and target.split(".")[1] != source:
                graph.setdefault(source, set()).add(target.split(".")[1])

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(n == goal or (n not in seen and reaches(n, goal, seen | {n})) for n in graph.get(start, ()))

    assert [p for p in graph if reaches(p, p, {p})] == [], graph


def test_only_the_neutral_modules_sit_at_the_top() -> None:
    """Everything else belongs to a package that says which stage it is; the C sources live in ``native/``."""
    plain = sorted(p.name for p in PACKAGE.iterdir() if p.is_file() and p.suffix in (".py", ".c", ".h"))
    assert plain == ["__init__.py", "__main__.py", "attention.py", "errors.py"]


def test_no_package_over_the_limit() -> None:
    crowded = {
        str(d.relative_to(PACKAGE)): n
        for d in [PACKAGE, *PACKAGE.rglob("*")]
        if d.is_dir() and (n := len(list(d.glob("*.py")))) > MAX_PACKAGE_MODULES
    }
    assert crowded == {}


def test_every_directory_is_a_regular_package() -> None:
    missing = [
        str(d.relative_to(PACKAGE))
        for d in PACKAGE.rglob("*")
        if d.is_dir() and any(d.glob("*.py")) and not (d / "__init__.py").exists()
    ]
    assert missing == []


def test_the_simulator_imports_nothing_of_the_load_generator() -> None:
    bad = []
    for module in SOURCES:
        if not module.startswith("attnload.sim"):
            continue
        for target, _names, line in _imports(module):
            if target.startswith("attnload.sim") or target in SIM_MAY_IMPORT:
                continue
            bad.append(f"{module}:{line} imports {target}")
    assert bad == []
    assert all(
        not t.startswith(f"attnload.{p}")
        for m in SOURCES
        if m.startswith("attnload.sim")
        for t, _n, _l in _imports(m)
        for p in LOAD_GENERATOR
    )


def test_only_commands_and_cluster_import_the_simulator() -> None:
    bad = [
        f"{module}:{line} imports {target}"
        for module in SOURCES
        if not module.startswith(("attnload.sim", *MAY_IMPORT_SIM))
        for target, _names, line in _imports(module)
        if target.startswith("attnload.sim")
    ]
    assert bad == []


def test_no_private_name_crosses_modules() -> None:
    bad = [
        f"{module}:{line} takes {name} from {target}"
        for module in SOURCES
        for target, names, line in _imports(module)
        if target != module
        for name in names
        if name.startswith("_") and not name.startswith("__")
    ]
    assert bad == []


def test_no_source_file_over_the_limit() -> None:
    long = {m: n for m, p in SOURCES.items() if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_FILE_LINES}
    assert long == {}


def test_no_function_over_the_limit() -> None:
    long = {}
    for module, path in SOURCES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{module}.{node.name}"] = lines
    assert long == {}


@pytest.mark.parametrize("module", ["attnload.attention", "attnload.errors"])
def test_the_neutral_modules_import_no_other_attnload_module(module: str) -> None:
    assert [t for t, _n, _l in _imports(module) if t != "attnload"] == []


def test_attention_types_are_one_table() -> None:
    """Adding an attention type is one entry in ``attention.KINDS`` plus its presets: no other module
    branches on a type's name (a second ``if attention == "MLA"`` would be a second place to edit)."""
    import re

    from attnload.attention import ATTENTION_TYPES, KINDS

    assert tuple(KINDS) == ATTENTION_TYPES
    names = "|".join(ATTENTION_TYPES)
    branch = re.compile(rf"""(==|!=|\bin)\s*\(?\s*["']({names})["']""")
    offenders = [
        f"{name}:{n}"
        for name, path in SOURCES.items()
        if name != "attnload.attention"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if branch.search(line)
    ]
    assert offenders == []


def test_no_role_string_to_branch_on() -> None:
    """A process's part in a run is the objects it holds (a sender, a collector), not a string to compare."""
    import re

    compare = re.compile(r"""\brole\s*(==|!=|\bin\b)\s*[\(\[{]?\s*["']""")
    offenders = [
        f"{name}:{n}"
        for name, path in SOURCES.items()
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if compare.search(line)
    ]
    assert offenders == []


def test_few_type_ignores() -> None:
    """mypy runs in ``make test`` with ``warn_unused_ignores``; each ignore left is a library without types."""
    count = sum(p.read_text(encoding="utf-8").count("type: ignore") for p in SOURCES.values())
    assert count <= MAX_TYPE_IGNORES


def _files_matching(pattern: str, flags: int = 0) -> list[str]:
    """Files under ``src/attnload`` (every text file, not only Python) whose text matches ``pattern``."""
    found = re.compile(pattern, flags)
    return sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*")
        if path.is_file()
        and path.suffix not in (".so", ".pyc")
        and found.search(path.read_bytes().decode("utf-8", errors="ignore"))
    )


def test_api_names_are_one_table() -> None:
    """Adding an API is its object in ``attnload.apis``, its dialect in sim/serving/dialects.py and one
    registration line: an API's name as a string literal (or a field that shares one, routed through the API
    objects' constants) lives in at most three files, so no other module branches on it."""
    assert len(_files_matching(r"""['"](completions|responses|messages|gemini)['"]""")) <= 3, _files_matching(
        r"""['"](completions|responses|messages|gemini)['"]"""
    )


def test_the_fifth_api_fits_in_three_files() -> None:
    """Gemini, added last, is named only by its API object, its simulator dialect and its registration."""
    assert _files_matching("gemini", re.IGNORECASE) == [
        "apis/__init__.py",
        "apis/gemini.py",
        "sim/serving/dialects.py",
    ]


def test_per_request_metrics_are_one_table() -> None:
    """Adding a per-request metric is one entry in ``measure.metrics.METRICS``: no other module spells an
    exported histogram's name (a second spelling would be a second place to edit)."""
    from attnload.measure.metrics import METRICS

    spelled = [m.prometheus for m in METRICS if m.prometheus is not None]
    offenders = [
        f"{name}: {series}"
        for name, path in SOURCES.items()
        if name != "attnload.measure.metrics"
        for series in spelled
        if f'"{series}' in path.read_text(encoding="utf-8")
    ]
    assert offenders == []
