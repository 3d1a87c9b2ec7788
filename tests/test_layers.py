"""Import directions (DESIGN.md): httpserver -> s3api -> engine -> (store, cluster, origin);
cluster -> store; store imports none of the others; config, errors and log import nothing of
the gateway. Every module of the package is placed in the table, and every module imports on
its own, in a fresh set of gateway modules, with warnings as errors."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "gateway"
BASE = {"config", "errors", "log"}
# What each part of the package (a subpackage or a top-level module) may import of the others.
ALLOWED: dict[str, set[str]] = {
    "config": set(), "errors": set(), "log": set(),
    "signing": set(), "bytebudget": set(), "heat": set(), "gcpauses": set(), "tls": {"log"},
    "retry": set(), "periodic": {"log"}, "lru": set(),
    "objects": {"errors"},
    "store": BASE | {"lru"},
    "node": BASE,
    "rangeclient": set(),
    "origin": BASE | {"signing", "rangeclient", "retry"},
    "events": BASE | {"signing", "retry"},
    "cluster": BASE | {"heat", "hitanswers", "lru", "store", "signing", "objects", "rangeclient", "periodic", "retry"},
    "engine": BASE | {"bytebudget", "cluster", "heat", "lru", "node", "objects", "origin", "store"},
    "s3api": BASE | {"engine", "hitanswers", "lru", "signing"},
    "transport_errors": BASE,
    "hitanswers": set(),
    "requesthead": set(),
    "connlimits": BASE | {"transport_errors"},
    "httpserver": BASE | {"transport_errors", "hitanswers", "requesthead", "connlimits"},
    "advisor": BASE | {"lru", "node", "store"},  # node: the workers' placement and count, to model a node
    "configdoc": {"config"},
    "tables": BASE,  # table formats for `gateway load --table`: pure, the bytes come from admin.tableplan
    "admin": BASE | {"advisor", "cluster", "engine", "events", "gcpauses", "httpserver", "node", "origin", "s3api",
                     "store", "heat", "tables", "retry"},
    "app": BASE | {"admin", "advisor", "cluster", "engine", "events", "heat", "httpserver", "node", "origin", "periodic",
                   "s3api", "store"},
    "run": BASE | {"app", "gcpauses", "httpserver", "node", "s3api", "tls"},
    "supervisor": BASE | {"node"},
    "demo": BASE | {"origin", "run"},
    "cli": BASE | {"admin", "advisor", "app", "demo", "run", "httpserver", "supervisor", "tls"},
}


def part_of(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def gateway_imports(path: Path) -> set[str]:
    """The parts of the package that `path` imports (module level or not)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "gateway":
                names.update(f"gateway.{alias.name}" for alias in node.names)
            else:
                names.add(node.module)
    return {name.split(".")[1] for name in names if name.startswith("gateway.")}


MODULES = sorted(p for p in PACKAGE.rglob("*.py"))


def test_every_part_of_the_package_has_its_rule():
    parts = {part_of(p) for p in MODULES} - {"__init__"}
    assert parts <= set(ALLOWED), f"no rule yet for {sorted(parts - set(ALLOWED))}: add it to ALLOWED"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_one_way(path: Path):
    part = part_of(path)
    if part == "__init__":
        return
    wrong = gateway_imports(path) - ALLOWED[part] - {part}
    assert not wrong, f"{path.relative_to(PACKAGE.parent)} ({part}) imports {sorted(wrong)}"


def test_every_module_imports_alone():
    """Each module imported first, with the gateway's other modules unloaded: no import
    cycle or order dependence hides behind another module having been imported before."""
    names = [".".join(("gateway", *p.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__")
             for p in MODULES]
    script = (
        "import importlib, sys\n"
        "failed = []\n"
        f"for name in {names!r}:\n"
        "    for loaded in [m for m in sys.modules if m == 'gateway' or m.startswith('gateway.')]:\n"
        "        del sys.modules[loaded]\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as exc:\n"
        "        failed.append(f'{name}: {exc.__class__.__name__}: {exc}')\n"
        "print('\\n'.join(failed))\n"
        "sys.exit(1 if failed else 0)\n"
    )
    done = subprocess.run([sys.executable, "-W", "error", "-c", script], cwd=PACKAGE.parent,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def module_name(path: Path) -> str:
    return ".".join(("gateway", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__")


NAMES = {module_name(p): p for p in MODULES}

def _module_of(name: str) -> str | None:
    """The module of the package that importing `name` runs (a name within one: that module)."""
    while name and name not in NAMES:
        name = name.rpartition(".")[0]
    return name or None


def module_imports(path: Path) -> set[str]:
    """The modules of the package that `path` imports anywhere in it: at module level, in a
    function, under TYPE_CHECKING (a cycle there is a cycle of the design, even if Python never
    runs it). `from gateway.s3api import cors` imports the module gateway.s3api.cors."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str | None] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(_module_of(alias.name) for alias in node.names if alias.name.startswith("gateway."))
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            source = (f"{base}.{node.module}" if node.module else base) if node.level else (node.module or "")
            if source == "gateway" or source.startswith("gateway."):
                found.update(f"{source}.{a.name}" if f"{source}.{a.name}" in NAMES else _module_of(source)
                             for a in node.names)
    return {target for target in found if target is not None and target != name}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` (its modules in import order, the first again at the end), or None."""
    done: set[str] = set()
    for start in sorted(graph):
        if start in done:
            continue
        path, on_path = [start], {start}
        stack = [iter(sorted(graph[start]))]
        while stack:
            target = next(stack[-1], None)
            if target is None:
                stack.pop()
                finished = path.pop()
                on_path.discard(finished)
                done.add(finished)
                continue
            if target in on_path:
                return path[path.index(target):] + [target]
            if target not in done:
                path.append(target)
                on_path.add(target)
                stack.append(iter(sorted(graph[target])))
    return None


def test_find_cycle_finds_one_and_only_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None  # a diamond is no cycle


def test_no_import_cycle():
    """The modules' import graph, with imports in functions and under TYPE_CHECKING, has no cycle:
    each module can be read, and changed, knowing only what it imports."""
    graph = {name: module_imports(path) for name, path in NAMES.items()}
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_hit_path_does_not_import_the_asgi_app():
    """The hit path and the kept requests are given the endpoint's services (s3api.context), its
    Authenticator and Accounts, never the app: what they depend on is what they are handed."""
    for name in ("gateway.s3api.hits", "gateway.s3api.replays"):
        assert "gateway.s3api.server" not in module_imports(NAMES[name]), name


def test_the_engine_and_s3api_name_nothing_under_type_checking():
    """What a part of the engine or the S3 API works with it is handed when it is built: no module
    there needs a name it may not import (issue 35: no collaborator wired after construction)."""
    for path in MODULES:
        if part_of(path) in ("engine", "s3api"):
            assert "TYPE_CHECKING" not in path.read_text(), path.relative_to(PACKAGE.parent)
