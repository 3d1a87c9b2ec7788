"""docs/configuration.md is what gateway.configdoc renders from the Settings dataclasses, and every setting has a help text."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import typing
from pathlib import Path

from gateway import config, configdoc

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "configuration.md"
REGENERATE = "python -m gateway.configdoc > docs/configuration.md"


def test_configuration_reference_is_up_to_date():
    assert DOC.read_text() == configdoc.render(), f"docs/configuration.md is stale: regenerate it with `{REGENERATE}`"


def test_every_setting_has_a_help_text():
    assert configdoc.missing_help() == [], (
        "give these fields a help text in gateway/config.py, setting(default, help=...), "
        f"then `{REGENERATE}`")


def test_module_entry_point_prints_the_reference():
    out = subprocess.run([sys.executable, "-m", "gateway.configdoc"], cwd=ROOT, capture_output=True, check=True,
                         timeout=60).stdout.decode()
    assert out == configdoc.render()


def test_every_section_and_setting_is_listed_with_its_env_var():
    text = DOC.read_text()
    for section, cls in configdoc.sections():
        assert f"## [{section}]" in text
        for f in dataclasses.fields(cls):
            assert f"| `{section}.{f.name}` |" in text
            assert f"`GATEWAY_{section.upper()}_{f.name.upper()}`" in text


def test_env_var_names_are_the_ones_load_reads():
    """Each variable configdoc names sets the setting it claims (so the docs and load() agree on the mapping)."""
    samples = {"int": "7", "float": "7", "bool": "true"}
    for var, name in configdoc.env_vars().items():
        section, key = name.split(".")
        f = next(f for f in dataclasses.fields(type(getattr(config.Settings(), section))) if f.name == key)
        if str(f.type).startswith("tuple") or str(f.type).startswith("Literal") or (section, key) in {
                ("origin", "endpoint"), ("events", "sqs_queue_url"), ("redis", "url"), ("admin", "path"),
                ("cluster", "advertise_url")}:
            continue  # needs a valid structured value; the kinds above cover the mapping
        if (section, key) in config._SIZE_FIELDS:
            value, want = "128KiB", 128 * 1024
        elif (section, key) in config._DURATION_FIELDS:
            value, want = "7s", 7.0
        else:
            value = samples.get(str(f.type), "x7")
            want = {"int": 7, "float": 7.0, "bool": True}.get(str(f.type), "x7")
        if (section, key) == ("cache", "shadow_rate"):  # a share, at most 1
            value, want = "0.5", 0.5
        if (section, key) == ("cache", "read_buffer"):
            value, want = "8MiB", 8 * 1024**2
        if (section, key) == ("cluster", "heartbeat_interval"):  # below cluster.member_ttl
            value, want = "1s", 1.0
        environ = {var: value}
        if (section, key) in {("server", "tls_cert_file"), ("server", "tls_key_file")}:  # one needs the other
            environ = {"GATEWAY_SERVER_TLS_CERT_FILE": value, "GATEWAY_SERVER_TLS_KEY_FILE": value}
        settings = config.load(None, environ=environ)
        assert getattr(getattr(settings, section), key) == want, var


def test_size_and_duration_defaults_are_rendered_back_exactly():
    for section, cls in configdoc.sections():
        for f in dataclasses.fields(cls):
            if (section, f.name) in config._SIZE_FIELDS:
                assert config.parse_size(configdoc._size(f.default)) == f.default
            if (section, f.name) in config._DURATION_FIELDS:
                assert config.parse_duration(configdoc._duration(f.default)) == f.default


def _setting_names() -> set[str]:
    names = set(configdoc.env_vars().values())
    for section, cls in configdoc.sections():
        for f in dataclasses.fields(cls):
            table = configdoc._tables(typing.get_type_hints(cls)[f.name])
            if table is not None:
                names |= {f"{section}.{f.name}[].{t.name}" for t in dataclasses.fields(table)}
    return names


def test_alluxio_table_names_only_settings_that_exist():
    """docs/alluxio.md: every setting in its "Here" column exists, and the properties people ask about are there."""
    rows = [line.split(" | ") for line in (ROOT / "docs" / "alluxio.md").read_text().splitlines()
            if line.startswith("| `")]
    known = _setting_names()
    for row in rows:
        here = row[1]
        for name in re.findall(r"`([a-z_]+\.[a-z_.\[\]]+)", here):
            assert name in known, f"docs/alluxio.md names {name}, which is not a setting of gateway/config.py"
        for section in re.findall(r"`([a-z_]+)\.\*`", here):
            assert section in dict(configdoc.sections()), f"docs/alluxio.md names a section {section} that does not exist"
        assert re.search(r"`[a-z_]+\.[a-z_*]", here) or here.startswith(("not yet", "the memory tier", "admin API")), row
    properties = " ".join(row[0] for row in rows)
    for wanted in ("alluxio.user.metadata.cache.max.size", "alluxio.user.metadata.cache.expiration.time",
                   "level0.dirs.quota", "tieredstore.levels", "dirs.path", "dirs.mediumtype", "CACHE_PROMOTE",
                   "readtype.default=CACHE`", "NO_CACHE", "CACHE_THROUGH", "writetype.default=THROUGH",
                   "alluxio.user.file.replication.max", "alluxio.user.file.passive.cache.enabled",
                   "alluxio.worker.evictor.class", "distributedLoad"):
        assert wanted in properties, wanted


def test_docs_name_only_settings_that_exist():
    """README.md and docs/: every `section.name` of a settings section, and every GATEWAY_* variable,
    is one gateway/config/ has. (docs/configuration.md is rendered from the settings; docs/benchmarks.md
    and its notes record runs at past commits, with the names they had, and name modules such as `auth.memo`.)"""
    known, variables = _setting_names(), set(configdoc.env_vars())
    sections = dict(configdoc.sections())
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    checked = 0
    for doc in docs:
        if doc.name in ("configuration.md", "benchmarks.md", "benchmarks-notes.md"):
            continue
        text = doc.read_text()
        for section, rest in re.findall(r"`([a-z_]+)\.([a-z_]+(?:\[\]\.[a-z_]+)?)(?![\w.(/])", text):
            if section in sections and rest != "py":
                checked += 1
                assert f"{section}.{rest}" in known, f"{doc.name} names {section}.{rest}, which is not a setting"
        for variable in re.findall(r"\bGATEWAY_[A-Z0-9_]*[A-Z0-9]\b", text):
            checked += 1
            assert variable in variables, f"{doc.name} names {variable}, which no setting reads"
    assert checked > 100, checked
