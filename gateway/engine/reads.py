"""Reading object bytes: a range split into blocks, held against the read buffer, read
ahead, and streamed in order; reads the cache must not share go straight to the origin."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import NamedTuple

from gateway.bytebudget import ByteBudget
from gateway.config import CacheSettings
from gateway.engine.fetch import BlockFetcher, version_of
from gateway.engine.holders import fetched_here
from gateway.engine.objectread import ObjectRead, prepend, started, within
from gateway.engine.opens import FirstBlock
from gateway.engine.runs import Run, Stretch
from gateway.engine.sources import Part
from gateway.engine.xcache import asked, from_tiers, in_others_file, reads_others_disks
from gateway.errors import S3Error
from gateway.lru import LRU
from gateway.objects import ObjectChanged, ObjectMeta
from gateway.origin import Origin, OriginResponse
from gateway.store.blocks import BlockId, block_span, slice_for

_FOOTER_FIRST_SUFFIXES = (".parquet", ".orc")
_SEQUENTIAL_READERS = 4096  # objects whose last read end is remembered
_NAMED_BLOCKS = 4096  # blocks of one_block whose BlockId is kept (naming one is a digest, a few us)


class OneBlock(NamedTuple):
    """A read within one block: the block, the first and last byte of the object read, and
    where they are in the block (block[lo:hi])."""

    block: BlockId
    start: int
    end: int
    lo: int
    hi: int


class Reads:
    """Reads of exact object versions for the engine. Event loop only.

    `fetch` is None without a block cache: every read then goes to the origin.
    `on_changed(bucket, key)` is called when the origin no longer holds the version a
    read was describing (its If-Match failed), before ObjectChanged is raised.
    """

    def __init__(self, origin: Origin, fetch: BlockFetcher | None, settings: CacheSettings, budget: ByteBudget,
                 on_changed: Callable[[str, str], Awaitable[None]]) -> None:
        self.origin = origin
        self.fetch = fetch
        self.settings = settings
        self.budget = budget
        self._on_changed = on_changed
        # Where the last read of each recently read object ended, to spot sequential readers.
        # (end, continuations in a row, where they began)
        self._read_ends: LRU[tuple[str, str, str], tuple[int, int, int]] = LRU(_SEQUENTIAL_READERS)
        self._named: LRU[tuple[str, str, str, int], BlockId] = LRU(_NAMED_BLOCKS)  # the oldest named out first

    async def read_object(
        self,
        bucket: str,
        key: str,
        meta: ObjectMeta,
        *,
        start: int | None = None,
        end: int | None = None,
        headers: dict[str, str] | None = None,
        first: FirstBlock | Run | None = None,
    ) -> ObjectRead:
        """The bytes [start, end] (inclusive) of exactly the version `meta` describes.

        From the block cache block by block, the blocks it misses from one origin GET for
        each stretch of them (a run, started before this returns: an object changed at the
        origin is found before a byte was sent, and the read is answered from one version),
        or straight from the origin for reads whose answer is the caller's own (`headers`:
        encryption keys, payer) or when no cache is configured. The first piece is in hand
        before this returns, so a failure becomes an S3 error, not a broken stream. `first`:
        what the cold open brought (Opens.open): a block in hand, or a run to claim.
        """
        fetch = self.fetch
        run = first if isinstance(first, Run) and first.claim() else None
        if headers or fetch is None:
            response = await self._origin_read(bucket, key, meta, start, end, headers)
            return ObjectRead("miss", chunks=response.iter_bytes(), close=response.aclose)
        if start is None or end is None:
            start, end = 0, meta.size - 1
        if run is not None and not run.first <= start <= run.last:
            await run.aclose()  # it does not hold this read's start (an If-Range that did not match, say)
            run = None
        if meta.size == 0:
            return ObjectRead("miss" if run is not None else "hit-mem", body=b"")
        blocks = [BlockId(bucket, key, version_of(meta), i) for i in block_span(start, end, self.settings.block_size)]
        in_hand = first.data if isinstance(first, FirstBlock) and first.block == blocks[0] else None
        fetched = isinstance(first, FirstBlock) and in_hand is not None and first.from_origin
        source = "miss" if run is not None else self._describe(fetch, blocks, start, end, fetched=fetched)
        if len(blocks) == 1 and run is None:
            return await self._one_block(fetch, blocks[0], meta, start, end, in_hand, source)
        try:
            rest = [b for b in blocks[0 if in_hand is None else 1:] if run is None or b.index not in run.indexes]
            runs = ([] if run is None else [run]) + await self._runs_for(fetch, rest, meta, start, end)
        finally:
            self._read_around(fetch, blocks, meta, start, end)
        source = asked(source, blocks, runs, fetched=fetched, node_disks=reads_others_disks(fetch))
        first_source: list[str] = []
        chunks = self._stream(fetch, blocks, meta, start, end, runs, in_hand, first_source)
        head = await started(chunks, runs)
        if first_source == ["miss"] and source.startswith("hit"):
            source = "partial"  # its owner worker said it held the first block, and fetched it for this read
        if len(head) == end - start + 1:  # (a cold open's run of one short piece): the body in hand
            return ObjectRead(source, body=head, close=chunks.aclose)  # (closing gives its buffer back)
        return ObjectRead(source, chunks=prepend(head, chunks), close=chunks.aclose)

    async def _one_block(self, fetch: BlockFetcher, block: BlockId, meta: ObjectMeta, start: int, end: int,
                         in_hand: bytes | None, source: str) -> ObjectRead:
        """A read within one block (small objects and small ranges, the common case of many small
        files): the body in hand, no stream to run, its block fetched once (one origin request
        when it is missing, in hand before any header is sent). The read buffer covers it until
        it was sent (closing the read), unless the memory tier holds it (its quota counts it)."""
        held = 0 if source == "hit-mem" else await self.budget.take(fetch.length(block, meta))
        lo, hi = slice_for(block.index, self.settings.block_size, start, end)
        try:
            if in_hand is None and source == "miss" and in_others_file(fetch, block):
                in_hand = await from_tiers(fetch, block)
                source = "miss" if in_hand is None else "hit-disk"
            if in_hand is not None:
                data, at = in_hand, 0
            else:  # x-cache says how the node had it (its owner worker may have fetched it for this read)
                data, at, got = await fetch.part(block, meta, lo, hi)
                # (a block another node holds, brought by the owner worker from it, stays hit-peer)
                source = source if source == "hit-peer" and got != "miss" else got
        except BaseException:
            self.budget.give(held)
            raise
        finally:
            self._read_around(fetch, [block], meta, start, end)
        lo, hi = lo - at, hi - at  # (where the read's bytes are in those the block's piece holds)

        async def give_back() -> None:
            self.budget.give(held)

        return ObjectRead(source, body=data if (lo, hi) == (0, len(data)) else data[lo:hi],
                          close=give_back if held else None)

    def one_block(self, bucket: str, key: str, meta: ObjectMeta, start: int | None = None,
                  end: int | None = None) -> OneBlock | None:
        """The block of `meta`'s version that holds all of bytes [start, end] (None: the whole
        object), with the range made explicit; None when no one block does, or there is no
        block cache."""
        if self.fetch is None or meta.size == 0:
            return None
        if start is None or end is None:
            start, end = 0, meta.size - 1
        size = self.settings.block_size
        index = start // size
        if index != end // size:
            return None
        return OneBlock(self._block_named(bucket, key, version_of(meta), index), start, end,
                        *slice_for(index, size, start, end))

    def read_block_now(self, read: OneBlock, meta: ObjectMeta) -> tuple[bytes | memoryview, str] | None:
        """(the bytes of a range one_block found, x-cache source) when a tier can answer the
        block at once (memory: hit-mem; a disk's page cache: hit-disk), read as read_object
        reads them (its counters, readahead); None, counting nothing, otherwise. No await: the
        hit path below ASGI asks this way."""
        fetch = self.fetch
        assert fetch is not None  # one_block finds no block without a cache
        block, start, end, lo, hi = read
        hit = fetch.block_now(block)
        if hit is None:
            kept = fetch.store.piece_hit(block, lo, hi)  # a part of the block, kept in memory
            if kept is None:
                return None
            fetch.stats["block_hit_piece"] += 1
            self._read_around(fetch, [block], meta, start, end)
            return kept, "hit-mem"
        data, tier = hit
        self._read_around(fetch, [block], meta, start, end)
        memory = fetch.store.memory
        source = "hit-mem" if memory is not None and tier == memory.name else "hit-disk"
        return data if lo == 0 and hi == len(data) else data[lo:hi], source

    def _block_named(self, bucket: str, key: str, version: str, index: int) -> BlockId:
        """The BlockId of a block hits ask for again and again, named once (at most _NAMED_BLOCKS kept)."""
        fields = (bucket, key, version, index)
        block = self._named.get(fields)
        if block is None:
            block = BlockId(bucket, key, version, index)
            self._named.put(fields, block)
        return block

    def _read_around(self, fetch: BlockFetcher, blocks: list[BlockId], meta: ObjectMeta, start: int, end: int) -> None:
        """Blocks a reader will want next: a Parquet/ORC footer, the blocks after a range that
        continues the previous one (a reader going through the object in consecutive ranges)."""
        size = self.settings.block_size
        first = blocks[0]
        last_index = (meta.size - 1) // size
        if first.key.endswith(_FOOTER_FIRST_SUFFIXES) and blocks[-1].index < last_index and fetch.granule is None:
            # Parquet and ORC readers start at the footer: have the last block ready. Not where
            # reads fetch about what they read (granules): engines read the footer first (Trino,
            # DuckDB, PyArrow), so the block would cost a request more than going to S3 directly.
            fetch.prefetch(BlockId(first.bucket, first.key, first.version, last_index), meta)
        stream_key = (first.bucket, first.key, first.version)
        previous = self._read_ends.get(stream_key)
        going_on = previous is not None and previous[0] == start - 1
        streak, began = (previous[1] + 1, previous[2]) if previous is not None and going_on else (0, start)
        # Where reads fetch about what they read (granules), a reader is sequential once it continued
        # twice in a row (an engine reads a Parquet page index or an ORC stream's index, then the
        # bytes right after it: one continuation), and reads ahead at most as much as it read in a
        # row so far, up to cache.readahead_blocks (an ORC reader goes through one column's stream
        # in 128 KiB reads, then jumps to the next: 16 blocks ahead would overshoot the stream).
        granules = fetch.granule is not None
        ahead = self.settings.readahead_blocks
        if granules:
            ahead = min(ahead, -(-(end - began + 1) // size))
        after = blocks[-1].index + 1
        if streak >= (2 if granules else 1) and ahead and self._reads_ahead_here(fetch, first, after):
            # A reader going through the object in consecutive ranges: its next blocks, in one run.
            fetch.read_ahead(first.bucket, first.key, meta, after, min(after + ahead, last_index + 1) - 1)
        self._read_ends.put(stream_key, (end, streak, began))

    @staticmethod
    def _reads_ahead_here(fetch: BlockFetcher, block: BlockId, after: int) -> bool:
        """Whether this worker reads ahead from block `after` of the object: in a node of several
        workers, only the one that owns that block. An engine reads a stream through several
        connections, which the kernel hands to different workers: each then saw a sequential
        reader and read the same blocks ahead, each from the origin (17.7 of 346 MB of
        bench/cold_bytes.py's origin bytes with 2 workers)."""
        siblings = fetch.siblings
        return siblings is None or siblings.owner(block.bucket, block.key, after) is None

    def _describe(self, fetch: BlockFetcher, blocks: list[BlockId], start: int, end: int, *,
                  fetched: bool = False) -> str:
        """The x-cache value: where the blocks of this read are, as it starts (`fetched`:
        the first block just came from the origin); a block whose part the read wants is
        kept (store.pieces) counts as one in memory."""
        store = fetch.store
        memory = store.memory
        rest = blocks[1:] if fetched else blocks
        kept = sum(1 for b in rest if b not in store and self._kept_part(fetch, b, start, end))
        in_memory = kept + sum(1 for b in rest if memory is not None and b in memory)
        cached = kept + sum(1 for b in rest if b in store)
        if fetched:
            return "miss" if cached == 0 else "partial"
        if in_memory == len(blocks):
            return "hit-mem"
        if cached == len(blocks):
            return "hit-disk"
        if fetch.fleet is not None:
            # Blocks not held here that a peer owns count as peer hits (whether that peer holds
            # them is known once it was asked: read_object corrects this then).
            remote = sum(1 for b in blocks if b not in store and fetch.route(b.bucket, b.key, b.index) is not None
                         and not self._kept_part(fetch, b, start, end))
            if remote and cached + remote == len(blocks):
                return "hit-peer"
        return "miss" if cached == 0 else "partial"

    def _kept_part(self, fetch: BlockFetcher, block: BlockId, start: int, end: int) -> bool:
        """Whether the part of the block that bytes [start, end] read is kept here (a piece)."""
        piece = fetch.store.piece(block)
        if piece is None:
            return False
        lo, hi = slice_for(block.index, self.settings.block_size, start, end)
        return piece[0] <= lo and hi <= piece[0] + len(piece[1])

    async def _runs_for(self, fetch: BlockFetcher, blocks: list[BlockId], meta: ObjectMeta, start: int,
                        end: int) -> list[Run]:
        """The run that brings the blocks of a read [start, end] that this worker fetches from the
        origin: one origin GET, as going to S3 directly costs, from the first block it fetches to
        the last, from the read's first byte and to its last rounded out to the granule where the
        blocks there are kept in part (store.pieces). A block held here (whole, or the part the read
        wants), on its way here, or that its owner (another worker or node) holds now, is read from
        there (the tiers' policies see their hits: engine.holders) unless it lies between two blocks
        the run brings: then the run brings it again, as splitting the run around it would cost the
        read a request more than going to S3 directly. Started (its answer's status in) before
        this returns; none when every block is held."""
        if not blocks:
            return []
        granule, size = fetch.granule, self.settings.block_size
        within = (start // granule * granule if granule and fetch.keeps_part(blocks[0]) else 0,
                  (end // granule + 1) * granule - 1 if granule and fetch.keeps_part(blocks[-1]) else meta.size)
        fetched = [block.index for block, here in zip(blocks, await fetched_here(fetch, blocks, meta))
                   if here and not (block.index in (start // size, end // size)  # a piece answers the read
                                    and self._kept_part(fetch, block, start, end))]
        if not fetched:
            return []
        first, last = fetched[0], fetched[-1]
        again = frozenset(range(first, last + 1)).difference(fetched)
        run = fetch.start_run(blocks[0].bucket, blocks[0].key, meta, first, last, eager=first == blocks[0].index,
                              within=within, again=again)
        try:
            await run.started()
        except BaseException:
            await run.aclose()
            raise
        return [run]

    async def _stream(self, fetch: BlockFetcher, blocks: list[BlockId], meta: ObjectMeta, start: int, end: int,
                      runs: list[Run], in_hand: bytes | None, first_source: list[str]) -> AsyncGenerator[bytes | memoryview, None]:
        """Each block's bytes of the read in turn: from the run that brings it, else from the
        tiers or its fetch (started up to the readahead window ahead). The read buffer a block
        holds is given back once it was sent. How the node had the first block, when it was
        fetched here (BlockFetcher.part), is put in `first_source` (x-cache's word)."""
        size = self.settings.block_size
        ahead: dict[int, tuple[asyncio.Future[Part], int]] = {}  # position -> (fetch, budget it holds)
        held = 0
        position = 0
        try:
            for position, block in enumerate(blocks):
                # This block's share of the read buffer is had before the next ones are started
                # (they take what is left): a read never waits for room its own readahead holds.
                offset = block.index * size
                run = next((r for r in runs if block.index in r.indexes), None)
                if position == 0 and in_hand is not None:
                    held = await self.budget.take(len(in_hand))
                    self._fill(fetch, blocks, position + 1, ahead, runs, meta, (start, end))
                    data = in_hand
                elif run is not None:
                    self._fill(fetch, blocks, position + 1, ahead, runs, meta, (start, end))
                    async with contextlib.aclosing(self._from_run(fetch, run, runs, block, meta)) as parts:
                        async for stretch, offset, held in parts:
                            if part := within(stretch, offset, start, end):
                                yield part
                            self.budget.give(held)
                            held = 0
                    continue
                elif position in ahead:
                    fetching, held = ahead.pop(position)
                    self._fill(fetch, blocks, position + 1, ahead, runs, meta, (start, end))
                    data, at, _ = await fetching
                    offset += at
                else:
                    held = await self.budget.take(fetch.length(block, meta))
                    self._fill(fetch, blocks, position + 1, ahead, runs, meta, (start, end))
                    data, at, got = await fetch.part(block, meta, *slice_for(block.index, size, start, end))
                    offset += at
                    if position == 0:
                        first_source.append(got)
                yield within(data, offset, start, end)
                self.budget.give(held)
                held = 0
        except ObjectChanged:
            if position:  # after the answer's headers: its owner lost a block it said it held (engine.holders)
                fetch.stats["read_cut_changed"] += 1
            raise
        finally:
            self.budget.give(held)
            for fetching, taken in ahead.values():  # only the waiting stops: shared fetches go on
                fetching.cancel()
                self.budget.give(taken)
            for run in runs:
                await run.aclose()

    async def _from_run(self, fetch: BlockFetcher, run: Run, runs: list[Run], block: BlockId,
                        meta: ObjectMeta) -> AsyncGenerator[Stretch, None]:
        """The run's piece of `block` as it arrives (Run.piece); if the origin's answer breaks off,
        the run is dropped (the read's later blocks are fetched one by one) and what this
        block's parts had not brought yet comes from its own fetch."""
        sent = run.bounds(block.index)[0]
        try:
            async for data, at, held in run.piece(block.index):
                yield data, at, held
                sent = at + len(data)
        except S3Error:
            runs.remove(run)
            await run.aclose()
            held = await self.budget.take(fetch.length(block, meta))
            try:
                data = await fetch.block(block, meta)
            except BaseException:
                self.budget.give(held)
                raise
            begin = block.index * self.settings.block_size
            yield memoryview(data)[sent - begin:], sent, held

    def _fill(self, fetch: BlockFetcher, blocks: list[BlockId], position: int,
              ahead: dict[int, tuple[asyncio.Future[Part], int]], runs: list[Run], meta: ObjectMeta,
              read: tuple[int, int]) -> None:
        """Start the blocks of positions [position, position + readahead) that no run brings,
        while the budget allows (the read's part of each: BlockFetcher.part)."""
        for later in range(position, min(position + self.settings.readahead_blocks, len(blocks))):
            block = blocks[later]
            if later in ahead or any(block.index in run.indexes for run in runs):
                continue
            taken = self.budget.try_take(fetch.length(block, meta))
            if not taken:
                return
            lo, hi = slice_for(block.index, self.settings.block_size, *read)
            ahead[later] = (fetch.spawn(fetch.part(block, meta, lo, hi)), taken)

    async def _origin_read(
        self, bucket: str, key: str, meta: ObjectMeta, start: int | None, end: int | None, headers: dict[str, str] | None
    ) -> OriginResponse:
        request_headers = dict(headers or {})
        # If-Match pins the version we described to the client: an object replaced
        # between HEAD and GET must not be served under the old ETag.
        request_headers["if-match"] = meta.etag
        if start is not None and end is not None:
            request_headers["range"] = f"bytes={start}-{end}"
        response = await self.origin.send("GET", bucket, key, query=meta.version_query, headers=request_headers)
        if response.status == 412:
            await response.aclose()
            await self._on_changed(bucket, key)
            raise ObjectChanged()
        if response.status >= 300:
            raise await self.origin.error_from(response, resource=f"/{bucket}/{key}")
        return response
