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

Read-after-write across nodes (`invalidate`, `listening`): a write is acknowledged once every
node subscribed to the invalidation channel when it was published confirmed it applied it (an
ack on the writer's own channel), or after `redis.invalidation_timeout`. A node trusts what it
cached only while the channel answered a PING it sent less than that long ago: Redis delivers
a subscriber's messages and PING replies in order on its one connection, so a node whose last
PONG answers a PING sent at t has applied every invalidation published before t. A node that
did not confirm within the deadline (held back, hung, cut off) has therefore stopped trusting
its caches by the time the write is acknowledged; a node killed meanwhile costs the writer the
deadline at most.
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
from contextvars import ContextVar
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

__all__ = ["Confirmation", "SharedMetadata"]

T = TypeVar("T")
OnInvalidate = Callable[[str, "str | None"], None]

# Metadata: one hash per object, a field per version ("" = current), each value
# "<expires ms>:<stored ms>:<payload>" on Redis's own clock (TIME), so ages do not
# depend on the nodes' clocks. The hash itself expires with its longest-lived field.
# Its field "~inv" counts the object's invalidations: a reader reads it with the entry
# (its token) and stores what the origin told it only if no invalidation came since, so
# an answer fetched before a write is never stored after the write's invalidation.
_META_GET = """
local value = redis.call('HGET', KEYS[1], ARGV[1])
local token = redis.call('HGET', KEYS[1], '~inv') or '0'
if not value then return {'', -1, token} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local a = string.find(value, ':', 1, true)
local b = string.find(value, ':', a + 1, true)
if now >= tonumber(string.sub(value, 1, a - 1)) then
    redis.call('HDEL', KEYS[1], ARGV[1])
    return {'', -1, token}
end
return {string.sub(value, b + 1), now - tonumber(string.sub(value, a + 1, b - 1)), token}
"""
# ARGV: version, life ms, payload, token ('' stores whatever the token).
_META_PUT = """
if ARGV[4] ~= '' and (redis.call('HGET', KEYS[1], '~inv') or '0') ~= ARGV[4] then return 0 end
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
# tag {bucket}, so each script touches one Redis Cluster slot. The index's field "~inv"
# counts the bucket's invalidations (the token of its pages, as for metadata).
_PAGE_GET = """
local token = redis.call('HGET', KEYS[2], '~inv') or '0'
local value = redis.call('GET', KEYS[1])
if not value then return {'', -1, token} end
local left = redis.call('PTTL', KEYS[1])
if left < 0 then return {'', -1, token} end
local colon = string.find(value, ':', 1, true)
return {string.sub(value, colon + 1), tonumber(string.sub(value, 1, colon - 1)) - left, token}
"""
_PAGE_PUT = """
if ARGV[5] ~= '' and (redis.call('HGET', KEYS[2], '~inv') or '0') ~= ARGV[5] then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local life = tonumber(ARGV[3])
redis.call('SET', KEYS[1], ARGV[3] .. ':' .. ARGV[4], 'PX', life)
redis.call('HSET', KEYS[2], ARGV[1], string.format('%d:', now + life) .. ARGV[2])
if redis.call('PTTL', KEYS[2]) < life then redis.call('PEXPIRE', KEYS[2], life) end
return 1
"""
# ARGV: page key prefix, "*" (every page of the bucket) or "=" followed by the written key,
# the life of the invalidation count (ms). Index entries of pages that expired by
# themselves are swept on the way. The page keys are not in KEYS (their ids are only
# known here), but they carry the index's {bucket} tag, so on a Redis Cluster they live in
# KEYS[1]'s slot.
_PAGES_FORGET = """
local entries = redis.call('HGETALL', KEYS[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local every = ARGV[2] == '*'
local key = string.sub(ARGV[2], 2)
local dropped = 0
for i = 1, #entries, 2 do
    local id, entry = entries[i], entries[i + 1]
    if id ~= '~inv' then
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
end
redis.call('HINCRBY', KEYS[1], '~inv', 1)
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
return dropped
"""
# Drop an object's metadata (keeping its invalidation count, for ARGV[3] ms at least) and
# tell the other nodes, in this order (ARGV: channel, '' to publish nothing; message);
# returns how many subscribers the message reached.
_META_FORGET = """
local count = tonumber(redis.call('HGET', KEYS[1], '~inv') or '0') + 1
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], '~inv', count)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
if ARGV[1] == '' then return 0 end
return redis.call('PUBLISH', ARGV[1], ARGV[2])
"""
# One server (or Sentinel's master), where a script may touch any keys: both of the above
# in one round trip. KEYS: the bucket's listing index, the object's hash; ARGV: page key
# prefix, "=" + key, count life (ms), channel, message.
_KEY_FORGET = "local function pages()\n" + _PAGES_FORGET + """
end
pages()
local count = tonumber(redis.call('HGET', KEYS[2], '~inv') or '0') + 1
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], '~inv', count)
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return redis.call('PUBLISH', ARGV[4], ARGV[5])
"""
# How long an invalidation count outlives the entries it dropped: longer than any fetch
# from the origin that could have started before it.
_TOKEN_LIFE_MS = 300_000
# The tokens read with the last shared entries asked for in this task: ((key, token), ...),
# newest first. (A tuple, replaced on each change: tasks started from here copy it.)
_tokens: ContextVar[tuple[tuple[object, str], ...]] = ContextVar("gateway_shared_tokens", default=())
_TOKENS_KEPT = 4


def _note_token(key: object, token: str | None) -> None:
    kept = tuple(entry for entry in _tokens.get() if entry[0] != key)
    _tokens.set((((key, token),) + kept)[:_TOKENS_KEPT] if token is not None else kept)


def _noted_token(key: object) -> str:
    """The token this task read with `key`, or "" (none: the write stores whatever the count)."""
    return next((token for noted, token in _tokens.get() if noted == key), "")

_MAX_PENDING = 10_000  # invalidations waiting for Redis; beyond it, whole buckets
_MAX_GENERATIONS = 10_000
_PINGS_PER_DEADLINE = 4  # PINGs through the channel per redis.invalidation_timeout
_RETRY_UNSENT = 0.05  # seconds between two tries of an invalidation Redis did not take
_BACK_HOME_AFTER = 4  # on a cluster: retry_intervals on another node before trying the channel's master again


class Confirmation:
    """The nodes' confirmations that they applied one invalidation. Event loop only.

    `expected` is how many subscribers the message reached (None: it was not sent, Redis
    being unreachable); `wait()` returns once that many confirmed, or at `until` (monotonic
    time), whichever comes first, True when every node confirmed.
    """

    __slots__ = ("expected", "confirmed", "until", "_event", "_done")

    def __init__(self, done: Callable[[bool], None] = lambda complete: None) -> None:
        self.expected: int | None = None
        self.confirmed = 0
        self.until = 0.0
        self._event = asyncio.Event()
        self._done = done

    def expect(self, expected: int | None, until: float) -> None:
        self.expected, self.until = expected, until
        self._check()

    def add(self) -> None:
        self.confirmed += 1
        self._check()

    def _check(self) -> None:
        if self.expected is not None and self.confirmed >= self.expected:
            self._event.set()

    @property
    def complete(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> bool:
        try:
            left = self.until - time.monotonic()
            if not self._event.is_set() and left > 0:
                with suppress(TimeoutError):
                    async with asyncio.timeout(left):
                        await self._event.wait()
            return self._event.is_set()
        finally:
            self._done(self._event.is_set())


class _BackHome(Exception):
    """On a cluster: listening on another node than the channel's master for long enough."""


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
        self._key_forget = self._client.register_script(_KEY_FORGET)
        self._pubsub_turn = 0  # on a cluster: which node the invalidation channel is heard on
        self._generations: dict[str, int] = {}
        self._pending: dict[tuple[str, str | None], int] = {}  # invalidation -> sequence number
        self._sequence = itertools.count()
        self._down_since: float | None = None
        self._retry_at = 0.0
        self._ack_channel = self._acks_of(self.node_id)
        self._ids = itertools.count()
        self._waiting: dict[str, Confirmation] = {}  # invalidation id -> its confirmations
        self._current_until = 0.0  # monotonic: cached answers may be trusted until then ...
        self._trusted_from = 0.0  # ... and from then (after a gap, once unsent writes went out)
        self._replayer: asyncio.Task[None] | None = None
        self.confirmations: Counter[str] = Counter()  # confirmed, unconfirmed, unsent
        # For tests and drills: the listener handles nothing until this time.monotonic().
        self.hold_listener_until = 0.0

    async def aclose(self) -> None:
        if self._replayer is not None:
            self._replayer.cancel()
            await asyncio.gather(self._replayer, return_exceptions=True)
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
        """(payload, age in seconds) of a live entry, or None (absent, expired, or no Redis).

        Also notes, for the rest of the calling task, the entry's invalidation count: a
        `put_meta` of the same key from this task is dropped if an invalidation of the key
        came in between (what the caller then learnt from the origin may predate it)."""
        _note_token(("m", *key), None)

        async def get() -> tuple[bytes, float] | None:
            found = await self._meta_get(keys=[await self._meta_key(key[0], key[1])], args=[key[2]])
            _note_token(("m", *key), _text(found[2]))
            return None if int(found[1]) < 0 else (bytes(found[0]), int(found[1]) / 1000)
        return await self._call("get_meta", get)

    async def put_meta(self, key: MetaKey, payload: bytes, ttl: float) -> None:
        """Share `payload` for `ttl` seconds (its whole life: expired entries are never returned),
        unless the key was invalidated since this task's `get_meta` of it."""
        if ttl <= 0:
            return
        token = _noted_token(("m", *key))

        async def put() -> bool:
            stored = await self._meta_put(keys=[await self._meta_key(key[0], key[1])],
                                          args=[key[2], _ms(ttl), payload, token])
            if not stored:
                self.errors["put_meta_raced"] += 1
            return True
        await self._call("put_meta", put)

    # --- listings ---------------------------------------------------------------------

    async def get_listing(self, key: ListingKey) -> tuple[bytes, float] | None:
        """(page, age in seconds) of a live listing page, or None; notes the bucket's
        invalidation count for `put_listing`, as `get_meta` does."""
        _note_token(("l", *key), None)

        async def get() -> tuple[bytes, float] | None:
            found = await self._page_get(keys=[self._page_key(key), self._index_key(key[0])])
            _note_token(("l", *key), _text(found[2]))
            return None if int(found[1]) < 0 else (bytes(found[0]), int(found[1]) / 1000)
        return await self._call("get_listing", get)

    async def put_listing(self, key: ListingKey, page: bytes, ttl: float) -> None:
        """Share a page for `ttl` seconds, unless its bucket saw an invalidation since this
        task's `get_listing` of it."""
        if ttl <= 0:
            return
        token = _noted_token(("l", *key))

        async def put() -> bool:
            stored = await self._page_put(keys=[self._page_key(key), self._index_key(key[0])],
                                          args=[_page_id(key), key[1], _ms(ttl), page, token])
            if not stored:
                self.errors["put_listing_raced"] += 1
            return True
        await self._call("put_listing", put)

    # --- invalidation -----------------------------------------------------------------

    async def invalidate(self, bucket: str, key: str | None) -> Confirmation:
        """Drop the shared metadata of `key` (of the whole bucket when None) and every
        listing page that can contain it, then tell the other nodes to do the same.

        The shared entries go before the message, so a node that refills its own cache
        on receiving it cannot find the old entry here. Without Redis the invalidation
        waits (bounded) and the listener replays it when Redis is back.

        Returns the nodes' confirmations: the write may be acknowledged once its `wait()`
        returned (see the module docstring). Unsent (Redis unreachable from here), it
        waits until `invalidation_timeout` after this node found Redis unreachable: by
        then no node still trusts its caches, unless Redis answers it but not this node.
        """
        ident = str(next(self._ids))
        confirmation = Confirmation(lambda complete: self._settled(ident, complete))
        self._waiting[ident] = confirmation
        deadline = self.settings.invalidation_timeout
        reached: int | None = None
        try:
            # Tried even while the circuit is open, as long as the channel is heard: a
            # skipped invalidation would leave the other nodes trusting what it changes.
            reached = await self._call("invalidate", lambda: self._invalidate_now(bucket, key, ident),
                                       probe=self.listening())
            if reached is None:
                # Unsent. Every node stops trusting its caches within the deadline of Redis
                # hanging (their PINGs go unanswered; this node noticed it at `_down_since`,
                # or a quarter deadline after at worst, when the failure before was another
                # one); if Redis answers again before then, the invalidation must go out.
                until = (self._down_since or time.monotonic()) + deadline * (1 + 1 / _PINGS_PER_DEADLINE)
                while reached is None and time.monotonic() < until:
                    await asyncio.sleep(min(_RETRY_UNSENT, max(0.0, until - time.monotonic())))
                    reached = await self._call("invalidate", lambda: self._invalidate_now(bucket, key, ident),
                                               probe=True)
        except BaseException:  # cancelled: nobody will wait for it
            self._waiting.pop(ident, None)
            raise
        finally:  # also when cancelled: the write it follows may have happened
            if reached is not None:
                self._pending.pop((bucket, key), None)  # an older one waiting is done with it
                confirmation.expect(reached, time.monotonic() + deadline)
            else:
                self._pending[(bucket, key)] = next(self._sequence)
                self._bound_pending()
                self._replay_soon()
                self.confirmations["unsent"] += 1
                confirmation.expect(None, 0.0)
        return confirmation

    async def _invalidate_now(self, bucket: str, key: str | None, ident: str) -> int:
        """Returns how many subscribers the message reached."""
        message: dict[str, Any] = {"n": self.node_id, "b": bucket, "k": key, "i": ident}
        if key is None:
            generation = self._note_generation(bucket, await self._client.incr(self._generation_key(bucket)))
            message["g"] = generation
            await self._pages_forget(keys=[self._index_key(bucket)],
                                     args=[self._page_prefix(bucket), "*", _TOKEN_LIFE_MS])
            return await self._publish(self._channel, orjson.dumps(message))
        meta_key = await self._meta_key(bucket, key)
        if isinstance(self._client, RedisCluster):  # keys of two slots; the message goes to the channel's node
            await self._pages_forget(keys=[self._index_key(bucket)],
                                     args=[self._page_prefix(bucket), "=" + key, _TOKEN_LIFE_MS])
            await self._meta_forget(keys=[meta_key], args=["", "", _TOKEN_LIFE_MS])
            return await self._publish(self._channel, orjson.dumps(message))
        return int(await self._key_forget(keys=[self._index_key(bucket), meta_key],
                                          args=[self._page_prefix(bucket), "=" + key, _TOKEN_LIFE_MS,
                                                self._channel, orjson.dumps(message)]))

    async def _publish(self, channel: str, message: bytes | str) -> int:
        """On a cluster, to the master of the invalidation channel's slot, where the nodes
        listen unless it failed them: delivered from there at once, not after a hop over the
        cluster bus (which still brings it to those listening elsewhere). Returns how many
        subscribers it reached (on a cluster: on the node it was published on)."""
        client = self._client
        if isinstance(client, RedisCluster):
            home = client.get_node_from_key(self._channel)
            if home is None:
                raise RedisConnectionError("no node holds the invalidation channel's slot")
            try:
                return int(await client.publish(channel, message, target_nodes=home))
            except (ConnectionError, RedisConnectionError):  # that node is down: any other one
                others = [node for node in client.get_nodes() if node.name != home.name]
                if not others:
                    raise
                await client.publish(channel, message, target_nodes=random.choice(others))
                return 0  # whoever hears it there: not on the master, so not trusting their caches
        return int(await client.publish(channel, message))

    def listening(self) -> bool:
        """Whether this node has applied every invalidation published more than
        `invalidation_timeout` ago: subscribed, and the channel answered a PING sent less
        than that long ago (on a cluster, through the channel's master, where writes
        publish). While not, cached metadata and listings, here or in Redis, must not be
        answered unasked.

        After a gap (a new subscription, or PINGs answered late), also not for
        `invalidation_timeout` + `socket_timeout`: writes acknowledged meanwhile whose
        invalidation could not be sent are sent again as soon as Redis answers, and the
        shared entries they drop must not be trusted before."""
        now = time.monotonic()
        return self.subscribed.is_set() and self._trusted_from <= now < self._current_until

    def _after_gap(self, on_resync: Callable[[], None] | None) -> None:
        self._trusted_from = time.monotonic() + self.settings.invalidation_timeout + self.settings.socket_timeout
        if on_resync is not None:
            try:
                on_resync()
            except Exception:
                log.cluster.exception("resync after a gap in %s failed", self._channel)

    def _settled(self, ident: str, complete: bool) -> None:
        confirmation = self._waiting.pop(ident, None)
        if confirmation is not None and confirmation.expected is not None:
            self.confirmations["confirmed" if complete else "unconfirmed"] += 1
            if not complete:
                log.cluster.info("invalidation %s: %d of %d nodes confirmed within %.1f s", ident,
                                 confirmation.confirmed, confirmation.expected, self.settings.invalidation_timeout)

    def _acks_of(self, node: str) -> str:
        return f"{self._prefix}ack:{node}"

    def _bound_pending(self) -> None:
        if len(self._pending) > _MAX_PENDING:  # a long outage under writes: whole buckets instead
            buckets = dict.fromkeys(bucket for bucket, _ in self._pending)
            self._pending = {(bucket, None): next(self._sequence) for bucket in buckets}

    async def _replay(self, *, probe: bool = False) -> None:
        for item, sequence in list(self._pending.items()):
            bucket, key = item
            ident = f"r{next(self._ids)}"  # nobody waits for it: its acks are dropped
            if await self._call("invalidate", lambda: self._invalidate_now(bucket, key, ident),  # noqa: B023
                                probe=probe) is None:
                return
            if self._pending.get(item) == sequence:  # not failed again meanwhile
                del self._pending[item]

    def _replay_soon(self) -> None:
        """Unsent invalidations go out as soon as Redis answers, within `_RETRY_UNSENT`: the
        other nodes distrust their caches for a while after a gap in the channel (see
        `listening`), and the replay must come within it."""
        if self._replayer is None or self._replayer.done():
            self._replayer = asyncio.get_running_loop().create_task(self._replay_until_sent(),
                                                                    name="gateway-invalidation-replay")

    async def _replay_until_sent(self) -> None:
        while self._pending:
            await asyncio.sleep(_RETRY_UNSENT)
            await self._replay(probe=True)

    async def listen(self, on_invalidate: OnInvalidate, on_resync: Callable[[], None] | None = None) -> None:
        """Call `on_invalidate(bucket, key)` for every invalidation published by another node,
        and confirm it to that node once applied.

        Runs until cancelled, resubscribing with backoff whenever the connection fails or
        stops answering the PINGs sent through it (`listening`). `on_resync` is called each
        time the subscription is (re)established: messages may have been missed before it,
        so the caller should drop what they could have invalidated. Pending invalidations of
        this node are replayed from here.
        """
        failures = 0
        while True:
            pubsub: PubSub | None = None
            try:
                async with asyncio.timeout(self.settings.socket_timeout):
                    pubsub, home = await self._pubsub()
                    asked = time.monotonic()
                    # The acks channel first: confirmed by the time writes can come from here.
                    await pubsub.subscribe(self._ack_channel, self._channel)
                await self._hear(pubsub, home, asked, on_invalidate, on_resync)
            except _BackHome:
                self.subscribed.clear()
                self._pubsub_turn = 0
                failures = 0
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
            if failures:
                # Jittered exponential backoff, capped low: a reconnect attempt is cheap.
                delay = min(self.settings.retry_interval * 2 ** (failures - 1), 4 * self.settings.retry_interval)
                await asyncio.sleep(delay * random.uniform(0.5, 1.0))

    async def _hear(self, pubsub: PubSub, home: bool, asked: float, on_invalidate: OnInvalidate,
                    on_resync: Callable[[], None] | None) -> None:
        """One subscription's life: messages, acks, and PINGs through the channel every
        quarter of the deadline; raises when it fails or stops answering."""
        deadline = self.settings.invalidation_timeout
        every = deadline / _PINGS_PER_DEADLINE
        give_up = deadline + self.settings.socket_timeout  # a PING unanswered this long: reconnect
        sent: dict[int, float] = {}  # PINGs in flight: number -> time.monotonic() when sent
        numbers = itertools.count()
        connected = next_ping = time.monotonic()
        while True:
            held = self.hold_listener_until - time.monotonic()
            if held > 0:
                await asyncio.sleep(held)
                continue
            if self.subscribed.is_set() and self._pending and self._usable():
                await self._replay()
            now = time.monotonic()
            if now >= next_ping:
                if sent and now - min(sent.values()) > give_up:
                    raise TimeoutError("Redis did not answer a PING on the invalidation channel")
                number = next(numbers)
                sent[number] = now
                async with asyncio.timeout(self.settings.socket_timeout):
                    await pubsub.ping(str(number))
                next_ping = now + every
            if not home and now - connected > _BACK_HOME_AFTER * self.settings.retry_interval:
                raise _BackHome
            message = await pubsub.get_message(timeout=max(0.0, next_ping - time.monotonic()))
            if message is None:
                continue
            held = self.hold_listener_until - time.monotonic()
            if held > 0:  # (the test hook holds back a message that came meanwhile too)
                await asyncio.sleep(held)
            kind = message["type"]
            if kind == "message":
                if _text(message["channel"]) == self._ack_channel:
                    waiting = self._waiting.get(_text(message["data"]))
                    if waiting is not None:
                        waiting.add()
                else:
                    await self._deliver(message["data"], on_invalidate)
            elif kind == "pong":
                try:
                    number = int(_text(message["data"]))
                except ValueError:
                    continue
                at = sent.pop(number, None)
                for older in [n for n in sent if n < number]:
                    del sent[older]
                if at is not None:
                    self._recovered()
                    if home:
                        if time.monotonic() >= self._current_until:  # lapsed meanwhile: a gap
                            self._after_gap(on_resync)
                        self._current_until = max(self._current_until, at + deadline)
            elif kind == "subscribe" and _text(message["channel"]) == self._channel:
                self._subscribed(on_resync)
                self._trusted_from = time.monotonic() + deadline + self.settings.socket_timeout
                if home:
                    self._current_until = asked + deadline

    async def _pubsub(self) -> tuple[PubSub, bool]:
        """A pub/sub connection, and whether it is to where invalidations are published. On a
        cluster, to the master of the channel's slot; after each failure to the next node: a
        classic PUBLISH reaches every node of a cluster, so any live node will do to hear
        them, but only on the master are they ordered with this node's PINGs (elsewhere the
        node hears them but does not trust its caches, and goes back to the master later)."""
        client = self._client
        if isinstance(client, RedisCluster):
            await client.initialize()  # reads the slot map again if a node failed since
            home = client.get_node_from_key(self._channel)
            if home is None:
                raise RedisConnectionError("no node holds the invalidation channel's slot")
            nodes = [home, *(node for node in client.get_nodes() if node.name != home.name)]
            turn = self._pubsub_turn % len(nodes)
            return client.pubsub(node=nodes[turn]), turn == 0
        return client.pubsub(), True

    def _subscribed(self, on_resync: Callable[[], None] | None) -> None:
        self._generations.clear()
        self.subscribed.set()
        self._recovered()
        if on_resync is not None:
            try:
                on_resync()
            except Exception:
                log.cluster.exception("resync after subscribing to %s failed", self._channel)

    async def _deliver(self, data: bytes, on_invalidate: OnInvalidate) -> None:
        """Apply another node's invalidation, then confirm it to that node (this node's own
        confirm themselves: its engine invalidated before publishing)."""
        try:
            message = orjson.loads(data)
            node, bucket, key = message["n"], message["b"], message["k"]
            if not isinstance(bucket, str) or not (key is None or isinstance(key, str)):
                raise TypeError(bucket, key)
            generation, ident = message.get("g"), message.get("i")
        except (orjson.JSONDecodeError, KeyError, TypeError):
            self.errors["bad_message"] += 1
            return
        if node == self.node_id:
            waiting = self._waiting.get(ident) if isinstance(ident, str) else None
            if waiting is not None:
                waiting.add()
            return
        if isinstance(generation, int):
            self._note_generation(bucket, generation)
        try:
            on_invalidate(bucket, key)
        except Exception:  # confirmed anyway: nothing better will come of not confirming
            log.cluster.exception("invalidating %s/%s on a message from %s failed", bucket, key, node)
        if isinstance(ident, str) and isinstance(node, str):
            await self._call("ack", lambda: self._publish(self._acks_of(node), ident), probe=True)

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

    async def _call(self, op: str, work: Callable[[], Awaitable[T]], *, probe: bool = False) -> T | None:
        """`work()` within the timeout, or None when Redis is down or the call failed;
        `probe`: tried even while the circuit is open."""
        if self._down_since is not None and not probe:
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
            async with asyncio.timeout(self.settings.socket_timeout):
                await self._client.connection_pool.disconnect(inuse_connections=False)

    def _recovered(self) -> None:
        if self._down_since is not None:
            log.cluster.warning("Redis available again after %.1f s", time.monotonic() - self._down_since)
            self._down_since = None


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def _page_id(key: ListingKey) -> str:
    return hashlib.blake2b(orjson.dumps([key[1], key[2]]), digest_size=16).hexdigest()
