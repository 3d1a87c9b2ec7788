"""What other nodes and the other workers of this node ask of this worker (the peer API's
`block`, `open`, `hold`, `held` and `take`): blocks from the tiers, else from the origin once,
never from another peer."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone

from gateway.cluster.peers import OpenAnswer, PeerRefused
from gateway.engine.opens import Opens
from gateway.engine.sources import version_of
from gateway.errors import S3Error
from gateway.objects import ObjectChanged, ObjectMeta, encode_meta
from gateway.store.blocks import BlockId

_EPOCH = datetime.fromtimestamp(0, timezone.utc)

Hold = Callable[..., Awaitable[int]]  # Replicas.hold(bucket, key, meta, replicas=...)
# Metadata.fresh_aged(bucket, key, version_id): (the metadata, its age) when known fresh, else None
Fresh = Callable[[str, str, "str | None"], "tuple[ObjectMeta, float] | None"]
Describe = Callable[[str, str, "str | None"], Awaitable[ObjectMeta]]  # the metadata, from the origin if need be


class Serving:
    """The answering side of the peer API. Event loop only."""

    def __init__(self, opens: Opens, fresh: Fresh, describe: Describe, hold: Hold | None = None) -> None:
        self.fetch = opens.fetch
        self._opens = opens
        self.fresh = fresh  # Metadata.fresh_aged: what this worker knows of an object, fresh, without asking
        self.describe = describe  # Metadata.head_object's metadata: a HEAD of the origin when not known
        self.hold = hold  # Replicas.hold, in a fleet

    async def serve_block(self, bucket: str, key: str, etag: str, version_id: str, size: int, index: int,
                          peers: bool = False, in_file: bool = False) -> tuple[bytes | None, bool]:
        """A block a peer asked for: from the tiers, else from the origin once (and kept), and
        whether it was fetched for this ask (the asker's x-cache then says miss, not hit); the
        bytes None when `in_file` (another worker of this node asks) and this worker keeps it in
        the node's shared memory tier, where the asker reads it. Another node's request is
        answered from this node or the origin, never from a third node (no circles); another
        worker's for its own read (`peers`) as this worker's own read is, the fleet's owners first.

        Raises PeerRefused for the origin's S3 errors, ValueError for a block outside the object.
        """
        meta = _described(etag, version_id, size)
        block = BlockId(bucket, key, version_of(meta), index)
        length = self.fetch.length(block, meta)
        memory = self.fetch.store.memory
        held = 0 if memory is not None and block in memory else await self.fetch.budget.take(length)
        try:
            data, source = await self.fetch.sourced(block, meta, from_peers=peers)
            return None if in_file and self.fetch.store.in_shared_memory(block) else data, source == "miss"
        except ObjectChanged as exc:
            raise PeerRefused(exc, changed=True) from exc
        except S3Error as exc:
            raise PeerRefused(exc, changed=False) from exc
        finally:
            self.fetch.budget.give(held)

    async def serve_part(self, bucket: str, key: str, etag: str, version_id: str, size: int, index: int,
                         lo: int, hi: int) -> tuple[int, bytes, bool]:
        """Bytes of a block this worker owns holding [lo, hi) (offsets in the block), another
        worker of this node asked for its read (BlockFetcher.part: what the block's piece lacks,
        fetched once however many workers ask): (where they start in the block, the bytes,
        whether they were fetched from the origin for this ask). Raises as `serve_block` does."""
        meta = _described(etag, version_id, size)
        block = BlockId(bucket, key, version_of(meta), index)
        if not 0 <= index * self.fetch.settings.block_size < size or not 0 <= lo < hi <= self.fetch.length(block, meta):
            raise ValueError("a part outside the block")
        try:
            part = await self.fetch.part(block, meta, lo, hi)
        except ObjectChanged as exc:
            raise PeerRefused(exc, changed=True) from exc
        except S3Error as exc:
            raise PeerRefused(exc, changed=False) from exc
        return part.at, part.data, part.source == "miss"

    def serve_block_now(self, bucket: str, key: str, etag: str, version_id: str, size: int,
                        index: int) -> bytes | memoryview | None:
        """A block a peer asked for when a tier holds it now (read on the event loop, counted
        as `serve_block` counts that hit); None, counting nothing, otherwise: `serve_block`."""
        if index < 0 or index * self.fetch.settings.block_size >= size:
            return None  # outside the object: serve_block refuses it
        hit = self.fetch.block_now(BlockId(bucket, key, version_of(_described(etag, version_id, size)), index))
        return None if hit is None else hit[0]

    async def serve_hold(self, bucket: str, key: str, etag: str, version_id: str, size: int, replicas: int) -> int:
        """A load a peer asked for (see Replicas.hold): the bytes fetched. Raises as `serve_block` does."""
        if size < 0 or replicas < 1:
            raise ValueError("size and replicas out of range")
        if self.hold is None:
            raise LookupError("no fleet: nothing to hold for")
        try:
            return await self.hold(bucket, key, _described(etag, version_id, size), replicas=replicas)
        except ObjectChanged as exc:
            raise PeerRefused(exc, changed=True) from exc
        except S3Error as exc:
            raise PeerRefused(exc, changed=False) from exc

    async def serve_open(self, bucket: str, key: str, version_id: str, index: int, peers: bool = False,
                         in_file: bool = False, cached: bool = False) -> OpenAnswer | None:
        """An open a peer asked for (see Opens.open_block), or None; the block is None as in
        `serve_block` when it is in the node's shared memory tier.
        It goes to the worker that owns the block; with `peers`, to the fleet's owner of it too.
        `cached` (another worker of this node, opening for its own read): only what this worker
        has in memory, metadata and block, else None; never the origin."""
        if cached:
            return await self._open_cached(bucket, key, version_id, index, in_file)
        query = [("versionId", version_id)] if version_id else []
        try:
            opened = await self._opens.open_block(bucket, key, query, index * self.fetch.settings.block_size,
                                                 from_peers=peers)
        except S3Error as exc:
            raise PeerRefused(exc, changed=False) from exc
        if opened is None:
            return None
        block = opened[1]
        return OpenAnswer(encode_meta(opened[0]),
                          None if in_file and self.fetch.store.in_shared_memory(block.block) else block.data,
                          cached=not block.from_origin)


    async def _open_cached(self, bucket: str, key: str, version_id: str, index: int,
                           in_file: bool) -> OpenAnswer | None:
        known = self.fresh(bucket, key, version_id or None)
        meta, age = known if known is not None else (await self._describe_taken(bucket, key, version_id, index), 0.0)
        if meta is None or not 0 <= index * self.fetch.settings.block_size < meta.size:
            return None
        block = BlockId(bucket, key, version_of(meta), index)
        if block not in self.fetch.store:  # not looked for: the asker opens it, and counts the miss then
            return None
        hit = await self.fetch.store.get(block)  # (counted here, as serve_block counts: the asker does not)
        if hit is None:
            return None
        return OpenAnswer(encode_meta(meta), None if in_file and self.fetch.store.in_shared_memory(block) else hit[0],
                          cached=True, age=age)

    async def _describe_taken(self, bucket: str, key: str, version_id: str, index: int) -> ObjectMeta | None:
        """The metadata of an object whose block `index` another worker read from the origin and
        lent this one, which holds it now but was not told the rest of its metadata: a HEAD (one
        origin request, where the asker would otherwise GET the block), so that this worker and
        every other opening it later answer from the block. None when no such block is here."""
        taken = self.fetch.lending.taken.get((bucket, key))
        if taken is None or (version_id and taken.version_id != version_id) or \
                BlockId(bucket, key, version_of(taken), index) not in self.fetch.store:
            return None
        try:
            meta = await self.describe(bucket, key, version_id or None)
        except S3Error:
            return None  # (the asker opens it itself, and gets the origin's answer)
        return meta if version_of(meta) == version_of(taken) else None

    async def serve_held(self, bucket: str, key: str, etag: str, version_id: str, size: int, indexes: list[int],
                         sibling: bool) -> set[int]:
        """Which of the blocks `indexes` of the object version this node holds now: in a tier, or
        on their way to one (a block this worker fetches, or another worker of this node that owns
        it says so). Another worker of this node (`sibling`) asks about those this one owns: only
        this worker is looked at. Nothing is asked of the origin or of another node."""
        meta = _described(etag, version_id, size)
        held, asks = self._held_here(meta, bucket, key, indexes, sibling)
        siblings = self.fetch.siblings
        if siblings is not None and asks:
            for answer in await asyncio.gather(*(siblings.held(owner, blocks, meta) for owner, blocks in asks.items())):
                held.update(answer)
        return held

    def serve_held_now(self, bucket: str, key: str, etag: str, version_id: str, size: int, indexes: list[int],
                       sibling: bool) -> set[int] | None:
        """`serve_held` when no other worker of this node need be asked (no await); else None."""
        held, asks = self._held_here(_described(etag, version_id, size), bucket, key, indexes, sibling)
        return None if asks else held

    def _held_here(self, meta: ObjectMeta, bucket: str, key: str, indexes: list[int],
                   sibling: bool) -> tuple[set[int], dict[int, list[BlockId]]]:
        """(the blocks this worker sees held, the others by the worker of this node to ask about them)."""
        if any(not 0 <= index * self.fetch.settings.block_size < meta.size for index in indexes):
            raise ValueError("a block outside the object")
        fetch, version = self.fetch, version_of(meta)
        siblings = None if sibling else fetch.siblings
        held: set[int] = set()
        asks: dict[int, list[BlockId]] = {}
        for index in indexes:
            block = BlockId(bucket, key, version, index)
            owner = siblings.owner(bucket, key, index) if siblings is not None else None
            if block in fetch.store or (owner is None and fetch.fetching(block)):
                held.add(index)
            elif owner is not None:
                asks.setdefault(owner, []).append(block)
        return held, asks

    async def serve_take(self, bucket: str, key: str, etag: str, version_id: str, size: int, index: int,
                         giver: int, node: str = "", in_file: bool = False) -> None:
        """A block this worker, or this node (`node`: the member offering it), owns, offered by
        worker `giver` of this node or of that one (`in_file`: written to this worker's file of the
        node's shared memory tier): taken (engine.lending)."""
        meta = _described(etag, version_id, size)
        block = BlockId(bucket, key, version_of(meta), index)
        if not 0 <= index * self.fetch.settings.block_size < size:
            raise ValueError("a block outside the object")
        await self.fetch.lending.take(block, meta, giver, node, in_file)

    async def serve_lent(self, bucket: str, key: str, etag: str, version_id: str, size: int, index: int,
                         worker: int | None = None) -> bytes | None:
        """The bytes of a block this worker lent, once for each owner it was offered to; `worker`
        (another node asks): the worker of this node that lent it, asked for it when not this one."""
        meta = _described(etag, version_id, size)
        block = BlockId(bucket, key, version_of(meta), index)
        siblings = self.fetch.siblings
        if worker is not None and siblings is not None and worker != siblings.workers.index:
            if worker not in siblings.workers.siblings():
                raise ValueError("no such worker")
            return await siblings.lent(worker, block, meta)
        return self.fetch.lending.lent(block)


def _described(etag: str, version_id: str, size: int) -> ObjectMeta:
    """The object version a peer named, as much of its metadata as a block needs."""
    return ObjectMeta(size=size, etag=etag, last_modified=_EPOCH,
                      headers={"x-amz-version-id": version_id} if version_id else {})
