"""Reading object bytes: a range split into blocks, held against the read buffer, read
ahead, and streamed in order; reads the cache must not share go straight to the origin."""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import NamedTuple

from gateway.bytebudget import ByteBudget
from gateway.config import CacheSettings
from gateway.engine.fetch import BlockFetcher, FirstBlock, version_of
from gateway.objects import ObjectChanged, ObjectMeta
from gateway.origin import Origin, OriginResponse
from gateway.store.blocks import BlockId, block_span, slice_for

_FOOTER_FIRST_SUFFIXES = (".parquet", ".orc")
_SEQUENTIAL_READERS = 4096  # objects whose last read end is remembered
_NAMED_BLOCKS = 4096  # blocks of one_block whose BlockId is kept (naming one is a digest, a few us)

Ahead = deque[tuple[asyncio.Future[bytes], int]]  # blocks being fetched ahead, with the budget each holds


class OneBlock(NamedTuple):
    """A read within one block: the block, the first and last byte of the object read, and
    where they are in the block (block[lo:hi])."""

    block: BlockId
    start: int
    end: int
    lo: int
    hi: int


class ObjectRead:
    """The bytes of a read, and how it is served: hit-mem | hit-disk | hit-peer | partial | miss.

    A read within one block is `body`, in hand (no stream to run); otherwise `chunks`. Either
    way the read owns what it holds (a share of the read buffer, an origin response) until it
    is closed: `async with read:` or `await read.aclose()`, on every path, sent or not.
    Closing twice is harmless.
    """

    __slots__ = ("source", "chunks", "body", "_close")

    def __init__(self, source: str, *, chunks: AsyncIterator[bytes] | None = None, body: bytes | None = None,
                 close: Callable[[], Awaitable[None]] | None = None) -> None:
        self.source = source
        self.chunks = chunks
        self.body = body
        self._close = close

    async def aclose(self) -> None:
        close, self._close = self._close, None
        if close is not None:
            await close()

    async def __aenter__(self) -> ObjectRead:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


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
        self._read_ends: OrderedDict[tuple[str, str, str], int] = OrderedDict()
        self._named: OrderedDict[tuple[str, str, str, int], BlockId] = OrderedDict()  # oldest out in O(1)

    async def read_object(
        self,
        bucket: str,
        key: str,
        meta: ObjectMeta,
        *,
        start: int | None = None,
        end: int | None = None,
        headers: dict[str, str] | None = None,
        first: FirstBlock | None = None,
    ) -> ObjectRead:
        """The bytes [start, end] (inclusive) of exactly the version `meta` describes.

        From the block cache block by block (fetching missing blocks once, with
        readahead), or straight from the origin for reads whose answer is the caller's
        own (`headers`: encryption keys, payer) or when no cache is configured. The first
        block is in hand before this returns, so a failure becomes an S3 error, not a
        broken stream. `first`: a block already fetched for this read (see BlockFetcher.open).
        """
        fetch = self.fetch
        if headers or fetch is None or meta.size == 0:
            response = await self._origin_read(bucket, key, meta, start, end, headers)
            return ObjectRead("miss", chunks=response.iter_bytes(), close=response.aclose)
        if start is None or end is None:
            start, end = 0, meta.size - 1
        blocks = [BlockId(bucket, key, version_of(meta), i) for i in block_span(start, end, self.settings.block_size)]
        in_hand = first.data if first is not None and first.block == blocks[0] else None
        source = self._describe(fetch, blocks, fetched=in_hand is not None and first is not None and first.from_origin)
        self._read_around(fetch, blocks, meta, start, end)
        first_length = fetch.length(blocks[0], meta)
        if len(blocks) == 1:
            # One block (small objects and small ranges, the common case of many small files):
            # the body in hand, no stream to run. The read buffer covers it until it was sent
            # (closing the read), unless the memory tier holds it (the tier's quota counts it).
            held = 0 if source == "hit-mem" else await self.budget.take(first_length)
            try:
                data = in_hand if in_hand is not None else await fetch.block(blocks[0], meta)
            except BaseException:
                self.budget.give(held)
                raise
            lo, hi = slice_for(blocks[0].index, self.settings.block_size, start, end)
            return ObjectRead(source, body=data if (lo, hi) == (0, len(data)) else data[lo:hi],
                              close=(lambda: self._give_back(held)) if held else None)
        held = await self.budget.take(first_length)
        # Readahead: the next blocks are fetched while the first one is awaited and sent.
        ahead: Ahead = deque()
        self._read_ahead(fetch, blocks, 1, ahead, meta)
        try:
            head_data = in_hand if in_hand is not None else await fetch.block(blocks[0], meta)
        except BaseException:
            self.budget.give(held)
            self._drop(ahead)
            raise
        chunks = self._stream(fetch, blocks, meta, start, end, head_data, held, ahead)
        # Started here, so that closing the read runs its `finally` (which gives the budget
        # back) even if the response never asks for a byte: an unstarted generator's is not run.
        head = await anext(chunks)
        return ObjectRead(source, chunks=_prepend(head, chunks), close=chunks.aclose)

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
            return None
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
            if len(self._named) >= _NAMED_BLOCKS:
                self._named.popitem(last=False)
            block = self._named[fields] = BlockId(bucket, key, version, index)
        return block

    async def _give_back(self, held: int) -> None:
        self.budget.give(held)

    def _read_around(self, fetch: BlockFetcher, blocks: list[BlockId], meta: ObjectMeta, start: int, end: int) -> None:
        """Blocks a reader will want next: a Parquet/ORC footer, the blocks after a range that
        continues the previous one (a reader going through the object in consecutive ranges)."""
        size = self.settings.block_size
        first = blocks[0]
        if first.key.endswith(_FOOTER_FIRST_SUFFIXES):
            # Parquet and ORC readers start at the footer: have the last block ready.
            fetch.prefetch(BlockId(first.bucket, first.key, first.version, (meta.size - 1) // size), meta)
        stream_key = (first.bucket, first.key, first.version)
        if self._read_ends.get(stream_key) == start - 1:
            after = blocks[-1].index + 1
            last_index = (meta.size - 1) // size
            for index in range(after, min(after + self.settings.readahead_blocks, last_index + 1)):
                fetch.prefetch(BlockId(first.bucket, first.key, first.version, index), meta)
        self._read_ends[stream_key] = end
        self._read_ends.move_to_end(stream_key)
        if len(self._read_ends) > _SEQUENTIAL_READERS:
            self._read_ends.popitem(last=False)

    @staticmethod
    def _describe(fetch: BlockFetcher, blocks: list[BlockId], *, fetched: bool = False) -> str:
        """The x-cache value: where the blocks of this read are, as it starts (`fetched`:
        the first block just came from the origin)."""
        store = fetch.store
        memory = store.memory
        rest = blocks[1:] if fetched else blocks
        in_memory = sum(1 for b in rest if memory is not None and b in memory)
        cached = sum(1 for b in rest if b in store)
        if fetched:
            return "miss" if cached == 0 else "partial"
        if in_memory == len(blocks):
            return "hit-mem"
        if cached == len(blocks):
            return "hit-disk"
        if fetch.fleet is not None:
            # Blocks not held here that a peer owns count as peer hits (whether that peer
            # holds them already is not known at this point).
            remote = sum(1 for b in blocks if b not in store and fetch.route(b.bucket, b.key, b.index) is not None)
            if remote and cached + remote == len(blocks):
                return "hit-peer"
        return "miss" if cached == 0 else "partial"

    async def _stream(self, fetch: BlockFetcher, blocks: list[BlockId], meta: ObjectMeta, start: int, end: int,
                      first: bytes, held: int, ahead: Ahead) -> AsyncGenerator[bytes, None]:
        """Each block's bytes in turn; the budget a block took is given back once it was sent."""
        size = self.settings.block_size
        try:
            for position, block in enumerate(blocks):
                if position == 0:
                    data = first
                elif ahead:
                    fetching, held = ahead.popleft()  # `ahead` holds exactly the blocks after this one
                    data = await fetching
                else:
                    held = await self.budget.take(fetch.length(block, meta))
                    data = await fetch.block(block, meta)
                self._read_ahead(fetch, blocks, position + 1 + len(ahead), ahead, meta)  # keep the window full
                lo, hi = slice_for(block.index, size, start, end)
                yield data if (lo, hi) == (0, len(data)) else data[lo:hi]
                self.budget.give(held)
                held = 0
        finally:
            self.budget.give(held)
            self._drop(ahead)  # only the waiting stops: shared fetches go on and fill the cache

    def _read_ahead(self, fetch: BlockFetcher, blocks: list[BlockId], position: int, ahead: Ahead,
                    meta: ObjectMeta) -> None:
        """Start fetching blocks[position:] up to the readahead window, while the budget allows."""
        while len(ahead) < self.settings.readahead_blocks and position < len(blocks):
            held = self.budget.try_take(fetch.length(blocks[position], meta))
            if not held:
                return
            ahead.append((fetch.spawn(fetch.block(blocks[position], meta)), held))
            position += 1

    def _drop(self, ahead: Ahead) -> None:
        while ahead:
            fetching, held = ahead.popleft()
            fetching.cancel()
            self.budget.give(held)

    async def _origin_read(
        self, bucket: str, key: str, meta: ObjectMeta, start: int | None, end: int | None, headers: dict[str, str] | None
    ) -> OriginResponse:
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
            await self._on_changed(bucket, key)
            raise ObjectChanged()
        if response.status >= 300:
            raise await self.origin.error_from(response, resource=f"/{bucket}/{key}")
        return response


async def _prepend(head: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    yield head
    async for chunk in rest:
        yield chunk

