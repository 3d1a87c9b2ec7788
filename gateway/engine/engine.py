"""The engine of one node: its parts wired together, and the questions s3api, the admin API
and the peer API ask of it. Each step of a request has its own module:

    metadata  object metadata: L1, Redis L2, revalidation, remembered 404s
    listings  listing pages: L1, Redis L2
    reads     a range of bytes: blocks, read buffer, readahead, streaming
    fetch     a block (single-flight; from the tiers, the owners or the origin); runs
    opens     a cold open: metadata and first bytes from one GET
    holders   which of a read's blocks their owners hold, asked before its answer starts
    lending   blocks a run brought offered to their owners (another worker, another node)
    sources   where a block not held here comes from before the origin, one protocol:
    siblings  this node's other workers, asked for the blocks they own
    peers     the fleet's other nodes, asked for the blocks they own
    serving   what other nodes and workers ask of this one
    replicas  this node's share of hot objects filled and dropped; loads spread over owners
    writes    forward to the origin, invalidate everywhere, cache-through
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from gateway.bytebudget import ByteBudget
from gateway.cluster.fleet import Fleet
from gateway.cluster.peers import OpenAnswer, PeerRefused
from gateway.cluster.replication import Change
from gateway.cluster.shared import Shared
from gateway.config import CacheSettings, ClusterSettings, ListingSettings, MetadataSettings
from gateway.engine.bucketdocs import BucketDocuments
from gateway.engine.coherence import Coherence
from gateway.engine.fetch import BlockFetcher
from gateway.engine.listings import Listings
from gateway.engine.metadata import Metadata, ObjectHead
from gateway.engine.opens import Opens
from gateway.engine.peers import Peers
from gateway.engine.objectread import ObjectRead
from gateway.engine.reads import OneBlock, Reads
from gateway.engine.replicas import Replicas
from gateway.engine.runs import Run, Want
from gateway.engine.serving import Serving
from gateway.engine.siblings import Siblings
from gateway.engine.writes import Writes
from gateway.errors import S3Error
from gateway.heat import HeatCounter
from gateway.node.journal import Journal
from gateway.node.workers import WorkerSet
from gateway.objects import ObjectChanged, ObjectMeta
from gateway.origin import Origin
from gateway.store.meta import MetadataCache
from gateway.store.tiers import TieredStore


R = TypeVar("R")


class OpenObject:
    """An object described and ready to be read: its metadata, whether that came from
    memory, and `read` of exactly the version the metadata describes (with the block a
    cold open brought along in hand). An S3 GET's read counts as a hit of the object once it
    was answered (Engine.answered); HEADs and loads do not count."""

    __slots__ = ("meta", "from_memory", "_head", "_reads", "_bucket", "_key", "_headers")

    def __init__(self, head: ObjectHead, reads: Reads, bucket: str, key: str, headers: dict[str, str] | None) -> None:
        self.meta = head.meta
        self.from_memory = head.from_memory
        self._head, self._reads, self._bucket, self._key, self._headers = head, reads, bucket, key, headers

    async def read(self, start: int | None = None, end: int | None = None) -> ObjectRead:
        """The bytes [start, end] (inclusive; the whole object when None): see Reads.read_object."""
        return await self._reads.read_object(self._bucket, self._key, self.meta, start=start, end=end,
                                             headers=self._headers, first=self._head.first)

    async def aclose(self) -> None:
        """Done with the object: a run the cold open started and no read took is stopped."""
        first = self._head.first
        if isinstance(first, Run) and first.claim():
            await first.aclose()


class Engine:
    """Reads and writes on behalf of authorised S3 requests (see the module docstring).

    Without a block cache (`store` None) bytes come from the origin; without a fleet
    there are no peers and no replicas.
    """

    def __init__(
        self,
        origin: Origin,
        metadata: MetadataSettings,
        listing: ListingSettings,
        *,
        store: TieredStore | None = None,
        cache: CacheSettings | None = None,
        shared: Shared | None = None,
        fleet: Fleet | None = None,
        heat: HeatCounter | None = None,
        workers: WorkerSet | None = None,
        cluster: ClusterSettings | None = None,
        journal: Journal | None = None,
    ) -> None:
        cache = cache or CacheSettings()
        self.origin = origin
        self.store = store
        self.shared = shared
        self.fleet = fleet
        self.heat = heat if heat is not None else HeatCounter()  # GETs answered per object (`answered`)
        self.budget = ByteBudget(cache.read_buffer)
        level2 = shared.level2 if shared is not None else None
        invalidation = shared.invalidation if shared is not None else None
        self.journal = journal  # the node's invalidation journal, with several workers
        coherence = Coherence(invalidation, journal)
        # The block sources, built before the fetcher that asks them (in their order: engine.fetch).
        self.siblings = None if store is None or workers is None or workers.alone else \
            Siblings(workers, cluster or ClusterSettings(), store, cache, self.budget, self.invalidate)
        self.peers = None if store is None or fleet is None else Peers(fleet, store, cache, self.budget, self.invalidate)
        self.fetch = None if store is None else BlockFetcher(origin, store, cache, self.budget, self.invalidate,
                                                              fleet=fleet, coherence=coherence,
                                                              siblings=self.siblings, peers=self.peers)
        self.opens = None if self.fetch is None else Opens(self.fetch, coherence)
        self.metadata = Metadata(origin, metadata, coherence, shared=level2, fetch=self.fetch, opens=self.opens)
        self.listings = Listings(origin, listing, coherence, shared=level2, siblings=self.siblings)
        self.bucket_documents = BucketDocuments(origin, ttl=metadata.ttl, error_ttl=metadata.negative_ttl)
        self.reads = Reads(origin, self.fetch, cache, self.budget, self.invalidate)
        self.writes = Writes(origin, coherence, self.metadata, self.listings, self.bucket_documents,
                             shared=invalidation, fetch=self.fetch, opens=self.opens, cache=cache, fleet=fleet)
        self.replicas = None if self.fetch is None or self.peers is None or fleet is None else \
            Replicas(fleet, self.fetch, self.peers, self._describe)
        # What peers and workers ask here.
        self.serving = None if self.opens is None else \
            Serving(self.opens, self.metadata.fresh_aged, self._head_meta,
                    hold=None if self.replicas is None else self.replicas.hold)
        self.head_object = self.metadata.head_object
        self.bucket_exists = self.bucket_documents.note_exists  # a known user's request succeeded on it
        # Asked without an await by the hit path and kept requests (s3api.hits, replays); they count
        # nothing but the block hit: the answer made of them is counted by `answered`.
        self.fresh_now = self.metadata.fresh_now
        self.one_block = self.reads.one_block
        self.read_block_now = self.reads.read_block_now
        self.list_objects = self.listings.list_objects
        self.forward = self.writes.forward
        self.put_object = self.writes.put_object
        self.complete_upload = self.writes.complete_upload
        self.invalidate_local = self.writes.invalidate_local

    @property
    def stats(self) -> Counter[str]:
        """Every part's counters together (each part keeps its own)."""
        total: Counter[str] = Counter()
        for part in (self.fetch, self.metadata, self.listings, self.writes, self.peers, self.replicas, self.siblings,
                     self.journal, self.bucket_documents):
            if part is not None:
                total.update(part.stats)
        return total

    @property
    def meta_cache(self) -> MetadataCache[object]:
        return self.metadata.cache  # type: ignore[return-value]

    async def aclose(self) -> None:
        if self.replicas is not None:
            await self.replicas.aclose()
        if self.siblings is not None:
            await self.siblings.aclose()
        await self.origin.aclose()
        if self.store is not None:
            await self.store.aclose()
        if self.shared is not None:
            await self.shared.aclose()
        if self.journal is not None:
            self.journal.close()

    async def invalidate(self, bucket: str, key: str | None = None) -> None:
        """Forget what a write to `key` (the bucket when None) may have changed, on every node."""
        await self.writes.invalidate(bucket, key)

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
        await self.invalidate(bucket, prefix if exact else None)
        return 0 if self.store is None else await self.store.evict_prefix(bucket, prefix)

    def purge(self) -> None:
        """Forget every answer this node cached, in every worker (the origin changed
        wholesale, an operator asked)."""
        self.writes.purge()

    def forget_here(self) -> None:
        """Forget every answer this worker cached: invalidations from other nodes may have been
        missed on its own subscription (the other workers listen on theirs)."""
        self.writes.forget_everything()

    async def open_object(self, bucket: str, key: str, *, version_id: str | None = None,
                          headers: dict[str, str] | None = None, checksums: bool = False,
                          want: Want | None = None, reopen: bool = False) -> OpenObject:
        """An object's metadata, ready to read: see Metadata.head_object for the arguments. The
        caller closes it (`aclose`) when it read what it reads, or decided not to."""
        head = await self.metadata.head_object(bucket, key, version_id=version_id, headers=headers,
                                               checksums=checksums, want=want, reopen=reopen)
        return OpenObject(head, self.reads, bucket, key, headers)

    async def get_object(self, bucket: str, key: str, answer: Callable[[OpenObject], Awaitable[R]], *,
                         version_id: str | None = None, headers: dict[str, str] | None = None,
                         checksums: bool = False, want: Want | None = None) -> R:
        """`answer(opened)` for the object as it is now: when the metadata turns out to
        describe a version the origin no longer holds (the object changed behind the
        gateway), the stale entry is already dropped, so one more open describes the
        current version and `answer` runs again on it: with its bytes from the same origin answer
        as its metadata where it can (Metadata.head_object's `reopen`), so that an object changed
        again meanwhile does not fail the read."""
        for attempt in (1, 2):
            opened = await self.open_object(bucket, key, version_id=version_id, headers=headers,
                                            checksums=checksums, want=want, reopen=attempt == 2)
            try:
                return await answer(opened)
            except ObjectChanged:
                if attempt == 2:
                    raise
            finally:
                await opened.aclose()
        raise AssertionError("unreachable")

    # --- hits answered without an await (the hit path below ASGI) -----------------------

    def peer_owns(self, read: OneBlock) -> bool:
        """Whether another node of the fleet owns the block of `read` (read_block asks it)."""
        fetch = self.reads.fetch
        block = read.block
        return fetch is not None and fetch.route(block.bucket, block.key, block.index) is not None

    async def read_block(self, read: OneBlock, meta: ObjectMeta) -> ObjectRead:
        """The bytes of a range one_block found, in hand, from wherever they are (Reads.read_object).
        The hit path asks this way for a block another node owns; the answer made of it is
        counted by `answered`."""
        block = read.block
        return await self.reads.read_object(block.bucket, block.key, meta, start=read.start, end=read.end)

    async def bucket_cors(self, bucket: str, *, known: bool = True) -> bytes | None:
        """The bucket's CORS configuration document as the origin has it, None when it has none
        (kept a while: engine.bucketdocs); raises the origin's S3Error when it cannot be read.
        `known` False: nobody vouches for the name (a preflight's, with a user who may reach any
        bucket), so asking the origin for it is rate-limited (SlowDown) and kept apart."""
        return await self.bucket_documents.get(bucket, "cors", known=known)

    def bucket_cors_now(self, bucket: str) -> tuple[bool, bytes | None]:
        """(True, what bucket_cors would answer) when that is in memory; (False, None) when it is not."""
        return self.bucket_documents.get_now(bucket, "cors")

    def answered(self, bucket: str, key: str, read: bool, from_fresh_now: bool) -> None:
        """The engine's books of a GET or HEAD of an object answered, kept by
        s3api.accounting.Accounts.record whichever way the answer was made: one more hit of the
        object when its bytes were `read` (a GET answered 200 or 206); the metadata hit of an
        answer made from fresh_now's metadata (below ASGI), which counts nothing itself
        (head_object, the app's way, counts its own)."""
        if from_fresh_now:
            self.metadata.stats["meta_hit"] += 1
        if read:
            self.heat.hit(bucket, key)

    # --- the fleet ---------------------------------------------------------------------

    async def rebalance(self, changes: Iterable[Change]) -> None:
        """Replica counts changed (the replication controller): see Replicas.rebalance."""
        if self.replicas is not None:
            self.replicas.rebalance(changes)

    async def spread(self, bucket: str, key: str, meta: ObjectMeta, *, replicas: int | None = None) -> None:
        """A load in a fleet: see Replicas.spread."""
        assert self.replicas is not None
        await self.replicas.spread(bucket, key, meta, replicas=replicas)

    async def serve_block(self, bucket: str, key: str, etag: str, version_id: str, size: int, index: int,
                          peers: bool, in_file: bool) -> tuple[bytes | None, bool]:
        return await self._serving().serve_block(bucket, key, etag, version_id, size, index, peers, in_file)

    async def serve_part(self, bucket: str, key: str, etag: str, version_id: str, size: int, index: int,
                         lo: int, hi: int) -> tuple[int, bytes, bool]:
        return await self._serving().serve_part(bucket, key, etag, version_id, size, index, lo, hi)

    def serve_block_now(self, bucket: str, key: str, etag: str, version_id: str, size: int,
                        index: int) -> bytes | memoryview | None:
        return self._serving().serve_block_now(bucket, key, etag, version_id, size, index)

    async def serve_open(self, bucket: str, key: str, version_id: str, index: int, peers: bool,
                         in_file: bool, cached: bool = False) -> OpenAnswer | None:
        return await self._serving().serve_open(bucket, key, version_id, index, peers, in_file, cached)

    async def serve_take(self, bucket: str, key: str, etag: str, version_id: str, size: int, index: int,
                         giver: int, node: str, in_file: bool = False) -> None:
        await self._serving().serve_take(bucket, key, etag, version_id, size, index, giver, node, in_file)

    async def serve_lent(self, bucket: str, key: str, etag: str, version_id: str, size: int, index: int,
                         worker: int | None) -> bytes | None:
        return await self._serving().serve_lent(bucket, key, etag, version_id, size, index, worker)

    async def serve_held(self, bucket: str, key: str, etag: str, version_id: str, size: int, indexes: list[int],
                         sibling: bool) -> set[int]:
        return await self._serving().serve_held(bucket, key, etag, version_id, size, indexes, sibling)

    def serve_held_now(self, bucket: str, key: str, etag: str, version_id: str, size: int, indexes: list[int],
                       sibling: bool) -> set[int] | None:
        return self._serving().serve_held_now(bucket, key, etag, version_id, size, indexes, sibling)

    async def serve_hold(self, bucket: str, key: str, etag: str, version_id: str, size: int, replicas: int) -> int:
        return await self._serving().serve_hold(bucket, key, etag, version_id, size, replicas)

    async def serve_meta(self, bucket: str, key: str, version_id: str, checksums: bool,
                         cached: bool) -> tuple[bytes, float] | None:
        """Another worker of this node asks about an object whose first block this one owns."""
        try:
            return await self.metadata.answer_worker(bucket, key, version_id, checksums, cached)
        except S3Error as exc:
            raise PeerRefused(exc, changed=False) from exc

    async def serve_listing(self, bucket: str, query: list[tuple[str, str]]) -> tuple[bytes, float]:
        """Another worker of this node asks for a listing page this one owns."""
        try:
            return await self.listings.answer_worker(bucket, query)
        except S3Error as exc:
            raise PeerRefused(exc, changed=False) from exc

    def _serving(self) -> Serving:
        if self.serving is None:
            raise LookupError("no block cache")  # the peer API answers that it holds nothing
        return self.serving

    async def _describe(self, bucket: str, key: str) -> ObjectMeta:
        return (await self.metadata.head_object(bucket, key)).meta

    async def _head_meta(self, bucket: str, key: str, version_id: str | None) -> ObjectMeta:
        return (await self.metadata.head_object(bucket, key, version_id=version_id)).meta


