"""Blocks into the cache: from a tier, else fetched once however many readers wait, from
the block's owners in a fleet (gateway.engine.peers) or from the origin; and the open of a
cold object, whose metadata and first block come from one ranged GET."""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from gateway import log
from gateway.bytebudget import ByteBudget
from gateway.cluster.fleet import Fleet, Route
from gateway.config import CacheSettings
from gateway.engine.coherence import Coherence, Epoch
from gateway.engine.flight import SingleFlight
from gateway.errors import S3Error
from gateway.objects import ObjectChanged, ObjectMeta, meta_from_ranged_get
from gateway.origin import Origin
from gateway.store.blocks import BlockId, block_bounds
from gateway.store.tiers import TieredStore

if TYPE_CHECKING:
    from gateway.engine.peers import Peers
    from gateway.engine.siblings import Siblings

# Opens a fleet node remembers for a moment (see BlockFetcher._open_here): how many, how long.
_RECENT_OPENS = 1024
_RECENT_OPEN = 2.0


class FirstBlock:
    """A block that came together with the object's metadata, in hand: from one ranged GET of
    the origin (`from_origin`, a cold read), or from a cache, when an open another worker or
    node just did answers this one too (x-cache then says hit, not miss)."""

    __slots__ = ("block", "data", "from_origin")

    def __init__(self, block: BlockId, data: bytes, *, from_origin: bool) -> None:
        self.block = block
        self.data = data
        self.from_origin = from_origin


Opened = tuple[ObjectMeta, FirstBlock]


class BlockFetcher:
    """Blocks of exact object versions, for reads, replicas and peers. Event loop only.

    `on_changed(bucket, key)` is called when the origin no longer holds the version a
    fetch was for (its If-Match failed), before ObjectChanged is raised.

    With a fleet (and `peers` set), a block this node does not own first is asked of its
    owners in rendezvous order, once however many wait; a peer that fails is skipped, and
    when none answers the block comes from the origin after all. Blocks asked for by peers
    come from the tiers or the origin, never from another peer (`from_peers=False`), so two
    nodes whose views differ for a moment cannot ask each other in a circle.
    """

    def __init__(self, origin: Origin, store: TieredStore, settings: CacheSettings, budget: ByteBudget,
                 on_changed: Callable[[str, str], Awaitable[None]], *, fleet: Fleet | None = None,
                 coherence: Coherence | None = None) -> None:
        self.origin = origin
        self.store = store
        self.settings = settings
        self.budget = budget
        self.fleet = fleet
        self.peers: Peers | None = None  # set by the engine when there is a fleet
        self.siblings: Siblings | None = None  # set by the engine when the node has other workers
        self.stats: Counter[str] = Counter()
        self._on_changed = on_changed
        self._coherence = coherence if coherence is not None else Coherence(None)
        self._from_origin: SingleFlight[str, bytes] = SingleFlight()
        self._from_peers: SingleFlight[str, bytes] = SingleFlight()
        # Opens under way, by block and the bucket's epoch: an open asked for after a write
        # (this worker's, or another's read from the journal) does not join one begun before it.
        self._opening: SingleFlight[tuple[str, Epoch], Opened | None] = SingleFlight()
        self._peer_opening: SingleFlight[tuple[str, Epoch], Opened | None] = SingleFlight()
        self._background: set[asyncio.Future[bytes]] = set()
        self._recent_opens: OrderedDict[str, tuple[ObjectMeta, BlockId, float]] = OrderedDict()

    # --- blocks ------------------------------------------------------------------------

    async def block(self, block: BlockId, meta: ObjectMeta, *, from_peers: bool = True,
                    replicas: int | None = None) -> bytes:
        """One block: from a tier, else fetched exactly once however many wait.

        In a fleet (and `from_peers`), a block whose owner is another node is asked of its
        owners instead, once however many wait, and from the origin only if none answers.
        A reader that goes away does not cancel a fetch that others may be waiting on.
        """
        while True:
            hit = await self.store.get(block)
            if hit is not None:
                self.stats[f"block_hit_{hit[1]}"] += 1
                return hit[0]
            flight = self._from_origin.joined(block.name)
            if flight is not None:
                self.stats["block_wait"] += 1
                return await asyncio.shield(flight)
            if block not in self.store:  # else stored between our look and now: look again
                break
        siblings, peers = self.siblings, self.peers
        owner = siblings.owner(block.bucket, block.key, block.index) if siblings is not None else None
        if siblings is not None and owner is not None:
            # Another worker of this node owns the block: it fetches and keeps it, and counts the
            # miss (a block is counted once in the node's figures).
            return await self._asked(block, lambda: siblings.block(owner, block, meta, from_peers), miss=False)
        route = self.route(block.bucket, block.key, block.index, replicas) if from_peers else None
        if route is not None and peers is not None:
            return await self._asked(block, lambda: peers.block(block, meta, route), miss=True)
        self.stats["block_miss"] += 1
        return await self.from_origin(block, meta)

    async def _asked(self, block: BlockId, ask: Callable[[], Awaitable[bytes]], *, miss: bool) -> bytes:
        """The block from another worker or node: asked once however many wait for it (`miss`:
        this node counts the miss; a worker asking the owner worker leaves that to the owner)."""
        flight = self._from_peers.joined(block.name)
        if flight is not None:
            self.stats["block_wait"] += 1
            return await asyncio.shield(flight)
        if miss:
            self.stats["block_miss"] += 1
        return await self._from_peers.run(block.name, ask)

    async def from_origin(self, block: BlockId, meta: ObjectMeta) -> bytes:
        """The block from the origin, once however many wait, kept if this worker keeps it."""
        return await self._from_origin.run(block.name, lambda: self._fetch_block(block, meta))

    @property
    def background(self) -> int:
        """Fetches under way that no reader waits for (readahead, prefetch)."""
        return len(self._background)

    def fetching(self, block: BlockId) -> bool:
        return block.name in self._from_origin or block.name in self._from_peers

    async def _fetch_block(self, block: BlockId, meta: ObjectMeta) -> bytes:
        """One block from the origin (ranged GET, If-Match the version), stored. An answer
        cut off mid-body is asked for again, `origin.retries` times (the block is held
        whole before a byte of it is sent, so a retry is invisible to the client)."""
        first, last = block_bounds(block.index, self.settings.block_size, meta.size)
        query = [("versionId", meta.version_id)] if meta.version_id and meta.version_id != "null" else []
        expected = last - first + 1
        for attempt in range(self.origin.settings.retries + 1):
            response = await self.origin.get_block(
                block.bucket, block.key, query=query,
                headers={"range": f"bytes={first}-{last}", "if-match": meta.etag},
            )
            if response.status == 412:
                await response.aclose()
                await self._on_changed(block.bucket, block.key)
                raise ObjectChanged()
            if response.status >= 300:
                raise await self.origin.error_from(response, resource=f"/{block.bucket}/{block.key}")
            if response.status != 206 and expected != meta.size:
                await response.aclose()
                raise S3Error("ServiceUnavailable", "The origin ignored a byte range; the block was not cached.")
            try:
                data = await response.read_at_most(expected)  # never more than one block, whatever is sent
            except S3Error:  # cut off mid-body
                data = b""
            if len(data) == expected:
                self.stats["origin_block_fetch"] += 1
                await self.store.put(block, data)
                return data
            if len(data) > expected:
                break
            self.stats["origin_block_retry"] += 1
            log.engine.info("block %d of /%s/%s cut off at %d of %d bytes (attempt %d)",
                            block.index, block.bucket, block.key, len(data), expected, attempt + 1)
        raise S3Error("ServiceUnavailable", "The origin sent a block of the wrong size; retry the request.")

    def block_now(self, block: BlockId) -> tuple[bytes | memoryview, str] | None:
        """(data, tier name) of a block a tier can answer at once, counted as `block` counts
        that hit; None, counting nothing, otherwise (see TieredStore.get_now)."""
        hit = self.store.get_now(block)
        if hit is not None:
            self.stats[f"block_hit_{hit[1]}"] += 1
        return hit

    def prefetch(self, block: BlockId, meta: ObjectMeta) -> None:
        """Fetch a block nobody asked for yet, if the budget allows; it is given back once
        the block is stored."""
        if block not in self.store and not self.fetching(block):
            held = self.budget.try_take(self.length(block, meta))
            if held:
                self.stats["prefetch"] += 1
                self.spawn(self.block(block, meta)).add_done_callback(lambda _: self.budget.give(held))

    def spawn(self, work: Awaitable[bytes]) -> asyncio.Future[bytes]:
        """Run `work` now; a failure nobody waits for only costs a later miss, not a log line."""
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._forget_background)
        return task

    def _forget_background(self, task: asyncio.Future[bytes]) -> None:
        self._background.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a failure nobody waited for is not logged

    def length(self, block: BlockId, meta: ObjectMeta) -> int:
        first, last = block_bounds(block.index, self.settings.block_size, meta.size)
        return last - first + 1

    def route(self, bucket: str, key: str, index: int, replicas: int | None = None) -> Route | None:
        """The owners to ask for a block, or None: no fleet, or this node is its first owner."""
        if self.fleet is None:
            return None
        route = self.fleet.route(bucket, key, index, replicas)
        return route if route.ask else None

    # --- opening a cold object ---------------------------------------------------------

    async def open(self, bucket: str, key: str, query: list[tuple[str, str]], first_byte: int, *,
                   from_peers: bool = True) -> Opened | None:
        """The metadata of an object nobody asked about lately, and the block holding
        `first_byte`, from one ranged GET instead of a HEAD and then a GET (one origin
        round trip saved on every cold read). Concurrent opens of the same block share
        one request. None when that answer can't serve as both (an empty object or a
        start past the end, which the origin refuses with 416; an origin that ignored
        the range of a large object): ask with a HEAD then. Raises the origin's error
        (NoSuchKey, NoSuchBucket, AccessDenied, ...) as S3Error.
        """
        index = first_byte // self.settings.block_size
        name = open_name(bucket, key, query, index)
        owner = self.siblings.owner(bucket, key, index) if self.siblings is not None else None
        if owner is not None:  # the worker that owns the first block opens the object
            siblings = self.siblings
            assert siblings is not None
            if not self._coherence.trusted():
                return await siblings.open(owner, bucket, key, query, index, from_peers)
            return await self._peer_opening.run((name, self._coherence.epoch(bucket)),
                                                lambda: siblings.open(owner, bucket, key, query, index, from_peers))
        route = self.route(bucket, key, index) if from_peers else None
        if route is not None and self.peers is not None:  # a peer owns the block: it opens the object for us
            peers = self.peers
            if not self._coherence.trusted():  # an open under way may have begun before an unheard write
                return await peers.open(bucket, key, query, index, route)
            return await self._peer_opening.run((name, self._coherence.epoch(bucket)),
                                                lambda: peers.open(bucket, key, query, index, route))
        return await self.open_here(bucket, key, query, index)

    async def open_here(self, bucket: str, key: str, query: list[tuple[str, str]], index: int) -> Opened | None:
        """`open` by this node itself: one ranged GET of the origin, shared by concurrent opens.

        In a fleet or a node of several workers, an open that just finished answers the opens
        that arrive a moment later too (`_recent_opens`): several nodes or workers that all
        missed the metadata at once ask the owner at slightly different times, and the block
        must still be fetched once.
        """
        name = open_name(bucket, key, query, index)
        epoch = self._coherence.epoch(bucket)  # and what this node's other workers' writes made it forget
        if not self._coherence.trusted():
            # Another node's write may have gone unheard: neither an open remembered from before
            # it nor one already under way (it may have begun before the write) may answer.
            return await self._open(bucket, key, query, index, name, epoch)
        if self._remembers_opens:
            recent = await self._recent_open(name)
            if recent is not None:
                return recent
        return await self._opening.run((name, epoch), lambda: self._open(bucket, key, query, index, name, epoch))

    async def _recent_open(self, name: str) -> Opened | None:
        recent = self._recent_opens.get(name)
        if recent is None:
            return None
        meta, block, when = recent
        if time.monotonic() - when > _RECENT_OPEN:
            del self._recent_opens[name]
            return None
        hit = await self.store.get(block)
        if hit is None:
            return None
        self.stats["open_recent"] += 1
        return meta, FirstBlock(block, hit[0], from_origin=False)

    @property
    def _remembers_opens(self) -> bool:
        """Whether other nodes or workers ask this one to open objects (see open_here)."""
        return self.fleet is not None or self.siblings is not None

    def forget_opens(self, bucket: str | None = None, key: str | None = None) -> None:
        """Drop remembered opens of `key` (of the bucket when None; of everything when no
        bucket): its metadata was invalidated, so an open must ask the origin again."""
        if not self._recent_opens:
            return
        if bucket is None:
            self._recent_opens.clear()
            return
        prefix = f"{bucket}\0" if key is None else f"{bucket}\0{key}\0"
        for name in [n for n in self._recent_opens if n.startswith(prefix)]:
            del self._recent_opens[name]

    def _remember_open(self, name: str, opened: Opened) -> None:
        self._recent_opens[name] = (opened[0], opened[1].block, time.monotonic())
        self._recent_opens.move_to_end(name)
        while len(self._recent_opens) > _RECENT_OPENS:
            self._recent_opens.popitem(last=False)

    async def _open(self, bucket: str, key: str, query: list[tuple[str, str]], index: int, name: str,
                    epoch: Epoch) -> Opened | None:
        """The open itself, remembered for the opens that follow unless a write to the bucket
        came meanwhile (`epoch`: the bucket's when it began)."""
        size = self.settings.block_size
        first = index * size
        response = await self.origin.get_block(bucket, key, query=query,
                                               headers={"range": f"bytes={first}-{first + size - 1}"})
        if response.status == 416:
            await response.aclose()
            return None
        if response.status >= 300:
            raise await self.origin.error_from(response, resource=f"/{bucket}/{key}")
        if response.status == 200:  # the range was ignored: fine if that is all of a small object
            length = response.headers.get("content-length", "")
            if index != 0 or not length.isdigit() or int(length) > size:
                await response.aclose()
                return None
            total = int(length)
        else:
            got = _content_range(response.headers.get("content-range", ""))
            if got is None or got[0] != first or got[1] != min(first + size, got[2]) - 1:
                await response.aclose()
                raise S3Error("ServiceUnavailable", "The origin answered a different byte range.")
            total = got[2]
        expected = min(first + size, total) - first
        held = await self.budget.take(expected)  # now that the size is known
        try:
            data = await response.read_at_most(expected)
        except S3Error:  # cut off mid-body: ask with a HEAD, then fetch the block (retried)
            data = b""
        finally:
            self.budget.give(held)
        if len(data) < expected:
            self.stats["origin_open_cut"] += 1
            return None
        if len(data) != expected:
            raise S3Error("ServiceUnavailable", "The origin sent a block of the wrong size; retry the request.")
        meta = meta_from_ranged_get(response.header_items, total)
        block = BlockId(bucket, key, version_of(meta), index)
        self.stats["origin_block_fetch"] += 1
        await self.store.put(block, data)
        opened = meta, FirstBlock(block, data, from_origin=True)
        if self._remembers_opens and self._coherence.epoch(bucket) == epoch:
            self._remember_open(name, opened)
        return opened


def open_name(bucket: str, key: str, query: list[tuple[str, str]], index: int) -> str:
    """What names an open (object, version asked for, block) for single-flight and memory."""
    return "\0".join((bucket, key, *(v for _, v in query), str(index)))


def version_of(meta: ObjectMeta) -> str:
    """What names the blocks of this object version: its version id, else its ETag."""
    return meta.version_id if meta.version_id and meta.version_id != "null" else meta.etag


def _content_range(value: str) -> tuple[int, int, int] | None:
    """(first, last, size) of `bytes first-last/size`."""
    match = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+)", value.strip())
    return (int(match[1]), int(match[2]), int(match[3])) if match else None
