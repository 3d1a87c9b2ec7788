"""The shared level (L2) of object metadata and listing pages in Redis, with the invalidation counts that guard it."""

from __future__ import annotations

import hashlib
from contextvars import ContextVar

import orjson

from gateway.cluster.redis_handle import RedisHandle, as_text
from gateway.store.meta import ListingKey, MetaKey

__all__ = ["Level2"]

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

_MAX_GENERATIONS = 10_000


class Level2:
    """Object metadata and listing pages in Redis, shared by the nodes. Event loop only.

    Values are opaque bytes (the engine serialises them). A bucket-wide invalidation
    moves the bucket to a new generation, which is part of every metadata key: entries
    of older generations are never read again and expire by themselves. Each node keeps
    the generations it has seen; they come with invalidation messages and are read
    again after any outage, when messages may have been missed (the handle's failures
    and each new subscription forget them).

    Every call goes through the handle's circuit: Redis down means a miss, or a skipped
    write. Dropping entries is the invalidation channel's (gateway.cluster.invalidation),
    through the `forget_*` methods here, which know the keys.
    """

    def __init__(self, redis: RedisHandle) -> None:
        self._redis = redis
        client = redis.client
        self._meta_get = client.register_script(_META_GET)
        self._meta_put = client.register_script(_META_PUT)
        self._page_get = client.register_script(_PAGE_GET)
        self._page_put = client.register_script(_PAGE_PUT)
        self._pages_forget = client.register_script(_PAGES_FORGET)
        self._meta_forget = client.register_script(_META_FORGET)
        self._key_forget = client.register_script(_KEY_FORGET)
        self._generations: dict[str, int] = {}
        redis.on_failure.append(self.forget_generations)

    # --- metadata ---------------------------------------------------------------------

    async def get_meta(self, key: MetaKey) -> tuple[bytes, float] | None:
        """(payload, age in seconds) of a live entry, or None (absent, expired, or no Redis).

        Also notes, for the rest of the calling task, the entry's invalidation count: a
        `put_meta` of the same key from this task is dropped if an invalidation of the key
        came in between (what the caller then learnt from the origin may predate it)."""
        _note_token(("m", *key), None)

        async def get() -> tuple[bytes, float] | None:
            found = await self._meta_get(keys=[await self.meta_key(key[0], key[1])], args=[key[2]])
            _note_token(("m", *key), as_text(found[2]))
            return None if int(found[1]) < 0 else (bytes(found[0]), int(found[1]) / 1000)
        return await self._redis.call("get_meta", get)

    async def put_meta(self, key: MetaKey, payload: bytes, ttl: float) -> None:
        """Share `payload` for `ttl` seconds (its whole life: expired entries are never returned),
        unless the key was invalidated since this task's `get_meta` of it."""
        if ttl <= 0:
            return
        token = _noted_token(("m", *key))

        async def put() -> bool:
            stored = await self._meta_put(keys=[await self.meta_key(key[0], key[1])],
                                          args=[key[2], _ms(ttl), payload, token])
            if not stored:
                self._redis.errors["put_meta_raced"] += 1
            return True
        await self._redis.call("put_meta", put)

    # --- listings ---------------------------------------------------------------------

    async def get_listing(self, key: ListingKey) -> tuple[bytes, float] | None:
        """(page, age in seconds) of a live listing page, or None; notes the bucket's
        invalidation count for `put_listing`, as `get_meta` does."""
        _note_token(("l", *key), None)

        async def get() -> tuple[bytes, float] | None:
            found = await self._page_get(keys=[self._page_key(key), self._index_key(key[0])])
            _note_token(("l", *key), as_text(found[2]))
            return None if int(found[1]) < 0 else (bytes(found[0]), int(found[1]) / 1000)
        return await self._redis.call("get_listing", get)

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
                self._redis.errors["put_listing_raced"] += 1
            return True
        await self._redis.call("put_listing", put)

    # --- dropping entries (for the invalidation channel; raise on failure) -------------

    async def new_generation(self, bucket: str) -> int:
        """Move `bucket` to a new generation: every metadata entry of it is gone at once."""
        return self.note_generation(bucket, await self._redis.client.incr(self._generation_key(bucket)))

    async def forget_pages(self, bucket: str, key: str | None) -> None:
        """Drop every listing page of `bucket` that can hold `key` (every page when None)."""
        await self._pages_forget(keys=[self._index_key(bucket)],
                                 args=[self._page_prefix(bucket), "*" if key is None else "=" + key, _TOKEN_LIFE_MS])

    async def forget_meta(self, meta_key: str) -> None:
        """Drop the metadata under `meta_key` (from `meta_key()`), keeping its invalidation count."""
        await self._meta_forget(keys=[meta_key], args=["", "", _TOKEN_LIFE_MS])

    async def forget_key_and_publish(self, bucket: str, key: str, meta_key: str, channel: str,
                                     message: bytes) -> int:
        """One server: the pages that can hold `key` and its metadata dropped, then `message`
        published on `channel`, in one script; returns how many subscribers it reached."""
        return int(await self._key_forget(keys=[self._index_key(bucket), meta_key],
                                          args=[self._page_prefix(bucket), "=" + key, _TOKEN_LIFE_MS,
                                                channel, message]))

    # --- keys and generations ----------------------------------------------------------

    async def meta_key(self, bucket: str, key: str) -> str:
        generation = self._generations.get(bucket)
        if generation is None:
            raw = await self._redis.client.get(self._generation_key(bucket))
            generation = self.note_generation(bucket, int(raw or 0))
        return self._redis.key(f"m:{bucket}:{generation}:{key}")

    def note_generation(self, bucket: str, generation: int) -> int:
        """The newest generation seen for `bucket` (replies and messages may cross)."""
        if len(self._generations) >= _MAX_GENERATIONS and bucket not in self._generations:
            self._generations.clear()
        newest = max(generation, self._generations.get(bucket, 0))
        self._generations[bucket] = newest
        return newest

    def forget_generations(self) -> None:
        """Read every bucket's generation from Redis again (messages may have been missed)."""
        self._generations.clear()

    def _generation_key(self, bucket: str) -> str:
        return self._redis.key(f"g:{bucket}")

    def _index_key(self, bucket: str) -> str:
        return self._redis.key(f"li:{{{bucket}}}")

    def _page_prefix(self, bucket: str) -> str:
        return self._redis.key(f"l:{{{bucket}}}:")

    def _page_key(self, key: ListingKey) -> str:
        return self._page_prefix(key[0]) + _page_id(key)


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def _page_id(key: ListingKey) -> str:
    return hashlib.blake2b(orjson.dumps([key[1], key[2]]), digest_size=16).hexdigest()
