"""The Redis client, built from settings in one place: one server, Sentinel, or Redis Cluster."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff

from gateway.config import RedisSettings

__all__ = ["AnyRedis", "redis_client"]

# What redis_client returns. Both have the same command methods, register_script and
# pubsub; RedisCluster routes each command, script call and pipeline by its keys' slot.
AnyRedis = Redis | RedisCluster


class SentinelMaster(Redis):
    """The current master of a Sentinel-watched set. Its pool asks the Sentinels where the
    master is on every new connection and drops connections to a master that turned
    replica, so the client follows a failover; closing it closes the Sentinel clients too."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        try:
            await super().aclose(close_connection_pool)
        finally:
            await self.connection_pool.sentinel_manager.aclose()  # type: ignore[attr-defined]


def redis_client(settings: RedisSettings) -> AnyRedis:
    """A client for `settings.url`: `redis://`, `rediss://` or `unix://` (one server),
    `redis+sentinel://` (the master the Sentinels name) or `redis+cluster://`.

    No retries inside the client: a failed call fails at once and the caller decides
    (RedisHandle falls back to the node's own caches). Connections the server closed
    while idle, as after a restart, are replaced by the pool when next taken; a cluster
    client reads the slot map again after a node failed.
    """
    target = settings.target
    common: dict[str, Any] = {
        "socket_timeout": settings.socket_timeout,
        "socket_connect_timeout": settings.socket_timeout,
        "retry": Retry(NoBackoff(), 0),
        "client_name": "s3-cache-gateway",
    }
    if target.kind == "server":
        return Redis.from_url(settings.url, **common)
    auth: dict[str, Any] = {"username": target.username, "password": target.password}
    tls: dict[str, Any] = {"ssl": True} if target.tls else {}
    if target.kind == "cluster":
        return RedisCluster(startup_nodes=[ClusterNode(host, port) for host, port in target.hosts],
                            **auth, **tls, **common)
    sentinels = Sentinel(
        list(target.hosts),
        sentinel_kwargs={**common, **tls, "password": target.sentinel_password},
        **auth, **tls, **common)
    return sentinels.master_for(target.master, redis_class=SentinelMaster, db=target.db)
