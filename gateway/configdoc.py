"""The configuration reference, rendered from the Settings dataclasses so that it cannot drift.

`python -m gateway.configdoc > docs/configuration.md` writes it; tests/test_configdoc.py fails when
the committed file differs from what this renders. Descriptions are the `help` texts of the fields
(`gateway.config.setting`) and the docstrings of the section classes.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
import types
import typing
from typing import Any, Literal

from gateway import config

_HEADER = """\
# Configuration reference

<!-- Generated from gateway/config/settings.py by `python -m gateway.configdoc > docs/configuration.md`.
     Do not edit by hand: change the help texts in gateway/config/settings.py and regenerate. -->

The gateway reads one TOML file (`gateway serve --config FILE`; `gateway config check --config FILE`
validates it and prints the effective settings with secrets hidden) and environment variables.
Every setting `<section>.<name>` has the variable `GATEWAY_<SECTION>_<NAME>`, which wins over the
file: `GATEWAY_CACHE_MEMORY_QUOTA=2GiB`, `GATEWAY_SERVER_PORT=9000`. Lists take JSON or
comma-separated values (`GATEWAY_AUTH_ANONYMOUS_READ=public,datasets`); lists of tables take JSON
(`GATEWAY_CACHE_DISK='[{"path": "/var/cache/gateway", "quota": "100GiB"}]'`). A variable naming
an unknown setting of a known section is an error; variables of sections that do not exist are
ignored.

- **size**: bytes, with an optional unit: `1000000`, `512KiB`, `4MiB`, `2GiB`, `1TiB` (binary),
  `500MB`, `2GB` (decimal).
- **duration**: seconds, with an optional unit: `250ms`, `30s`, `5m`, `1h`, `2d`; a bare number is
  seconds.
- **secret**: hidden from logs, `repr` and `gateway config check`.

[`deploy/gateway.example.toml`](../deploy/gateway.example.toml) sets every section, with comments.
For the names of the Alluxio properties these correspond to, see [alluxio.md](alluxio.md).
"""

# Fields inside lists of tables that load() parses as sizes or durations (config._build_table).
_TABLE_SIZES = {"quota"}
_TABLE_DURATIONS = {"seconds"}


@dataclasses.dataclass(frozen=True)
class Row:
    """One setting as the reference shows it."""

    name: str  # `origin.endpoint`, or `path` for a field of a list of tables
    kind: str
    default: str
    env: str  # "" for fields of a list of tables: the whole list is one variable
    help: str


def sections() -> list[tuple[str, type]]:
    """(section name, settings class), in the order of the Settings fields."""
    hints = typing.get_type_hints(config.Settings)
    return [(f.name, hints[f.name]) for f in dataclasses.fields(config.Settings)]


def env_vars() -> dict[str, str]:
    """GATEWAY_* variable -> the setting it sets (`origin.endpoint`), for every setting load() reads."""
    return {f"GATEWAY_{section.upper()}_{f.name.upper()}": f"{section}.{f.name}"
            for section, cls in sections() for f in dataclasses.fields(cls)}


def _tables(annotation: Any) -> type | None:
    """The dataclass of a `tuple[X, ...]` setting (a list of tables), else None."""
    if typing.get_origin(annotation) is tuple:
        item = typing.get_args(annotation)[0]
        if dataclasses.is_dataclass(item):
            return item  # type: ignore[return-value]
    return None


def _kind(annotation: Any, size: bool, duration: bool) -> str:
    if size:
        return "size"
    if duration:
        return "duration"
    if typing.get_origin(annotation) is Literal:
        return "one of " + ", ".join(f"`{v}`" for v in typing.get_args(annotation))
    table = _tables(annotation)
    if table is not None:
        return f"list of tables ({_anchor_link(table)})"
    if typing.get_origin(annotation) is tuple:
        return "list of strings"
    names = {bool: "boolean", int: "integer", float: "number", str: "string"}
    if isinstance(annotation, type) and annotation in names:
        return names[annotation]
    if isinstance(annotation, types.UnionType):
        return " or ".join(_kind(a, False, False) for a in typing.get_args(annotation))
    return str(annotation)


def _size(value: int) -> str:
    for unit, factor in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if value and value % factor == 0:
            return f"{value // factor}{unit}"
    return str(value)


def _duration(value: float) -> str:
    for unit, factor in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if value and value % factor == 0:
            return f"{int(value // factor)}{unit}"
    if value and (value * 1000) == int(value * 1000):
        return f"{int(value * 1000)}ms"
    return f"{value:g}s"


def _default(f: dataclasses.Field[Any], size: bool, duration: bool) -> str:
    if f.default is dataclasses.MISSING:
        return "required"
    value = f.default
    if size:
        return f"`{_size(value)}`"
    if duration:
        return f"`{_duration(value)}`"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, tuple):
        return "`[]`" if not value else f"`{list(value)}`"
    return f"`{value}`"


def _help(f: dataclasses.Field[Any]) -> str:
    text = str(f.metadata.get("help", "")).strip()
    if f.repr is False:
        text = f"{text} *Secret.*".strip()
    return text.replace("|", "\\|").replace("\n", " ")


def rows(section: str, cls: type) -> list[Row]:
    """The settings of one section (`section` non-empty) or the fields of one table (`section` "")."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if section:
            size = (section, f.name) in config._SIZE_FIELDS
            duration = (section, f.name) in config._DURATION_FIELDS
        else:
            size, duration = f.name in _TABLE_SIZES, f.name in _TABLE_DURATIONS
        out.append(Row(
            name=f"{section}.{f.name}" if section else f.name,
            kind=_kind(hints[f.name], size, duration),
            default=_default(f, size, duration),
            env=f"GATEWAY_{section.upper()}_{f.name.upper()}" if section else "",
            help=_help(f),
        ))
    return out


def _anchor(cls: type) -> str:
    return f"table-{cls.__name__.lower()}"


def _anchor_link(cls: type) -> str:
    return f"[{cls.__name__}](#{_anchor(cls)})"


def _doc(cls: type) -> str:
    doc = (cls.__doc__ or "").strip()
    if doc.startswith(cls.__name__ + "("):  # the signature dataclasses makes up when there is no docstring
        return ""
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs)


def render() -> str:
    """The whole reference as Markdown."""
    parts = [_HEADER]
    tables: dict[type, list[str]] = {}  # list-of-tables class -> where it is used, in order of first use

    def note_tables(owner: str, cls: type) -> None:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            table = _tables(hints[f.name])
            if table is not None:
                tables.setdefault(table, []).append(f"{owner}.{f.name}")
                note_tables(f"{owner}.{f.name}", table)

    for section, cls in sections():
        parts.append(f"## [{section}]\n")
        doc = _doc(cls)
        if doc:
            parts.append(doc + "\n")
        parts.append("| Setting | Type | Default | Environment variable | Description |")
        parts.append("| --- | --- | --- | --- | --- |")
        for row in rows(section, cls):
            parts.append(f"| `{row.name}` | {row.kind} | {row.default} | `{row.env}` | {row.help} |")
        parts.append("")
        note_tables(section, cls)

    if tables:
        parts.append("## Tables inside lists\n")
        parts.append("Entries of the settings that are lists of tables. In TOML they are inline tables or "
                     "`[[section.name]]` blocks; in an environment variable the whole list is one JSON value.\n")
    for cls, used in tables.items():
        parts.append(f'<a id="{_anchor(cls)}"></a>\n')
        parts.append(f"### {cls.__name__}: {', '.join(f'`{u}`' for u in used)}\n")
        doc = _doc(cls)
        if doc:
            parts.append(doc + "\n")
        parts.append("| Field | Type | Default | Description |")
        parts.append("| --- | --- | --- | --- |")
        for row in rows("", cls):
            parts.append(f"| `{row.name}` | {row.kind} | {row.default} | {row.help} |")
        parts.append("")
    return "\n".join(parts).rstrip("\n") + "\n"


def missing_help() -> list[str]:
    """Settings and table fields that have no help text (each should have one)."""
    missing = []
    seen: set[type] = set()

    def walk(owner: str, cls: type) -> None:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if not str(f.metadata.get("help", "")).strip():
                missing.append(f"{owner}.{f.name}")
            table = _tables(hints[f.name])
            if table is not None and table not in seen:
                seen.add(table)
                walk(f"{owner}.{f.name}[]", table)

    for section, cls in sections():
        walk(section, cls)
    return missing


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
