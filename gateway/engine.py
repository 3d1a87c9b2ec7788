"""The read and write paths: object metadata, object bytes, listings, write-through.

Object metadata and listings are cached in process (store.meta, the L1) and, when
Redis is configured, shared by the nodes (cluster.shared, the L2); object bytes come
from the block cache (blockreads.py over store) or the origin. `s3api` never talks to
the origin itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter, OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from gateway import log
from gateway.blockreads import BlockReader, FirstBlock, ObjectRead
from gateway.cluster.fleet import Fleet
from gateway.cluster.replication import Change
from gateway.cluster.shared import SharedMetadata
from gateway.config import CacheSettings, ListingSettings, MetadataSettings
from gateway.errors import S3Error
from gateway.objects import Missing, ObjectChanged, ObjectMeta, decode_meta, encode_meta, meta_from_headers
from gateway.origin import BodyFactory, Origin, OriginResponse, error_for_status
from gateway.store.meta import ListingCache, ListingKey, MetadataCache, MetaKey
from gateway.store.tiers import TieredStore

__all__ = ["Engine", "ObjectChanged", "ObjectHead", "ObjectMeta", "ObjectRead", "OriginResponse", "meta_from_headers"]


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
        fleet: Fleet | None = None,
    ) -> None:
        self.origin = origin
        self.store = store
        self.shared = shared
        self.settings = metadata
        self.listing_settings = listing
        self.meta_cache: MetadataCache[_Known] = MetadataCache(
            metadata.max_entries, ttl=metadata.ttl, negative_ttl=metadata.negative_ttl)
        self.listing_cache: ListingCache[_Page] = ListingCache(listing.max_entries, ttl=listing.ttl)
        self.stats: Counter[str] = Counter()
        # Objects whose replica count changed, to fill (True) or drop (False), in order.
        self._rebalancing: OrderedDict[tuple[str, str], bool] = OrderedDict()
        self._rebalancer: asyncio.Task[None] | None = None
        self.reads = BlockReader(origin, store, cache or CacheSettings(), self.stats, self.invalidate, fleet=fleet)
        self.read_object = self.reads.read_object
        self.cache_written = self.reads.cache_written
        self._epochs: Counter[str] = Counter()  # per bucket: invalidations so far
        self._purges = 0
        # Metadata fetches in flight, shared by the readers that missed at the same time.
        self._flights: dict[tuple[MetaKey, int, tuple[int, int]], asyncio.Future[ObjectHead]] = {}

    async def aclose(self) -> None:
        if self._rebalancer is not None:
            self._rebalancer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._rebalancer
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
        checksums: bool = False,
        read_from: int | None = None,
    ) -> ObjectHead:
        """Metadata of one object (version); raises S3Error (NoSuchKey, NoSuchBucket, ...).

        `headers` are the client's object-read headers (encryption keys, payer, ...);
        a request carrying any of them bypasses the cache, since its answer is its own.
        `checksums`: the answer must include the object's checksums. `read_from`: the
        caller will read the object from this byte on; when the metadata has to come
        from the origin, one ranged GET then brings it and the first block together.
        """
        query = [("versionId", version_id)] if version_id else []
        if headers:
            return ObjectHead(await self._fetch_meta(bucket, key, query, headers))
        cache_key = (bucket, key, version_id or "")
        epoch = self._epoch(bucket)
        found = self._meta_from_l1(cache_key)
        if found is not None and self._usable(found, checksums):
            self.stats["meta_hit"] += 1
            return ObjectHead(self._answer(found[0]), from_memory=True)
        # L1 missed or is past its TTL: another node may have a fresh answer. (Strict
        # mode asks the origin about every positive entry anyway.)
        if self.shared is not None and (found is None or found[0].missing or not self.settings.strict):
            shared = await self._meta_from_l2(cache_key)
            if shared is not None:
                known = shared[0]
                if self._epoch(bucket) == epoch:
                    self.meta_cache.put(cache_key, known, missing=known.missing)
                if self._usable(shared, checksums):
                    self.stats["meta_l2_hit"] += 1
                    return ObjectHead(self._answer(known), from_memory=True)
                found = shared
        if found is None or found[0].missing or (checksums and not found[0].complete):
            self.stats["meta_miss"] += 1
            if read_from is None or checksums or self.store is None:
                read_from = None
            # One origin request however many readers miss at once: they share the flight
            # until its answer is cached. (Not across an invalidation: a read that started
            # after a write must not get an answer asked for before it.)
            block = -1 if read_from is None else read_from // self.reads.cache_settings.block_size
            flight = (cache_key, block, epoch)
            if self._deaf():  # another node's write may have come unheard since a flight began
                return await self._fetch_missing(flight, query, read_from)
            task = self._flights.get(flight)
            if task is None:
                task = asyncio.ensure_future(self._fetch_missing(flight, query, read_from))
                self._flights[flight] = task
            else:
                self.stats["meta_miss_shared"] += 1
            return await asyncio.shield(task)
        meta = found[0].value
        assert isinstance(meta, ObjectMeta)
        return ObjectHead(await self._revalidate(cache_key, query, meta, found[1], epoch))

    async def _fetch_missing(self, flight: tuple[MetaKey, int, tuple[int, int]], query: list[tuple[str, str]],
                             read_from: int | None) -> ObjectHead:
        """Metadata the caches do not have, from the origin, cached before the flight ends."""
        cache_key, _, epoch = flight
        try:
            if read_from is not None:
                opened = await self._open(cache_key, query, read_from, epoch)
                if opened is not None:
                    return opened
            return ObjectHead(await self._fetch_and_cache(cache_key, query, epoch))
        finally:
            if self._flights.get(flight) is asyncio.current_task():
                del self._flights[flight]

    async def _open(self, cache_key: MetaKey, query: list[tuple[str, str]], read_from: int,
                    epoch: tuple[int, int]) -> ObjectHead | None:
        """The metadata and the first block of a cold read from one ranged GET (see
        BlockReader.open); None when a HEAD must be asked instead."""
        try:
            opened = await self.reads.open(cache_key[0], cache_key[1], query, read_from)
        except S3Error as error:
            if error.status == 404:
                await self._remember(cache_key, Missing.of(error), epoch)
            raise
        if opened is None:
            return None
        meta, first = opened
        self.stats["meta_opened_with_get"] += 1
        await self._remember(cache_key, meta, epoch)
        return ObjectHead(meta, first=first)

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
        value = decode_meta(payload)
        if value is None:  # written by another version of the gateway: a miss
            return None
        return _Known(value, head_start=age), age

    def _deaf(self) -> bool:
        """Shared, but not known to have heard every invalidation acknowledged writes sent
        (Redis down or hung, not yet subscribed again, or the listener behind: see
        SharedMetadata.listening): another node's write may have gone unheard, so nothing
        cached is answered without asking the origin until the channel is back (after a
        new subscription the caches were purged, `on_resync`)."""
        return self.shared is not None and not self.shared.listening()

    def _usable(self, found: tuple[_Known, float], checksums: bool = False) -> bool:
        """Whether an entry of this age may be answered without asking the origin."""
        if self._deaf():
            return False
        known, age = found
        if known.missing:
            return age <= self.settings.negative_ttl
        return age <= self.settings.ttl and not self.settings.strict and (known.complete or not checksums)

    @staticmethod
    def _answer(known: _Known) -> ObjectMeta:
        if isinstance(known.value, Missing):
            raise known.value.error()
        return known.value

    async def _remember(self, cache_key: MetaKey, value: ObjectMeta | Missing, epoch: tuple[int, int]) -> None:
        """Cache an answer the origin just gave, here and in the shared level."""
        if self._epoch(cache_key[0]) != epoch:
            self.stats["meta_not_cached_raced"] += 1
            return
        missing = isinstance(value, Missing)
        self.meta_cache.put(cache_key, _Known(value), missing=missing)
        if self.shared is not None:
            await self.shared.put_meta(cache_key, encode_meta(value),
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
            meta = meta_from_headers(response.header_items)
            await self._remember(cache_key, meta, epoch)
            return meta
        await response.aclose()
        error = await self._explain(bucket, key, query, _META_HEADERS, response.status)
        if error.status == 404:
            await self._remember(cache_key, Missing.of(error), epoch)
        raise error

    async def _fetch_meta(self, bucket: str, key: str, query: list[tuple[str, str]], headers: dict[str, str]) -> ObjectMeta:
        response = await self.origin.send("HEAD", bucket, key, query=query, headers=headers)
        if response.status >= 300:
            await response.aclose()
            raise await self._explain(bucket, key, query, headers, response.status)
        await response.aclose()
        return meta_from_headers(response.header_items)

    async def _explain(self, bucket: str, key: str, query: list[tuple[str, str]], headers: dict[str, str], status: int) -> S3Error:
        """A HEAD error has no body (NoSuchKey and NoSuchBucket look alike): ask with a GET."""
        resource = f"/{bucket}/{key}"
        if status < 400:
            return S3Error("PreconditionFailed" if status == 412 else "InternalError", status=status, resource=resource)
        response = await self.origin.send("GET", bucket, key, query=query, headers=dict(headers, range="bytes=0-0"))
        if response.status == status:
            return await self.origin.error_from(response, resource=resource)
        # The GET was answered otherwise (the object appeared meanwhile, or an origin refuses a
        # HEAD it serves as a GET, as moto does with ?versionId=null): the HEAD's own error is
        # the answer, never one of the gateway's making.
        await response.aclose()
        return error_for_status(status, resource)

    async def list_objects(self, bucket: str, query: list[tuple[str, str]]) -> bytes:
        """An origin listing body for exactly these parameters, from the listing cache while fresh."""
        params = dict(query)
        cache_key: ListingKey = (bucket, params.pop("prefix", ""), tuple(sorted(params.items())))
        page = self.listing_cache.get(cache_key)
        if page is not None and time.monotonic() < page.expires and not self._deaf():
            self.stats["list_hit"] += 1
            return page.body
        epoch = self._epoch(bucket)
        ttl = self.listing_settings.ttl
        if self.shared is not None:
            shared = await self.shared.get_listing(cache_key)
            if shared is not None and not self._deaf():  # deaf: maybe from before an unheard write
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
        changed: in Redis and on every node when shared, and here. Returns once every
        node applied it or stopped trusting its caches (SharedMetadata.invalidate), so the
        write may then be acknowledged."""
        self._epochs[bucket] += 1  # answers being fetched now are no longer cached
        confirmation = None
        try:
            if self.shared is not None:
                # Shared entries first: a miss here meanwhile must not refill from them.
                confirmation = await self.shared.invalidate(bucket, key)
        finally:
            self.invalidate_local(bucket, key)
        if confirmation is not None and not await confirmation.wait():
            self.stats["invalidation_unconfirmed"] += 1

    def invalidate_local(self, bucket: str, key: str | None = None) -> None:
        """Forget what this node cached about `key` (the bucket when None); another node's
        write arrives here through the invalidation channel."""
        self._epochs[bucket] += 1
        self.meta_cache.invalidate(bucket, key)
        self.listing_cache.invalidate(bucket, key)
        self.reads.forget_opens(bucket, key)

    async def rebalance(self, changes: Iterable[Change]) -> None:
        """Replica counts changed (the replication controller): in the background, one
        object after another, fill the blocks this node now owns and drop those it no
        longer owns."""
        for change in changes:
            self._rebalancing[change.name] = change.now > change.was  # the latest change wins
            self._rebalancing.move_to_end(change.name)
        if self._rebalancing and (self._rebalancer is None or self._rebalancer.done()):
            self._rebalancer = asyncio.create_task(self._rebalance(), name="gateway-replica-rebalance")

    async def _rebalance(self) -> None:
        while self._rebalancing:
            (bucket, key), raised = self._rebalancing.popitem(last=False)
            try:
                head = await self.head_object(bucket, key)
                if raised:
                    await self.reads.hold(bucket, key, head.meta)
                else:
                    await self.reads.drop_unowned(bucket, key, head.meta)
            except S3Error as err:  # gone, or the origin failing: the next change tries again
                log.cluster.info("replicas of /%s/%s not changed: %s", bucket, key, err.code)
            except Exception:  # one object must not stop the others
                log.cluster.exception("replicas of /%s/%s not changed", bucket, key)

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
        self.reads.forget_opens()

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
class _Known:
    """An L1 metadata entry: the answer, and the age it already had when this node
    learnt it from the shared level (so it is not fresh for longer than anywhere else)."""

    value: ObjectMeta | Missing
    head_start: float = 0.0

    @property
    def missing(self) -> bool:
        return isinstance(self.value, Missing)

    @property
    def complete(self) -> bool:
        return isinstance(self.value, Missing) or self.value.complete


@dataclass(frozen=True, slots=True)
class ObjectHead:
    """What `head_object` found: the metadata, whether it came from memory without asking
    the origin, and the first block of the read when one GET brought both."""

    meta: ObjectMeta
    from_memory: bool = False
    first: FirstBlock | None = None


@dataclass(frozen=True, slots=True)
class _Page:
    """An L1 listing page and when it stops being fresh (time.monotonic)."""

    body: bytes
    expires: float


_WRITES = frozenset({"PUT", "POST", "DELETE"})
# Metadata is always asked for with its checksums, so one cached entry serves every
# client; the handler shows checksums only to clients that asked for them.
_META_HEADERS = {"x-amz-checksum-mode": "ENABLED"}


def _may_change_objects(method: str, query: list[tuple[str, str]]) -> bool:
    """False for CreateMultipartUpload, UploadPart(Copy) and AbortMultipartUpload."""
    names = {name for name, _ in query}
    if "uploads" in names:
        return False
    return not ("uploadId" in names and method in ("PUT", "DELETE"))


