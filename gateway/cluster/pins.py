"""Prefixes pinned at runtime (admin API), kept in Redis so that every node applies them."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import orjson

from gateway.cluster.redis_handle import RedisHandle
from gateway.periodic import run_every

Pin = tuple[str, str]  # bucket, key prefix ("" = the whole bucket)


class RuntimePins:
    """The pins set at runtime, on top of the configured ones (cache.pinned). Event loop only.

    Without Redis they live in this node's memory and are gone after a restart. With
    Redis they are a set (`<redis.key_prefix>pins`) that each node reads at start and
    again every `refresh` seconds: a pin made through one node reaches the others within
    that time and outlives restarts. A change made while Redis is down applies here at
    once and is written to Redis when it is back (the latest change of each pin wins).

    `apply(runtime_pins)` hands the runtime set to the block store after every change.
    Configured pins are never part of the runtime set and are not removed here.
    """

    def __init__(
        self,
        configured: Iterable[Pin],
        apply: Callable[[Iterable[Pin]], None] | None = None,
        redis: RedisHandle | None = None,
        *,
        refresh: float = 5.0,
    ) -> None:
        self.configured = frozenset(configured)
        self.refresh_interval = refresh
        self._apply = apply
        self._redis = redis
        self._runtime: set[Pin] = set()
        self._pending: dict[Pin, bool] = {}  # changes not yet in Redis: pin -> pinned

    @property
    def pins(self) -> list[Pin]:
        """Every pin in force here, configured and runtime, sorted."""
        return sorted(self.configured | self._runtime)

    def is_runtime(self, pin: Pin) -> bool:
        return pin in self._runtime

    async def set(self, pin: Pin, pinned: bool) -> bool:
        """Pin or unpin here at once and in Redis; False when Redis is configured but did
        not take the change yet (it is retried on each refresh)."""
        self._pending[pin] = pinned
        self._local(pin, pinned)
        return await self._flush(pin)

    async def refresh(self) -> None:
        """Write changes Redis missed, then take the fleet's set from it (no-op without Redis)."""
        if self._redis is None:
            return
        for pin in list(self._pending):
            if not await self._flush(pin):
                return
        redis = self._redis
        members = await redis.call("pins", lambda: redis.client.smembers(redis.key("pins")))
        if members is None:
            return
        runtime: set[Pin] = set()
        for member in members:
            try:
                bucket, prefix = orjson.loads(member)
                runtime.add((str(bucket), str(prefix)))
            except (orjson.JSONDecodeError, ValueError, TypeError):
                redis.errors["bad_pin"] += 1
        for pin, pinned in self._pending.items():  # changed meanwhile, not yet written
            (runtime.add if pinned else runtime.discard)(pin)
        if runtime != self._runtime:
            self._runtime = runtime
            self._applied()

    async def run(self) -> None:
        """Refresh every `refresh_interval` seconds until cancelled."""
        await run_every(self.refresh_interval, self.refresh, "refreshing the runtime pins")

    def _local(self, pin: Pin, pinned: bool) -> None:
        if pinned:
            self._runtime.add(pin)
        else:
            self._runtime.discard(pin)
        self._applied()

    def _applied(self) -> None:
        if self._apply is not None:
            self._apply(self._runtime)

    async def _flush(self, pin: Pin) -> bool:
        """Write one pending change to Redis; True when it is there (or there is no Redis)."""
        if self._redis is None:
            self._pending.pop(pin, None)
            return True
        redis, pinned = self._redis, self._pending[pin]
        member = orjson.dumps(list(pin))
        key = redis.key("pins")

        async def write() -> bool:
            await (redis.client.sadd(key, member) if pinned else redis.client.srem(key, member))
            return True

        done = await redis.call("pins", write)
        if done and self._pending.get(pin) == pinned:  # not changed again meanwhile
            del self._pending[pin]
        return bool(done)
