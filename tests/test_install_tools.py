"""scripts/install-test-tools.sh: what `make test` and .ci/run run first, so that a fresh machine runs
the whole suite. Run here for its answer where it cannot install (not root): one line naming the
command to run, and a stop. Where it can (root, apt-get), it is what CI runs on every clean clone."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "install-test-tools.sh"
BASICS = ("bash", "sed", "sort", "head", "apt-cache", "apt-get", "printf")  # what the script itself runs


def test_without_root_it_names_the_command_and_stops(tmp_path: Path) -> None:
    """A machine with none of the programs, and a user who is not root: exit 1 and one line with
    the `sudo apt-get install` of every package."""
    for name in BASICS:
        if shutil.which(name):
            (tmp_path / name).symlink_to(shutil.which(name))  # type: ignore[arg-type]
    (tmp_path / "python3").symlink_to(sys.executable)
    (tmp_path / "id").write_text("#!/bin/sh\necho 1000\n")
    (tmp_path / "id").chmod(0o755)
    result = subprocess.run([shutil.which("bash") or "bash", str(SCRIPT)], capture_output=True, text=True, timeout=60,
                            env={"PATH": str(tmp_path), "HOME": str(tmp_path)})
    assert result.returncode == 1, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    command = re.search(r"run: sudo apt-get install -y ([^(]+) \(", lines[0]) if shutil.which("apt-get") else None
    if command is None:  # no apt-get here: the Debian package names, to find in this system's packages
        assert "install the programs of these Debian packages:" in lines[0], lines[0]
        return
    packages = command.group(1).split()
    for wanted in ("redis-server", "redis-tools", "rclone", "s3cmd", "wrk", "openssl", "curl", "systemd", "nodejs",
                   "npm", "maven", "default-jdk-headless", "gcc"):
        assert wanted in packages, (wanted, lines[0])
    # Looked for where the tests look: chromium and its driver at /usr/bin, nginx in /usr/sbin too.
    for paths, package in ((("/usr/bin/chromium",), "chromium"), (("/usr/bin/chromedriver",), "chromium-driver"),
                           (("/usr/sbin/nginx", "/sbin/nginx"), "nginx")):
        assert (package in packages) != any(os.access(path, os.X_OK) for path in paths), (package, lines[0])
    assert "INSTALL_TOOLS=no" in lines[0]


def test_every_program_the_run_names_as_missing_is_installed_by_the_script() -> None:
    """tests/conftest.py names the missing programs at the start of a run; the script installs each
    (Go from Debian only where its version is new enough)."""
    script = SCRIPT.read_text()
    conftest = ast.parse((ROOT / "tests" / "conftest.py").read_text())
    programs = next(ast.literal_eval(node.value) for node in conftest.body
                    if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "_PROGRAMS")
    for program, packages in programs.items():
        if program == "go":
            assert "golang-go" in script
            continue
        assert program in script, program
        for package in packages.split():
            assert package in script, package


def test_make_test_and_ci_run_it_first() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^test: tools install$", makefile, re.MULTILINE)
    assert re.search(r"^tools:\n(?:.*\n)*?\tbash scripts/install-test-tools.sh$", makefile, re.MULTILINE)
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.index("bash scripts/install-test-tools.sh") < ci.index("tests/clients/build.sh") < ci.index("make test\n")
    assert "apt-get" not in ci  # one place installs packages
