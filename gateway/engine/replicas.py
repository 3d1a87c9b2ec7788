"""Replicas in a fleet: the blocks this node owns filled, those it no longer owns dropped,
as the replication controller changes replica counts; and loads spread over the owners."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable

from gateway import log
from gateway.cluster.fleet import Fleet
from gateway.cluster.membership import Member
from gateway.cluster.peers import PeerError, PeerRefused
from gateway.cluster.replication import Change
from gateway.engine.fetch import BlockFetcher
from gateway.engine.peers import Peers
from gateway.engine.sources import version_of
from gateway.errors import S3Error
from gateway.lru import LRU
from gateway.objects import ObjectMeta
from gateway.store.blocks import BlockId

_HOLD_LANES = 4  # blocks of one object a fill or a load fetches at a time
_QUEUED = 1 << 16  # objects whose replica change waits at most (past it the oldest waiting is dropped)

Describe = Callable[[str, str], Awaitable[ObjectMeta]]  # the current metadata of an object


class Replicas:
    """Fills and drops of this node's share of objects. Event loop only.

    `rebalance` queues objects whose replica count changed; one background task works
    through them, one object after another (the latest change of an object wins).
    """

    def __init__(self, fleet: Fleet, fetch: BlockFetcher, peers: Peers, describe: Describe) -> None:
        self.fleet = fleet
        self.fetch = fetch
        self.peers = peers
        self.stats: Counter[str] = Counter()
        self._describe = describe
        self._queue: LRU[tuple[str, str], bool] = LRU(_QUEUED)  # object -> fill (True) or drop, oldest first
        self._worker: asyncio.Task[None] | None = None

    async def aclose(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)

    async def hold(self, bucket: str, key: str, meta: ObjectMeta, *, replicas: int | None = None) -> int:
        """Have every block of the object that this node owns (with `replicas` owners, if
        given) in the tiers, each from the owners above this node or the origin; returns
        the bytes that were not here yet. A replica being filled, or a load."""
        if meta.size == 0:
            return 0
        fetch, store = self.fetch, self.fetch.store
        size = fetch.settings.block_size
        version = version_of(meta)
        wanted = [BlockId(bucket, key, version, index) for index in range((meta.size + size - 1) // size)
                  if self.fleet.owns(bucket, key, index, replicas)]
        lanes = asyncio.Semaphore(_HOLD_LANES)

        async def one(block: BlockId) -> int:
            async with lanes:
                if block in store:
                    return 0
                held = await fetch.budget.take(fetch.length(block, meta))
                try:
                    data = await fetch.block(block, meta, replicas=replicas)
                    if block not in store:  # joined a read that keeps nothing
                        await store.put(block, data)
                finally:
                    fetch.budget.give(held)
                self.stats["replica_fill_blocks"] += 1
                return len(data)

        return sum(await asyncio.gather(*(one(block) for block in wanted)))

    async def spread(self, bucket: str, key: str, meta: ObjectMeta, *, replicas: int | None = None) -> None:
        """A load in a fleet: every owner of the object's blocks (`replicas` owners each, if
        given) fetches and keeps its blocks, all owners at once (peer `hold`; this node's
        own share directly). Raises S3Error when an owner failed, or the origin refused."""
        fleet, size = self.fleet, self.fetch.settings.block_size
        blocks = (meta.size + size - 1) // size

        async def ask(member: Member, count: int) -> int:
            if member == fleet.me:
                return await self.hold(bucket, key, meta, replicas=replicas)
            n = fleet.replicas(bucket, key, replicas)
            try:
                return await fleet.peers.hold(member, bucket, key, meta.etag, meta.version_id, meta.size, n, count)
            except PeerRefused as refused:
                await self.peers.refused(bucket, key, refused)
                raise refused.error from None
            except PeerError as exc:
                self.peers.failed(member, exc)
                raise S3Error("ServiceUnavailable", f"Node {member.id} did not load its blocks ({exc}); "
                                                    "load again once the fleet has noticed.") from None

        await asyncio.gather(*(ask(member, count) for member, count in
                               fleet.owners_of_object(bucket, key, blocks, replicas).items()))

    async def drop_unowned(self, bucket: str, key: str, meta: ObjectMeta) -> int:
        """Remove the blocks of the object version that this node holds but no longer owns
        (its replica count went down), unless passive copies are kept or the block is
        pinned; returns how many were removed. Blocks of older versions age out."""
        if self.fleet.settings.passive_cache:
            return 0
        store = self.fetch.store
        size, version, dropped = self.fetch.settings.block_size, version_of(meta), 0
        for index in range((meta.size + size - 1) // size):
            block = BlockId(bucket, key, version, index)
            if block in store and not store.is_pinned(block) and not self.fleet.owns(bucket, key, index):
                dropped += await store.remove(block)
        self.stats["replica_drop_blocks"] += dropped
        return dropped

    def rebalance(self, changes: Iterable[Change]) -> None:
        """Replica counts changed (the replication controller): in the background, fill the
        blocks this node now owns and drop those it no longer owns."""
        for change in changes:
            self._queue.put(change.name, change.now > change.was)  # the latest change wins, and waits the least
        if self._queue and (self._worker is None or self._worker.done()):
            self._worker = asyncio.create_task(self._work(), name="gateway-replica-rebalance")

    async def _work(self) -> None:
        while (change := self._queue.pop_oldest()) is not None:
            (bucket, key), raised = change
            try:
                meta = await self._describe(bucket, key)
                if raised:
                    await self.hold(bucket, key, meta)
                else:
                    await self.drop_unowned(bucket, key, meta)
            except S3Error as err:  # gone, or the origin failing: the next change tries again
                log.cluster.info("replicas of /%s/%s not changed: %s", bucket, key, err.code)
            except Exception:  # one object must not stop the others
                log.cluster.exception("replicas of /%s/%s not changed", bucket, key)
