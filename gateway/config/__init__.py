"""One frozen Settings object, read from a TOML file and GATEWAY_* environment variables.

`load()` is the only place that reads the environment or a config file. Every other
module receives the Settings (or one section of it) through its constructor.

One module per job: units (ConfigError, `setting()`, sizes, durations), redisurl (what
`redis.url` names), redact (secrets hidden), settings (Settings and its sections),
loading (`load()`). Callers import from this package.
"""

from __future__ import annotations

from gateway.config.loading import _DURATION_FIELDS, _SIZE_FIELDS, load
from gateway.config.redact import redacted_url
from gateway.config.redisurl import RedisTarget, redis_target
from gateway.config.settings import (
    Access,
    AdminSettings,
    AuthSettings,
    CacheSettings,
    ClusterSettings,
    DiskTierSettings,
    EventsSettings,
    Grant,
    ListingSettings,
    MetadataSettings,
    OriginSettings,
    PrefixRule,
    RedisSettings,
    ServerSettings,
    Settings,
    User,
)
from gateway.config.units import ConfigError, parse_duration, parse_size, setting

__all__ = [
    "_DURATION_FIELDS",  # read by gateway.configdoc
    "_SIZE_FIELDS",
    "Access",
    "AdminSettings",
    "AuthSettings",
    "CacheSettings",
    "ClusterSettings",
    "ConfigError",
    "DiskTierSettings",
    "EventsSettings",
    "Grant",
    "ListingSettings",
    "MetadataSettings",
    "OriginSettings",
    "PrefixRule",
    "RedisSettings",
    "RedisTarget",
    "ServerSettings",
    "Settings",
    "User",
    "load",
    "parse_duration",
    "parse_size",
    "redacted_url",
    "redis_target",
    "setting",
]
