"""Opening an object this worker knows nothing of: its metadata and its first bytes together,
never a HEAD in front of a GET. For a read here (`open`): what the worker owning its first
block holds (no origin request), a fleet owner's open of a read within one block it owns, else
one GET of the origin for all the read's bytes (a run). For another node or worker (`open_block`): the block holding
a first byte, from one ranged GET shared by concurrent opens and remembered a moment."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from gateway.engine.coherence import Coherence, Epoch
from gateway.engine.fetch import BlockFetcher, content_range
from gateway.engine.flight import SingleFlight
from gateway.engine.runs import Run, Want
from gateway.engine.sources import FirstBlock, Opened, Unanswered, version_of
from gateway.errors import S3Error
from gateway.lru import LRU
from gateway.objects import ObjectMeta, meta_from_ranged_get
from gateway.store.blocks import BlockId

# Opens a fleet node remembers for a moment (see Opens.open_here): how many, how long.
_RECENT_OPENS = 1024
_RECENT_OPEN = 2.0


Cold = tuple[ObjectMeta, "FirstBlock | Run"]  # what a cold read starts with: a block in hand, or a run


class Opens:
    """The opens of one worker, over its block fetcher (whose siblings and peers it asks).
    Event loop only."""

    def __init__(self, fetch: BlockFetcher, coherence: Coherence) -> None:
        self.fetch = fetch
        self._coherence = coherence
        # Opens under way, by block and the bucket's epoch: an open asked for after a write
        # (this worker's, or another's read from the journal) does not join one begun before it.
        self._opening: SingleFlight[tuple[str, Epoch], Opened | None] = SingleFlight()
        self._peer_opening: SingleFlight[tuple[str, Epoch], Opened | None] = SingleFlight()
        self._recent_opens: LRU[str, tuple[ObjectMeta, BlockId, float]] = LRU(_RECENT_OPENS)

    async def open(self, bucket: str, key: str, query: list[tuple[str, str]], want: Want, *,
                   checksums: bool = False, run: bool = True, asked: int | None = None) -> Cold | None:
        """The metadata of an object this worker knows nothing of, and the bytes `want` reads:
        the owner worker's, when it has both in memory (no origin request); a fleet owner's
        open of the block, when `want` is within one block another node owns; else one GET of
        the origin, whatever the range (BlockFetcher.open_run; in a fleet, the blocks it brings
        that other nodes own are offered to them). None when that answer can't serve (an empty
        range, a start past the end): ask with a HEAD then. Raises the origin's S3Error.
        `checksums`: the metadata must hold the object's checksums (a whole object's GET brings
        them). `run` False: only what another worker holds (None otherwise), the origin is not asked.
        `asked`: the owner worker that just said it knows nothing of the object (Metadata.head_object):
        not asked again for the first block (a block lent to it without the metadata, which it would
        answer after a HEAD, is then read with the metadata by the one GET: one origin request either way)."""
        fetch = self.fetch
        index = want.start // fetch.settings.block_size
        if want.suffix is None:
            owner = fetch.siblings.owner(bucket, key, index) if fetch.siblings is not None else None
            if owner is not None and owner != asked and fetch.siblings is not None:
                known = await fetch.siblings.open_cached(owner, bucket, key, query, index)
                if known is not None and (known[0].complete or not checksums):
                    return known
        if not run:
            return None
        one_block = want.suffix is None and want.end is not None and want.end // fetch.settings.block_size == index
        if one_block and fetch.peers is not None and fetch.route(bucket, key, index) is not None:
            # The block's owner opens it (one ranged GET, shared by the opens of every node) and keeps it.
            return await self.open_block(bucket, key, query, want.start)
        # One GET for all the read's bytes, here; the blocks others own are offered to them (engine.lending).
        return await fetch.open_run(bucket, key, query, want)

    async def open_block(self, bucket: str, key: str, query: list[tuple[str, str]], first_byte: int, *,
                         from_peers: bool = True) -> Opened | None:
        """The metadata of an object nobody asked about lately, and the block holding
        `first_byte`, from one ranged GET instead of a HEAD and then a GET (what another
        node asks of the block's owner, and a read of a block another node owns). Concurrent
        opens of the same block share one request. None when that answer can't serve as both
        (an empty object or a start past the end, which the origin refuses with 416; an
        origin that ignored the range of a large object): ask with a HEAD then. Raises the
        origin's error (NoSuchKey, NoSuchBucket, AccessDenied, ...) as S3Error.
        """
        index = first_byte // self.fetch.settings.block_size
        name = open_name(bucket, key, query, index)
        owner = self.fetch.siblings.owner(bucket, key, index) if self.fetch.siblings is not None else None
        if owner is not None:  # the worker that owns the first block opens the object
            siblings = self.fetch.siblings
            assert siblings is not None
            ask: Callable[[], Awaitable[Opened | None]] = \
                lambda: siblings.open(owner, bucket, key, query, index, from_peers)
        else:
            route = self.fetch.route(bucket, key, index) if from_peers else None
            peers = self.fetch.peers
            if route is None or peers is None:
                return await self.open_here(bucket, key, query, index)
            ask = lambda: peers.open(bucket, key, query, index, route)  # a peer owns the block: it opens the object
        if not self._coherence.trusted():  # an open under way may have begun before an unheard write
            return await self._open_elsewhere(ask, bucket, key, query, index)
        return await self._peer_opening.run((name, self._coherence.epoch(bucket)),
                                            lambda: self._open_elsewhere(ask, bucket, key, query, index))

    async def _open_elsewhere(self, ask: Callable[[], Awaitable[Opened | None]], bucket: str, key: str,
                              query: list[tuple[str, str]], index: int) -> Opened | None:
        """The open as the owner elsewhere answers it; by this node itself when it does not answer."""
        try:
            return await ask()
        except Unanswered:
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
            self._recent_opens.pop(name)
            return None
        hit = await self.fetch.store.get(block)
        if hit is None:
            return None
        self.fetch.stats["open_recent"] += 1
        return meta, FirstBlock(block, hit[0], from_origin=False)

    @property
    def _remembers_opens(self) -> bool:
        """Whether other nodes or workers ask this one to open objects (see open_here)."""
        return self.fetch.fleet is not None or self.fetch.siblings is not None

    def forget(self, bucket: str | None = None, key: str | None = None) -> None:
        """Drop remembered opens of `key` (of the bucket when None; of everything when no
        bucket): its metadata was invalidated, so an open must ask the origin again."""
        if not self._recent_opens:
            return
        if bucket is None:
            self._recent_opens.clear()
            return
        prefix = f"{bucket}\0" if key is None else f"{bucket}\0{key}\0"
        self._recent_opens.remove_where(lambda name: name.startswith(prefix))

    def _remember_open(self, name: str, opened: Opened) -> None:
        self._recent_opens.put(name, (opened[0], opened[1].block, time.monotonic()))

    async def _open(self, bucket: str, key: str, query: list[tuple[str, str]], index: int, name: str,
                    epoch: Epoch) -> Opened | None:
        """The open itself, remembered for the opens that follow unless a write to the bucket
        came meanwhile (`epoch`: the bucket's when it began)."""
        size = self.fetch.settings.block_size
        first = index * size
        response = await self.fetch.origin.get_block(bucket, key, query=query,
                                               headers={"range": f"bytes={first}-{first + size - 1}"})
        if response.status == 416:
            await response.aclose()
            return None
        if response.status >= 300:
            raise await self.fetch.origin.error_from(response, resource=f"/{bucket}/{key}")
        if response.status == 200:  # the range was ignored: fine if that is all of a small object
            length = response.headers.get("content-length", "")
            if index != 0 or not length.isdigit() or int(length) > size:
                await response.aclose()
                return None
            total = int(length)
        else:
            got = content_range(response.headers.get("content-range", ""))
            if got is None or got[0] != first or got[1] != min(first + size, got[2]) - 1:
                await response.aclose()
                raise S3Error("ServiceUnavailable", "The origin answered a different byte range.")
            total = got[2]
        expected = min(first + size, total) - first
        held = await self.fetch.budget.take(expected)  # now that the size is known
        try:
            data = await response.read_at_most(expected)
        except S3Error:  # cut off mid-body: ask with a HEAD, then fetch the block (retried)
            data = b""
        finally:
            self.fetch.budget.give(held)
        if len(data) < expected:
            self.fetch.stats["origin_open_cut"] += 1
            return None
        if len(data) != expected:
            raise S3Error("ServiceUnavailable", "The origin sent a block of the wrong size; retry the request.")
        meta = meta_from_ranged_get(response.header_items, total)
        block = BlockId(bucket, key, version_of(meta), index)
        self.fetch.stats["origin_block_fetch"] += 1
        await self.fetch.store.put(block, data)
        opened = meta, FirstBlock(block, data, from_origin=True)
        if self._remembers_opens and self._coherence.epoch(bucket) == epoch:
            self._remember_open(name, opened)
        return opened



def open_name(bucket: str, key: str, query: list[tuple[str, str]], index: int) -> str:
    """What names an open (object, version asked for, block) for single-flight and memory."""
    return "\0".join((bucket, key, *(v for _, v in query), str(index)))
