"""The advisor reads only the store's pure modules, the bounded LRU, the node's placement and worker
count, and the config: never s3api, cluster or engine."""

from __future__ import annotations

import ast
from pathlib import Path

ADVISOR = Path(__file__).resolve().parents[2] / "gateway" / "advisor"
ALLOWED = ("gateway.advisor", "gateway.store.blocks", "gateway.store.policy", "gateway.config", "gateway.lru",
           "gateway.node.workers", "gateway.node.cores")


def test_advisor_imports_only_store_policy_blocks_node_and_config() -> None:
    for path in sorted(ADVISOR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            wrong = [n for n in names if n.startswith("gateway") and not n.startswith(ALLOWED)]
            assert not wrong, f"{path.name} imports {wrong}"
