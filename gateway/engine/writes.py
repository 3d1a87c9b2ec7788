"""Writes: sent on to the origin, then everything cached that they may have changed is
forgotten on every node before the write is acknowledged; with cache.cache_through the
bytes of an acknowledged PUT fill the cache. Requests the gateway does not interpret are
sent on here too."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Iterable

from gateway.cluster.fleet import Fleet
from gateway.cluster.invalidation import Invalidations
from gateway.config import CacheSettings
from gateway.engine.bucketdocs import BucketDocuments
from gateway.engine.coherence import Coherence
from gateway.engine.fetch import BlockFetcher
from gateway.engine.listings import Listings
from gateway.engine.metadata import Metadata
from gateway.engine.opens import Opens
from gateway.errors import S3Error
from gateway.objects import block_version
from gateway.origin import BodyFactory, Origin, OriginResponse
from gateway.store.blocks import BlockId

_WRITES = frozenset({"PUT", "POST", "DELETE"})


class Forwarded:
    """The origin's answer to a request sent on, when it succeeded (2xx, or 304 to a
    conditional read). `header_items` are its headers as sent (names lower-cased, values
    latin-1 text), `headers` the same as a dict. The caller reads the body (`read`,
    `chunks`) or closes it."""

    __slots__ = ("status", "headers", "header_items", "_response")

    def __init__(self, response: OriginResponse) -> None:
        self._response = response
        self.status = response.status
        self.headers = response.headers
        self.header_items = response.header_items

    async def read(self) -> bytes:
        return await self._response.read()

    def chunks(self) -> AsyncIterator[bytes]:
        return self._response.iter_bytes()

    async def aclose(self) -> None:
        await self._response.aclose()


class Writes:
    """Event loop only."""

    def __init__(self, origin: Origin, coherence: Coherence, metadata: Metadata, listings: Listings,
                 documents: BucketDocuments, *, shared: Invalidations | None = None, fetch: BlockFetcher | None = None,
                 opens: Opens | None = None, cache: CacheSettings | None = None, fleet: Fleet | None = None) -> None:
        self.origin = origin
        self.shared = shared
        self.stats: Counter[str] = Counter()
        self._coherence = coherence
        self._metadata = metadata
        self._listings = listings
        self._documents = documents
        self._fetch = fetch
        self._opens = opens
        self.settings = cache or CacheSettings()
        self._fleet = fleet
        coherence.follow(self.invalidate_local, self.forget_everything)  # another worker's writes

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
        resource: str,
    ) -> Forwarded:
        """Any request sent on to the origin as it is: writes (write-through) and pass-through ops.

        An error answer is raised as the origin's S3Error, naming `resource`. A write
        drops the cached metadata and listings of its key (of the whole bucket when it
        names no key, as DeleteObjects and bucket operations do), whatever the origin
        answered, since a failed write may still have changed something. Uploading
        parts does not change an object until the upload is completed.
        """
        query = list(query)
        try:
            response = await self.origin.send(
                method, bucket, key, query=query, headers=headers, body=body, body_length=body_length
            )
        finally:
            if method in _WRITES and bucket is not None and _may_change_objects(method, query):
                await self.invalidate(bucket, key)
        if response.status >= 300 and response.status != 304:
            raise await self.origin.error_from(response, resource=resource)
        return Forwarded(response)

    async def put_object(self, bucket: str, key: str, *, query: Iterable[tuple[str, str]] = (),
                         headers: dict[str, str], body: BodyFactory, body_length: int, resource: str,
                         personal: bool = False) -> Forwarded:
        """PutObject and UploadPart, written through. An object the origin acknowledged
        fills the cache with the same bytes (cache_written), unless it is a part or
        `personal` (readable only with the writer's own headers, such as SSE-C keys)."""
        query = list(query)
        answer = await self.forward("PUT", bucket, key, query=query, headers=headers, body=body,
                                    body_length=body_length, resource=resource)
        if answer.status == 200 and not personal and all(name != "uploadId" for name, _ in query):
            await self._cache_written(bucket, key, etag=answer.headers.get("etag", ""),
                                     version_id=answer.headers.get("x-amz-version-id"), chunks=body(), size=body_length)
        return answer

    async def complete_upload(self, bucket: str, key: str, upload_id: str, *, query: Iterable[tuple[str, str]],
                              headers: dict[str, str], body: bytes, resource: str) -> Forwarded:
        """CompleteMultipartUpload. Some origins (moto) answer an upload they do not know
        with a 500: a ListParts tells that apart (NoSuchUpload) from a real failure, which
        stays the answer."""
        try:
            return await self.forward("POST", bucket, key, query=query, headers=headers, body=body, resource=resource)
        except S3Error as failure:
            if failure.status < 500:
                raise
            try:
                probe = await self.forward("GET", bucket, key, query=[("uploadId", upload_id), ("max-parts", "1")],
                                           resource=resource)
            except S3Error as unknown:
                if unknown.status == 404:
                    raise unknown from None
                raise failure from None
            await probe.aclose()
            raise

    async def invalidate(self, bucket: str, key: str | None = None) -> None:
        """Forget cached metadata and listings a write to `key` (or to the bucket) may have
        changed: in Redis and on every node when shared, here, and in the node's journal
        for its other workers. Returns once every node applied it or stopped trusting its
        caches (Invalidations.invalidate), so the write may then be acknowledged; the
        other workers of this node forget it before their next lookup (Coherence.catch_up)."""
        self._coherence.invalidated(bucket)  # answers being fetched now are no longer cached
        confirmation = None
        try:
            if self.shared is not None:
                # Shared entries first: a miss here meanwhile must not refill from them.
                confirmation = await self.shared.invalidate(bucket, key)
        finally:
            self.invalidate_local(bucket, key)
            if self._coherence.journal is not None:
                self._coherence.journal.append(bucket, key)
        if confirmation is not None and not await confirmation.wait():
            self.stats["invalidation_unconfirmed"] += 1

    def invalidate_local(self, bucket: str, key: str | None = None) -> None:
        """Forget what this worker cached about `key` (the bucket when None); another node's
        write arrives here through the invalidation channel, another worker's through the
        journal."""
        self._coherence.invalidated(bucket)
        self._metadata.cache.invalidate(bucket, key)
        self._listings.cache.invalidate(bucket, key)
        if key is None:
            self._documents.forget(bucket)
        if self._opens is not None:
            self._opens.forget(bucket, key)

    def purge(self) -> None:
        """Forget every answer this node cached, in every worker (the journal tells the others)."""
        self.forget_everything()
        if self._coherence.journal is not None:
            self._coherence.journal.append_purge()

    def forget_everything(self) -> None:
        """Forget every answer this worker cached (the origin changed wholesale, an operator
        asked, or invalidations from other nodes or workers may have been missed)."""
        self._coherence.purged()
        self._metadata.cache.clear()
        self._listings.cache.clear()
        self._documents.forget()
        if self._opens is not None:
            self._opens.forget()

    async def _cache_written(
        self, bucket: str, key: str, *, etag: str, version_id: str | None, chunks: AsyncIterator[bytes], size: int
    ) -> None:
        """CACHE_THROUGH: the blocks of an object the origin just acknowledged, so a read after
        the write is a hit. Nothing happens unless cache.cache_through is on."""
        if self._fetch is None or not self.settings.cache_through or not etag or size == 0:
            return
        store, block_size = self._fetch.store, self.settings.block_size
        version = block_version(version_id, etag)
        fleet = self._fleet
        # In a fleet, a node keeps the blocks it owns (and others only as passive copies):
        # a block kept anywhere else would never be asked for.
        everything = fleet is None or fleet.settings.passive_cache
        kept = 0

        async def keep(index: int, data: bytes) -> None:
            nonlocal kept
            if everything or fleet.owns(bucket, key, index):  # type: ignore[union-attr]
                await store.put(BlockId(bucket, key, version, index), data)
                kept += 1

        pending, index = bytearray(), 0
        async for piece in chunks:
            pending += piece
            while len(pending) >= block_size:
                await keep(index, bytes(pending[:block_size]))
                del pending[:block_size]
                index += 1
        if pending:
            await keep(index, bytes(pending))
        self.stats["cache_through_blocks"] += kept


def _may_change_objects(method: str, query: list[tuple[str, str]]) -> bool:
    """False for CreateMultipartUpload, UploadPart(Copy) and AbortMultipartUpload."""
    names = {name for name, _ in query}
    if "uploads" in names:
        return False
    return not ("uploadId" in names and method in ("PUT", "DELETE"))
