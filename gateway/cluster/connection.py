"""The Redis client, built from settings in one place (Sentinel and Cluster plug in here)."""

from __future__ import annotations

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from gateway.config import RedisSettings


def redis_client(settings: RedisSettings) -> Redis:
    """A client for `settings.url`: a single server today (redis://, rediss://, unix://).

    No retries inside the client: a failed call fails at once and the caller decides
    (SharedMetadata falls back to the node's own caches). Connections the server closed
    while idle, as after a restart, are replaced by the pool when next taken.
    """
    return Redis.from_url(
        settings.url,
        socket_timeout=settings.socket_timeout,
        socket_connect_timeout=settings.socket_timeout,
        retry=Retry(NoBackoff(), 0),
        client_name="s3-cache-gateway",
    )
