"""Object bytes through the block cache: blocks from the tiers, or fetched from the origin
once however many readers wait, with readahead; reads the cache must not share go
straight to the origin. In a fleet, a block this node does not own comes from its
owners over the peer API, and only owners fetch blocks from the origin."""

from __future__ import annotations

import asyncio
import functools
import re
import time
from collections import Counter, OrderedDict, deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from gateway import log
from gateway.bytebudget import ByteBudget
from gateway.cluster.fleet import Fleet, Route
from gateway.cluster.membership import Member
from gateway.cluster.peers import PeerError, PeerRefused
from gateway.config import CacheSettings
from gateway.errors import S3Error
from gateway.objects import ObjectChanged, ObjectMeta, decode_meta, encode_meta, meta_from_ranged_get
from gateway.origin import Origin, OriginResponse
from gateway.store.blocks import BlockId, block_bounds, block_span, slice_for
from gateway.store.tiers import TieredStore

_FOOTER_FIRST_SUFFIXES = (".parquet", ".orc")
_SEQUENTIAL_READERS = 4096  # objects whose last read end is remembered
_PEER_LOG_EVERY = 10.0  # seconds between two log lines about the same failing peer
_EPOCH = datetime.fromtimestamp(0, timezone.utc)
_HOLD_LANES = 4  # blocks of one object a fill or a load fetches at a time
# Opens a fleet node remembers for a moment (see BlockReader._open_here): how many, how long.
_RECENT_OPENS = 1024
_RECENT_OPEN = 2.0


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


@dataclass(frozen=True, slots=True)
class FirstBlock:
    """A block fetched together with the object's metadata (a cold GET), in hand."""

    block: BlockId
    data: bytes


class BlockReader:
    """Reads object bytes for the engine. Event loop only.

    `on_changed(bucket, key)` is called when the origin no longer holds the version a
    read was describing (its If-Match failed), before ObjectChanged is raised.

    With a `fleet`, a block missing here is asked of its owners in rendezvous order
    (`_peer_inflight`, single-flight like `_inflight`); a peer that fails is skipped, and
    when none answers the block comes from the origin after all. Blocks asked for by
    peers (`serve_block`, `serve_open`) come from the tiers or the origin, never from
    another peer, so two nodes whose views differ for a moment cannot ask each other
    in a circle.
    """

    def __init__(
        self,
        origin: Origin,
        store: TieredStore | None,
        settings: CacheSettings,
        stats: Counter[str],
        on_changed: Callable[[str, str], Awaitable[None]],
        *,
        fleet: Fleet | None = None,
    ) -> None:
        self.origin = origin
        self.fleet = fleet
        self.store = store
        self.cache_settings = settings
        self.stats = stats
        self._on_changed = on_changed
        self.budget = ByteBudget(settings.read_buffer)
        self._inflight: dict[str, asyncio.Future[bytes]] = {}
        self._opening: dict[str, asyncio.Future[tuple[ObjectMeta, FirstBlock] | None]] = {}
        self._background: set[asyncio.Future[bytes]] = set()
        # Fetches from peers, by block name (and opens, by the same name as _opening).
        self._peer_inflight: dict[str, asyncio.Future[bytes]] = {}
        self._peer_opening: dict[str, asyncio.Future[tuple[ObjectMeta, FirstBlock] | None]] = {}
        self._peer_logged: dict[str, float] = {}
        self._recent_opens: OrderedDict[str, tuple[ObjectMeta, BlockId, float]] = OrderedDict()
        # Where the last read of each recently read object ended, to spot sequential readers.
        self._read_ends: OrderedDict[tuple[str, str, str], int] = OrderedDict()

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
        broken stream. `first`: a block already fetched for this read (see `open`).
        """
        if headers or self.store is None or meta.size == 0:
            response = await self._origin_read(bucket, key, meta, start, end, headers)
            return ObjectRead("miss", chunks=response.iter_bytes(), close=response.aclose)
        if start is None or end is None:
            start, end = 0, meta.size - 1
        size = self.cache_settings.block_size
        version = _version(meta)
        blocks = [BlockId(bucket, key, version, i) for i in block_span(start, end, size)]
        in_hand = first.data if first is not None and first.block == blocks[0] else None
        source = self._describe(blocks, fetched=in_hand is not None)
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
        first_length = self._length(blocks[0], meta)
        if len(blocks) == 1:
            # One block (small objects and small ranges, the common case of many small files):
            # the body in hand, no stream to run. The read buffer covers it until it was sent
            # (`release`), unless the memory tier holds it (the tier's quota counts it).
            held = 0 if source == "hit-mem" else await self.budget.take(first_length)
            try:
                data = in_hand if in_hand is not None else await self._block(blocks[0], meta)
            except BaseException:
                self.budget.give(held)
                raise
            lo, hi = slice_for(blocks[0].index, size, start, end)
            return ObjectRead(source, body=data if (lo, hi) == (0, len(data)) else data[lo:hi],
                              close=functools.partial(self._give_back, held) if held else None)
        held = await self.budget.take(first_length)
        # Readahead: the next blocks are fetched while the first one is awaited and sent.
        ahead: deque[tuple[asyncio.Future[bytes], int]] = deque()
        self._read_ahead(blocks, 1, ahead, meta)
        try:
            head_data = in_hand if in_hand is not None else await self._block(blocks[0], meta)
        except BaseException:
            self.budget.give(held)
            self._drop(ahead)
            raise
        chunks = self._stream(blocks, meta, start, end, head_data, held, ahead)
        # Started here, so that closing the read runs its `finally` (which gives the budget
        # back) even if the response never asks for a byte: an unstarted generator's is not run.
        head = await anext(chunks)
        return ObjectRead(source, chunks=_prepend(head, chunks), close=chunks.aclose)

    async def _give_back(self, held: int) -> None:
        self.budget.give(held)

    def _describe(self, blocks: list[BlockId], *, fetched: bool = False) -> str:
        """The x-cache value: where the blocks of this read are, as it starts (`fetched`:
        the first block just came from the origin)."""
        assert self.store is not None
        memory = self.store.memory
        rest = blocks[1:] if fetched else blocks
        in_memory = sum(1 for b in rest if memory is not None and b in memory)
        cached = sum(1 for b in rest if b in self.store)
        if fetched:
            return "miss" if cached == 0 else "partial"
        if in_memory == len(blocks):
            return "hit-mem"
        if cached == len(blocks):
            return "hit-disk"
        if self.fleet is not None:
            # Blocks not held here that a peer owns count as peer hits (whether that peer
            # holds them already is not known at this point).
            remote = sum(1 for b in blocks if b not in self.store and self._route(b.bucket, b.key, b.index) is not None)
            if remote and cached + remote == len(blocks):
                return "hit-peer"
        return "miss" if cached == 0 else "partial"

    async def _stream(
        self, blocks: list[BlockId], meta: ObjectMeta, start: int, end: int, first: bytes, held: int,
        ahead: deque[tuple[asyncio.Future[bytes], int]],
    ) -> AsyncGenerator[bytes, None]:
        """Each block's bytes in turn; the budget a block took is given back once it was sent."""
        size = self.cache_settings.block_size
        try:
            for position, block in enumerate(blocks):
                if position == 0:
                    data = first
                elif ahead:
                    fetch, held = ahead.popleft()  # `ahead` holds exactly the blocks after this one
                    data = await fetch
                else:
                    held = await self.budget.take(self._length(block, meta))
                    data = await self._block(block, meta)
                self._read_ahead(blocks, position + 1 + len(ahead), ahead, meta)  # keep the window full
                lo, hi = slice_for(block.index, size, start, end)
                yield data if (lo, hi) == (0, len(data)) else data[lo:hi]
                self.budget.give(held)
                held = 0
        finally:
            self.budget.give(held)
            self._drop(ahead)  # only the waiting stops: shared fetches go on and fill the cache

    def _read_ahead(
        self, blocks: list[BlockId], position: int, ahead: deque[tuple[asyncio.Future[bytes], int]], meta: ObjectMeta
    ) -> None:
        """Start fetching blocks[position:] up to the readahead window, while the budget allows."""
        while len(ahead) < self.cache_settings.readahead_blocks and position < len(blocks):
            held = self.budget.try_take(self._length(blocks[position], meta))
            if not held:
                return
            ahead.append((self._spawn(self._block(blocks[position], meta)), held))
            position += 1

    def _drop(self, ahead: deque[tuple[asyncio.Future[bytes], int]]) -> None:
        while ahead:
            fetch, held = ahead.popleft()
            fetch.cancel()
            self.budget.give(held)

    def _length(self, block: BlockId, meta: ObjectMeta) -> int:
        first, last = block_bounds(block.index, self.cache_settings.block_size, meta.size)
        return last - first + 1

    async def open(
        self, bucket: str, key: str, query: list[tuple[str, str]], first_byte: int
    ) -> tuple[ObjectMeta, FirstBlock] | None:
        """The metadata of an object nobody asked about lately, and the block holding
        `first_byte`, from one ranged GET instead of a HEAD and then a GET (one origin
        round trip saved on every cold read). Concurrent opens of the same block share
        one request. None when that answer can't serve as both (an empty object or a
        start past the end, which the origin refuses with 416; an origin that ignored
        the range of a large object): ask with a HEAD then. Raises the origin's error
        (NoSuchKey, NoSuchBucket, AccessDenied, ...) as S3Error.
        """
        assert self.store is not None
        index = first_byte // self.cache_settings.block_size
        name = "\0".join((bucket, key, *(v for _, v in query), str(index)))
        route = self._route(bucket, key, index)
        if route is not None:  # a peer owns the block: it opens the object for us
            opening = self._peer_opening.get(name)
            if opening is None:
                opening = asyncio.ensure_future(self._open_via_peers(bucket, key, query, index, name, route))
                self._peer_opening[name] = opening
                opening.add_done_callback(lambda done: self._fetched(name, done, self._peer_opening))
            return await asyncio.shield(opening)
        return await self._open_here(bucket, key, query, index, name)

    async def _open_here(
        self, bucket: str, key: str, query: list[tuple[str, str]], index: int, name: str
    ) -> tuple[ObjectMeta, FirstBlock] | None:
        """`open` by this node itself: one ranged GET of the origin, shared by concurrent opens.

        In a fleet, an open that just finished answers the opens that arrive a moment
        later too (`_recent_opens`): several nodes that all missed the metadata at once
        ask the owner at slightly different times, and the block must still be fetched once.
        """
        if self.fleet is not None:
            recent = await self._recent_open(name)
            if recent is not None:
                return recent
        opening = self._opening.get(name)
        if opening is None:
            opening = asyncio.ensure_future(self._open(bucket, key, query, index))
            self._opening[name] = opening
            opening.add_done_callback(lambda done: self._fetched(name, done, self._opening))
            if self.fleet is not None:
                opening.add_done_callback(lambda done: self._remember_open(name, done))
        return await asyncio.shield(opening)

    async def _recent_open(self, name: str) -> tuple[ObjectMeta, FirstBlock] | None:
        assert self.store is not None
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
        return meta, FirstBlock(block, hit[0])

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

    def _remember_open(self, name: str, done: asyncio.Future[tuple[ObjectMeta, FirstBlock] | None]) -> None:
        if done.cancelled() or done.exception() is not None or done.result() is None:
            return
        opened = done.result()
        assert opened is not None
        self._recent_opens[name] = (opened[0], opened[1].block, time.monotonic())
        self._recent_opens.move_to_end(name)
        while len(self._recent_opens) > _RECENT_OPENS:
            self._recent_opens.popitem(last=False)

    async def _open(
        self, bucket: str, key: str, query: list[tuple[str, str]], index: int
    ) -> tuple[ObjectMeta, FirstBlock] | None:
        assert self.store is not None
        size = self.cache_settings.block_size
        first = index * size
        response = await self.origin.send("GET", bucket, key, query=query,
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
        block = BlockId(bucket, key, _version(meta), index)
        self.stats["origin_block_fetch"] += 1
        await self.store.put(block, data)
        return meta, FirstBlock(block, data)

    async def _block(self, block: BlockId, meta: ObjectMeta, *, from_peers: bool = True,
                     replicas: int | None = None) -> bytes:
        """One block: from a tier, else fetched from the origin exactly once however many wait.

        In a fleet (and `from_peers`), a block whose owner is another node is asked of its
        owners instead, once however many wait, and from the origin only if none answers.
        """
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
            route = self._route(block.bucket, block.key, block.index, replicas) if from_peers else None
            if route is not None:
                fetch = self._peer_inflight.get(block.name)
                if fetch is not None:
                    self.stats["block_wait"] += 1
                    break
                self.stats["block_miss"] += 1
                fetch = asyncio.ensure_future(self._fetch_from_peers(block, meta, route))
                self._peer_inflight[block.name] = fetch
                fetch.add_done_callback(functools.partial(self._fetched, block.name, inflight=self._peer_inflight))
                break
            self.stats["block_miss"] += 1
            fetch = asyncio.ensure_future(self._fetch_block(block, meta))
            self._inflight[block.name] = fetch
            fetch.add_done_callback(functools.partial(self._fetched, block.name, inflight=self._inflight))
            break
        # A reader that goes away does not cancel a fetch that others may be waiting on.
        return await asyncio.shield(fetch)

    @staticmethod
    def _fetched(name: str, fetch: asyncio.Future[Any], inflight: dict[str, Any]) -> None:
        inflight.pop(name, None)
        if not fetch.cancelled():
            fetch.exception()  # retrieved: a failed fetch nobody waited for is not an error to log

    async def _fetch_block(self, block: BlockId, meta: ObjectMeta) -> bytes:
        """One block from the origin (ranged GET, If-Match the version), stored. An answer
        cut off mid-body is asked for again, `origin.retries` times (the block is held
        whole before a byte of it is sent, so a retry is invisible to the client)."""
        assert self.store is not None
        first, last = block_bounds(block.index, self.cache_settings.block_size, meta.size)
        query = [("versionId", meta.version_id)] if meta.version_id and meta.version_id != "null" else []
        expected = last - first + 1
        for attempt in range(self.origin.settings.retries + 1):
            response = await self.origin.send(
                "GET", block.bucket, block.key, query=query,
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

    # --- the fleet ---------------------------------------------------------------------

    def _route(self, bucket: str, key: str, index: int, replicas: int | None = None) -> Route | None:
        """The owners to ask for a block, or None: no fleet, or this node is its first owner."""
        if self.fleet is None:
            return None
        route = self.fleet.route(bucket, key, index, replicas)
        return route if route.ask else None

    async def hold(self, bucket: str, key: str, meta: ObjectMeta, *, replicas: int | None = None) -> int:
        """Have every block of the object that this node owns (with `replicas` owners, if
        given) in the tiers, each from the owners above this node or the origin; returns
        the bytes that were not here yet. A replica being filled, or a load."""
        if self.store is None or self.fleet is None or meta.size == 0:
            return 0
        size = self.cache_settings.block_size
        version = _version(meta)
        wanted = [BlockId(bucket, key, version, index) for index in range((meta.size + size - 1) // size)
                  if self.fleet.owns(bucket, key, index, replicas)]
        lanes = asyncio.Semaphore(_HOLD_LANES)

        async def one(block: BlockId) -> int:
            async with lanes:
                if block in self.store:  # type: ignore[operator]
                    return 0
                held = await self.budget.take(self._length(block, meta))
                try:
                    data = await self._block(block, meta, replicas=replicas)
                    if block not in self.store:  # type: ignore[operator]  # joined a read that keeps nothing
                        await self.store.put(block, data)  # type: ignore[union-attr]
                finally:
                    self.budget.give(held)
                self.stats["replica_fill_blocks"] += 1
                return len(data)

        return sum(await asyncio.gather(*(one(block) for block in wanted)))

    async def spread(self, bucket: str, key: str, meta: ObjectMeta, *, replicas: int | None = None) -> None:
        """A load in a fleet: every owner of the object's blocks (`replicas` owners each, if
        given) fetches and keeps its blocks, all owners at once (peer `hold`; this node's
        own share directly). Raises S3Error when an owner failed, or the origin refused."""
        assert self.fleet is not None
        fleet, size = self.fleet, self.cache_settings.block_size
        blocks = (meta.size + size - 1) // size

        async def ask(member: Member, count: int) -> int:
            if member == fleet.me:
                return await self.hold(bucket, key, meta, replicas=replicas)
            n = fleet.replicas(bucket, key, replicas)
            try:
                return await fleet.peers.hold(member, bucket, key, meta.etag, meta.version_id, meta.size, n, count)
            except PeerRefused as refused:
                await self._peer_refused(bucket, key, refused)
                raise refused.error from None
            except PeerError as exc:
                self._peer_failed(member, exc)
                raise S3Error("ServiceUnavailable", f"Node {member.id} did not load its blocks ({exc}); "
                                                    "load again once the fleet has noticed.") from None

        await asyncio.gather(*(ask(member, count) for member, count in
                               fleet.owners_of_object(bucket, key, blocks, replicas).items()))

    async def drop_unowned(self, bucket: str, key: str, meta: ObjectMeta) -> int:
        """Remove the blocks of the object version that this node holds but no longer owns
        (its replica count went down), unless passive copies are kept or the block is
        pinned; returns how many were removed. Blocks of older versions age out."""
        if self.store is None or self.fleet is None or self.fleet.settings.passive_cache:
            return 0
        size, version, dropped = self.cache_settings.block_size, _version(meta), 0
        for index in range((meta.size + size - 1) // size):
            block = BlockId(bucket, key, version, index)
            if block in self.store and not self.store.is_pinned(block) and not self.fleet.owns(bucket, key, index):
                dropped += await self.store.remove(block)
        self.stats["replica_drop_blocks"] += dropped
        return dropped

    async def _fetch_from_peers(self, block: BlockId, meta: ObjectMeta, route: Route) -> bytes:
        assert self.store is not None and self.fleet is not None
        length = self._length(block, meta)
        for peer in route.ask:
            try:
                data = await self.fleet.peers.block(peer, block.bucket, block.key, meta.etag, meta.version_id,
                                                    meta.size, block.index, length)
            except PeerRefused as refused:
                await self._peer_refused(block.bucket, block.key, refused)
                self._peer_failed(peer, refused)
                continue
            except PeerError as exc:
                self._peer_failed(peer, exc)
                continue
            self.stats["peer_block_fetch"] += 1
            if route.keep:
                await self.store.put(block, data)
            return data
        # No owner answered: the block comes from the origin (and is kept: its owners are
        # failing, and the next read should not wait for them again).
        self.stats["peer_fallback"] += 1
        return await self._block(block, meta, from_peers=False)

    async def _open_via_peers(
        self, bucket: str, key: str, query: list[tuple[str, str]], index: int, name: str, route: Route
    ) -> tuple[ObjectMeta, FirstBlock] | None:
        """`open`, asked of the owners of block `index`; by this node itself if none answers."""
        assert self.store is not None and self.fleet is not None
        size = self.cache_settings.block_size
        version_id = dict(query).get("versionId")
        for peer in route.ask:
            try:
                opened = await self.fleet.peers.open(peer, bucket, key, version_id, index, size, budget=self.budget)
            except PeerRefused as refused:
                await self._peer_refused(bucket, key, refused)
                self._peer_failed(peer, refused)
                continue
            except PeerError as exc:
                self._peer_failed(peer, exc)
                continue
            if opened is None:
                return None
            meta = decode_meta(opened[0])
            first = index * size
            if not isinstance(meta, ObjectMeta) or len(opened[1]) != min(first + size, meta.size) - first:
                self._peer_failed(peer, PeerError("an open answer that does not add up"))
                continue
            block = BlockId(bucket, key, _version(meta), index)
            self.stats["peer_open"] += 1
            if route.keep:
                await self.store.put(block, opened[1])
            return meta, FirstBlock(block, opened[1])
        self.stats["peer_fallback"] += 1
        return await self._open_here(bucket, key, query, index, name)

    async def _peer_refused(self, bucket: str, key: str, refused: PeerRefused) -> None:
        """An owner's origin said no: that answer is ours too, unless it is the origin failing
        (5xx), which another owner or the origin may get past (the caller goes on)."""
        if refused.changed:
            await self._on_changed(bucket, key)
            raise ObjectChanged()
        if refused.error.status < 500:
            refused.error.resource = f"/{bucket}/{key}"
            raise refused.error

    def _peer_failed(self, peer: Member, exc: Exception) -> None:
        self.stats["peer_failure"] += 1
        now = time.monotonic()
        if now - self._peer_logged.get(peer.id, -_PEER_LOG_EVERY) >= _PEER_LOG_EVERY:
            self._peer_logged[peer.id] = now
            log.cluster.warning("peer %s failed (%s); asking the next owner or the origin", peer.id, exc)

    async def serve_block(self, bucket: str, key: str, etag: str, version_id: str, size: int, index: int) -> bytes:
        """A block a peer asked for: from the tiers, else from the origin once (and kept).

        Raises PeerRefused for the origin's S3 errors, LookupError without a block cache,
        ValueError for a block outside the object.
        """
        if self.store is None:
            raise LookupError("no block cache")
        meta = ObjectMeta(size=size, etag=etag, last_modified=_EPOCH,
                          headers={"x-amz-version-id": version_id} if version_id else {})
        block = BlockId(bucket, key, _version(meta), index)
        length = self._length(block, meta)
        memory = self.store.memory
        held = 0 if memory is not None and block in memory else await self.budget.take(length)
        try:
            return await self._block(block, meta, from_peers=False)
        except ObjectChanged as exc:
            raise PeerRefused(exc, changed=True) from exc
        except S3Error as exc:
            raise PeerRefused(exc, changed=False) from exc
        finally:
            self.budget.give(held)

    async def serve_hold(self, bucket: str, key: str, etag: str, version_id: str, size: int, replicas: int) -> int:
        """A load a peer asked for (see `hold`): the bytes fetched. Raises as `serve_block` does."""
        if self.store is None or self.fleet is None:
            raise LookupError("no block cache")
        if size < 0 or replicas < 1:
            raise ValueError("size and replicas out of range")
        meta = ObjectMeta(size=size, etag=etag, last_modified=_EPOCH,
                          headers={"x-amz-version-id": version_id} if version_id else {})
        try:
            return await self.hold(bucket, key, meta, replicas=replicas)
        except ObjectChanged as exc:
            raise PeerRefused(exc, changed=True) from exc
        except S3Error as exc:
            raise PeerRefused(exc, changed=False) from exc

    async def serve_open(self, bucket: str, key: str, version_id: str, index: int) -> tuple[bytes, bytes] | None:
        """An open a peer asked for (see `open`): (metadata in the shared form, block) or None."""
        if self.store is None:
            raise LookupError("no block cache")
        query = [("versionId", version_id)] if version_id else []
        name = "\0".join((bucket, key, *(v for _, v in query), str(index)))
        try:
            opened = await self._open_here(bucket, key, query, index, name)
        except S3Error as exc:
            raise PeerRefused(exc, changed=False) from exc
        if opened is None:
            return None
        return encode_meta(opened[0]), opened[1].data

    def _prefetch(self, block: BlockId, meta: ObjectMeta) -> None:
        """Fetch a block nobody asked for yet, if the budget allows; it is given back once
        the block is stored."""
        assert self.store is not None
        if block not in self.store and block.name not in self._inflight and block.name not in self._peer_inflight:
            held = self.budget.try_take(self._length(block, meta))
            if held:
                self.stats["prefetch"] += 1
                self._spawn(self._block(block, meta)).add_done_callback(lambda _: self.budget.give(held))

    def _spawn(self, work: Awaitable[bytes]) -> asyncio.Future[bytes]:
        """Run `work` now; a failure nobody waits for only costs a later miss, not a log line."""
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._forget_background)
        return task

    def _forget_background(self, task: asyncio.Future[bytes]) -> None:
        self._background.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a failure nobody waited for is not logged

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

    async def cache_written(
        self, bucket: str, key: str, *, etag: str, version_id: str | None, chunks: AsyncIterator[bytes], size: int
    ) -> None:
        """CACHE_THROUGH: the blocks of an object the origin just acknowledged, so a read after
        the write is a hit. Nothing happens unless cache.cache_through is on."""
        if self.store is None or not self.cache_settings.cache_through or not etag or size == 0:
            return
        block_size = self.cache_settings.block_size
        version = version_id if version_id and version_id != "null" else etag
        fleet = self.fleet
        # In a fleet, a node keeps the blocks it owns (and others only as passive copies):
        # a block kept anywhere else would never be asked for.
        everything = fleet is None or fleet.settings.passive_cache
        kept = 0

        async def keep(index: int, data: bytes) -> None:
            nonlocal kept
            if everything or fleet.owns(bucket, key, index):  # type: ignore[union-attr]
                await self.store.put(BlockId(bucket, key, version, index), data)  # type: ignore[union-attr]
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


async def _prepend(head: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    yield head
    async for chunk in rest:
        yield chunk


def _version(meta: ObjectMeta) -> str:
    """What names the blocks of this object version: its version id, else its ETag."""
    return meta.version_id if meta.version_id and meta.version_id != "null" else meta.etag


def _content_range(value: str) -> tuple[int, int, int] | None:
    """(first, last, size) of `bytes first-last/size`."""
    match = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+)", value.strip())
    return (int(match[1]), int(match[2]), int(match[3])) if match else None
