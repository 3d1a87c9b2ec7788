"""The read and write paths: object metadata, object bytes, listings, write-through.

Object metadata and listings are cached in process (store.meta, the L1) and, when
Redis is configured, shared by the nodes (cluster.shared, the L2); object bytes come
from the block cache (store) or the origin. `s3api` never talks to the origin itself.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter, OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime

import orjson

from gateway.cluster.shared import SharedMetadata
from gateway.config import CacheSettings, ListingSettings, MetadataSettings
from gateway.errors import S3Error
from gateway.origin import BodyFactory, Origin, OriginResponse
from gateway.store.blocks import BlockId, block_bounds, block_span, slice_for
from gateway.store.meta import ListingCache, ListingKey, MetadataCache, MetaKey
from gateway.store.tiers import TieredStore

__all__ = ["Engine", "ObjectChanged", "ObjectMeta", "ObjectRead", "OriginResponse", "meta_from_headers"]


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    """What a HEAD of the object told us: size, validators and the headers S3 sends with it."""

    size: int
    etag: str
    last_modified: datetime
    headers: dict[str, str]  # lowercase names, origin hop headers removed

    @property
    def version_id(self) -> str | None:
        return self.headers.get("x-amz-version-id")


class Engine:
    """Reads and writes on behalf of authorised S3 requests.

    Metadata and listings come from the in-process caches (L1) while fresh, else from
    the shared ones in Redis (L2) when configured; past their TTL the origin is asked
    with a conditional HEAD. Writes go through to the origin and, once it answered,
    drop what they may have changed from both levels on every node before the write
    is acknowledged.

    An answer fetched while an invalidation of its bucket happened is returned but not
    cached (`_epoch`): it may predate the write that caused the invalidation.
    """

    def __init__(
        self,
        origin: Origin,
        metadata: MetadataSettings,
        listing: ListingSettings,
        *,
        store: TieredStore | None = None,
        cache: CacheSettings | None = None,
        shared: SharedMetadata | None = None,
    ) -> None:
        self.origin = origin
        self.store = store
        self.shared = shared
        self.cache_settings = cache or CacheSettings()
        self._inflight: dict[str, asyncio.Future[bytes]] = {}
        self._background: set[asyncio.Future[bytes]] = set()
        # Where the last read of each recently read object ended, to spot sequential readers.
        self._read_ends: OrderedDict[tuple[str, str, str], int] = OrderedDict()
        self.settings = metadata
        self.listing_settings = listing
        self.meta_cache: MetadataCache[_Known] = MetadataCache(
            metadata.max_entries, ttl=metadata.ttl, negative_ttl=metadata.negative_ttl)
        self.listing_cache: ListingCache[_Page] = ListingCache(listing.max_entries, ttl=listing.ttl)
        self.stats: Counter[str] = Counter()
        self._epochs: Counter[str] = Counter()  # per bucket: invalidations so far
        self._purges = 0

    async def aclose(self) -> None:
        await self.origin.aclose()
        if self.store is not None:
            await self.store.aclose()
        if self.shared is not None:
            await self.shared.aclose()

    async def head_object(
        self,
        bucket: str,
        key: str,
        *,
        version_id: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[ObjectMeta, bool]:
        """Metadata of one object (version), and whether it came from memory without asking
        the origin; raises S3Error (NoSuchKey, NoSuchBucket, ...).

        `headers` are the client's object-read headers (encryption keys, payer, ...);
        a request carrying any of them bypasses the cache, since its answer is its own.
        """
        query = [("versionId", version_id)] if version_id else []
        if headers:
            return await self._fetch_meta(bucket, key, query, headers), False
        cache_key = (bucket, key, version_id or "")
        epoch = self._epoch(bucket)
        found = self._meta_from_l1(cache_key)
        if found is not None and self._usable(found):
            self.stats["meta_hit"] += 1
            return self._answer(found[0]), True
        # L1 missed or is past its TTL: another node may have a fresh answer. (Strict
        # mode asks the origin about every positive entry anyway.)
        if self.shared is not None and (found is None or found[0].missing or not self.settings.strict):
            shared = await self._meta_from_l2(cache_key)
            if shared is not None:
                known = shared[0]
                if self._epoch(bucket) == epoch:
                    self.meta_cache.put(cache_key, known, missing=known.missing)
                if self._usable(shared):
                    self.stats["meta_l2_hit"] += 1
                    return self._answer(known), True
                found = shared
        if found is None or found[0].missing:
            self.stats["meta_miss"] += 1
            return await self._fetch_and_cache(cache_key, query, epoch), False
        meta = found[0].value
        assert isinstance(meta, ObjectMeta)
        return await self._revalidate(cache_key, query, meta, found[1], epoch), False

    def _meta_from_l1(self, cache_key: MetaKey) -> tuple[_Known, float] | None:
        found = self.meta_cache.get(cache_key)
        if found is None:
            return None
        cached, _ = found
        return cached.value, cached.age + cached.value.head_start

    async def _meta_from_l2(self, cache_key: MetaKey) -> tuple[_Known, float] | None:
        assert self.shared is not None
        shared = await self.shared.get_meta(cache_key)
        if shared is None:
            return None
        payload, age = shared
        value = _decode_meta(payload)
        if value is None:  # written by another version of the gateway: a miss
            return None
        return _Known(value, head_start=age), age

    def _usable(self, found: tuple[_Known, float]) -> bool:
        """Whether an entry of this age may be answered without asking the origin."""
        known, age = found
        if known.missing:
            return age <= self.settings.negative_ttl
        return age <= self.settings.ttl and not self.settings.strict

    @staticmethod
    def _answer(known: _Known) -> ObjectMeta:
        if isinstance(known.value, _Missing):
            raise known.value.error()
        return known.value

    async def _remember(self, cache_key: MetaKey, value: ObjectMeta | _Missing, epoch: tuple[int, int]) -> None:
        """Cache an answer the origin just gave, here and in the shared level."""
        if self._epoch(cache_key[0]) != epoch:
            self.stats["meta_not_cached_raced"] += 1
            return
        missing = isinstance(value, _Missing)
        self.meta_cache.put(cache_key, _Known(value), missing=missing)
        if self.shared is not None:
            await self.shared.put_meta(cache_key, _encode_meta(value),
                                       self.settings.negative_ttl if missing else self.settings.ttl)

    async def _revalidate(
        self, cache_key: MetaKey, query: list[tuple[str, str]], meta: ObjectMeta, age: float, epoch: tuple[int, int]
    ) -> ObjectMeta:
        """A conditional HEAD: 304 keeps the entry (no data is fetched again)."""
        self.stats["meta_revalidate"] += 1
        try:
            response = await self.origin.send("HEAD", cache_key[0], cache_key[1], query=query,
                                              headers={"if-none-match": meta.etag, **_META_HEADERS})
        except S3Error:
            if age <= self.settings.ttl + self.settings.stale_if_error:
                self.stats["meta_stale_served"] += 1
                return meta
            raise
        if response.status == 304:
            await response.aclose()
            self.stats["meta_not_modified"] += 1
            await self._remember(cache_key, meta, epoch)  # its age starts again, here and shared
            return meta
        if response.status >= 500 and age <= self.settings.ttl + self.settings.stale_if_error:
            await response.aclose()
            self.stats["meta_stale_served"] += 1
            return meta
        return await self._cache_answer(cache_key, query, response, epoch)

    async def _fetch_and_cache(self, cache_key: MetaKey, query: list[tuple[str, str]], epoch: tuple[int, int]) -> ObjectMeta:
        response = await self.origin.send("HEAD", cache_key[0], cache_key[1], query=query, headers=_META_HEADERS)
        return await self._cache_answer(cache_key, query, response, epoch)

    async def _cache_answer(
        self, cache_key: MetaKey, query: list[tuple[str, str]], response: OriginResponse, epoch: tuple[int, int]
    ) -> ObjectMeta:
        bucket, key, _ = cache_key
        if response.status < 300:
            await response.aclose()
            meta = meta_from_headers(response.headers.multi_items())
            await self._remember(cache_key, meta, epoch)
            return meta
        await response.aclose()
        error = await self._explain(bucket, key, query, _META_HEADERS, response.status)
        if error.status == 404:
            await self._remember(cache_key, _Missing.of(error), epoch)
        raise error

    async def _fetch_meta(self, bucket: str, key: str, query: list[tuple[str, str]], headers: dict[str, str]) -> ObjectMeta:
        response = await self.origin.send("HEAD", bucket, key, query=query, headers=headers)
        if response.status >= 300:
            await response.aclose()
            raise await self._explain(bucket, key, query, headers, response.status)
        await response.aclose()
        return meta_from_headers(response.headers.multi_items())

    async def _explain(self, bucket: str, key: str, query: list[tuple[str, str]], headers: dict[str, str], status: int) -> S3Error:
        """A HEAD error has no body (NoSuchKey and NoSuchBucket look alike): ask with a GET."""
        resource = f"/{bucket}/{key}"
        if status < 400:
            return S3Error("PreconditionFailed" if status == 412 else "InternalError", status=status, resource=resource)
        response = await self.origin.send("GET", bucket, key, query=query, headers=dict(headers, range="bytes=0-0"))
        if response.status < 300:  # it appeared meanwhile; the caller may simply ask again
            await response.aclose()
            return S3Error("ServiceUnavailable", "The object changed while it was being read; retry the request.")
        return await self.origin.error_from(response, resource=resource)

    async def read_object(
        self,
        bucket: str,
        key: str,
        meta: ObjectMeta,
        *,
        start: int | None = None,
        end: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> ObjectRead:
        """The bytes [start, end] (inclusive) of exactly the version `meta` describes.

        From the block cache block by block (fetching missing blocks once, with
        readahead), or straight from the origin for reads whose answer is the caller's
        own (`headers`: encryption keys, payer) or when no cache is configured. The first
        block is in hand before this returns, so a failure becomes an S3 error, not a
        broken stream.
        """
        if headers or self.store is None or meta.size == 0:
            return ObjectRead("miss", chunks=await self._origin_read(bucket, key, meta, start, end, headers))
        if start is None or end is None:
            start, end = 0, meta.size - 1
        size = self.cache_settings.block_size
        version = meta.version_id if meta.version_id and meta.version_id != "null" else meta.etag
        blocks = [BlockId(bucket, key, version, i) for i in block_span(start, end, size)]
        source = self._describe(blocks)
        if key.endswith(_FOOTER_FIRST_SUFFIXES):
            # Parquet and ORC readers start at the footer: have the last block ready.
            self._prefetch(BlockId(bucket, key, version, (meta.size - 1) // size), meta)
        # A reader going through an object in consecutive ranges gets the blocks after
        # this range fetched ahead of its next request.
        stream_key = (bucket, key, version)
        if self._read_ends.get(stream_key) == start - 1:
            after = blocks[-1].index + 1
            last_index = (meta.size - 1) // size
            for index in range(after, min(after + self.cache_settings.readahead_blocks, last_index + 1)):
                self._prefetch(BlockId(bucket, key, version, index), meta)
        self._read_ends[stream_key] = end
        self._read_ends.move_to_end(stream_key)
        if len(self._read_ends) > _SEQUENTIAL_READERS:
            self._read_ends.popitem(last=False)
        if len(blocks) == 1:  # small objects and small ranges: the common case of many small files
            data = await self._block(blocks[0], meta)
            lo, hi = slice_for(blocks[0].index, size, start, end)
            return ObjectRead(source, body=data if (lo, hi) == (0, len(data)) else data[lo:hi])
        # Readahead: the next blocks are fetched while the first one is awaited and sent.
        pending = deque(self._spawn(self._block(b, meta)) for b in blocks[1 : 1 + self.cache_settings.readahead_blocks])
        try:
            first = await self._block(blocks[0], meta)
        except BaseException:
            for waiter in pending:
                waiter.cancel()
            raise
        return ObjectRead(source, chunks=self._stream(blocks, meta, start, end, first, pending))

    def _describe(self, blocks: list[BlockId]) -> str:
        """The x-cache value: where the blocks of this read are, as it starts."""
        assert self.store is not None
        memory = self.store.memory
        in_memory = sum(1 for b in blocks if memory is not None and b in memory)
        cached = sum(1 for b in blocks if b in self.store)
        if in_memory == len(blocks):
            return "hit-mem"
        if cached == len(blocks):
            return "hit-disk"
        return "miss" if cached == 0 else "partial"

    async def _stream(
        self, blocks: list[BlockId], meta: ObjectMeta, start: int, end: int, first: bytes,
        pending: deque[asyncio.Future[bytes]],
    ) -> AsyncIterator[bytes]:
        size = self.cache_settings.block_size
        upcoming = iter(blocks[1 + len(pending):])
        try:
            for position, block in enumerate(blocks):
                if position == 0:
                    data = first
                elif pending:
                    data = await pending.popleft()
                else:
                    data = await self._block(block, meta)
                if position > 0 and self.cache_settings.readahead_blocks:
                    nxt = next(upcoming, None)  # keep the window full: one out, one in
                    if nxt is not None:
                        pending.append(self._spawn(self._block(nxt, meta)))
                lo, hi = slice_for(block.index, size, start, end)
                yield data if (lo, hi) == (0, len(data)) else data[lo:hi]
        finally:
            for waiter in pending:  # only the waiting stops: shared fetches go on and fill the cache
                waiter.cancel()

    async def _block(self, block: BlockId, meta: ObjectMeta) -> bytes:
        """One block: from a tier, else fetched from the origin exactly once however many wait."""
        assert self.store is not None
        while True:
            hit = await self.store.get(block)
            if hit is not None:
                self.stats[f"block_hit_{hit[1]}"] += 1
                return hit[0]
            fetch = self._inflight.get(block.name)
            if fetch is not None:
                self.stats["block_wait"] += 1
                break
            if block in self.store:  # stored between our look and now
                continue
            self.stats["block_miss"] += 1
            fetch = asyncio.ensure_future(self._fetch_block(block, meta))
            self._inflight[block.name] = fetch
            fetch.add_done_callback(lambda done, name=block.name: self._fetched(name, done))
            break
        # A reader that goes away does not cancel a fetch that others may be waiting on.
        return await asyncio.shield(fetch)

    def _fetched(self, name: str, fetch: asyncio.Future[bytes]) -> None:
        self._inflight.pop(name, None)
        if not fetch.cancelled():
            fetch.exception()  # retrieved: a failed fetch nobody waited for is not an error to log

    async def _fetch_block(self, block: BlockId, meta: ObjectMeta) -> bytes:
        assert self.store is not None
        first, last = block_bounds(block.index, self.cache_settings.block_size, meta.size)
        query = [("versionId", meta.version_id)] if meta.version_id and meta.version_id != "null" else []
        response = await self.origin.send(
            "GET", block.bucket, block.key, query=query,
            headers={"range": f"bytes={first}-{last}", "if-match": meta.etag},
        )
        if response.status == 412:
            await response.aclose()
            await self.invalidate(block.bucket, block.key)
            raise ObjectChanged()
        if response.status >= 300:
            raise await self.origin.error_from(response, resource=f"/{block.bucket}/{block.key}")
        expected = last - first + 1
        if response.status != 206 and expected != meta.size:
            await response.aclose()
            raise S3Error("ServiceUnavailable", "The origin ignored a byte range; the block was not cached.")
        data = bytearray()
        async for piece in response.iter_bytes():  # never more than one block, whatever is sent
            data += piece
            if len(data) > expected:
                await response.aclose()
                break
        if len(data) != expected:
            raise S3Error("ServiceUnavailable", "The origin sent a block of the wrong size; retry the request.")
        self.stats["origin_block_fetch"] += 1
        block_bytes = bytes(data)
        await self.store.put(block, block_bytes)
        return block_bytes

    def _prefetch(self, block: BlockId, meta: ObjectMeta) -> None:
        assert self.store is not None
        if block not in self.store and block.name not in self._inflight:
            self.stats["prefetch"] += 1
            self._spawn(self._block(block, meta))

    def _spawn(self, work: Awaitable[bytes]) -> asyncio.Future[bytes]:
        """Run `work` now; a failure nobody waits for only costs a later miss, not a log line."""
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(lambda t: (self._background.discard(t), t.cancelled() or t.exception()))
        return task

    async def _origin_read(
        self, bucket: str, key: str, meta: ObjectMeta, start: int | None, end: int | None, headers: dict[str, str] | None
    ) -> AsyncIterator[bytes]:
        request_headers = dict(headers or {})
        # If-Match pins the version we described to the client: an object replaced
        # between HEAD and GET must not be served under the old ETag.
        request_headers["if-match"] = meta.etag
        if start is not None and end is not None:
            request_headers["range"] = f"bytes={start}-{end}"
        query = [("versionId", meta.version_id)] if meta.version_id and meta.version_id != "null" else []
        response = await self.origin.send("GET", bucket, key, query=query, headers=request_headers)
        if response.status == 412:
            await response.aclose()
            await self.invalidate(bucket, key)
            raise ObjectChanged()
        if response.status >= 300:
            raise await self.origin.error_from(response, resource=f"/{bucket}/{key}")
        return response.iter_bytes()

    async def list_objects(self, bucket: str, query: list[tuple[str, str]]) -> bytes:
        """An origin listing body for exactly these parameters, from the listing cache while fresh."""
        params = dict(query)
        cache_key: ListingKey = (bucket, params.pop("prefix", ""), tuple(sorted(params.items())))
        page = self.listing_cache.get(cache_key)
        if page is not None and time.monotonic() < page.expires:
            self.stats["list_hit"] += 1
            return page.body
        epoch = self._epoch(bucket)
        ttl = self.listing_settings.ttl
        if self.shared is not None:
            shared = await self.shared.get_listing(cache_key)
            if shared is not None:
                body, age = shared
                self.stats["list_l2_hit"] += 1
                if self._epoch(bucket) == epoch:
                    self.listing_cache.put(cache_key, _Page(body, time.monotonic() + ttl - age))
                return body
        self.stats["list_miss"] += 1
        response = await self.origin.send("GET", bucket, None, query=query)
        if response.status >= 300:
            raise await self.origin.error_from(response, resource=f"/{bucket}")
        body = await response.read()
        if self._epoch(bucket) == epoch:
            self.listing_cache.put(cache_key, _Page(body, time.monotonic() + ttl))
            if self.shared is not None:
                await self.shared.put_listing(cache_key, body, ttl)
        return body

    async def invalidate(self, bucket: str, key: str | None = None) -> None:
        """Forget cached metadata and listings a write to `key` (or to the bucket) may have
        changed: in Redis and on every node when shared, and here."""
        self._epochs[bucket] += 1  # answers being fetched now are no longer cached
        try:
            if self.shared is not None:
                # Shared entries first: a miss here meanwhile must not refill from them.
                await self.shared.invalidate(bucket, key)
        finally:
            self.invalidate_local(bucket, key)

    def invalidate_local(self, bucket: str, key: str | None = None) -> None:
        """Forget what this node cached about `key` (the bucket when None); another node's
        write arrives here through the invalidation channel."""
        self._epochs[bucket] += 1
        self.meta_cache.invalidate(bucket, key)
        self.listing_cache.invalidate(bucket, key)

    async def cache_written(
        self, bucket: str, key: str, *, etag: str, version_id: str | None, chunks: AsyncIterator[bytes], size: int
    ) -> None:
        """CACHE_THROUGH: the blocks of an object the origin just acknowledged, so a read after
        the write is a hit. Nothing happens unless cache.cache_through is on."""
        if self.store is None or not self.cache_settings.cache_through or not etag or size == 0:
            return
        block_size = self.cache_settings.block_size
        version = version_id if version_id and version_id != "null" else etag
        pending, index = bytearray(), 0
        async for piece in chunks:
            pending += piece
            while len(pending) >= block_size:
                await self.store.put(BlockId(bucket, key, version, index), bytes(pending[:block_size]))
                del pending[:block_size]
                index += 1
        if pending:
            await self.store.put(BlockId(bucket, key, version, index), bytes(pending))
        self.stats["cache_through_blocks"] += index + (1 if pending else 0)

    async def changed(self, changes: Iterable[tuple[str, str]]) -> None:
        """Objects changed behind the gateway (an S3 event): forget what we knew of them.

        Their blocks stay: a changed object has a new ETag, so new block names.
        """
        for bucket, key in changes:
            await self.invalidate(bucket, key)

    async def purge_prefix(self, bucket: str, prefix: str, exact: bool = False) -> int:
        """The admin purge: metadata, listings and cached blocks of one key (`exact`), of
        every key under a prefix, or of a whole bucket (prefix ""). Returns blocks removed.

        Other nodes forget the key, or for a prefix the whole bucket's metadata (the
        shared level invalidates by key or bucket); blocks are evicted on this node,
        and of every key starting with `prefix` even when `exact` (evicting more of a
        disposable cache is harmless).
        """
        if exact:
            await self.invalidate(bucket, prefix)
        else:
            await self.invalidate(bucket)
        return 0 if self.store is None else await self.store.evict_prefix(bucket, prefix)

    def purge(self) -> None:
        """Forget every answer this node cached (the origin changed wholesale, an operator
        asked, or invalidations from other nodes may have been missed)."""
        self._purges += 1
        self.meta_cache.clear()
        self.listing_cache.clear()

    def _epoch(self, bucket: str) -> tuple[int, int]:
        """Changes when anything cached about `bucket` is invalidated."""
        return self._purges, self._epochs[bucket]

    async def error_from(self, response: OriginResponse, *, resource: str) -> S3Error:
        """The S3Error an origin error response stands for (the response is consumed)."""
        return await self.origin.error_from(response, resource=resource)

    async def forward(
        self,
        method: str,
        bucket: str | None,
        key: str | None,
        *,
        query: Iterable[tuple[str, str]] = (),
        headers: dict[str, str] | None = None,
        body: bytes | BodyFactory | None = None,
        body_length: int | None = None,
    ) -> OriginResponse:
        """Any request sent on to the origin as it is: writes (write-through) and pass-through ops.

        The answer may be an error status; the caller decides how to present it. A
        write drops the cached metadata and listings of its key (of the whole bucket
        when it names no key, as DeleteObjects and bucket operations do), whatever
        the origin answered, since a failed write may still have changed something.
        Uploading parts does not change an object until the upload is completed.
        """
        query = list(query)
        try:
            return await self.origin.send(
                method, bucket, key, query=query, headers=headers, body=body, body_length=body_length
            )
        finally:
            if method in _WRITES and bucket is not None and _may_change_objects(method, query):
                await self.invalidate(bucket, key)


@dataclass(frozen=True, slots=True)
class ObjectRead:
    """The bytes of a read, and how it is served: hit-mem | hit-disk | partial | miss.

    A read within one block is `body`, in hand (no stream to run); otherwise `chunks`.
    """

    source: str
    chunks: AsyncIterator[bytes] | None = None
    body: bytes | None = None


class ObjectChanged(S3Error):
    """The object at the origin is no longer the version our metadata described."""

    def __init__(self) -> None:
        super().__init__("ServiceUnavailable", "The object changed while it was being read; retry the request.")


@dataclass(frozen=True, slots=True)
class _Known:
    """An L1 metadata entry: the answer, and the age it already had when this node
    learnt it from the shared level (so it is not fresh for longer than anywhere else)."""

    value: ObjectMeta | _Missing
    head_start: float = 0.0

    @property
    def missing(self) -> bool:
        return isinstance(self.value, _Missing)


@dataclass(frozen=True, slots=True)
class _Page:
    """An L1 listing page and when it stops being fresh (time.monotonic)."""

    body: bytes
    expires: float


@dataclass(frozen=True, slots=True)
class _Missing:
    """A remembered 404, re-raised as the same S3 error while it is fresh."""

    code: str
    message: str
    status: int
    headers: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, error: S3Error) -> _Missing:
        return cls(error.code, error.message, error.status, tuple(error.headers.items()))

    def error(self) -> S3Error:
        return S3Error(self.code, self.message, status=self.status, headers=dict(self.headers))


_WRITES = frozenset({"PUT", "POST", "DELETE"})
_FOOTER_FIRST_SUFFIXES = (".parquet", ".orc")
_SEQUENTIAL_READERS = 4096  # objects whose last read end is remembered
# Metadata is always asked for with its checksums, so one cached entry serves every
# client; the handler shows checksums only to clients that asked for them.
_META_HEADERS = {"x-amz-checksum-mode": "ENABLED"}


def _may_change_objects(method: str, query: list[tuple[str, str]]) -> bool:
    """False for CreateMultipartUpload, UploadPart(Copy) and AbortMultipartUpload."""
    names = {name for name, _ in query}
    if "uploads" in names:
        return False
    return not ("uploadId" in names and method in ("PUT", "DELETE"))


# The shared (L2) form of metadata; "v" lets nodes of different versions share a Redis
# (an entry of an unknown version is a miss).
_META_FORMAT = 1


def _encode_meta(value: ObjectMeta | _Missing) -> bytes:
    if isinstance(value, _Missing):
        return orjson.dumps({"v": _META_FORMAT, "missing": {
            "code": value.code, "message": value.message, "status": value.status, "headers": value.headers}})
    return orjson.dumps({"v": _META_FORMAT, "size": value.size, "etag": value.etag,
                         "last_modified": value.last_modified.isoformat(), "headers": value.headers})


def _decode_meta(payload: bytes) -> ObjectMeta | _Missing | None:
    try:
        data = orjson.loads(payload)
        if data.get("v") != _META_FORMAT:
            return None
        if "missing" in data:
            m = data["missing"]
            return _Missing(str(m["code"]), str(m["message"]), int(m["status"]),
                            tuple((str(n), str(v)) for n, v in m["headers"]))
        return ObjectMeta(size=int(data["size"]), etag=str(data["etag"]),
                          last_modified=datetime.fromisoformat(data["last_modified"]),
                          headers={str(n): str(v) for n, v in data["headers"].items()})
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def meta_from_headers(items: Iterable[tuple[str, str]]) -> ObjectMeta:
    headers: dict[str, str] = {}
    for name, value in items:
        name = name.lower()
        if name in _NOT_OBJECT_HEADERS:
            continue
        headers[name] = value
    try:
        size = int(headers.get("content-length", "0"))
    except ValueError:
        raise S3Error("InternalError", "The origin sent an invalid Content-Length.") from None
    last_modified = _parse_date(headers.get("last-modified"))
    _qualify_composite_checksums(headers)
    return ObjectMeta(size=size, etag=headers.get("etag", ""), last_modified=last_modified, headers=headers)


_NOT_OBJECT_HEADERS = frozenset({
    "connection", "keep-alive", "transfer-encoding", "date", "server", "x-amz-request-id",
    "x-amz-id-2", "content-range", "accept-ranges",
})


def _qualify_composite_checksums(headers: dict[str, str]) -> None:
    """Mark a multipart object's checksum-of-checksums as such (`value-N`, COMPOSITE).

    S3 writes a composite checksum as `value-N`; some origins (moto) answer HEAD with
    the bare value and no type, and SDKs would then check it against the whole body
    and reject a correct download.
    """
    parts = re.fullmatch(r'"?[0-9a-fA-F]+-(\d+)"?', headers.get("etag", ""))
    if parts is None or headers.get("x-amz-checksum-type", "").upper() == "FULL_OBJECT":
        return
    qualified = False
    for name in [n for n in headers if n.startswith("x-amz-checksum-") and n not in _CHECKSUM_SETTINGS]:
        if "-" not in headers[name]:
            headers[name] = f"{headers[name]}-{parts.group(1)}"
            qualified = True
    if qualified:
        headers.setdefault("x-amz-checksum-type", "COMPOSITE")


_CHECKSUM_SETTINGS = frozenset({"x-amz-checksum-type", "x-amz-checksum-mode", "x-amz-checksum-algorithm"})


def _parse_date(value: str | None) -> datetime:
    if value:
        try:
            parsed = parsedate_to_datetime(value)
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)
        except (TypeError, ValueError):
            pass
    return datetime.fromtimestamp(0, timezone.utc)
