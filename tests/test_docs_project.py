"""The project's own docs (README.md, docs/) hold to the code and stay inside the repository:

- docs/architecture.md names only files, functions, classes and methods that exist, so a
  module moved or renamed fails here instead of leaving the map wrong;
- every relative link of README.md and docs/*.md leads to a file of the repository (none to a
  project document kept elsewhere);
- no internal issue numbers ("issue 7"): a reader outside the project has no tracker to look in.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "gateway"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
ARCHITECTURE = ROOT / "docs" / "architecture.md"


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def _module_functions(path: Path) -> set[str]:
    return {n.name for n in _tree(path).body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


@cache
def _classes() -> dict[str, set[str]]:
    """Every class of the package: its methods and the attributes its methods assign to self."""
    found: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(_tree(path)):
            if not isinstance(node, ast.ClassDef):
                continue
            names = found.setdefault(node.name, set())
            for item in ast.walk(node):
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(item.name)
                elif isinstance(item, ast.Attribute) and isinstance(item.value, ast.Name) and item.value.id == "self":
                    names.add(item.attr)
    return found


def _resolve(name: str) -> list[Path]:
    """The files or folders a path as the doc writes it may mean: from the repository's root, from
    gateway/, or from any folder of gateway/ (a table row names `server.py` of `gateway/s3api/`)."""
    name = name.rstrip("/")
    folders = [ROOT, PACKAGE, *(p for p in PACKAGE.rglob("*") if p.is_dir() and p.name != "__pycache__")]
    return [folder / name for folder in folders if (folder / name).exists()]


def test_the_architecture_names_only_files_that_exist() -> None:
    text = ARCHITECTURE.read_text()
    paths = set(re.findall(r"`(\w[\w/]*(?:\.py|/))(?::\w+)?`", text))  # not URL paths such as `/_peer/`
    assert len(paths) > 50, paths
    missing = sorted(p for p in paths if not _resolve(p))
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def test_the_architecture_names_only_functions_that_exist() -> None:
    text = ARCHITECTURE.read_text()
    for path, function in re.findall(r"`([\w/]+\.py):(\w+)`", text):
        where = [p for p in _resolve(path) if function in _module_functions(p)]
        assert where, f"docs/architecture.md: no function {function} in {path}"
    pairs = set(re.findall(r"`(?:[\w/]+\.py:)?([A-Z]\w+)\.(\w+)`", text))
    assert len(pairs) > 20, pairs
    classes = _classes()
    for cls, member in sorted(pairs):
        assert cls in classes, f"docs/architecture.md names a class {cls} that does not exist"
        assert member in classes[cls], f"docs/architecture.md names {cls}.{member}, which does not exist"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_stay_in_the_repository(doc: Path) -> None:
    text = doc.read_text()
    assert "../shared/" not in text and "DESIGN.md" not in text, "a project document outside the repository"
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a site of its own (a tool's documentation), or a place in this page
        path = (doc.parent / target.split("#")[0]).resolve()
        assert path.is_relative_to(ROOT) and path.exists(), f"{doc.name} links {target}, which is not in the repository"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_internal_issue_numbers(doc: Path) -> None:
    found = re.findall(r"\bissues? #?\d+|/issues/\d+", doc.read_text(), re.IGNORECASE)
    assert not found, f"{doc.name} cites the project's tracker: {found}"
