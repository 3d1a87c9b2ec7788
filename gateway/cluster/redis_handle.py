"""The node's one Redis handle: the client, the key prefix, and the circuit breaker every call goes through.

Redis is a speed-up, never a dependency: every call is bounded by a timeout, and any
failure becomes "no shared state" (a miss, or a skipped write) plus a counter, so a node
keeps serving from its own caches and comes back to Redis by itself. The metadata and
listing L2 (level2), the invalidation channel (invalidation), runtime pins, membership
and replication all use this handle.

Redis may be one server, a Sentinel-watched master or a Redis Cluster (gateway.cluster.
connection). What keeps every use cluster-safe:

- Name keys with `RedisHandle.key(name)` (the prefix never holds a hash tag).
- A single-key command needs nothing more. A Lua script, a MULTI or any multi-key command
  (MGET, SUNIONSTORE, ...) must touch keys of one slot: give every key it touches the same
  hash tag, `key("fleet:{members}")` and `key("fleet:{members}:urls")`, and declare them
  in KEYS (the client routes EVALSHA by KEYS[1]). A script may build further keys only
  from the same tag (as level2's _PAGES_FORGET builds page keys).
- A tag puts all its keys on one master: tag what must be atomic together, not whole
  namespaces (metadata is not tagged, so it spreads over the masters).
- No KEYS or SCAN over the keyspace (on a cluster they see one master); keep an index.
- PUBLISH and SUBSCRIBE are classic pub/sub: on a cluster a message reaches every node.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import TypeVar

from redis.asyncio.cluster import RedisCluster

from gateway import log
from gateway.cluster.connection import AnyRedis, redis_client
from gateway.config import RedisSettings

__all__ = ["RedisHandle", "as_text"]

T = TypeVar("T")


class RedisHandle:
    """The Redis client of this node and the failure boundary around it. Event loop only.

    Failure model: any error or timeout opens the circuit for `retry_interval`; while it
    is open, calls return at once (None: a miss, or a skipped write). Logged once per
    outage; `errors` counts every failed call by operation (and the users of the handle
    count their own oddities there too: bad messages, raced writes, unreadable pins);
    `skipped` the calls not tried because the circuit was open. `on_failure` callbacks run
    on every failure (the L2 forgets the generations it knew: messages may be missed until
    the channel is back).
    """

    def __init__(self, settings: RedisSettings, *, client: AnyRedis | None = None) -> None:
        self.settings = settings
        self.errors: Counter[str] = Counter()
        self.skipped = 0
        self.on_failure: list[Callable[[], None]] = []
        self._client = client if client is not None else redis_client(settings)
        self._prefix = settings.key_prefix
        self._down_since: float | None = None
        self._retry_at = 0.0

    async def aclose(self) -> None:
        await self._client.aclose()

    @property
    def client(self) -> AnyRedis:
        """The Redis client: a `Redis` (one server, or Sentinel's master) or a `RedisCluster`;
        see the module docstring for what keeps its use cluster-safe."""
        return self._client

    @property
    def is_cluster(self) -> bool:
        return isinstance(self._client, RedisCluster)

    @property
    def down_since(self) -> float | None:
        """When (time.monotonic()) the current outage was noticed; None while Redis answers."""
        return self._down_since

    def key(self, name: str) -> str:
        """A Redis key of this gateway's namespace (redis.key_prefix). Keys that a script or
        MULTI uses together share a hash tag in `name`: `key("heat:{hot}")`, `key("heat:{hot}:lock")`."""
        return self._prefix + name

    def usable(self) -> bool:
        """Whether a call now would be tried: Redis answers, or the circuit is due a probe."""
        return self._down_since is None or time.monotonic() >= self._retry_at

    async def call(self, op: str, work: Callable[[], Awaitable[T]], *, probe: bool = False) -> T | None:
        """`work()` within the timeout, or None when Redis is down or the call failed
        (counted in `errors[op]`); `probe`: tried even while the circuit is open."""
        if self._down_since is not None and not probe:
            now = time.monotonic()
            if now < self._retry_at:
                self.skipped += 1
                return None
            self._retry_at = now + self.settings.retry_interval  # this call probes; others wait for it
        try:
            async with asyncio.timeout(self.settings.socket_timeout):
                result = await work()
        except Exception as exc:  # Redis errors, timeouts, OSError, bad replies: all mean "no Redis"
            self.failed(op, exc)
            await self.drop_idle_connections()
            return None
        self.recovered()
        return result

    async def ping(self) -> bool:
        """Whether Redis answers a PING now, within the timeout, whatever the circuit says."""
        try:
            async with asyncio.timeout(self.settings.socket_timeout):
                return bool(await self._client.ping())
        except Exception:  # any failure means "not now"; the probe is not counted as an error
            return False

    def failed(self, op: str, exc: Exception) -> None:
        """A call (or the invalidation listener) failed: count it and open the circuit."""
        self.errors[op] += 1
        for hook in self.on_failure:
            hook()
        now = time.monotonic()
        self._retry_at = now + self.settings.retry_interval
        if self._down_since is None:
            self._down_since = now
            log.cluster.warning(
                "Redis unavailable (%s: %s); serving from this node's caches, retrying every %.1f s",
                exc.__class__.__name__, str(exc) or "no answer in time", self.settings.retry_interval)

    def recovered(self) -> None:
        """Redis answered: close the circuit."""
        if self._down_since is not None:
            log.cluster.warning("Redis available again after %.1f s", time.monotonic() - self._down_since)
            self._down_since = None

    async def drop_idle_connections(self) -> None:
        """After a failure, pooled connections may be dead without knowing it (Redis
        restarted): close them so the next call connects afresh. (A cluster client does
        this itself for the node that failed, and reads the slot map again.)"""
        if isinstance(self._client, RedisCluster):
            return
        with suppress(Exception):
            async with asyncio.timeout(self.settings.socket_timeout):
                await self._client.connection_pool.disconnect(inuse_connections=False)


def as_text(value: bytes | str) -> str:
    """A Redis reply or message field as text (bytes unless the client decodes responses)."""
    return value.decode() if isinstance(value, bytes) else value
