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
    "retry": set(), "periodic": {"log"},
    "objects": {"errors"},
    "store": BASE,
    "node": BASE,
    "rangeclient": set(),
    "origin": BASE | {"signing", "rangeclient", "retry"},
    "events": BASE | {"signing", "retry"},
    "cluster": BASE | {"heat", "store", "signing", "objects", "rangeclient", "periodic", "retry"},
    "engine": BASE | {"bytebudget", "cluster", "heat", "node", "objects", "origin", "store"},
    "s3api": BASE | {"engine", "signing"},
    "transport_errors": BASE,
    "hitanswers": set(),
    "requesthead": set(),
    "connlimits": BASE | {"transport_errors"},
    "httpserver": BASE | {"transport_errors", "hitanswers", "requesthead", "connlimits"},
    "advisor": BASE | {"store"},
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
