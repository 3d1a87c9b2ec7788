"""What `redis.url` names: one server, a master found through Sentinel, or a Redis Cluster."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import parse_qsl, unquote

from gateway.config.units import ConfigError


@dataclass(frozen=True, slots=True)
class RedisTarget:
    """What `redis.url` names: one server, a master found through Sentinel, or a Redis Cluster."""

    kind: Literal["server", "sentinel", "cluster"]
    hosts: tuple[tuple[str, int], ...] = ()  # sentinels or cluster seed nodes; empty for a server
    username: str | None = None
    password: str | None = field(default=None, repr=False)  # of the data nodes
    sentinel_password: str | None = field(default=None, repr=False)
    master: str = ""  # the Sentinel service name
    db: int = 0
    tls: bool = False


_REDIS_SERVER_SCHEMES = ("redis", "rediss", "unix")
_REDIS_MULTI_SCHEMES: dict[str, tuple[Literal["sentinel", "cluster"], bool]] = {"redis+sentinel": ("sentinel", False), "rediss+sentinel": ("sentinel", True),
                        "redis+cluster": ("cluster", False), "rediss+cluster": ("cluster", True)}
_REDIS_URL_FORMS = ("redis://[user:password@]host:port/db, rediss://... (TLS), unix:///path/redis.sock, "
                    "redis+sentinel://[user:password@]host:port[,host:port...]/master-name[/db] "
                    "or redis+cluster://[user:password@]host:port[,host:port...]")


def redis_target(url: str) -> RedisTarget:
    """Parse `redis.url`; ConfigError names what is wrong. A one-server URL is left to redis-py."""
    scheme, sep, rest = url.partition("://")
    if sep and scheme in _REDIS_SERVER_SCHEMES:
        return RedisTarget("server")
    if not sep or scheme not in _REDIS_MULTI_SCHEMES:
        raise ConfigError(f"redis.url: expected {_REDIS_URL_FORMS}")
    kind, tls = _REDIS_MULTI_SCHEMES[scheme]
    rest, _, query = rest.partition("?")
    userinfo, at, rest = rest.rpartition("@")
    netloc, _, path = rest.partition("/")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    default_port = 26379 if kind == "sentinel" else 6379
    hosts = tuple(_redis_host(part, default_port, scheme) for part in netloc.split(","))
    sentinel_password = None
    for name, value in parse_qsl(query, keep_blank_values=True):
        if kind == "sentinel" and name == "sentinel_password":
            sentinel_password = value
        else:
            raise ConfigError(f"redis.url: unknown parameter {name!r} for {scheme}://"
                              + (" (known: sentinel_password)" if kind == "sentinel" else ""))
    parts = [unquote(p) for p in path.split("/")] if path else []
    if kind == "sentinel":
        if not parts or not parts[0] or len(parts) > 2 or (len(parts) == 2 and not parts[1].isdigit()):
            raise ConfigError(f"redis.url: {scheme}://host:port[,host:port...]/<master name>[/db], "
                              "the master name as the Sentinels know it (sentinel monitor <name> ...)")
        return RedisTarget(kind, hosts, username, password, sentinel_password,
                           master=parts[0], db=int(parts[1]) if len(parts) == 2 else 0, tls=tls)
    if parts not in ([], [""], ["0"]):
        raise ConfigError(f"redis.url: {scheme}:// names seed nodes only, no path: "
                          "a Redis Cluster has one database (0)")
    return RedisTarget(kind, hosts, username, password, tls=tls)


def _redis_host(part: str, default_port: int, scheme: str) -> tuple[str, int]:
    match = re.fullmatch(r"(\[[0-9a-fA-F:.]+\]|[^\[\]:/]+)(?::(\d{1,5}))?", part)
    port = int(match.group(2) or default_port) if match else 0
    if not match or not 0 < port < 65536:
        raise ConfigError(f"redis.url: {scheme}:// needs host[:port] entries separated by commas, "
                          f"got {part!r}")
    return match.group(1).strip("[]"), port
