"""`load()`: the only reader of the config file and the GATEWAY_* environment; raw values parsed and checked per field."""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from gateway.config.settings import DiskTierSettings, Grant, PrefixRule, Settings, User
from gateway.config.units import ConfigError, parse_duration, parse_size


_SIZE_FIELDS = {
    ("server", "max_object_size"), ("server", "spool_memory"), ("server", "max_xml_size"), ("server", "max_head_size"),
    ("cache", "block_size"), ("cache", "memory_quota"), ("cache", "read_buffer"), ("metadata", "head_tail"),
}
_DURATION_FIELDS = {
    ("origin", "connect_timeout"), ("origin", "read_timeout"), ("auth", "max_clock_skew"),
    ("server", "head_timeout"), ("server", "keepalive_timeout"), ("server", "stall_timeout"),
    ("server", "shutdown_timeout"),
    ("metadata", "ttl"), ("metadata", "negative_ttl"), ("metadata", "stale_if_error"), ("listing", "ttl"),
    ("redis", "socket_timeout"), ("redis", "retry_interval"), ("redis", "invalidation_timeout"),
    ("cluster", "heartbeat_interval"), ("cluster", "member_ttl"), ("cluster", "peer_connect_timeout"),
    ("cluster", "peer_read_timeout"), ("cluster", "heat_interval"), ("cluster", "heat_half_life"),
}


def _build_section(cls: type, name: str, raw: Mapping[str, Any]) -> Any:
    known = {f.name: f for f in dataclasses.fields(cls)}
    _refuse_unknown(f"[{name}]", raw, known)
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if (name, key) in _SIZE_FIELDS:
            value = parse_size(value, f"{name}.{key}")
        elif (name, key) in _DURATION_FIELDS:
            value = parse_duration(value, f"{name}.{key}")
        elif name == "auth" and key == "users":
            value = tuple(_build_user(u) for u in _as_list(value, "auth.users"))
        elif name == "auth" and key == "anonymous_read":
            value = tuple(_as_list(value, "auth.anonymous_read"))
        elif name == "cache" and key == "disk":
            value = tuple(_build_table(DiskTierSettings, "cache.disk", d) for d in _as_list(value, "cache.disk"))
        elif name == "cache" and key in ("pinned", "ttl"):
            value = tuple(_build_table(PrefixRule, f"cache.{key}", r) for r in _as_list(value, f"cache.{key}"))
        else:
            value = _coerce(value, known[key].type, f"{name}.{key}")
        values[key] = value
    return cls(**values)


def _refuse_unknown(where: str, raw: Mapping[str, Any], known: Iterable[str]) -> None:
    unknown = set(raw) - set(known)
    if unknown:
        raise ConfigError(f"{where}: unknown setting(s): {', '.join(sorted(unknown))}")


def _as_list(value: Any, name: str) -> list[Any]:
    if isinstance(value, str):
        try:
            value = orjson.loads(value) if value.strip().startswith("[") else value.split(",")
        except orjson.JSONDecodeError as exc:
            raise ConfigError(f"{name}: not valid JSON: {exc}") from None
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"{name}: expected a list")
    return [v.strip() if isinstance(v, str) else v for v in value]


def _build_table(cls: type, name: str, raw: Any) -> Any:
    """One entry of a list of tables ([[cache.disk]], cache.ttl = [{...}])."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{name}: each entry is a table")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    _refuse_unknown(name, raw, fields)
    values = {}
    for key, value in raw.items():
        if key == "quota":
            value = parse_size(value, f"{name}.quota")
        elif key == "seconds":
            value = parse_duration(value, f"{name}.seconds")
        else:
            value = _coerce(value, fields[key].type, f"{name}.{key}")
        values[key] = value
    try:
        return cls(**values)
    except TypeError as exc:
        raise ConfigError(f"{name}: {exc}") from None


def _build_user(raw: Any) -> User:
    if not isinstance(raw, Mapping):
        raise ConfigError("auth.users: each user is a table with access_key, secret_key, grants")
    _refuse_unknown("auth.users", raw, {"access_key", "secret_key", "grants", "admin"})
    grants = []
    for g in raw.get("grants", []):
        if not isinstance(g, Mapping) or set(g) - {"bucket", "prefix", "access"}:
            raise ConfigError("auth.users.grants: each grant is {bucket, prefix, access}")
        grants.append(Grant(**g))
    return User(
        access_key=str(raw.get("access_key", "")),
        secret_key=str(raw.get("secret_key", "")),
        grants=tuple(grants),
        admin=bool(raw.get("admin", False)),
    )


def _coerce(value: Any, annotation: Any, name: str) -> Any:
    kind = str(annotation)
    try:
        if kind == "int":
            return int(value)
        if kind == "float":
            return float(value)
        if kind == "bool":
            if isinstance(value, str):
                if value.lower() not in ("1", "0", "true", "false", "yes", "no"):
                    raise ValueError(value)
                return value.lower() in ("1", "true", "yes")
            return bool(value)
    except ValueError:
        raise ConfigError(f"{name}: expected {kind}, got {value!r}") from None
    return str(value) if not isinstance(value, str) else value


# Every section of Settings, by its name; each field's default is an instance of its class.
_SECTIONS: dict[str, type] = {f.name: type(f.default) for f in dataclasses.fields(Settings)}


def load(path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Merge the TOML file at `path` (if any) with GATEWAY_<SECTION>_<NAME> variables.

    Environment variables win over the file, e.g. GATEWAY_ORIGIN_ENDPOINT or
    GATEWAY_SERVER_PORT=9000. Lists take JSON or comma-separated values, so
    GATEWAY_AUTH_USERS='[{"access_key": "...", "secret_key": "...", "grants": [...]}]'.
    """
    raw: dict[str, dict[str, Any]] = {}
    if path is not None:
        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
        unknown = set(data) - set(_SECTIONS)
        if unknown:
            raise ConfigError(f"{path}: unknown section(s): {', '.join(sorted(unknown))}")
        for section, values in data.items():
            if not isinstance(values, dict):
                raise ConfigError(f"{path}: [{section}] must be a table")
            raw[section] = dict(values)
    env = os.environ if environ is None else environ
    for var, value in env.items():
        if not var.startswith("GATEWAY_"):
            continue
        rest = var[len("GATEWAY_"):].lower()
        section, _, key = rest.partition("_")
        if section in _SECTIONS and key:
            raw.setdefault(section, {})[key] = value
    sections = {name: _build_section(cls, name, raw.get(name, {})) for name, cls in _SECTIONS.items()}
    return Settings(**sections)
