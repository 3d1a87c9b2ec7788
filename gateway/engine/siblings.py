"""The other workers of this node (gateway.node.workers): a block this worker does not own,
and does not find in its owner's files, is asked of its owner, which fetches it once
however many workers miss it, and keeps it. The same goes for the open of a cold object
(its metadata and first block in one ranged GET): the first block's owner opens it."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Awaitable, Callable

from gateway import log
from gateway.bytebudget import ByteBudget
from gateway.cluster.membership import Member
from gateway.cluster.peers import PeerClient, PeerError, PeerRefused
from gateway.config import CacheSettings, ClusterSettings
from gateway.engine.sources import Ask, Failures, Got, Opened, Part, Unanswered, length_of, opened_from, take_refusal
from gateway.node.workers import WorkerSet
from gateway.objects import ObjectMeta
from gateway.store.blocks import BlockId
from gateway.store.shared import SharedTier
from gateway.store.tiers import TieredStore

# Metadata told the owner worker: the version asked for ("" none: Metadata's key), the shared form, and
# the node's journal's records published when it was fetched (Metadata.told keeps it only if no more were).
Told = tuple[str, bytes, int]


class Siblings:
    """Asking the owner worker: a BlockSource. Event loop only.

    An owner that does not answer (it is being restarted) is skipped: the block comes from
    the fleet's owners or the origin, fetched here and not kept (only the owner keeps it); an
    owner whose origin refused gives this worker the same answer.
    """

    counts_miss = False  # (the owner counts the miss: a block is counted once in the node's figures)

    def __init__(self, workers: WorkerSet, cluster: ClusterSettings, store: TieredStore, settings: CacheSettings,
                 budget: ByteBudget, on_changed: Callable[[str, str], Awaitable[None]]) -> None:
        self.workers = workers
        self.stats: Counter[str] = Counter()
        self._store = store
        self._block_size = settings.block_size
        self._budget = budget
        self._on_changed = on_changed
        # The peer API of each other worker, on its own socket, signed with the node's secret.
        signed = dataclasses.replace(cluster, secret=workers.secret.hex())
        self._clients = {i: PeerClient(signed, max_connections=64, unix_socket=workers.socket_path(i),
                                       counts=self.stats)
                         for i in workers.siblings()}
        self._members = {i: Member(f"worker-{i}", "http://worker") for i in workers.siblings()}
        # With the memory tier shared as files, an owner that keeps a block there is not asked to send it.
        self._in_files = isinstance(store.memory, SharedTier)
        self._failures = Failures(log.engine, self.stats, "worker_failure")

    @property
    def in_files(self) -> bool:
        """Whether the node's memory tier is shared as files: a block lent to its owner goes there."""
        return self._in_files

    def owner(self, bucket: str, key: str, index: int) -> int | None:
        """The worker to ask for the block, or None: this one owns it."""
        owner = self.workers.owner(bucket, key, index)
        return None if owner == self.workers.index else owner

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()

    def asking(self, block: BlockId, meta: ObjectMeta, *, from_peers: bool, replicas: int | None) -> Ask | None:
        """The worker of this node that owns the block, when it is not this one (BlockSource)."""
        owner = self.owner(block.bucket, block.key, block.index)
        return None if owner is None else lambda: self.block(owner, block, meta, from_peers)

    async def block(self, owner: int, block: BlockId, meta: ObjectMeta, from_peers: bool = True) -> Got:
        """The block from the worker that owns it, and how that worker had it (x-cache's word:
        "miss" when it fetched it for this ask); `from_peers`: which may ask the fleet's owners
        (False for what another node asked of this one: never a third node). Unanswered when it
        does not answer."""
        length = length_of(block.index, self._block_size, meta)
        try:
            data = await self._ask_block(owner, block, meta, length, from_peers)
        except PeerRefused as refused:
            await take_refusal(block.bucket, block.key, refused, self._on_changed)
        except PeerError as exc:
            self._failed(owner, exc)
        else:
            self.stats["worker_block_fetch"] += 1
            return data
        self.stats["worker_fallback"] += 1
        raise Unanswered()

    async def part(self, owner: int, block: BlockId, meta: ObjectMeta, lo: int, hi: int) -> Part | None:
        """Bytes of the block holding [lo, hi) (offsets in the block) from the worker that owns it,
        which fetches what its piece lacks once however many workers ask (BlockFetcher.part); None
        when it does not answer within the peer read timeout, or fails (this worker then fetches
        them alone)."""
        length = length_of(block.index, self._block_size, meta)
        try:
            at, data, fetched = await self._clients[owner].part(
                self._members[owner], block.bucket, block.key, meta.etag, meta.version_id, meta.size, block.index,
                length, lo, hi)
        except PeerRefused as refused:
            await take_refusal(block.bucket, block.key, refused, self._on_changed)
            self._failed(owner, refused, "fetching the part here")
            return None
        except PeerError as exc:
            self._failed(owner, exc, "fetching the part here")
            return None
        self.stats["worker_part_fetch"] += 1
        return Part(data, at, "miss" if fetched else "hit-mem")

    async def _ask_block(self, owner: int, block: BlockId, meta: ObjectMeta, length: int, peers: bool) -> Got:
        """The block from its owner, and how it had it: read from the owner's file of the shared
        memory tier when it says it keeps it there (hit-mem, unless it fetched it for this ask),
        else (or when it was evicted meanwhile) through the socket (from its tiers, which are on
        a disk when it does not keep the block in the memory the workers share)."""
        client, member = self._clients[owner], self._members[owner]
        ask = (member, block.bucket, block.key, meta.etag, meta.version_id, meta.size, block.index, length)
        data, fetched = await client.block_or_file(*ask, in_file=self._in_files, peers=peers)
        source = "hit-mem" if data is None or not self._store.disks else "hit-disk"
        if data is None:
            data = self._store.from_shared_memory(block)
            self.stats["worker_block_from_file" if data is not None else "worker_block_file_gone"] += 1
        if data is None:
            data, again = await client.block_or_file(*ask, in_file=False, peers=peers)
            fetched, source = fetched or again, "hit-disk" if self._store.disks else "hit-mem"
        assert data is not None  # asked without in_file: the bytes, or PeerError
        return data, "miss" if fetched else source

    async def open(self, owner: int, bucket: str, key: str, query: list[tuple[str, str]], index: int,
                   from_peers: bool = True) -> Opened | None:
        """`Opens.open_block`, asked of the worker that owns block `index`; Unanswered when it does not
        answer (or its answer was in its file, evicted meanwhile)."""
        version_id = dict(query).get("versionId")
        try:
            answer = await self._clients[owner].open_or_file(self._members[owner], bucket, key, version_id, index,
                                                             self._block_size, budget=self._budget,
                                                             in_file=self._in_files, peers=from_peers)
            if answer is None:
                return None
            opened = opened_from(answer, bucket, key, index, self._block_size, self._store.from_shared_memory)
        except PeerRefused as refused:
            await take_refusal(bucket, key, refused, self._on_changed)
        except PeerError as exc:
            self._failed(owner, exc)
        else:
            if opened is not None:
                self.stats["worker_open"] += 1
                return opened
            self.stats["worker_block_file_gone"] += 1  # in the owner's file, and evicted meanwhile
        self.stats["worker_fallback"] += 1
        raise Unanswered()

    async def open_cached(self, owner: int, bucket: str, key: str, query: list[tuple[str, str]],
                          index: int) -> Opened | None:
        """The metadata and block `index` of an object as the owner worker holds them now, or
        None (it does not, or does not answer): the owner never asks the origin for this."""
        version_id = dict(query).get("versionId")
        in_file = self._in_files
        while True:
            try:
                answer = await self._clients[owner].open_or_file(
                    self._members[owner], bucket, key, version_id, index, self._block_size,
                    budget=self._budget, in_file=in_file, cached=True)
                opened = None if answer is None else \
                    opened_from(answer, bucket, key, index, self._block_size, self._store.from_shared_memory)
            except PeerError as exc:  # PeerRefused included: nothing is asked of the owner's origin
                self._failed(owner, exc, "opening it here")
                return None
            if opened is not None or answer is None or not in_file:
                break
            self.stats["worker_block_file_gone"] += 1  # in its file, and evicted meanwhile: through the socket
            in_file = False
        if opened is None:
            return None
        self.stats["worker_open"] += 1
        meta, first = opened
        first.from_origin = False
        return meta, first

    async def held(self, owner: int, blocks: list[BlockId], meta: ObjectMeta) -> set[int]:
        """Which of `blocks` (of one object version) the owner worker holds now (none when it
        does not answer: they are read from the origin here, and lent to it)."""
        try:
            return await self._clients[owner].held(self._members[owner], blocks[0].bucket, blocks[0].key, meta.etag,
                                                   meta.version_id, meta.size, [block.index for block in blocks])
        except PeerError as exc:
            self._failed(owner, exc, "reading its blocks from the origin here")
            return set()

    async def give(self, owner: int, block: BlockId, meta: ObjectMeta, giver: int | None = None,
                   node: str = "", *, told: Told | None = None, in_file: bool = False) -> bool:
        """Tell the owner worker to take a block this worker lends it (engine.lending; `in_file`:
        written to its file of the node's shared memory tier, else offered), or (`node`) one that
        worker `giver` of that node of the fleet offered this node; with the metadata `told` (see
        `tell_meta`) in the same request. False when it could not be told (it will not take it)."""
        try:
            await self._clients[owner].take(self._members[owner], block.bucket, block.key, meta.etag,
                                            meta.version_id, meta.size, block.index,
                                            self.workers.index if giver is None else giver, node,
                                            told=told, in_file=in_file)
        except PeerError as exc:
            self._failed(owner, exc, "its block not kept")
            return False
        if told is not None:
            self.stats["worker_meta_told"] += 1
        return True

    async def lent(self, giver: int, block: BlockId, meta: ObjectMeta) -> bytes | None:
        """The block worker `giver` lends this one, or None when it is gone."""
        try:
            return await self._clients[giver].lent(self._members[giver], block.bucket, block.key, meta.etag,
                                                   meta.version_id, meta.size, block.index,
                                                   length_of(block.index, self._block_size, meta))
        except PeerError as exc:
            self._failed(giver, exc, "the block it lent not kept")
            return None

    def _failed(self, owner: int, exc: Exception, instead: str = "asking the fleet's owners or the origin") -> None:
        self._failures.failed(f"worker {owner}", exc, instead)

    # Without Redis, the node's workers share object metadata and listing pages this way: a worker
    # that misses asks the owner (of the object's first block; of the listing's parameters), which
    # answers from its cache or asks its origin once, and keeps the answer.

    def listing_owner(self, bucket: str, prefix: str, params: tuple[tuple[str, str], ...]) -> int | None:
        """The worker that keeps the listing page of these parameters, or None: this one."""
        name = "\0".join((prefix, *(f"{k}={v}" for k, v in params)))
        return self.owner(bucket, name, 0)

    async def meta(self, owner: int, bucket: str, key: str, version_id: str, checksums: bool,
                   cached: bool = False) -> tuple[bytes, float] | None:
        """(the metadata in the shared form, its age) as the owner worker knows it or asks its origin
        (`cached`: knows it, never its origin); None when it does not answer (or does not know it).
        Raises the S3Error its origin gave (not a 404: that is metadata)."""
        try:
            answer = await self._clients[owner].meta(self._members[owner], bucket, key, version_id or None,
                                                     checksums=checksums, cached=cached)
        except PeerRefused as refused:
            raise refused.error from None
        except PeerError as exc:
            self._failed(owner, exc, "asking the origin here")
            return None
        if answer is not None:
            self.stats["worker_meta"] += 1
        return answer

    async def tell_meta(self, owner: int, bucket: str, key: str, version_id: str, meta: bytes, published: int) -> None:
        """Tell the owner worker the metadata this worker's origin answered (PeerClient.tell_meta)."""
        try:
            await self._clients[owner].tell_meta(self._members[owner], bucket, key, version_id or None, meta, published)
        except PeerError as exc:
            self._failed(owner, exc, "the owner not told")
            return
        self.stats["worker_meta_told"] += 1

    async def listing(self, owner: int, bucket: str, query: list[tuple[str, str]]) -> tuple[bytes, float] | None:
        """(the listing body, its age) as the owner worker holds it or asks its origin; None when it
        does not answer. Raises the S3Error its origin gave."""
        try:
            answer = await self._clients[owner].listing(self._members[owner], bucket, query)
        except PeerRefused as refused:
            raise refused.error from None
        except PeerError as exc:
            self._failed(owner, exc, "asking the origin here")
            return None
        self.stats["worker_listing"] += 1
        return answer
