"""Import directions (DESIGN.md): s3api -> engine -> (store, cluster, origin); cluster -> store."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "gateway"
FORBIDDEN = {
    "store": ("gateway.s3api", "gateway.cluster", "gateway.engine", "gateway.blockreads", "gateway.origin",
              "gateway.app", "gateway.admin"),
    "cluster": ("gateway.s3api", "gateway.app", "gateway.engine", "gateway.admin"),
    "s3api": ("gateway.store", "gateway.cluster", "gateway.origin", "gateway.app", "gateway.admin"),
}


def imports_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_point_one_way(layer):
    for path in sorted((PACKAGE / layer).glob("*.py")):
        wrong = {name for name in imports_of(path) if name.startswith(FORBIDDEN[layer])}
        assert not wrong, f"{path.relative_to(PACKAGE.parent)} imports {sorted(wrong)}"
