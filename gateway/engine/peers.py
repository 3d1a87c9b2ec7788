"""The fleet's block traffic: blocks and opens asked of their owners, which of a read's blocks
they hold, blocks a run brought offered to them (what other nodes ask of this one is
engine.serving's)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Awaitable, Callable

from gateway import log
from gateway.cluster.fleet import Fleet, Route
from gateway.cluster.membership import Member
from gateway.cluster.peers import PeerError, PeerRefused
from gateway.engine.fetch import version_of
from gateway.engine.opens import FirstBlock, Opened, Opens
from gateway.engine.serving import take_refusal
from gateway.objects import ObjectMeta, decode_meta
from gateway.store.blocks import BlockId

_PEER_LOG_EVERY = 10.0  # seconds between two log lines about the same failing peer


class Peers:
    """Asking a block's owners, in rendezvous order. Event loop only.

    A peer that fails is skipped (logged at most every 10 s per peer); an owner whose
    origin refused (a 4xx, or the object changed) gives this node the same answer.
    """

    def __init__(self, fleet: Fleet, opens: Opens, on_changed: Callable[[str, str], Awaitable[None]]) -> None:
        self.fleet = fleet
        self.fetch = opens.fetch
        self._opens = opens
        self.stats: Counter[str] = Counter()
        self._on_changed = on_changed
        self._logged: dict[str, float] = {}

    # --- asking the owners -------------------------------------------------------------

    async def block(self, block: BlockId, meta: ObjectMeta, route: Route) -> bytes:
        """The block from the first owner that answers; from the origin (and kept) if none does."""
        length = self.fetch.length(block, meta)
        for peer in route.ask:
            try:
                data = await self.fleet.peers.block(peer, block.bucket, block.key, meta.etag, meta.version_id,
                                                    meta.size, block.index, length)
            except PeerRefused as refused:
                await self.refused(block.bucket, block.key, refused)
                self.failed(peer, refused)
                continue
            except PeerError as exc:
                self.failed(peer, exc)
                continue
            self.stats["peer_block_fetch"] += 1
            if route.keep:
                await self.fetch.store.put(block, data)
            return data
        # No owner answered: the block comes from the origin (and is kept: its owners are
        # failing, and the next read should not wait for them again).
        self.stats["peer_fallback"] += 1
        return await self.fetch.block(block, meta, from_peers=False)

    async def open(self, bucket: str, key: str, query: list[tuple[str, str]], index: int, route: Route) -> Opened | None:
        """`Opens.open_block`, asked of the owners of block `index`; by this node itself if none answers."""
        size = self.fetch.settings.block_size
        version_id = dict(query).get("versionId")
        for peer in route.ask:
            try:
                opened = await self.fleet.peers.open(peer, bucket, key, version_id, index, size, budget=self.fetch.budget)
            except PeerRefused as refused:
                await self.refused(bucket, key, refused)
                self.failed(peer, refused)
                continue
            except PeerError as exc:
                self.failed(peer, exc)
                continue
            if opened is None:
                return None
            meta = decode_meta(opened.meta)
            data = opened.data
            first = index * size
            if not isinstance(meta, ObjectMeta) or data is None or len(data) != min(first + size, meta.size) - first:
                self.failed(peer, PeerError("an open answer that does not add up"))
                continue
            block = BlockId(bucket, key, version_of(meta), index)
            self.stats["peer_open"] += 1
            if route.keep:
                await self.fetch.store.put(block, data)
            return meta, FirstBlock(block, data, from_origin=not opened.cached)
        self.stats["peer_fallback"] += 1
        return await self._opens.open_here(bucket, key, query, index)

    async def held(self, peer: Member, blocks: list[BlockId], meta: ObjectMeta) -> set[int] | None:
        """Which of `blocks` (of one object version) `peer` holds now; None when it does not answer."""
        try:
            return await self.fleet.peers.held(peer, blocks[0].bucket, blocks[0].key, meta.etag, meta.version_id,
                                               meta.size, [block.index for block in blocks])
        except PeerError as exc:
            self.failed(peer, exc)
            return None

    # --- blocks a run of this node brought, offered to their owners (engine.lending) ----

    async def give(self, owner: Member, block: BlockId, meta: ObjectMeta, giver: int) -> None:
        """Tell the node that owns a block to take it from worker `giver` of this node."""
        try:
            await self.fleet.peers.take(owner, block.bucket, block.key, meta.etag, meta.version_id, meta.size,
                                        block.index, giver, node=self.fleet.me.id)
        except PeerError as exc:
            self.fetch.lending.lent(block)  # not taken: not kept there either
            self.failed(owner, exc, "its block not kept there")

    async def lent(self, node: str, giver: int, block: BlockId, meta: ObjectMeta) -> bytes | None:
        """The block worker `giver` of node `node` offered this node, or None when it is gone."""
        member = self.fleet.membership.member(node)
        if member is None:
            return None
        try:
            return await self.fleet.peers.lent(member, block.bucket, block.key, meta.etag, meta.version_id,
                                               meta.size, block.index, self.fetch.length(block, meta), worker=giver)
        except PeerError as exc:
            self.failed(member, exc, "the block it offered not kept")
            return None

    async def refused(self, bucket: str, key: str, refused: PeerRefused) -> None:
        await take_refusal(bucket, key, refused, self._on_changed)

    def failed(self, peer: Member, exc: Exception, instead: str = "asking the next owner or the origin") -> None:
        self.stats["peer_failure"] += 1
        now = time.monotonic()
        if now - self._logged.get(peer.id, -_PEER_LOG_EVERY) >= _PEER_LOG_EVERY:
            self._logged[peer.id] = now
            log.cluster.warning("peer %s failed (%s); %s", peer.id, exc, instead)
