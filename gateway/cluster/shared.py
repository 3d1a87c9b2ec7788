"""What the nodes share in Redis, on one handle: the metadata and listing L2, and the invalidation channel."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.cluster.connection import AnyRedis
from gateway.cluster.invalidation import Invalidations
from gateway.cluster.level2 import Level2
from gateway.cluster.redis_handle import RedisHandle
from gateway.config import RedisSettings

__all__ = ["Shared"]


@dataclass(frozen=True, slots=True)
class Shared:
    """The shared state of a node with Redis: `redis` (the one client and its circuit, also
    what pins, membership and replication use), `level2` (metadata and listing pages) and
    `invalidation` (the channel and its confirmations), wired together by `connect`."""

    redis: RedisHandle
    level2: Level2
    invalidation: Invalidations

    @classmethod
    def connect(cls, settings: RedisSettings, *, node_id: str | None = None, client: AnyRedis | None = None) -> Shared:
        """The three on a client for `settings` (or on `client`); nothing is sent to Redis yet."""
        redis = RedisHandle(settings, client=client)
        level2 = Level2(redis)
        return cls(redis, level2, Invalidations(redis, level2, node_id=node_id))

    async def aclose(self) -> None:
        await self.invalidation.aclose()
        await self.redis.aclose()
