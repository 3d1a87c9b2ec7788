"""Sizes (issue 16): no module of gateway/ over 450 lines, and no function over 60 lines
unless a reason is written beside it -- a comment beginning `# long:` on its `def` line or
on the line just above it (above its decorators, if it has any)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "gateway"
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60


MODULES = sorted(PACKAGE.rglob("*.py"))


def _name(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def _has_reason(lines: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    candidates = [lines[node.lineno - 1], lines[first - 2] if first >= 2 else ""]
    return any("# long:" in line for line in candidates)


def test_no_module_is_over_the_limit():
    over = {}
    for path in MODULES:
        count = len(path.read_text().splitlines())
        if count > MAX_MODULE_LINES:
            over[_name(path)] = count
    assert not over, f"modules over {MAX_MODULE_LINES} lines (split them by job): {over}"


def test_no_function_is_over_the_limit_without_a_reason():
    over = []
    for path in MODULES:
        text = path.read_text()
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert node.end_lineno is not None
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES and not _has_reason(lines, node):
                    over.append(f"{_name(path)}:{node.lineno} {node.name} ({length} lines)")
    assert not over, (
        f"functions over {MAX_FUNCTION_LINES} lines: split them, or write why not in a `# long: ...` "
        f"comment on or just above the def: {over}"
    )


def test_the_rules_see_every_module():
    assert len(MODULES) > 50
    assert {"config/settings.py", "s3api/auth/sigv4.py", "store/disk.py"} <= {_name(p) for p in MODULES}


def test_a_reason_is_read_on_or_above_the_def():
    source = (
        "# long: a reason\n"
        "def above():\n    pass\n"
        "def on():  # long: a reason\n    pass\n"
        "# long: a reason\n"
        "@decorated\n"
        "def decorated():\n    pass\n"
        "def none():\n    pass\n"
    )
    lines = source.splitlines()
    found = {n.name: _has_reason(lines, n) for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef)}
    assert found == {"above": True, "on": True, "decorated": True, "none": False}


def test_test_modules_have_names_of_their_own():
    """tests/ has no packages: pytest imports each test module by its file name, and refuses a run
    (every test of it) in which two folders hold a module of the same name."""
    tests = Path(__file__).resolve().parent
    names = [path.name for path in tests.rglob("test_*.py")]
    assert sorted({name for name in names if names.count(name) > 1}) == []
