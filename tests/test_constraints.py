"""constraints.txt: the versions every install takes (the Makefile's and deploy/install.sh).

Each requirement of pyproject.toml, of the package and of every extra, is pinned there with `==`
to a version its own specifier accepts; so no install resolves a package to whatever was
released last (moto 5.2.6 changed an answer the suite relied on, between two CI runs).
tests/test_deploy.py installs the package from constraints.txt into a fresh virtualenv.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent


def pinned_versions() -> dict[str, str]:
    """constraints.txt as {canonical name: version}; every line not a comment is `name==version`."""
    pins: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        assert sep and version.strip(), f"not pinned with ==: {line!r}"
        pins[canonicalize_name(name)] = version.strip()
    return pins


def _requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        lines.extend(extra)
    return [Requirement(line) for line in lines]


def test_every_requirement_is_pinned_to_a_version_it_accepts():
    pins = pinned_versions()
    linux = {"platform_system": "Linux", "platform_machine": "x86_64"}
    for requirement in _requirements():
        if requirement.marker is not None and not requirement.marker.evaluate(linux):
            continue
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement} is not in constraints.txt: run `make lock`"
        assert requirement.specifier.contains(pins[name], prereleases=True), (str(requirement), pins[name])

