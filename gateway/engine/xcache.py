"""The x-cache answer of a read once it knows more than where its blocks were as it started
(gateway.engine.reads `Reads._describe`): what the owners of its blocks answered, and, in a node
whose workers share a disk tier, the blocks read from another worker's file.

A worker does not look in the files other workers keep on a disk before a read (store.shared: a
look there costs a disk access; on tmpfs it looks). A block it does not find is read from its
owner's file when there is one, before anything else (BlockFetcher.block), so the answer is
known once that read is done, and before a header is sent: a read of one block reads it here
first; a read of several asks the owners which they hold (engine.holders), and a block no run
brings from the origin is held by the node. No question more than the read asks anyway.
"""

from __future__ import annotations

from gateway.engine.fetch import BlockFetcher
from gateway.engine.runs import Run
from gateway.store.blocks import BlockId

__all__ = ["asked", "from_tiers", "in_others_file", "reads_others_disks"]


def asked(source: str, blocks: list[BlockId], runs: list[Run], *, fetched: bool, node_disks: bool) -> str:
    """The x-cache value once the owners of the blocks were asked: a guessed hit-peer is a miss,
    or partial, when some of them no one held (runs bring them from the origin). In a node whose
    workers share a disk tier (`node_disks`), a block `Reads._describe` did not find here is
    held by the node when no run brings it: its owner holds it (engine.holders asked), most
    often in a file on the disk that this worker reads. `fetched`: the first block came from
    the origin with the object's metadata (a cold open)."""
    if source in ("hit-mem", "hit-disk") or (source == "hit-peer" and not runs):
        return source
    brought = sum(1 for block in blocks if any(block.index in run.indexes for run in runs))
    if source == "hit-peer":
        return "miss" if brought == len(blocks) else "partial"
    if not node_disks:
        return source
    brought += fetched and not any(blocks[0].index in run.indexes for run in runs)  # the first, from the origin
    return "hit-disk" if brought == 0 else "miss" if brought == len(blocks) else "partial"


def reads_others_disks(fetch: BlockFetcher) -> bool:
    """Whether this worker reads blocks other workers of its node keep on a disk, which `in` does
    not see (store.shared: looking there would cost a disk access)."""
    return fetch.siblings is not None and not fetch.store.sees_other_workers


def in_others_file(fetch: BlockFetcher, block: BlockId) -> bool:
    """Whether the block, not found here, may be in a file its owner, another worker of this
    node, keeps on a disk that this worker reads (the first place BlockFetcher.block looks)."""
    siblings = fetch.siblings
    return (siblings is not None and not fetch.store.sees_other_workers
            and siblings.owner(block.bucket, block.key, block.index) is not None)


async def from_tiers(fetch: BlockFetcher, block: BlockId) -> bytes | None:
    """The block from the node's tiers (its owner's file), counted as BlockFetcher.block counts a
    hit; None: no tier holds it (not counted: its owner counts the miss when it is asked)."""
    hit = await fetch.store.get(block)
    if hit is None:
        return None
    fetch.stats[f"block_hit_{hit[1]}"] += 1
    return hit[0]
