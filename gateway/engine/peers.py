"""The fleet's block traffic: blocks and opens asked of their owners, which of a read's blocks
they hold, blocks a run brought offered to them (what other nodes ask of this one is
engine.serving's)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable

from gateway import log
from gateway.bytebudget import ByteBudget
from gateway.cluster.fleet import Fleet, Route
from gateway.cluster.membership import Member
from gateway.cluster.peers import PeerError, PeerRefused
from gateway.config import CacheSettings
from gateway.engine.sources import Ask, Failures, Got, Opened, Unanswered, length_of, opened_from, take_refusal
from gateway.objects import ObjectMeta
from gateway.store.blocks import BlockId
from gateway.store.tiers import TieredStore


class Peers:
    """Asking a block's owners, in rendezvous order: a BlockSource. Event loop only.

    A peer that fails is skipped (logged at most every 10 s per peer); an owner whose
    origin refused (a 4xx, or the object changed) gives this node the same answer.
    """

    counts_miss = True  # (a block asked of another node is this node's miss)

    def __init__(self, fleet: Fleet, store: TieredStore, settings: CacheSettings, budget: ByteBudget,
                 on_changed: Callable[[str, str], Awaitable[None]]) -> None:
        self.fleet = fleet
        self.stats: Counter[str] = Counter()
        self._store = store
        self._block_size = settings.block_size
        self._budget = budget
        self._on_changed = on_changed
        self._failures = Failures(log.cluster, self.stats, "peer_failure")

    # --- asking the owners -------------------------------------------------------------

    def asking(self, block: BlockId, meta: ObjectMeta, *, from_peers: bool, replicas: int | None) -> Ask | None:
        """The block's owners in the fleet, when it has some other than this node (BlockSource)."""
        if not from_peers:
            return None
        route = self.fleet.route(block.bucket, block.key, block.index, replicas)
        return None if not route.ask else lambda: self.block(block, meta, route)

    async def block(self, block: BlockId, meta: ObjectMeta, route: Route) -> Got:
        """The block from the first owner that answers (kept when this node keeps it); Unanswered
        when none does: the block then comes from the origin, and is kept (its owners are failing,
        and the next read should not wait for them again)."""
        length = length_of(block.index, self._block_size, meta)
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
                await self._store.put(block, data)
            return data, "hit-peer"
        self.stats["peer_fallback"] += 1
        raise Unanswered()

    async def open(self, bucket: str, key: str, query: list[tuple[str, str]], index: int, route: Route) -> Opened | None:
        """`Opens.open_block`, asked of the owners of block `index`; Unanswered when none answers."""
        version_id = dict(query).get("versionId")
        for peer in route.ask:
            try:
                answer = await self.fleet.peers.open(peer, bucket, key, version_id, index, self._block_size,
                                                     budget=self._budget)
                if answer is None:
                    return None
                opened = opened_from(answer, bucket, key, index, self._block_size, _not_in_file)
                if opened is None:
                    raise PeerError("an open answer without its block")
            except PeerRefused as refused:
                await self.refused(bucket, key, refused)
                self.failed(peer, refused)
                continue
            except PeerError as exc:
                self.failed(peer, exc)
                continue
            self.stats["peer_open"] += 1
            if route.keep:
                await self._store.put(opened[1].block, opened[1].data)
            return opened
        self.stats["peer_fallback"] += 1
        raise Unanswered()

    async def held(self, peer: Member, blocks: list[BlockId], meta: ObjectMeta) -> set[int] | None:
        """Which of `blocks` (of one object version) `peer` holds now; None when it does not answer."""
        try:
            return await self.fleet.peers.held(peer, blocks[0].bucket, blocks[0].key, meta.etag, meta.version_id,
                                               meta.size, [block.index for block in blocks])
        except PeerError as exc:
            self.failed(peer, exc)
            return None

    # --- blocks a run of this node brought, offered to their owners (engine.lending) ----

    async def give(self, owner: Member, block: BlockId, meta: ObjectMeta, giver: int) -> bool:
        """Tell the node that owns a block to take it from worker `giver` of this node; False when
        it could not be told (it will not take it)."""
        try:
            await self.fleet.peers.take(owner, block.bucket, block.key, meta.etag, meta.version_id, meta.size,
                                        block.index, giver, node=self.fleet.me.id)
        except PeerError as exc:
            self.failed(owner, exc, "its block not kept there")
            return False
        return True

    async def lent(self, node: str, giver: int, block: BlockId, meta: ObjectMeta) -> bytes | None:
        """The block worker `giver` of node `node` offered this node, or None when it is gone."""
        member = self.fleet.membership.member(node)
        if member is None:
            return None
        try:
            return await self.fleet.peers.lent(member, block.bucket, block.key, meta.etag, meta.version_id,
                                               meta.size, block.index, length_of(block.index, self._block_size, meta),
                                               worker=giver)
        except PeerError as exc:
            self.failed(member, exc, "the block it offered not kept")
            return None

    async def refused(self, bucket: str, key: str, refused: PeerRefused) -> None:
        await take_refusal(bucket, key, refused, self._on_changed)

    def failed(self, peer: Member, exc: Exception, instead: str = "asking the next owner or the origin") -> None:
        self._failures.failed(f"peer {peer.id}", exc, instead)


def _not_in_file(block: BlockId) -> bytes | None:
    return None  # (another node has no file of this node's shared memory tier)
