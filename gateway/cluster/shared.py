"""What the nodes share in Redis: object metadata (L2), listing pages, and invalidations.

Redis is a speed-up, never a dependency: every call here is bounded by a timeout, and
any failure becomes "no shared state" (a miss, or a skipped write) plus a counter, so a
node keeps serving from its own caches and comes back to Redis by itself.

Redis may be one server, a Sentinel-watched master or a Redis Cluster (gateway.cluster.
connection). What keeps every use cluster-safe, here and in the modules that use
`SharedMetadata.client` (membership, pins, replication):

- Name keys with `SharedMetadata.key(name)` (the prefix never holds a hash tag).
- A single-key command needs nothing more. A Lua script, a MULTI or any multi-key command
  (MGET, SUNIONSTORE, ...) must touch keys of one slot: give every key it touches the same
  hash tag, `key("fleet:{members}")` and `key("fleet:{members}:urls")`, and declare them
  in KEYS (the client routes EVALSHA by KEYS[1]). A script may build further keys only
  from the same tag (as _PAGES_FORGET builds page keys).
- A tag puts all its keys on one master: tag what must be atomic together, not whole
  namespaces (metadata is not tagged, so it spreads over the masters).
- No KEYS or SCAN over the keyspace (on a cluster they see one master); keep an index.
- PUBLISH and SUBSCRIBE are classic pub/sub: on a cluster a message reaches every node.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import os
import random
import socket
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Any, TypeVar

import orjson
from redis.asyncio.client import PubSub
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError

from gateway import log
from gateway.cluster.connection import AnyRedis, redis_client
from gateway.config import RedisSettings
from gateway.store.meta import ListingKey, MetaKey

__all__ = ["SharedMetadata"]

T = TypeVar("T")
OnInvalidate = Callable[[str, "str | None"], None]

# Metadata: one hash per object, a field per version ("" = current), each value
# "<expires ms>:<stored ms>:<payload>" on Redis's own clock (TIME), so ages do not
# depend on the nodes' clocks. The hash itself expires with its longest-lived field.
_META_GET = """
local value = redis.call('HGET', KEYS[1], ARGV[1])
if not value then return nil end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local a = string.find(value, ':', 1, true)
local b = string.find(value, ':', a + 1, true)
if now >= tonumber(string.sub(value, 1, a - 1)) then
    redis.call('HDEL', KEYS[1], ARGV[1])
    return nil
end
return {string.sub(value, b + 1), now - tonumber(string.sub(value, a + 1, b - 1))}
"""
_META_PUT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local life = tonumber(ARGV[2])
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d:%d:', now + life, now) .. ARGV[3])
if redis.call('PTTL', KEYS[1]) < life then redis.call('PEXPIRE', KEYS[1], life) end
return 1
"""
# Listings: a page is a string "<life ms>:<body>" that expires with its life; each
# bucket has an index hash (page id -> "<expires ms>:<prefix>") so a write to a key can
# find every page whose prefix is a prefix of the key. Page and index share the hash
# tag {bucket}, so each script touches one Redis Cluster slot.
_PAGE_GET = """
local value = redis.call('GET', KEYS[1])
if not value then return nil end
local left = redis.call('PTTL', KEYS[1])
if left < 0 then return nil end
local colon = string.find(value, ':', 1, true)
return {string.sub(value, colon + 1), tonumber(string.sub(value, 1, colon - 1)) - left}
"""
_PAGE_PUT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local life = tonumber(ARGV[3])
redis.call('SET', KEYS[1], ARGV[3] .. ':' .. ARGV[4], 'PX', life)
redis.call('HSET', KEYS[2], ARGV[1], string.format('%d:', now + life) .. ARGV[2])
if redis.call('PTTL', KEYS[2]) < life then redis.call('PEXPIRE', KEYS[2], life) end
return 1
"""
# ARGV: page key prefix, "*" (every page of the bucket) or "=" followed by the written key.
# Index entries of pages that expired by themselves are swept on the way. The page keys
# are not in KEYS (their ids are only known here), but they carry the index's {bucket}
# tag, so on a Redis Cluster they live in KEYS[1]'s slot.
_PAGES_FORGET = """
local entries = redis.call('HGETALL', KEYS[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local every = ARGV[2] == '*'
local key = string.sub(ARGV[2], 2)
local dropped = 0
for i = 1, #entries, 2 do
    local id, entry = entries[i], entries[i + 1]
    local colon = string.find(entry, ':', 1, true)
    local prefix = string.sub(entry, colon + 1)
    if every or string.sub(key, 1, #prefix) == prefix then
        redis.call('DEL', ARGV[1] .. id)
        redis.call('HDEL', KEYS[1], id)
        dropped = dropped + 1
    elseif now >= tonumber(string.sub(entry, 1, colon - 1)) then
        redis.call('HDEL', KEYS[1], id)
    end
end
return dropped
"""
# Drop an object's metadata and tell the other nodes, in this order (ARGV: channel, message).
_META_FORGET = """
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[1], ARGV[2])
return 1
"""

_MAX_PENDING = 10_000  # invalidations waiting for Redis; beyond it, whole buckets
_MAX_GENERATIONS = 10_000
_HEARTBEAT = 5.0  # a silent invalidation channel is PINGed after this many seconds


class SharedMetadata:
    """Object metadata and listing pages in Redis, and the cluster's invalidation channel.

    Values are opaque bytes (the engine serialises them). A bucket-wide invalidation
    moves the bucket to a new generation, which is part of every metadata key: entries
    of older generations are never read again and expire by themselves. Each node keeps
    the generations it has seen; they come with invalidation messages and are read
    again after any outage, when messages may have been missed.

    Failure model: any error or timeout opens the circuit for `retry_interval`; while it
    is open, calls return at once (a miss, or a skipped write). Invalidations that could
    not be written are kept (bounded) and replayed by the listener once Redis is back,
    so a write acknowledged during an outage still reaches the other nodes. Logged once
    per outage; `errors` counts every failed call by operation.

    Event loop only (plain dicts, no locks).
    """

    def __init__(self, settings: RedisSettings, *, node_id: str | None = None, client: AnyRedis | None = None) -> None:
        self.settings = settings
        self.node_id = node_id or f"{socket.gethostname()}:{os.getpid()}:{os.urandom(4).hex()}"
        self.errors: Counter[str] = Counter()
        self.skipped = 0  # calls not tried because the circuit was open
        self.subscribed = asyncio.Event()  # set while the invalidation channel is listened to
        self._client = client if client is not None else redis_client(settings)
        self._prefix = settings.key_prefix
        self._channel = f"{settings.key_prefix}invalidate"
        self._meta_get = self._client.register_script(_META_GET)
        self._meta_put = self._client.register_script(_META_PUT)
        self._page_get = self._client.register_script(_PAGE_GET)
        self._page_put = self._client.register_script(_PAGE_PUT)
        self._pages_forget = self._client.register_script(_PAGES_FORGET)
        self._meta_forget = self._client.register_script(_META_FORGET)
        self._pubsub_turn = 0  # on a cluster: which node the invalidation channel is heard on
        self._generations: dict[str, int] = {}
        self._pending: dict[tuple[str, str | None], int] = {}  # invalidation -> sequence number
        self._sequence = itertools.count()
        self._down_since: float | None = None
        self._retry_at = 0.0

    async def aclose(self) -> None:
        await self._client.aclose()

    # --- for the cluster's other shared state (runtime pins) and the readiness probe ---

    @property
    def client(self) -> AnyRedis:
        """The Redis client: a `Redis` (one server, or Sentinel's master) or a `RedisCluster`;
        see the module docstring for what keeps its use cluster-safe."""
        return self._client

    def key(self, name: str) -> str:
        """A Redis key of this gateway's namespace (redis.key_prefix). Keys that a script or
        MULTI uses together share a hash tag in `name`: `key("heat:{hot}")`, `key("heat:{hot}:lock")`."""
        return self._prefix + name

    async def call(self, op: str, work: Callable[[], Awaitable[T]]) -> T | None:
        """`work()` behind the same timeout and circuit as every call here: None when Redis
        is down or the call failed (counted in `errors[op]`)."""
        return await self._call(op, work)

    async def ping(self) -> bool:
        """Whether Redis answers a PING now, within the timeout, whatever the circuit says."""
        try:
            async with asyncio.timeout(self.settings.socket_timeout):
                return bool(await self._client.ping())
        except Exception:  # any failure means "not now"; the probe is not counted as an error
            return False

    # --- metadata ---------------------------------------------------------------------

    async def get_meta(self, key: MetaKey) -> tuple[bytes, float] | None:
        """(payload, age in seconds) of a live entry, or None (absent, expired, or no Redis)."""
        async def get() -> tuple[bytes, float] | None:
            found = await self._meta_get(keys=[await self._meta_key(key[0], key[1])], args=[key[2]])
            return None if found is None else (bytes(found[0]), int(found[1]) / 1000)
        return await self._call("get_meta", get)

    async def put_meta(self, key: MetaKey, payload: bytes, ttl: float) -> None:
        """Share `payload` for `ttl` seconds (its whole life: expired entries are never returned)."""
        if ttl <= 0:
            return
        async def put() -> bool:
            await self._meta_put(keys=[await self._meta_key(key[0], key[1])], args=[key[2], _ms(ttl), payload])
            return True
        await self._call("put_meta", put)

    # --- listings ---------------------------------------------------------------------

    async def get_listing(self, key: ListingKey) -> tuple[bytes, float] | None:
        """(page, age in seconds) of a live listing page, or None."""
        async def get() -> tuple[bytes, float] | None:
            found = await self._page_get(keys=[self._page_key(key)])
            return None if found is None else (bytes(found[0]), int(found[1]) / 1000)
        return await self._call("get_listing", get)

    async def put_listing(self, key: ListingKey, page: bytes, ttl: float) -> None:
        if ttl <= 0:
            return
        async def put() -> bool:
            await self._page_put(keys=[self._page_key(key), self._index_key(key[0])],
                                 args=[_page_id(key), key[1], _ms(ttl), page])
            return True
        await self._call("put_listing", put)

    # --- invalidation -----------------------------------------------------------------

    async def invalidate(self, bucket: str, key: str | None) -> None:
        """Drop the shared metadata of `key` (of the whole bucket when None) and every
        listing page that can contain it, then tell the other nodes to do the same.

        The shared entries go before the message, so a node that refills its own cache
        on receiving it cannot find the old entry here. Without Redis the invalidation
        waits (bounded) and the listener replays it when Redis is back.
        """
        done = None
        try:
            done = await self._call("invalidate", lambda: self._invalidate_now(bucket, key))
        finally:  # also when cancelled: the write it follows may have happened
            if done:
                self._pending.pop((bucket, key), None)  # an older one waiting is done with it
            else:
                self._pending[(bucket, key)] = next(self._sequence)
                self._bound_pending()

    async def _invalidate_now(self, bucket: str, key: str | None) -> bool:
        message: dict[str, Any] = {"n": self.node_id, "b": bucket, "k": key}
        if key is None:
            generation = self._note_generation(bucket, await self._client.incr(self._generation_key(bucket)))
            message["g"] = generation
            await self._pages_forget(keys=[self._index_key(bucket)], args=[self._page_prefix(bucket), "*"])
            await self._publish(orjson.dumps(message))
            return True
        meta_key = await self._meta_key(bucket, key)
        await self._pages_forget(keys=[self._index_key(bucket)], args=[self._page_prefix(bucket), "=" + key])
        if isinstance(self._client, RedisCluster):  # the message goes to the channel's node, below
            await self._client.delete(meta_key)
            await self._publish(orjson.dumps(message))
        else:
            await self._meta_forget(keys=[meta_key], args=[self._channel, orjson.dumps(message)])
        return True

    async def _publish(self, message: bytes) -> None:
        """On a cluster, to the master of the channel's slot, where the nodes listen unless it
        failed them: delivered from there at once, not after a hop over the cluster bus
        (which still brings it to those listening elsewhere)."""
        client = self._client
        if isinstance(client, RedisCluster):
            home = client.get_node_from_key(self._channel)
            try:
                await client.publish(self._channel, message, target_nodes=home)
                return
            except (ConnectionError, RedisConnectionError):  # that node is down: any other one
                others = [node for node in client.get_nodes() if node.name != home.name]
                if not others:
                    raise
                await client.publish(self._channel, message, target_nodes=random.choice(others))
        else:
            await client.publish(self._channel, message)

    def _bound_pending(self) -> None:
        if len(self._pending) > _MAX_PENDING:  # a long outage under writes: whole buckets instead
            buckets = dict.fromkeys(bucket for bucket, _ in self._pending)
            self._pending = {(bucket, None): next(self._sequence) for bucket in buckets}

    async def _replay(self) -> None:
        for item, sequence in list(self._pending.items()):
            bucket, key = item
            if not await self._call("invalidate", lambda: self._invalidate_now(bucket, key)):  # noqa: B023 (awaited here)
                return
            if self._pending.get(item) == sequence:  # not failed again meanwhile
                del self._pending[item]

    async def listen(self, on_invalidate: OnInvalidate, on_resync: Callable[[], None] | None = None) -> None:
        """Call `on_invalidate(bucket, key)` for every invalidation published by another node.

        Runs until cancelled, resubscribing with backoff whenever the connection fails.
        `on_resync` is called each time the subscription is (re)established: messages may
        have been missed before it, so the caller should drop what they could have
        invalidated. Pending invalidations of this node are replayed from here.
        """
        failures = 0
        loop = asyncio.get_running_loop()
        tick = min(1.0, self.settings.socket_timeout)
        while True:
            pubsub: PubSub | None = None
            try:
                async with asyncio.timeout(self.settings.socket_timeout):
                    pubsub = await self._pubsub()
                    await pubsub.subscribe(self._channel)
                heard, pinged = loop.time(), None
                while True:
                    if self.subscribed.is_set() and self._pending and self._usable():
                        await self._replay()
                    message = await pubsub.get_message(timeout=tick)
                    now = loop.time()
                    if message is not None:
                        heard, pinged = now, None
                        if message["type"] == "subscribe":
                            failures = 0
                            self._subscribed(on_resync)
                        elif message["type"] == "message":
                            self._deliver(message["data"], on_invalidate)
                    elif pinged is not None:
                        if now - pinged > self.settings.socket_timeout + tick:
                            raise TimeoutError("Redis did not answer a PING on the invalidation channel")
                    elif now - heard > _HEARTBEAT:
                        async with asyncio.timeout(self.settings.socket_timeout):
                            await pubsub.ping()
                        pinged = now
            except Exception as exc:  # any failure: resubscribe after a pause
                self.subscribed.clear()
                self._failed("listen", exc)
                failures += 1
                self._pubsub_turn += 1
                await self._drop_idle_connections()
            finally:
                if pubsub is not None:
                    with suppress(Exception):
                        async with asyncio.timeout(self.settings.socket_timeout):
                            await pubsub.aclose()
            # Jittered exponential backoff, capped low: a reconnect attempt is cheap.
            delay = min(self.settings.retry_interval * 2 ** (failures - 1), 4 * self.settings.retry_interval)
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))

    async def _pubsub(self) -> PubSub:
        """A pub/sub connection. On a cluster, to the master of the channel's slot, where
        invalidations are published; after each failure to the next node: a classic PUBLISH
        reaches every node of a cluster, so any live node will do."""
        client = self._client
        if isinstance(client, RedisCluster):
            await client.initialize()  # reads the slot map again if a node failed since
            home = client.get_node_from_key(self._channel)
            nodes = [home, *(node for node in client.get_nodes() if node.name != home.name)]
            return client.pubsub(node=nodes[self._pubsub_turn % len(nodes)])
        return client.pubsub()

    def _subscribed(self, on_resync: Callable[[], None] | None) -> None:
        self._generations.clear()
        self.subscribed.set()
        self._recovered()
        if on_resync is not None:
            try:
                on_resync()
            except Exception:
                log.cluster.exception("resync after subscribing to %s failed", self._channel)

    def _deliver(self, data: bytes, on_invalidate: OnInvalidate) -> None:
        try:
            message = orjson.loads(data)
            node, bucket, key = message["n"], message["b"], message["k"]
            if not isinstance(bucket, str) or not (key is None or isinstance(key, str)):
                raise TypeError(bucket, key)
            generation = message.get("g")
        except (orjson.JSONDecodeError, KeyError, TypeError):
            self.errors["bad_message"] += 1
            return
        if node == self.node_id:
            return
        if isinstance(generation, int):
            self._note_generation(bucket, generation)
        try:
            on_invalidate(bucket, key)
        except Exception:
            log.cluster.exception("invalidating %s/%s on a message from %s failed", bucket, key, node)

    # --- keys -------------------------------------------------------------------------

    async def _meta_key(self, bucket: str, key: str) -> str:
        generation = self._generations.get(bucket)
        if generation is None:
            raw = await self._client.get(self._generation_key(bucket))
            generation = self._note_generation(bucket, int(raw or 0))
        return f"{self._prefix}m:{bucket}:{generation}:{key}"

    def _note_generation(self, bucket: str, generation: int) -> int:
        """The newest generation seen for `bucket` (replies and messages may cross)."""
        if len(self._generations) >= _MAX_GENERATIONS and bucket not in self._generations:
            self._generations.clear()
        newest = max(generation, self._generations.get(bucket, 0))
        self._generations[bucket] = newest
        return newest

    def _generation_key(self, bucket: str) -> str:
        return f"{self._prefix}g:{bucket}"

    def _index_key(self, bucket: str) -> str:
        return f"{self._prefix}li:{{{bucket}}}"

    def _page_prefix(self, bucket: str) -> str:
        return f"{self._prefix}l:{{{bucket}}}:"

    def _page_key(self, key: ListingKey) -> str:
        return self._page_prefix(key[0]) + _page_id(key)

    # --- the failure boundary ---------------------------------------------------------

    def _usable(self) -> bool:
        return self._down_since is None or time.monotonic() >= self._retry_at

    async def _call(self, op: str, work: Callable[[], Awaitable[T]]) -> T | None:
        """`work()` within the timeout, or None when Redis is down or the call failed."""
        if self._down_since is not None:
            now = time.monotonic()
            if now < self._retry_at:
                self.skipped += 1
                return None
            self._retry_at = now + self.settings.retry_interval  # this call probes; others wait for it
        try:
            async with asyncio.timeout(self.settings.socket_timeout):
                result = await work()
        except Exception as exc:  # Redis errors, timeouts, OSError, bad replies: all mean "no L2"
            self._failed(op, exc)
            await self._drop_idle_connections()
            return None
        self._recovered()
        return result

    def _failed(self, op: str, exc: Exception) -> None:
        self.errors[op] += 1
        self._generations.clear()  # messages may be missed until the channel is back
        now = time.monotonic()
        self._retry_at = now + self.settings.retry_interval
        if self._down_since is None:
            self._down_since = now
            log.cluster.warning(
                "Redis unavailable (%s: %s); serving from this node's caches, retrying every %.1f s",
                exc.__class__.__name__, str(exc) or "no answer in time", self.settings.retry_interval)

    async def _drop_idle_connections(self) -> None:
        """After a failure, pooled connections may be dead without knowing it (Redis
        restarted): close them so the next call connects afresh. (A cluster client does
        this itself for the node that failed, and reads the slot map again.)"""
        if isinstance(self._client, RedisCluster):
            return
        with suppress(Exception):
            await self._client.connection_pool.disconnect(inuse_connections=False)

    def _recovered(self) -> None:
        if self._down_since is not None:
            log.cluster.warning("Redis available again after %.1f s", time.monotonic() - self._down_since)
            self._down_since = None


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def _page_id(key: ListingKey) -> str:
    return hashlib.blake2b(orjson.dumps([key[1], key[2]]), digest_size=16).hexdigest()
