"""A cold read never waits for bytes it did not ask for: the bytes of the block it waits for reach
it as they arrive from the origin, while the rest of the block fills (then kept whole)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway.bytebudget import ByteBudget
from gateway.config import CacheSettings
from gateway.engine.fetch import BlockFetcher
from gateway.engine.reads import Reads
from gateway.engine.sources import version_of
from gateway.errors import S3Error
from gateway.objects import meta_from_headers
from gateway.store.blocks import BlockId
from gateway.store.disk import DiskTier
from gateway.store.memory import MemoryTier
from gateway.store.policy import make_policy
from gateway.store.tiers import TieredStore
from tests.engine.origin import MemoryOrigin

BLOCK = 256 * 1024
BODY = bytes(range(256)) * (3 * BLOCK // 256)


async def _reads(origin: MemoryOrigin, disk: Path | None = None) -> tuple[Reads, BlockFetcher]:
    """Over a memory tier of 16 blocks; with `disk`, of one block over a disk tier there (a block
    kept sends the one before down to the disk, in a thread: keeping it takes a while)."""
    settings = CacheSettings(block_size=BLOCK, readahead_blocks=0)
    memory = 16 * BLOCK if disk is None else BLOCK
    disks = [] if disk is None else [DiskTier(str(disk), 16 * BLOCK, make_policy("lru", 16 * BLOCK), name="disk0")]
    store = TieredStore(MemoryTier(memory, make_policy("lru", memory)), disks)
    budget = ByteBudget(settings.read_buffer)

    async def changed(bucket: str, key: str) -> None:
        raise AssertionError("the object never changes here")

    fetch = BlockFetcher(origin, store, settings, budget, changed)
    return Reads(origin, fetch, settings, budget, changed), fetch


async def test_the_first_bytes_of_a_cold_read_come_before_the_rest_of_their_block_arrives():
    origin = MemoryOrigin()
    origin.put("b", "k", BODY)
    meta = meta_from_headers((await origin.send("HEAD", "b", "k")).header_items)
    reads, fetch = await _reads(origin)
    origin.trickle = asyncio.Event()  # each part's second half waits until this is set
    start, end = 1000, 2 * BLOCK + 99  # from inside the first block to inside the third
    read = await asyncio.wait_for(reads.read_object("b", "k", meta, start=start, end=end), 5)
    async with read:
        assert read.chunks is not None and read.body is None
        first = await asyncio.wait_for(anext(read.chunks), 5)  # the first half of the first piece only
        assert 0 < len(first) < BLOCK - start and bytes(first) == BODY[start:start + len(first)]
        middle = BlockId("b", "k", version_of(meta), 1)
        assert middle not in fetch.store
        origin.trickle.set()
        rest = b"".join([bytes(chunk) async for chunk in read.chunks])
    assert bytes(first) + rest == BODY[start:end + 1]
    for _ in range(100):
        await asyncio.sleep(0)
    assert middle in fetch.store  # kept whole once it was all in
    assert len(origin.sent) == 2  # the HEAD above and one GET


async def test_a_read_answered_whole_leaves_its_blocks_kept_when_it_is_closed_at_once(tmp_path: Path):
    origin = MemoryOrigin()
    origin.put("b", "k", BODY)
    meta = meta_from_headers((await origin.send("HEAD", "b", "k")).header_items)
    reads, fetch = await _reads(origin, tmp_path / "disk")
    async with await reads.read_object("b", "k", meta, start=0, end=2 * BLOCK - 1) as read:
        assert read.chunks is not None
        got = b"".join([bytes(chunk) async for chunk in read.chunks])
    assert got == BODY[:2 * BLOCK]
    # Closed the moment its last byte came: the run's pump was not cancelled keeping the last block.
    assert all(BlockId("b", "k", version_of(meta), index) in fetch.store for index in (0, 1))


async def test_a_read_whose_answer_breaks_off_and_whose_block_cannot_be_had_gives_its_buffer_back():
    origin = MemoryOrigin()
    origin.put("b", "k", BODY)
    meta = meta_from_headers((await origin.send("HEAD", "b", "k")).header_items)
    reads, _ = await _reads(origin)
    origin.cut = BLOCK + 1000  # the run's answer breaks off in its second block ...
    read = await reads.read_object("b", "k", meta, start=0, end=3 * BLOCK - 1)
    origin.down = True  # ... and that block's own fetch fails too
    got = b""
    with pytest.raises(S3Error):
        async with read:
            assert read.chunks is not None
            async for chunk in read.chunks:
                got += bytes(chunk)
    assert BODY.startswith(got) and len(got) >= BLOCK  # what came was the object's, the first block whole
    assert reads.budget.used == 0
