"""Blocks a run of this worker brought that others own, offered to them: to the worker of this
node that owns one (it takes the bytes over this worker's socket), and to the nodes of the fleet
that own it (each takes them over the peer API the same way, and hands them to its own owner
worker). The node, and the fleet, keep a block the origin sent once."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.cluster.fleet import Fleet
from gateway.config import CacheSettings
from gateway.engine.peers import Peers
from gateway.engine.runs import RunStopped
from gateway.engine.siblings import Siblings, Told
from gateway.lru import LRU
from gateway.objects import ObjectMeta
from gateway.store.blocks import BlockId
from gateway.store.shared import SharedTier
from gateway.store.tiers import TieredStore

_TAKEN_OBJECTS = 4096  # objects whose version taken lately is remembered (Lending.taken)
_OFFERS = 1 << 16  # blocks waiting at most (a read buffer's worth of bytes is the bound reached first)

Arriving = Callable[[BlockId, Callable[[], Awaitable[bytes]]], Awaitable[bytes]]  # BlockFetcher.arriving


class Lending:
    """What this worker lends and takes, for its fetcher. Event loop only.

    A block offered waits here until each owner it was offered to took it (`lent`), or said it
    would not; at most a read buffer's worth waits, the oldest offers going first. A take asks
    nothing of the origin: a block the giver no longer has is left to the next read that wants it.
    What it needs of the fetcher it is given by it: whether a block is being fetched (`fetching`),
    a take registered as the block's fetch (`arriving`), work run in the background (`spawn`).
    """

    def __init__(self, store: TieredStore, settings: CacheSettings, stats: Counter[str], *, fleet: Fleet | None,
                 siblings: Siblings | None, peers: Peers | None, fetching: Callable[[BlockId], bool],
                 arriving: Arriving, spawn: Callable[[Awaitable[Any]], asyncio.Future[Any]]) -> None:
        self.stats = stats
        self._store = store
        self._read_buffer = settings.read_buffer
        self._fleet = fleet
        self._siblings = siblings
        self._peers = peers
        self._fetching = fetching
        self._arriving = arriving
        self._spawn = spawn
        # name -> (bytes, owners yet to take them), the oldest offer first; bounded by bytes and
        # count in `_offer` (never by the LRU itself, which would not give their bytes back).
        self._lent: LRU[str, tuple[bytes, int]] = LRU(_OFFERS + 1)
        self._bytes = 0
        # The version of each object a block of which was taken lately (its metadata stays with
        # the giver): what an open another worker asks of this one may find here (Serving).
        self.taken: LRU[tuple[str, str], ObjectMeta] = LRU(_TAKEN_OBJECTS)
        self._tells: LRU[str, Told] = LRU(_TAKEN_OBJECTS)  # block name -> metadata to tell with it (tell_with)

    async def keep(self, block: BlockId, meta: ObjectMeta, data: bytes) -> None:
        """A block a run brought: kept by this node when it is one of the block's owners in the
        fleet (or keeps what it reads, `cluster.passive_cache`), and offered to the other nodes
        owning it (those ranked above this one, when it is an owner); kept by this worker when it
        owns the block, else lent to the worker of this node that does: through the node's shared
        memory tier when there is one (written to the owner's file, the owner told to take it in:
        one request), else offered (the owner asks for the bytes). The metadata to tell that owner
        (`tell_with`) goes with it."""
        self.stats["origin_block_fetch"] += 1
        route = self._fleet.route(block.bucket, block.key, block.index) if self._fleet is not None else None
        peers = self._peers
        nodes = route.ask if route is not None and peers is not None else ()
        here = route is None or route.keep
        siblings = self._siblings if here else None
        owner = siblings.owner(block.bucket, block.key, block.index) if siblings is not None else None
        in_file = owner is not None and siblings is not None and siblings.in_files
        takers = len(nodes) + (owner is not None and not in_file)
        if takers:
            self._offer(block, data, takers)
        for node in nodes:
            assert peers is not None
            self.stats["run_block_offered"] += 1
            self._spawn(self._given(block, peers.give(node, block, meta, self.giver)))
        if owner is not None and siblings is not None:
            told = self._tells.pop(block.name)
            if in_file:
                self._spawn(self._lend_in_file(owner, block, meta, data, told))
            else:
                self._spawn(self._given(block, siblings.give(owner, block, meta, told=told)))
        elif here:
            await self._store.put(block, data)

    async def _lend_in_file(self, owner: int, block: BlockId, meta: ObjectMeta, data: bytes, told: Told | None) -> None:
        """Lend the block to its owner worker through its file of the node's shared memory tier,
        or, when the file could not be written, as an offer."""
        memory, siblings = self._store.memory, self._siblings
        assert isinstance(memory, SharedTier) and siblings is not None
        if block in memory:  # its owner holds it, or another worker wrote it for it: nothing to lend
            self.stats["lend_held"] += 1
            if told is not None:
                await siblings.tell_meta(owner, block.bucket, block.key, *told)
            return
        inode = await memory.write_for_owner(block, data)
        if inode:
            self.stats["lent_in_file"] += 1
            if not await siblings.give(owner, block, meta, told=told, in_file=True):
                memory.drop_written(block, inode)  # (the owner will not take it: in no quota, it is not left)
            return
        self._offer(block, data, 1)
        await self._given(block, siblings.give(owner, block, meta, told=told))

    async def _given(self, block: BlockId, told: Awaitable[bool]) -> None:
        if not await told:
            self.lent(block)  # the owner was not told: it will not take it, and it is not kept here either

    def tell_with(self, block: BlockId, told: Told) -> None:
        """Metadata to tell the owner worker of `block` (of the object's first block: Metadata's
        owner) together with the block, when a run of this worker lends it (`keep`)."""
        self._tells.put(block.name, told)

    def untold(self, block: BlockId) -> Told | None:
        """The metadata `tell_with` left for `block` that no lend took (the run did not bring it)."""
        return self._tells.pop(block.name)

    @property
    def waiting(self) -> int:
        """Blocks offered that an owner has yet to take."""
        return len(self._lent)

    @property
    def giver(self) -> int:
        """This worker's index in its node (what a taker asks for the bytes by)."""
        return 0 if self._siblings is None else self._siblings.workers.index

    def _offer(self, block: BlockId, data: bytes, takers: int) -> None:
        again = self._lent.pop(block.name)  # offered before (another run brought it too): each taker asks once
        if again is not None:
            self._bytes -= len(again[0])
            takers += again[1]
        self._lent.put(block.name, (data, takers))
        self._bytes += len(data)
        while (self._bytes > self._read_buffer or len(self._lent) > _OFFERS) and len(self._lent) > 1:
            oldest = self._lent.pop_oldest()
            assert oldest is not None
            self._bytes -= len(oldest[1][0])
            self.stats["lent_dropped"] += 1

    def lent(self, block: BlockId) -> bytes | None:
        """A block offered to owners (`keep`), to one of them that takes it or will not (each once);
        None when it is gone."""
        offered = self._lent.pop(block.name)
        if offered is None:
            return None
        data, takers = offered
        if takers > 1:
            self._lent.put(block.name, (data, takers - 1))
        else:
            self._bytes -= len(data)
        return data

    async def take(self, block: BlockId, meta: ObjectMeta, giver: int, node: str = "", in_file: bool = False) -> None:
        """Keep a block worker `giver` offers, of this node or (`node`, a member's id) of another
        node, unless it is here or on its way already; `in_file`: the giver wrote it to this
        worker's file of the node's shared memory tier (read from there, kept, the file deleted if
        not kept). A block from another node that another worker of this one owns is taken by that
        worker (told to, from that node). While it is taken, it is on its way here
        (BlockFetcher.arriving): a read of it waits for it."""
        if not node:
            self.taken.put((block.bucket, block.key), meta)
        if block in self._store or self._fetching(block):
            return
        siblings, peers = self._siblings, self._peers
        if node:
            if peers is None or self._fleet is None or not self._fleet.route(block.bucket, block.key, block.index).keep:
                self.stats["take_not_owner"] += 1  # (views of the fleet that differ for a moment)
                return
            owner = siblings.owner(block.bucket, block.key, block.index) if siblings is not None else None
            if owner is not None and siblings is not None:
                await siblings.give(owner, block, meta, giver, node)
                return
        memory = self._store.memory if in_file and not node else None

        async def taken() -> bytes:
            if isinstance(memory, SharedTier):
                data = memory.read_written(block)
            elif node and peers is not None:
                data = await peers.lent(node, giver, block, meta)
            else:
                data = await siblings.lent(giver, block, meta) if siblings is not None else None
            if data is None:
                raise RunStopped()  # (a read waiting for it fetches it itself)
            await self._store.put(block, data)
            if isinstance(memory, SharedTier):
                memory.drop_written(block)  # (unless kept: then it is this worker's own file now)
            return data

        try:
            await self._arriving(block, taken)
        except RunStopped:
            self.stats["take_gone"] += 1
        else:
            self.stats["take"] += 1
