"""Blocks into the cache: from a tier, else fetched once however many readers wait, from the
block's owners elsewhere (engine.sources: another worker of this node, the fleet's other nodes)
or from the origin; and runs, one origin answer for a stretch of blocks (gateway.engine.runs),
lending the blocks others own (engine.lending)."""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from gateway import log
from gateway.bytebudget import ByteBudget
from gateway.cluster.fleet import Fleet, Route
from gateway.config import CacheSettings
from gateway.engine.coherence import Coherence
from gateway.engine.flight import Coming, SingleFlight
from gateway.engine.lending import Lending
from gateway.engine.peers import Peers
from gateway.engine.runs import GRANULE, Run, RunStopped, Want
from gateway.engine.siblings import Siblings
from gateway.engine.sources import Ask, BlockSource, Got, Part, Unanswered, length_of, version_of
from gateway.errors import S3Error
from gateway.objects import ObjectChanged, ObjectMeta, meta_from_headers, meta_from_ranged_get
from gateway.origin import BlockResponse, Origin
from gateway.store import pieces
from gateway.store.blocks import BlockId, block_bounds
from gateway.store.tiers import TieredStore

T = TypeVar("T")

# A whole object is asked for with its checksums, as a HEAD is (engine.metadata): its
# metadata then serves every later read, checksums asked for or not.
_WITH_CHECKSUMS = {"x-amz-checksum-mode": "ENABLED"}
# Pieces a run reads ahead of its reader at least (cache.readahead_blocks when more): the origin's
# bytes keep coming while the reader sends the ones before.
_RUN_AHEAD = 4


class BlockFetcher:
    """Blocks of exact object versions, for reads, replicas and peers. Event loop only.

    `on_changed(bucket, key)` is called when the origin no longer holds the version a
    fetch was for (its If-Match failed), before ObjectChanged is raised.

    A block not in the tiers is asked of its sources in order (`sources`, one loop in `block`):
    the worker of this node that owns it (`siblings`, when the node has other workers), then
    its owners in the fleet in rendezvous order (`peers`, with a fleet), once however many wait;
    a source that does not answer is skipped, and when none answers the block comes from the
    origin after all. Blocks asked for by peers come from the tiers, this node's owner worker or
    the origin, never from another peer (`from_peers=False`), so two nodes whose views differ for
    a moment cannot ask each other in a circle.
    """

    def __init__(self, origin: Origin, store: TieredStore, settings: CacheSettings, budget: ByteBudget,
                 on_changed: Callable[[str, str], Awaitable[None]], *, fleet: Fleet | None = None,
                 coherence: Coherence | None = None, siblings: Siblings | None = None,
                 peers: Peers | None = None) -> None:
        self.origin = origin
        self.store = store
        self.settings = settings
        self.budget = budget
        self.fleet = fleet
        self.siblings = siblings
        self.peers = peers
        # The fallback order: this node's owner worker, then the fleet's owners; the origin after them.
        self.sources: tuple[BlockSource, ...] = tuple(source for source in (siblings, peers) if source is not None)
        self.stats: Counter[str] = Counter()
        self._on_changed = on_changed
        self.coherence = coherence if coherence is not None else Coherence(None)
        self._from_origin: SingleFlight[str, bytes] = SingleFlight()
        self._from_elsewhere: SingleFlight[str, Got] = SingleFlight()  # blocks asked of the sources
        self._parts: SingleFlight[tuple[str, int, int], Part] = SingleFlight()  # (block, lo, hi) from the origin
        self._background: set[asyncio.Future[Any]] = set()
        self.arriving_parts: Coming[str] = Coming()  # parts of blocks runs without a reader bring (engine.tails)
        # Blocks this worker's runs brought that others own.
        self.lending = Lending(store, settings, self.stats, fleet=fleet, siblings=siblings, peers=peers,
                               fetching=self.fetching, arriving=self.arriving, spawn=self.spawn)

    # --- blocks ------------------------------------------------------------------------

    async def block(self, block: BlockId, meta: ObjectMeta, *, from_peers: bool = True,
                    replicas: int | None = None) -> bytes:
        """One block: from a tier, else fetched exactly once however many wait (`sourced`)."""
        return (await self.sourced(block, meta, from_peers=from_peers, replicas=replicas))[0]

    async def sourced(self, block: BlockId, meta: ObjectMeta, *, from_peers: bool = True,
                      replicas: int | None = None) -> Got:
        """One block, and how the node had it, as x-cache says it: "hit-mem" or "hit-disk" (a
        tier of this node, this worker's or its owner worker's), "hit-peer" (another node held
        it), "miss" (fetched from the origin for it, by this worker or the owner it asked, or a
        fetch under way joined).

        A block another worker of this node, or (`from_peers`) another node owns is asked of its
        sources instead, in order, once however many wait, and from the origin only if none
        answers. A reader that goes away does not cancel a fetch that others may be waiting on.
        """
        while True:
            hit = await self.store.get(block)
            if hit is not None:
                self.stats[f"block_hit_{hit[1]}"] += 1
                return hit[0], self.tier_source(hit[1])
            flight = self._from_origin.joined(block.name)
            if flight is not None:
                self.stats["block_wait"] += 1
                try:
                    return await asyncio.shield(flight), "miss"
                except RunStopped:  # the run that was bringing it stopped first: look again
                    continue
            if block not in self.store:  # else stored between our look and now: look again
                break
        asks = [(source, ask) for source in self.sources
                if (ask := source.asking(block, meta, from_peers=from_peers, replicas=replicas)) is not None]
        if not asks:
            self.stats["block_miss"] += 1
            return await self.from_origin(block, meta), "miss"
        asking = self._from_elsewhere.joined(block.name)
        if asking is not None:
            self.stats["block_wait"] += 1
            return await asyncio.shield(asking)
        return await self._from_elsewhere.run(block.name, lambda: self._asked(block, meta, asks))

    def tier_source(self, tier: str) -> str:
        """The x-cache word of a hit in the tier named `tier`."""
        memory = self.store.memory
        return "hit-mem" if memory is not None and tier == memory.name else "hit-disk"

    async def _asked(self, block: BlockId, meta: ObjectMeta, asks: list[tuple[BlockSource, Ask]]) -> Got:
        """The block from the first source that answers, else from the origin (and kept where this
        worker keeps it: its owners are failing, and the next read should not wait for them again).
        The miss is counted here once, unless the source that answers counts it (an owner worker)."""
        counted = False
        for source, ask in asks:
            if source.counts_miss and not counted:
                self.stats["block_miss"] += 1
                counted = True
            try:
                return await ask()
            except Unanswered:
                continue
        hit = await self.store.get(block)  # (stored meanwhile: a take, another read's run)
        if hit is not None:
            self.stats[f"block_hit_{hit[1]}"] += 1
            return hit[0], self.tier_source(hit[1])
        if not counted:
            self.stats["block_miss"] += 1
        return await self.from_origin(block, meta), "miss"

    async def from_origin(self, block: BlockId, meta: ObjectMeta) -> bytes:
        """The block from the origin, once however many wait, kept if this worker keeps it."""
        while True:
            try:
                return await self._from_origin.run(block.name, lambda: self._fetch_block(block, meta))
            except RunStopped:  # joined a run that stopped before it brought the block
                continue

    @property
    def background(self) -> int:
        """Fetches under way that no reader waits for (readahead, prefetch)."""
        return len(self._background)

    async def arriving(self, block: BlockId, work: Callable[[], Awaitable[bytes]]) -> bytes:
        """`work` (bringing the block from elsewhere: a take) as the block's fetch here: a read of
        it meanwhile waits for these bytes, and when `work` raises RunStopped (it brought nothing),
        fetches the block itself."""
        return await self._from_origin.run(block.name, work)

    def fetching(self, block: BlockId) -> bool:
        return block.name in self._from_origin or block.name in self._from_elsewhere

    async def _fetch_block(self, block: BlockId, meta: ObjectMeta) -> bytes:
        """One block from the origin (_fetch_bytes), stored."""
        first, last = block_bounds(block.index, self.settings.block_size, meta.size)
        data = await self._fetch_bytes(block, meta, first, last)
        self.stats["origin_block_fetch"] += 1
        await self.store.put(block, data)
        return data

    async def _fetch_bytes(self, block: BlockId, meta: ObjectMeta, first: int, last: int) -> bytes:
        """Bytes [first, last] of the object, within `block`, from the origin (ranged GET, If-Match
        the version). An answer cut off mid-body is asked for again, `origin.retries` times (the
        bytes are held whole before one of them is sent, so a retry is invisible to the client)."""
        query = meta.version_query
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
                data = await response.read_at_most(expected)  # never more than asked, whatever is sent
            except S3Error:  # cut off mid-body
                data = b""
            if len(data) == expected:
                return data
            if len(data) > expected:
                break
            self.stats["origin_block_retry"] += 1
            log.engine.info("block %d of /%s/%s cut off at %d of %d bytes (attempt %d)",
                            block.index, block.bucket, block.key, len(data), expected, attempt + 1)
        raise S3Error("ServiceUnavailable", "The origin sent a block of the wrong size; retry the request.")

    # --- parts of blocks (store.pieces) ---------------------------------------------------

    @property
    def granule(self) -> int | None:
        """What a read of part of a block is rounded out to; None: whole blocks (the store keeps
        no part of a block, or blocks are no larger than a granule)."""
        return GRANULE if self.store.keeps_pieces and self.settings.block_size > GRANULE else None

    def keeps_part(self, block: BlockId) -> bool:
        """Whether part of the block may be kept here: the store keeps pieces (its memory tier,
        a lone worker's or the node's shared one on tmpfs) and no other node owns the block. A
        piece is never lent, offered or served to another node: for them, this one does not hold
        the block."""
        return self.store.keeps_pieces and self.route(block.bucket, block.key, block.index) is None

    async def part(self, block: BlockId, meta: ObjectMeta, lo: int, hi: int) -> Part:
        """Bytes of the block holding [lo, hi) (offsets in the block), where in the block they
        start, and how the node had them (as `sourced` says): the block's piece when it holds
        them (a hit); else, for a block this worker fetches itself and keeps in part, what the
        piece lacks of [lo, hi) rounded out to the granule, one origin GET however many reads
        want it at once, joined with the piece; for a block another worker of this node owns,
        that worker brings it so (one GET however many workers want it: Siblings.part), or this
        one when it does not answer; else the whole block (`sourced`)."""
        kept = self.store.piece_hit(block, lo, hi)
        if kept is None and await self.arriving_parts.waited(block.name, lo, hi):  # a HEAD's tail brought them
            kept = self.store.piece_hit(block, lo, hi)
        if kept is not None:
            self.stats["block_hit_piece"] += 1
            return Part(kept, lo, "hit-mem")
        length = self.length(block, meta)
        granule = self.granule
        if granule is None or not self.keeps_part(block) or self.missing_here(block) is not True:
            return Part(*await self._whole(block, meta))
        want = pieces.rounded(lo, hi, granule, length)
        if want == (0, length):
            return Part(*await self._whole(block, meta))
        owner = self.siblings.owner(block.bucket, block.key, block.index) if self.siblings is not None else None
        if owner is not None and self.siblings is not None:
            got = await self.siblings.part(owner, block, meta, *want)
            if got is not None:
                return got
        return await self._parts.run((block.name, *want), lambda: self._fetch_part(block, meta, want, length))

    async def _fetch_part(self, block: BlockId, meta: ObjectMeta, want: tuple[int, int], length: int) -> Part:
        """What the block's piece lacks of `want`, from the origin, kept as its piece and joined with it."""
        held = self.store.piece(block)
        ask = pieces.lacking(None if held is None else (held[0], held[0] + len(held[1])), *want)
        offset = block.index * self.settings.block_size
        self.stats["block_miss"] += 1
        self.store.missed()
        data = await self._fetch_bytes(block, meta, offset + ask[0], offset + ask[1] - 1)
        self.stats["origin_part_fetch"] += 1
        await self.store.put_piece(block, ask[0], data, length)
        lo_in_hand, in_hand = pieces.join(held, ask[0], data)  # (whatever the store could keep)
        return Part(in_hand, lo_in_hand, "miss")

    async def _whole(self, block: BlockId, meta: ObjectMeta) -> tuple[bytes, int, str]:
        data, source = await self.sourced(block, meta)
        return data, 0, source

    def block_now(self, block: BlockId) -> tuple[bytes | memoryview, str] | None:
        """(data, tier name) of a block a tier can answer at once, counted as `block` counts
        that hit; None, counting nothing, otherwise (see TieredStore.get_now)."""
        hit = self.store.get_now(block)
        if hit is not None:
            self.stats[f"block_hit_{hit[1]}"] += 1
        return hit

    def prefetch(self, block: BlockId, meta: ObjectMeta) -> None:
        """Fetch a block nobody asked for yet, if the budget allows (given back once the block is stored)."""
        if block not in self.store and not self.fetching(block):
            held = self.budget.try_take(self.length(block, meta))
            if held:
                self.stats["prefetch"] += 1
                self.spawn(self.block(block, meta)).add_done_callback(lambda _: self.budget.give(held))

    def spawn(self, work: Awaitable[T]) -> asyncio.Future[T]:
        """Run `work` now; a failure nobody waits for only costs a later miss, not a log line."""
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._forget_background)
        return task

    def _forget_background(self, task: asyncio.Future[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a failure nobody waited for is not logged

    def length(self, block: BlockId, meta: ObjectMeta) -> int:
        return length_of(block.index, self.settings.block_size, meta)

    def route(self, bucket: str, key: str, index: int, replicas: int | None = None) -> Route | None:
        """The owners to ask for a block, or None: no fleet, or this node is its first owner."""
        if self.fleet is None:
            return None
        route = self.fleet.route(bucket, key, index, replicas)
        return route if route.ask else None

    # --- runs: the blocks of a read from one origin answer --------------------------------

    async def open_run(self, bucket: str, key: str, query: list[tuple[str, str]], want: Want, *,
                       reader: bool = True) -> tuple[ObjectMeta, Run] | None:
        """One GET of the origin for the blocks `want` touches (Want.origin_range): its headers are the object's metadata
        (checksums too, for a whole object), its body a run of them (that only keeps them: not `reader`); None on a 416."""
        asked = want.origin_range(self.settings.block_size, self.granule)
        headers = dict(_WITH_CHECKSUMS) if asked is None else {"range": asked}
        response = await self.origin.get_run(bucket, key, query=query, headers=headers)
        if response.status == 416:
            await response.aclose()
            return None
        if response.status >= 300:
            raise await self.origin.error_from(response, resource=f"/{bucket}/{key}")
        got = await _answered_range(response)
        first, last, size = got
        if asked is not None and not _covers(want, self.granule or self.settings.block_size, got):
            await response.aclose()
            raise S3Error("ServiceUnavailable", "The origin answered a different byte range.")
        whole = response.status == 200 and asked is None
        meta = meta_from_headers(response.header_items) if whole else meta_from_ranged_get(response.header_items, size)
        self.stats["origin_run"] += 1
        async def given() -> BlockResponse:  # (the answer in hand: a coroutine for the run to await, as before)
            return response
        return meta, self._run(given(), bucket, key, meta, first, last, reader=reader)

    def missing_here(self, block: BlockId) -> bool | None:
        """Whether a read here takes the block from the origin itself (True), from this node's
        tiers (False), or from elsewhere (None: a fetch under way, another node of the fleet
        that owns it, another worker whose disk may hold it)."""
        if block in self.store:
            return False
        if self.fetching(block) or block.name in self.arriving_parts or self.route(block.bucket, block.key, block.index) is not None:
            return None
        others = self.siblings is not None and self.siblings.owner(block.bucket, block.key, block.index) is not None
        return None if others and not self.store.sees_other_workers else True

    def read_ahead(self, bucket: str, key: str, meta: ObjectMeta, first_index: int, last_index: int) -> None:
        """Fetch the blocks first_index..last_index that nobody asked for yet (a sequential
        reader's next ones) missing here, up to the first that is not, in one background run,
        if the read buffer has room for a block now."""
        version = version_of(meta)
        stretch: list[int] = []
        for index in range(first_index, last_index + 1):
            missing = self.missing_here(BlockId(bucket, key, version, index))
            if not missing:
                if stretch or missing is None:
                    break
                continue
            stretch.append(index)
        if not stretch or not self.budget.try_take(1):
            return
        self.budget.give(1)
        self.stats["prefetch"] += len(stretch)
        pump = self.start_run(bucket, key, meta, stretch[0], stretch[-1], reader=False).pump
        self._background.add(pump)  # (held, so that it is not collected before it ends)
        pump.add_done_callback(self._forget_background)

    def start_run(self, bucket: str, key: str, meta: ObjectMeta, first_index: int, last_index: int, *,
                  reader: bool = True, eager: bool = True, within: tuple[int, int] | None = None,
                  again: frozenset[int] = frozenset()) -> Run:
        """Blocks first_index..last_index of the version `meta` describes, from one ranged GET (If-Match the
        version), registered for concurrent readers at once; `within` (first, last): only those bytes of
        them (a read's ends, rounded out to the granule); `again`: blocks held (here, or by their owners),
        brought only so that a read costs one request: neither kept nor lent. Its `started` raises
        ObjectChanged when the origin no longer holds the version (the read is then answered anew)."""
        size = self.settings.block_size
        first, last = first_index * size, min((last_index + 1) * size, meta.size) - 1
        if within is not None:
            first, last = max(first, within[0]), min(last, within[1])

        async def answer() -> BlockResponse:
            response = await self.origin.get_run(bucket, key, query=meta.version_query,
                                                 headers={"range": f"bytes={first}-{last}", "if-match": meta.etag})
            if response.status == 412:
                await response.aclose()
                await self._on_changed(bucket, key)
                raise ObjectChanged()
            if response.status >= 300:
                raise await self.origin.error_from(response, resource=f"/{bucket}/{key}")
            if await _answered_range(response) != (first, last, meta.size):
                await response.aclose()
                raise S3Error("ServiceUnavailable", "The origin answered a different byte range.")
            return response

        self.stats["origin_run"] += 1
        return self._run(answer(), bucket, key, meta, first, last, reader=reader, eager=eager, claimed=True, again=again)

    def _run(self, answer: Awaitable[BlockResponse], bucket: str, key: str, meta: ObjectMeta, first: int,
             last: int, *, reader: bool = True, eager: bool = True, claimed: bool = False,
             again: frozenset[int] = frozenset()) -> Run:
        version = version_of(meta)

        async def keep(block: BlockId, data: bytes, lo: int, whole: bool) -> None:
            if block.index in again:  # held, brought again between blocks a read fetches: a tier's hit, not read
                tier = await self.store.touch(block, data if whole else None)
                self.stats["run_block_again" if tier is None else f"block_hit_{tier}"] += 1
                return
            self.stats["block_miss"] += 1
            self.store.missed()
            if whole:
                await self.lending.keep(block, meta, data)
            elif self.keeps_part(block):
                await self.store.put_piece(block, lo, data, self.length(block, meta))

        return Run(answer, lambda index: BlockId(bucket, key, version, index), first, last, meta.size,
                   self.settings.block_size, flights=self._from_origin, keep=keep, budget=self.budget,
                   ahead=max(self.settings.readahead_blocks, _RUN_AHEAD), reader=reader, eager=eager,
                   claimed=claimed)


async def _answered_range(response: BlockResponse) -> tuple[int, int, int]:
    """(first, last, size) of the bytes a 200 or 206 answer holds."""
    if response.status == 206:
        got = content_range(response.headers.get("content-range", ""))
    else:
        length = response.headers.get("content-length", "")
        got = (0, int(length) - 1, int(length)) if length.isdigit() else None
    if got is None:
        await response.aclose()
        raise S3Error("ServiceUnavailable", "The origin answered without saying which bytes it sent.")
    return got


def _covers(want: Want, unit: int, got: tuple[int, int, int]) -> bool:
    """Whether an answer of bytes got = (first, last, size) holds every byte `want` reads, from
    its start rounded down to `unit` (the granule or the block size)."""
    first, last, size = got
    if want.suffix is not None:
        return last == size - 1 and first <= max(size - want.suffix, 0)
    start = want.start // unit * unit
    end = size - 1 if want.end is None else min(want.end, size - 1)
    return first <= start and last >= end


def content_range(value: str) -> tuple[int, int, int] | None:
    """(first, last, size) of `bytes first-last/size`."""
    match = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+)", value.strip())
    return (int(match[1]), int(match[2]), int(match[3])) if match else None
