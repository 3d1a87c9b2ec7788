"""A block held here that a read's run brings again (so that the read costs the origin one GET,
engine.reads) is counted as its tier's hit, seen by the tier's policy, and never read from its tier:
the run has its bytes already (on a disk tier, that read would be a disk read for nothing)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gateway.bytebudget import ByteBudget
from gateway.config import CacheSettings
from gateway.engine.fetch import BlockFetcher
from gateway.engine.reads import Reads
from gateway.engine.sources import version_of
from gateway.objects import meta_from_headers
from gateway.store.blocks import BlockId
from gateway.store.policy import make_policy
from gateway.store.tiers import TieredStore
from tests.engine.origin import MemoryOrigin
from tests.store.helpers import ReadCountingDisk, lru_order

BLOCK = 64 * 1024
SETTINGS = CacheSettings(block_size=BLOCK, readahead_blocks=0)
BODY = bytes(range(256)) * (5 * BLOCK // 256)  # five blocks


async def _read(reads: Reads, fetch: BlockFetcher, meta: object, start: int, end: int) -> None:
    async with await reads.read_object("b", "k", meta, start=start, end=end) as read:  # type: ignore[arg-type]
        got = read.body if read.body is not None else b"".join([chunk async for chunk in read.chunks or ()])
    assert got == BODY[start:end + 1]
    for _ in range(100):  # the run's pump keeps what it brought a moment after the read was answered
        await asyncio.sleep(0)
        if not fetch.background:
            return


async def test_a_held_block_a_run_brings_again_is_its_tiers_hit_not_read(tmp_path: Path) -> None:
    origin = MemoryOrigin()
    origin.put("b", "k", BODY)
    meta = meta_from_headers((await origin.send("HEAD", "b", "k")).header_items)
    disk = ReadCountingDisk(str(tmp_path / "disk"), 16 * BLOCK, make_policy("lru", 16 * BLOCK), name="disk0")
    store = TieredStore(None, [disk])
    await store.open()

    async def changed(bucket: str, key: str) -> None:
        raise AssertionError("the object never changes here")

    budget = ByteBudget(SETTINGS.read_buffer)
    fetch = BlockFetcher(origin, store, SETTINGS, budget, changed)
    reads = Reads(origin, fetch, SETTINGS, budget, changed)
    try:
        await _read(reads, fetch, meta, 2 * BLOCK, 3 * BLOCK - 1)  # block 2, kept on the disk
        held = BlockId("b", "k", version_of(meta), 2)
        assert held in disk and disk.stats.hits == 0
        await store.put(BlockId("b", "other", "v", 0), b"x" * BLOCK)  # after it in the policy's order
        gets = origin.gets("k")
        await _read(reads, fetch, meta, 0, len(BODY) - 1)  # one GET: blocks 0-4, block 2 brought again
        assert origin.gets("k") == gets + 1
        assert fetch.stats["block_hit_disk0"] == 1 and disk.stats.hits == 1  # its tier's hit...
        assert disk.reads == 0  # ...its file not read: the run had its bytes
        assert lru_order(disk.policy)[0] != held.name  # the policy saw the hit: no longer the least recent
    finally:
        await store.aclose()
