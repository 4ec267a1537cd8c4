"""The repository explains itself: no file cites a file a clone does not have.

The contract, the simulator's cost model and the seed's requirements live in docs/ (design.md,
cost-model.md, seed.md). Two checks keep it so:

- no file in the repository (tracked, or new and not ignored) names the out-of-repository sources
  the project was first written against (the tokens in :data:`FORBIDDEN`);
- every relative link in README.md and docs/*.md points to a file or folder of the repository, and
  a ``#anchor`` into a markdown file names one of its headings (GitHub's slugs).
"""

from __future__ import annotations

import re
import subprocess
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = ("shared" + "/", "DESIGN" + ".md", "ATTENTION" + "_MODEL")
"""Spelled in pieces so this file does not name them itself."""
SKIP_DIRS = {
    ".git",
    ".venv",
    "node_modules",
    "__pycache__",
    "build",
    "dist",
    "results",
    ".pytest_cache",
    ".ruff_cache",
    ".mypy_cache",
}
LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
IMAGE = re.compile(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def repository_files() -> list[Path]:
    """Tracked files plus new ones git does not ignore; a plain walk where there is no git checkout."""
    try:
        listing = subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "-z"],
            cwd=ROOT,
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout.decode()
        paths = [ROOT / name for name in listing.split("\0") if name]
    except (OSError, subprocess.CalledProcessError):
        paths = [
            p
            for p in ROOT.rglob("*")
            if not SKIP_DIRS & set(p.relative_to(ROOT).parts[:-1])
            and not any(part.endswith(".egg-info") for part in p.relative_to(ROOT).parts)
        ]
    return sorted(p for p in paths if p.is_file())


FILES = repository_files()


def text_of(path: Path) -> str | None:
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def test_the_file_list_is_the_repository() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in FILES}
    assert {"README.md", "docs/design.md", "docs/cost-model.md", "docs/seed.md", "pyproject.toml"} <= names
    assert not any(name.startswith(".venv/") for name in names)


def test_no_file_cites_sources_outside_the_repository() -> None:
    offenders = []
    for path in FILES:
        text = text_of(path)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for token in FORBIDDEN:
                if token in line:
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {token!r}")
    assert not offenders, "cite docs/ instead (docs/design.md, docs/cost-model.md §N, docs/seed.md):\n" + "\n".join(
        offenders
    )


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation removed, spaces to hyphens."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text).strip().lower()
    kept = "".join(ch for ch in text if ch in " -_" or unicodedata.category(ch)[0] in "LN")
    return kept.replace(" ", "-")


def anchors_of(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if fenced or not match:
            continue
        slug = github_slug(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def links_of(path: Path) -> list[tuple[int, str]]:
    found = []
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        bare = re.sub(r"`[^`]*`", "", line)  # a link shown as code is not a link
        found += [(number, target) for target in LINK.findall(bare) + IMAGE.findall(bare)]
    return found


MARKDOWN = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", MARKDOWN, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_point_into_the_repository(page: Path) -> None:
    names = {p.relative_to(ROOT).as_posix() for p in FILES}
    folders = {parent.as_posix() for p in FILES for parent in p.relative_to(ROOT).parents}
    broken = []
    for number, target in links_of(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
            continue  # http:, https:, mailto:
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        try:
            relative = resolved.relative_to(ROOT).as_posix()
        except ValueError:
            broken.append(f"{number}: {target} (outside the repository)")
            continue
        if relative not in names and relative.rstrip("/") not in folders:
            broken.append(f"{number}: {target} (no such file in the repository)")
        elif anchor and relative.endswith(".md") and anchor not in anchors_of(resolved):
            broken.append(f"{number}: {target} (no heading with anchor #{anchor})")
    assert not broken, f"{page.relative_to(ROOT)}:\n" + "\n".join(broken)


def test_the_checker_sees_broken_links_and_slugs(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text(
        "# Prometheus metrics (`/metrics` on `--metrics-port`, default 9646)\n## 4.6 Defaults\n"
        "## 4.6 Defaults\n```\n# not a heading\n[x](in-code.md)\n```\n"
        "see [a](a.md#b), ![i](img.png), `[c](code.md)` and [w](https://example.com)\n",
        encoding="utf-8",
    )
    assert anchors_of(page) == {
        "prometheus-metrics-metrics-on---metrics-port-default-9646",
        "46-defaults",
        "46-defaults-1",
    }
    assert sorted(t for _, t in links_of(page)) == ["a.md#b", "https://example.com", "img.png"]
