"""store.mapped: block files read through mappings kept open. A read is the block's bytes or
an error, never another block's or a damaged file's; on tmpfs a file is mapped once, at its
second read; a mapping whose file is deleted or replaced is dropped at the next check; the
mappings stay within their bytes and their count. On a disk (`verify`) a block is read from
its mapping only while the page cache holds all of it, and checked against its CRC on every
read; a large block is handed out as a read-only view that outlives its mapping's drop."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.store import blockfile
from gateway.store import mapped as mapped_module
from gateway.store.blockfile import BadBlockError
from gateway.store.blocks import BlockId, checksum
from gateway.store.disk import DiskTier
from gateway.store.mapped import CACHED_SIZE, VIEW_SIZE, MappedBlocks
from gateway.store.policy import make_policy
from tests.store.helpers import Clock, bid, change_files, flip_last_byte, out_of_page_cache, payload, write_block

MADV_PAGEOUT = 21  # Linux 5.4: reclaim these pages now (the mmap module has no name for it)


def counting_maps(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    mapped: list[str] = []
    map_file = blockfile.map_file

    def recording(path: str, *, private: bool = False) -> tuple[mmap.mmap, tuple[int, int, int]]:
        mapped.append(path)
        return map_file(path, private=private)

    monkeypatch.setattr(blockfile, "map_file", recording)
    return mapped


def read_twice(blocks: MappedBlocks, path: str, block: BlockId) -> bytes:
    """Read a block so that it is mapped: its first read is not."""
    first = blocks.read(path, block)
    assert blocks.read(path, block) == first
    return first


def test_a_file_is_mapped_at_its_second_read_and_read_from_its_mapping(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    mapped = counting_maps(monkeypatch)
    blocks = MappedBlocks(1 << 20)
    block = bid("k")
    path = write_block(tmp_path, block, payload(block, 5000))
    assert blocks.read(path, block) == payload(block, 5000)
    assert mapped == [] and blocks.held(block.name) is None  # read once: not mapped
    assert [blocks.read(path, block) for _ in range(3)] == [payload(block, 5000)] * 3
    assert mapped == [path] and blocks.held(block.name) == payload(block, 5000)
    assert (len(blocks), blocks.bytes) == (1, 5000)


def test_a_deleted_or_replaced_file_is_dropped_at_the_next_check(tmp_path: Path) -> None:
    clock = Clock()
    blocks = MappedBlocks(1 << 20, recheck=1.0, clock=clock)
    block = bid("k")
    path = write_block(tmp_path, block, payload(block, 100))
    read_twice(blocks, path, block)
    os.unlink(path)
    assert blocks.held(block.name) == payload(block, 100)  # the same bytes, until the check is due
    clock.now += 1.0
    assert blocks.held(block.name) is None and len(blocks) == 0 and blocks.bytes == 0
    with pytest.raises(FileNotFoundError):
        blocks.read(path, block)
    write_block(tmp_path, block, payload(block, 100))
    assert read_twice(blocks, path, block) == payload(block, 100)
    os.replace(write_block(tmp_path, bid("other"), payload(block, 100)), path)  # another inode at the name
    clock.now += 1.0
    assert blocks.held(block.name) is None  # dropped: the next read maps (and checks) the new file
    with pytest.raises(BadBlockError):
        read_twice(blocks, path, block)


def test_the_mappings_stay_within_their_bytes_and_count(tmp_path: Path) -> None:
    blocks = MappedBlocks(1000, most=3)
    ids = [bid(f"k{i}") for i in range(6)]
    paths = {block: write_block(tmp_path, block, payload(block, 300)) for block in ids}
    for block in ids[:4]:  # 1200 bytes: the first one goes
        read_twice(blocks, paths[block], block)
    assert blocks.bytes == 900 and [blocks.held(b.name) is not None for b in ids[:4]] == [False, True, True, True]
    blocks.read(paths[ids[1]], ids[1])  # read lately: kept over ids[2]
    small = bid("small")
    read_twice(blocks, write_block(tmp_path, small, b"x"), small)  # a fourth file: over `most`
    assert len(blocks) == 3 and blocks.held(ids[2].name) is None and blocks.held(ids[1].name) is not None
    big = bid("big")
    assert read_twice(blocks, write_block(tmp_path, big, payload(big, 2000)), big) == payload(big, 2000)  # over the budget
    assert blocks.held(big.name) is None and blocks.bytes <= 1000


async def test_a_block_the_tier_evicts_or_removes_is_unmapped(tmp_path: Path) -> None:
    tier = DiskTier(str(tmp_path), 800, make_policy("lru", 800), medium="memory", name="mem")
    await tier.open()
    try:
        ids = [bid(f"k{i}") for i in range(3)]
        for block in ids[:2]:
            await tier.put(block, payload(block, 300))
            assert tier.get_now(block) == payload(block, 300)
        mapped = tier.files
        assert isinstance(mapped, MappedBlocks) and mapped.bytes == 0  # 300 bytes are over 1/8 of the quota
        mapped.budget = 800
        for _ in range(2):  # mapped at the second read
            assert [tier.get_now(block) for block in ids[:2]] == [payload(block, 300) for block in ids[:2]]
        assert len(mapped) == 2
        await tier.put(ids[2], payload(ids[2], 300))  # evicts ids[0]
        assert mapped.held(ids[0].name) is None and tier.get_now(ids[0]) is None
        await tier.remove(ids[1])
        assert len(mapped) == 0 and tier.get_now(ids[1]) is None
    finally:
        await tier.aclose()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(st.sampled_from(["read", "delete", "write", "swap", "tick"]), st.integers(0, 3)),
                      max_size=40))
def test_a_read_is_its_block_or_an_error(tmp_path: Path, steps: list[tuple[str, int]]) -> None:
    """Whatever happens to the files between reads (deleted, written again, another block's
    file renamed over one), a read returns that block's bytes or raises."""
    clock = Clock()
    blocks = MappedBlocks(700, most=2, recheck=1.0, clock=clock)
    root = tmp_path / os.urandom(4).hex()
    ids = [bid(f"k{i}") for i in range(4)]
    data = {block: payload(block, 100 + 50 * i) for i, block in enumerate(ids)}
    paths = {block: blockfile.block_path(str(root), block.name) for block in ids}
    for action, i in steps:
        block = ids[i]
        if action == "read":
            try:
                assert blocks.read(paths[block], block) == data[block]
            except (FileNotFoundError, BadBlockError):
                pass
        elif action == "tick":
            clock.now += 0.6
        else:
            change_files(action, block, data, root)
        assert blocks.bytes <= 700 and len(blocks) <= 2


def counting_checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the blocks whose CRC store.mapped computes, as it computes them."""
    checked: list[int] = []

    def recording(data: memoryview) -> int:
        checked.append(len(data))
        return checksum(data)

    monkeypatch.setattr(mapped_module, "checksum", recording)
    monkeypatch.setattr(blockfile, "checksum", recording)
    return checked


def held(blocks: MappedBlocks, block: BlockId) -> mapped_module.BlockMapping:
    """The mapping `blocks` holds of `block`'s file."""
    mapping = blocks._maps.get(block.name)
    assert mapping is not None
    return mapping


def page_out(blocks: MappedBlocks, block: BlockId, path: str) -> None:
    """The kernel takes the block file's pages back (as under memory pressure): unmapped from the
    worker and out of the page cache."""
    try:
        held(blocks, block).mapping.madvise(MADV_PAGEOUT)
    except OSError:
        pytest.skip("this kernel has no MADV_PAGEOUT, which the test takes the pages back with")
    out_of_page_cache(path)


def test_on_a_disk_a_block_is_mapped_once_cached_and_checked_when_it_may_come_from_the_disk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    maps, checks = counting_maps(monkeypatch), counting_checks(monkeypatch)
    blocks = MappedBlocks(1 << 30, verify=True)
    block = bid("k")
    path = out_of_page_cache(write_block(tmp_path, block, payload(block, 200_000)))
    assert blocks.cached(path, block) is None and len(blocks) == 0  # not in the page cache: not mapped
    Path(path).read_bytes()
    assert [blocks.cached(path, block) for _ in range(3)] == [payload(block, 200_000)] * 3
    assert maps == [path, path] and len(blocks) == 1
    assert checks == [200_000]  # checked when mapped; its pages stayed in the worker since
    page_out(blocks, block, path)
    assert blocks.held(block.name) is None and len(blocks) == 1  # not in memory: a thread reads it
    Path(path).read_bytes()  # back from the disk
    assert blocks.held(block.name) == payload(block, 200_000) and blocks.held(block.name) == payload(block, 200_000)
    assert checks == [200_000] * 2  # checked again, once


def test_on_a_disk_a_block_damaged_on_the_disk_is_caught_when_read_from_it_again(tmp_path: Path) -> None:
    blocks = MappedBlocks(1 << 30, verify=True)
    block = bid("k")
    path = write_block(tmp_path, block, payload(block, 5000))
    assert blocks.cached(path, block) == payload(block, 5000)
    flip_last_byte(path)  # what the disk will give back, as bit rot would: without the file changing
    held(blocks, block).identity = blockfile.identity(path)
    page_out(blocks, block, path)
    Path(path).read_bytes()
    with pytest.raises(BadBlockError):
        blocks.held(block.name)
    assert len(blocks) == 0


def test_on_a_disk_a_file_written_to_is_mapped_and_checked_again_at_its_next_read(tmp_path: Path) -> None:
    blocks = MappedBlocks(1 << 30, verify=True)
    block = bid("k")
    path = write_block(tmp_path, block, payload(block, 5000))
    assert blocks.cached(path, block) == payload(block, 5000)
    flip_last_byte(path)  # its ctime changes: the mapping goes, and the file is mapped again
    with pytest.raises(BadBlockError):
        blocks.cached(path, block)
    assert len(blocks) == 0


def test_a_large_block_is_a_read_only_view_that_outlives_its_mapping(tmp_path: Path) -> None:
    blocks = MappedBlocks(1 << 30, verify=True)
    small, large = bid("small"), bid("large")
    paths = {b: write_block(tmp_path, b, payload(b, size)) for b, size in ((small, VIEW_SIZE - 1), (large, VIEW_SIZE))}
    assert type(blocks.cached(paths[small], small)) is bytes
    view = blocks.cached(paths[large], large)
    assert isinstance(view, memoryview) and view.readonly and view == payload(large, VIEW_SIZE)
    with pytest.raises(TypeError):
        view[0] = 0  # type: ignore[index]
    blocks.close()  # dropped while the view is being sent: unmapped when the view goes
    assert len(blocks) == 0 and view == payload(large, VIEW_SIZE)
    view.release()


def test_on_a_disk_a_block_too_large_for_the_loop_is_not_mapped(tmp_path: Path) -> None:
    blocks = MappedBlocks(1 << 30, verify=True)
    block = bid("big")
    path = write_block(tmp_path, block, payload(block, CACHED_SIZE + blockfile.MAX_HEADER))
    assert blocks.cached(path, block) is None and len(blocks) == 0


async def test_a_disk_tier_reads_its_large_blocks_through_mappings_it_drops_when_they_go(tmp_path: Path) -> None:
    quota = 2 * VIEW_SIZE
    tier = DiskTier(str(tmp_path), quota, make_policy("lru", quota), name="ssd")
    await tier.open()
    try:
        ids = [bid(f"k{i}") for i in range(4)]
        for block in ids[:2]:
            await tier.put(block, payload(block, VIEW_SIZE))
            view = tier.get_now(block)  # written lately: on the loop, from a mapping
            assert isinstance(view, memoryview) and view == payload(block, VIEW_SIZE)
        mapped = tier.files.mapped  # type: ignore[union-attr]
        assert len(mapped) == 2 and tier.stats.page_cache_hits == 2
        assert await tier.get(ids[0]) == payload(ids[0], VIEW_SIZE) and tier.stats.page_cache_hits == 3
        await tier.put(ids[2], payload(ids[2], VIEW_SIZE))  # evicts ids[1]
        assert len(mapped) == 1 and tier.get_now(ids[1]) is None
        await tier.remove(ids[0])
        assert len(mapped) == 0
        flip_last_byte(tier.block_path(ids[2].name))
        assert tier.get_now(ids[2]) is None  # bad: left to the threads, which delete it
        assert await tier.get(ids[2]) is None and tier.stats.bad_blocks == 1 and ids[2] not in tier
    finally:
        await tier.aclose()
    assert len(tier.files) == 0
