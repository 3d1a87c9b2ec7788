"""One frozen Settings object, read from a TOML file and GATEWAY_* environment variables.

`load()` is the only place that reads the environment or a config file. Every other
module receives the Settings (or one section of it) through its constructor.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

Access = Literal["read", "readwrite"]


class ConfigError(ValueError):
    """A setting is missing, malformed or inconsistent; the message names it."""


_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "kib": 1024,
    "m": 1000**2, "mb": 1000**2, "mib": 1024**2,
    "g": 1000**3, "gb": 1000**3, "gib": 1024**3,
    "t": 1000**4, "tb": 1000**4, "tib": 1024**4,
}
_DURATION_UNITS = {"ms": 0.001, "s": 1, "": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def parse_size(value: int | str, name: str = "size") -> int:
    """`2GiB`, `512 MiB`, `1000000` -> bytes."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(value))
    if not match or match.group(2).lower() not in _SIZE_UNITS:
        raise ConfigError(f"{name}: not a size: {value!r} (try 512MiB or 2GiB)")
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()])


def parse_duration(value: int | float | str, name: str = "duration") -> float:
    """`30s`, `5m`, `250ms`, `2` -> seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(value))
    if not match or match.group(2).lower() not in _DURATION_UNITS:
        raise ConfigError(f"{name}: not a duration: {value!r} (try 30s, 5m or 250ms)")
    return float(match.group(1)) * _DURATION_UNITS[match.group(2).lower()]


@dataclass(frozen=True, slots=True)
class OriginSettings:
    """The real bucket's endpoint and the gateway's own credentials for it."""

    endpoint: str = "https://s3.amazonaws.com"
    region: str = "us-east-1"
    access_key: str = ""
    secret_key: str = field(default="", repr=False)
    addressing: Literal["path", "virtual"] = "path"
    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    max_connections: int = 256
    retries: int = 2

    def __post_init__(self) -> None:
        if not re.match(r"^https?://[^/]+/?$", self.endpoint):
            raise ConfigError(f"origin.endpoint: expected http(s)://host[:port], got {self.endpoint!r}")
        if self.addressing not in ("path", "virtual"):
            raise ConfigError(f"origin.addressing: 'path' or 'virtual', got {self.addressing!r}")
        if self.connect_timeout <= 0 or self.read_timeout <= 0:
            raise ConfigError("origin timeouts must be positive")


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """Where the S3 endpoint listens and how it reads requests."""

    host: str = "127.0.0.1"
    port: int = 8080
    # Virtual-hosted-style addressing: `bucket.<domain>`; empty means path-style only.
    domain: str = ""
    max_object_size: int = 5 * 1024**3  # S3's single-PUT limit
    spool_memory: int = 4 * 1024**2  # request bodies above this go to a temp file
    spool_dir: str = ""  # empty: the system temp folder
    max_xml_size: int = 2 * 1024**2

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"server.port: out of range: {self.port}")


@dataclass(frozen=True, slots=True)
class Grant:
    """Access to one bucket, optionally narrowed to keys under a prefix."""

    bucket: str
    prefix: str = ""
    access: Access = "read"

    def __post_init__(self) -> None:
        if self.access not in ("read", "readwrite"):
            raise ConfigError(f"grant access must be 'read' or 'readwrite', got {self.access!r}")
        if not self.bucket:
            raise ConfigError("grant.bucket must not be empty ('*' means every bucket)")


@dataclass(frozen=True, slots=True)
class User:
    access_key: str
    secret_key: str = field(repr=False)
    grants: tuple[Grant, ...] = ()
    # Admins may use bucket configuration operations (policy, ACL, lifecycle, ...)
    # that the gateway passes through with its own origin credentials.
    admin: bool = False

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ConfigError("every auth.users entry needs access_key and secret_key")


@dataclass(frozen=True, slots=True)
class AuthSettings:
    users: tuple[User, ...] = ()
    # Buckets that anyone may read without credentials.
    anonymous_read: tuple[str, ...] = ()
    max_clock_skew: float = 900.0

    def __post_init__(self) -> None:
        keys = [u.access_key for u in self.users]
        if len(keys) != len(set(keys)):
            raise ConfigError("auth.users: access keys must be unique")


@dataclass(frozen=True, slots=True)
class DiskTierSettings:
    """One cache folder: Alluxio's tieredstore.levelN.dirs.path / .quota / .mediumtype."""

    path: str
    quota: int
    medium: Literal["ssd", "hdd"] = "ssd"

    def __post_init__(self) -> None:
        if not self.path:
            raise ConfigError("cache.disk: every disk tier needs a path")
        if self.quota <= 0:
            raise ConfigError(f"cache.disk {self.path}: quota must be positive")
        if self.medium not in ("ssd", "hdd"):
            raise ConfigError(f"cache.disk {self.path}: medium is 'ssd' or 'hdd', got {self.medium!r}")


@dataclass(frozen=True, slots=True)
class PrefixRule:
    """A bucket/prefix, with a TTL in seconds for `cache.ttl` rules."""

    bucket: str
    prefix: str = ""
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class CacheSettings:
    """The block cache: tiers, block size, eviction policy, promotion, pins and TTLs."""

    block_size: int = 4 * 1024**2
    policy: Literal["lru", "s3fifo"] = "s3fifo"
    # CACHE_PROMOTE (true): a hit in a lower tier is copied up to memory; CACHE (false): not.
    promote: bool = True
    memory_quota: int = 1024**3
    disk: tuple[DiskTierSettings, ...] = ()
    readahead_blocks: int = 4  # blocks of a read fetched ahead, in parallel
    # Bytes of blocks that reads in flight hold besides the memory tier (being fetched, read
    # from disk, sent): past it readahead is skipped and new block reads wait their turn.
    read_buffer: int = 96 * 1024**2
    pinned: tuple[PrefixRule, ...] = ()  # never evicted
    ttl: tuple[PrefixRule, ...] = ()  # freed `seconds` after they were cached
    # Writes also fill the cache (Alluxio's CACHE_THROUGH), so a read after a write hits.
    cache_through: bool = False

    def __post_init__(self) -> None:
        if not 64 * 1024 <= self.block_size <= 64 * 1024**2:
            raise ConfigError(f"cache.block_size: between 64KiB and 64MiB, got {self.block_size}")
        if self.policy not in ("lru", "s3fifo"):
            raise ConfigError(f"cache.policy: 'lru' or 's3fifo', got {self.policy!r}")
        if self.memory_quota < 0 or self.readahead_blocks < 0:
            raise ConfigError("cache.memory_quota and cache.readahead_blocks must not be negative")
        if self.read_buffer < self.block_size:
            raise ConfigError(f"cache.read_buffer: at least one block ({self.block_size}), got {self.read_buffer}")
        if any(rule.seconds <= 0 for rule in self.ttl):
            raise ConfigError("cache.ttl: every rule needs seconds > 0")


@dataclass(frozen=True, slots=True)
class MetadataSettings:
    """The object-metadata cache (Alluxio's alluxio.user.metadata.cache.*)."""

    max_entries: int = 100_000  # metadata.cache.max.size
    ttl: float = 60.0  # metadata.cache.expiration.time: after it, revalidate with the origin
    negative_ttl: float = 5.0  # how long a 404 is remembered
    strict: bool = False  # revalidate on every request (a conditional HEAD; no data refetch)
    stale_if_error: float = 3600.0  # serve cached metadata this long past its TTL when the origin is down

    def __post_init__(self) -> None:
        if self.max_entries < 0 or self.ttl < 0 or self.negative_ttl < 0 or self.stale_if_error < 0:
            raise ConfigError("metadata settings must not be negative")


@dataclass(frozen=True, slots=True)
class AdminSettings:
    """The admin API, served under `path` on the S3 port (no bucket name can start with '_')."""

    token: str = field(default="", repr=False)  # empty: the admin API answers nothing
    path: str = "/_gateway"

    def __post_init__(self) -> None:
        if not self.path.startswith("/_") or self.path.endswith("/"):
            raise ConfigError(f"admin.path: like '/_gateway' (starting with '/_'), got {self.path!r}")


@dataclass(frozen=True, slots=True)
class EventsSettings:
    """S3 event notifications that invalidate at once what changed behind the gateway."""

    sqs_queue_url: str = ""  # empty: no SQS consumer (the admin webhook still works)
    sqs_region: str = "us-east-1"
    sqs_access_key: str = ""
    sqs_secret_key: str = field(default="", repr=False)
    wait_seconds: int = 10  # long-poll duration of each ReceiveMessage

    def __post_init__(self) -> None:
        if self.sqs_queue_url and not re.match(r"^https?://[^/]+/.+", self.sqs_queue_url):
            raise ConfigError(f"events.sqs_queue_url: expected http(s)://host/account/queue, got {self.sqs_queue_url!r}")
        if not 0 <= self.wait_seconds <= 20:
            raise ConfigError("events.wait_seconds: 0 to 20 (SQS long polling)")


@dataclass(frozen=True, slots=True)
class ListingSettings:
    """The listing cache: ListObjects pages keyed by their full parameter set."""

    max_entries: int = 10_000
    ttl: float = 30.0

    def __post_init__(self) -> None:
        if self.max_entries < 0 or self.ttl < 0:
            raise ConfigError("listing settings must not be negative")


@dataclass(frozen=True, slots=True)
class RedisSettings:
    """Shared state in Redis: object metadata (L2), listing pages and the invalidation channel.

    An empty `url` means no Redis: the node runs alone with its in-process caches (the
    embedded default). With Redis down the node keeps serving from those caches.
    """

    # redis://[user:password@]host:port/db, rediss:// (TLS) or unix:///path/redis.sock.
    # Sentinel and Cluster will be further schemes here. Hidden from repr: it may hold a password.
    url: str = field(default="", repr=False)
    key_prefix: str = "gw:"  # every key and the pub/sub channel start with it
    socket_timeout: float = 0.5  # a Redis call taking longer counts as Redis being down
    retry_interval: float = 1.0  # after a failure, how long the node runs without Redis before trying again

    def __post_init__(self) -> None:
        if self.url and not re.match(r"^(redis|rediss|unix)://", self.url):
            raise ConfigError("redis.url: expected redis://host:port/db, rediss://... or unix:///path "
                              "(Sentinel and Cluster are not supported yet)")
        if self.socket_timeout <= 0 or self.retry_interval <= 0:
            raise ConfigError("redis.socket_timeout and redis.retry_interval must be positive")


@dataclass(frozen=True, slots=True)
class Settings:
    origin: OriginSettings = OriginSettings()
    server: ServerSettings = ServerSettings()
    auth: AuthSettings = AuthSettings()
    cache: CacheSettings = CacheSettings()
    metadata: MetadataSettings = MetadataSettings()
    listing: ListingSettings = ListingSettings()
    redis: RedisSettings = RedisSettings()
    admin: AdminSettings = AdminSettings()
    events: EventsSettings = EventsSettings()

    def redacted(self) -> dict[str, Any]:
        """The effective settings as plain data, secrets replaced by '***'."""
        return _redact(dataclasses.asdict(self))


def _is_secret(name: str) -> bool:
    return "secret" in name or "token" in name or "password" in name


def _redact(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: ("***" if _is_secret(k) and v else _redact(v)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redact(v) for v in value]
    if isinstance(value, str) and "://" in value:  # redis://user:password@host
        return re.sub(r"^([a-z+]+://[^/@:]*):[^/@]*@", r"\1:***@", value)
    return value


_SIZE_FIELDS = {
    ("server", "max_object_size"), ("server", "spool_memory"), ("server", "max_xml_size"),
    ("cache", "block_size"), ("cache", "memory_quota"), ("cache", "read_buffer"),
}
_DURATION_FIELDS = {
    ("origin", "connect_timeout"), ("origin", "read_timeout"), ("auth", "max_clock_skew"),
    ("metadata", "ttl"), ("metadata", "negative_ttl"), ("metadata", "stale_if_error"), ("listing", "ttl"),
    ("redis", "socket_timeout"), ("redis", "retry_interval"),
}


def _build_section(cls: type, name: str, raw: Mapping[str, Any]) -> Any:
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = set(raw) - set(known)
    if unknown:
        raise ConfigError(f"[{name}]: unknown setting(s): {', '.join(sorted(unknown))}")
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
    unknown = set(raw) - set(fields)
    if unknown:
        raise ConfigError(f"{name}: unknown setting(s): {', '.join(sorted(unknown))}")
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
    unknown = set(raw) - {"access_key", "secret_key", "grants", "admin"}
    if unknown:
        raise ConfigError(f"auth.users: unknown setting(s): {', '.join(sorted(unknown))}")
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


_SECTIONS = {
    "origin": OriginSettings, "server": ServerSettings, "auth": AuthSettings,
    "cache": CacheSettings, "metadata": MetadataSettings, "listing": ListingSettings,
    "redis": RedisSettings,
    "admin": AdminSettings, "events": EventsSettings,
}


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
