"""store.shared: two workers' parts of one folder. Each keeps only the blocks it owns, within
its quota; each reads the other's blocks from their files; on tmpfs every read is on the loop."""

from __future__ import annotations

import mmap
import os
import threading
from pathlib import Path

import pytest

from gateway.store import blockfile
from gateway.store.blocks import BlockId
from gateway.store.hitnotes import HitNotes
from gateway.store.mapped import MappedBlocks
from gateway.store.policy import make_policy
from gateway.store.shared import SharedTier
from tests.store.helpers import Clock, bid, flip_last_byte, lru_order, payload


def even(block: BlockId) -> bool:
    return block.index % 2 == 0


def parts(root: Path, quota: int, medium: str = "memory") -> tuple[SharedTier, SharedTier]:
    return (SharedTier(str(root), quota, make_policy("lru", quota), even, medium=medium, name="mem"),
            SharedTier(str(root), quota, make_policy("lru", quota), lambda b: not even(b), medium=medium, name="mem"))


@pytest.mark.parametrize("medium", ["memory", "ssd"])
async def test_each_part_keeps_its_own_and_reads_the_others(tmp_path: Path, medium: str) -> None:
    a, b = parts(tmp_path, 1000, medium)
    await a.open()
    await b.open()
    try:
        blocks = [bid("k", i) for i in range(4)]
        for block in blocks:
            for tier in (a, b):  # both are offered every block; only the owner keeps it
                await tier.put(block, payload(block, 100))
        assert sorted(x.index for x in a) == [0, 2] and sorted(x.index for x in b) == [1, 3]
        assert a.used == b.used == 200
        for tier in (a, b):
            for block in blocks:
                assert await tier.get(block) == payload(block, 100)
        assert (a.stats.hits, a.stats.misses) == (4, 0)
        missing = bid("gone", 1)  # b's to fetch: a counts no miss for it, b does
        assert await a.get(missing) is None and await b.get(missing) is None
        assert (a.stats.misses, b.stats.misses) == (0, 1)
        assert await a.remove(blocks[1]) is False and await b.get(blocks[1]) is not None  # not a's to remove
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_part_stays_within_its_quota_and_a_restart_finds_its_own(tmp_path: Path) -> None:
    a, b = parts(tmp_path, 250)
    await a.open()
    await b.open()
    blocks = [bid(f"k{i}", i % 2) for i in range(10)]
    for block in blocks:
        await (a if even(block) else b).put(block, payload(block, 100))
    assert a.used <= 250 and b.used <= 250 and len(a) == len(b) == 2
    await a.aclose()
    again, _ = parts(tmp_path, 250)
    await again.open()  # the scan takes a's files only, and leaves b's alone
    try:
        assert sorted(x.key for x in again) == sorted(x.key for x in a) and again.used == a.used
        assert all(b.get_now(x) is not None for x in b)
    finally:
        await again.aclose()
        await b.aclose()


async def test_reads_on_tmpfs_run_on_the_loop_and_map_each_file_once(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[tuple[str, threading.Thread]] = []
    map_file, read_block = blockfile.map_file, blockfile.read_block

    def mapping(path: str, *, private: bool = False) -> tuple[mmap.mmap, tuple[int, int, int]]:
        threads.append(("map", threading.current_thread()))
        return map_file(path, private=private)

    def reading(path: str, block: BlockId) -> bytes:
        threads.append(("read", threading.current_thread()))
        return read_block(path, block)

    monkeypatch.setattr(blockfile, "map_file", mapping)
    monkeypatch.setattr(blockfile, "read_block", reading)
    a, b = parts(tmp_path, 8000)  # each keeps up to 1/8 of its quota mapped
    await a.open()
    await b.open()
    try:
        own, other = bid("k", 0), bid("k", 1)
        await a.put(own, payload(own, 100))
        await b.put(other, payload(other, 100))
        threads.clear()
        assert await a.get(own) == payload(own, 100) and await a.get(other) == payload(other, 100)
        for _ in range(2):
            assert a.get_now(own) == payload(own, 100) and a.get_now(other) == payload(other, 100)
        loop = threading.current_thread()  # read by the first reads, mapped by the second, from the maps after
        assert threads == [("read", loop), ("read", loop), ("map", loop), ("map", loop)]
        assert (a.stats.hits, len(a.own.files)) == (6, 2)
    finally:
        await a.aclose()
        await b.aclose()


async def test_writes_and_deletes_on_tmpfs_run_on_the_loop_without_a_thread(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A put, its eviction and a remove on tmpfs are copies in memory: done on the loop, where a
    thread's hand-off would cost more than the copy; a disk's stay in its threads."""
    writers: list[threading.Thread] = []
    write_file = blockfile.write_file

    def writing(*args: object, **kwargs: object) -> None:
        writers.append(threading.current_thread())
        write_file(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(blockfile, "write_file", writing)
    for medium, on_loop in (("memory", True), ("ssd", False)):
        a, _ = parts(tmp_path / medium, 250, medium=medium)
        await a.open()
        try:
            first, second, third = bid("k", 0), bid("k", 2), bid("k", 4)
            for block in (first, second, third):  # the third evicts the first
                await a.put(block, payload(block, 100))
            assert await a.remove(second)
            assert first not in a and third in a and await a.get(third) == payload(third, 100)
            assert not os.path.exists(a.own.block_path(second.name))
            assert len(writers) == 3 and all((w is threading.current_thread()) == on_loop for w in writers)
            store_threads = [t for t in threading.enumerate() if t.name.startswith("gateway-store-mem")]
            assert bool(store_threads) != on_loop
        finally:
            await a.aclose()
            writers.clear()


async def test_another_workers_disk_block_read_lately_is_read_on_the_loop(tmp_path: Path) -> None:
    """On a disk, another worker's block is read in a thread the first time; after that, while
    the page cache holds it, on the event loop (get_now answers it, so the hit path can)."""
    a, b = parts(tmp_path, 1 << 24, "ssd")
    await a.open()
    await b.open()
    try:
        other, large = bid("k", 1), bid("large", 1)  # b's
        await b.put(other, payload(other, 4096))
        await b.put(large, payload(large, 5 << 20))
        assert a.get_now(other) is None  # not read yet: whether opening it waits for the disk is not known
        assert await a.get(other) == payload(other, 4096) and a.stats.page_cache_hits == 0  # in a thread
        assert a.get_now(other) == payload(other, 4096) and await a.get(other) == payload(other, 4096)
        assert a.stats.page_cache_hits == 2 and a.stats.hits == 3
        assert await a.get(large) == payload(large, 5 << 20)
        assert a.get_now(large) is None  # over 4 MiB: always in a thread
        view_sized = bid("view", 1)  # b's: read on the loop from a mapping of its file
        await b.put(view_sized, payload(view_sized, 100_000))
        assert await a.get(view_sized) == payload(view_sized, 100_000)
        view = a.get_now(view_sized)
        assert isinstance(view, memoryview) and view == payload(view_sized, 100_000)
        flip_last_byte(b.own.block_path(other.name))
        assert a.get_now(other) is None and await a.get(other) is None  # refused on the loop, and in the thread
        assert os.path.exists(b.own.block_path(other.name))  # left to its owner
    finally:
        await a.aclose()
        await b.aclose()


@pytest.mark.parametrize("medium", ["memory", "ssd"])
async def test_touch_counts_a_hit_without_reading_the_file(tmp_path: Path, medium: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A block whose bytes the caller has already: this worker's own is its part's hit (its policy
    told); another worker's, on tmpfs where its file is seen, a hit of this part too; no file read."""
    a, b = parts(tmp_path, 1000, medium)
    await a.open()
    await b.open()
    try:
        own, other, later = bid("k", 0), bid("k", 1), bid("k", 2)
        for block in (own, later):
            await a.put(block, payload(block, 100))
        await b.put(other, payload(other, 100))
        read: list[str] = []
        monkeypatch.setattr(blockfile, "read_block", lambda path, block: read.append(path))
        monkeypatch.setattr(blockfile, "map_file", lambda path, **_: read.append(path))
        assert a.touch(own) is True and lru_order(a.policy) == [later.name, own.name]  # (the policy saw it)
        assert a.touch(other) is (medium == "memory")  # on a disk, `in` does not see it either
        assert a.touch(bid("gone", 1)) is False and b.touch(bid("gone", 1)) is False
        assert (a.stats.hits, a.stats.misses, read) == (1 + (medium == "memory"), 0, [])
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_mapped_block_is_answered_as_its_files_read_would_be(tmp_path: Path) -> None:
    """get_now of a block whose file is mapped (from its second read on) answers from the mapping
    whichever worker owns it (each keeps up to 1/8 of its quota mapped), and counts as the reads through the own part or the other's file
    count: this part's hit and its policy's access, or a hit noted to the owner. A block this
    worker removed is gone at once; another's, once its mapping is compared with its file again."""
    folder = str(tmp_path / "hits")

    def tier(index: int) -> SharedTier:
        return SharedTier(str(tmp_path / "mem"), 8000, make_policy("lru", 8000), lambda b: even(b) == (index == 0),
                          medium="memory", name="mem",
                          notes=HitNotes(folder, "mem", index, 2, lambda b: 0 if even(b) else 1))

    a, b = tier(0), tier(1)
    await a.open()
    await b.open()
    try:
        mapped = a.own.files
        assert isinstance(mapped, MappedBlocks)
        clock = mapped.clock = Clock()
        own, later, other = bid("k", 0), bid("k", 2), bid("k", 1)
        for block in (own, later):
            await a.put(block, payload(block, 100))
        await b.put(other, payload(other, 100))
        for _ in range(4):
            assert a.get_now(own) == payload(own, 100) and a.get_now(other) == payload(other, 100)
        assert own.name in mapped and other.name in mapped
        assert (a.stats.hits, a.stats.notes_sent, b.take_notes()) == (8, 4, 4)
        assert a.get_now(later) is not None and lru_order(a.policy) == [own.name, later.name]
        assert a.get_now(own) is not None and lru_order(a.policy) == [later.name, own.name]  # its policy saw it
        await a.remove(own)
        assert a.get_now(own) is None and own.name not in mapped  # forgotten with its mapping
        await b.remove(other)
        assert a.get_now(other) == payload(other, 100)  # from its mapping, until it is compared again
        clock.now += mapped.recheck
        assert a.get_now(other) is None and other.name not in mapped
        assert (a.stats.hits, a.stats.misses, a.stats.notes_sent) == (11, 0, 5)
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_block_lent_in_its_file_is_kept_as_that_file_not_written_again(tmp_path: Path) -> None:
    """The owner of a block another worker wrote for it (write_for_owner, engine.lending) reads it
    (checked), then keeps that file as it is: one write of the block's bytes, not two; a file
    renamed over it between its read and its put (another lender's) is written again."""
    a, b = parts(tmp_path, 1000)
    await a.open()
    await b.open()
    writes: list[str] = []
    write = a.own._write_file
    a.own._write_file = lambda path, header, data: (writes.append(path), write(path, header, data))[1]  # type: ignore[method-assign]
    try:
        lent, again = bid("lent", 0), bid("again", 2)  # a's blocks, brought by b
        for block in (lent, again):
            assert await b.write_for_owner(block, payload(block, 100))
        path = a.own.block_path(lent.name)
        inode = os.stat(path).st_ino
        assert a.read_written(lent) == payload(lent, 100)
        await a.put(lent, payload(lent, 100))
        assert lent in a and os.stat(path).st_ino == inode and writes == []
        a.drop_written(lent)  # (the take's last step: the file is a's own now, and stays)
        assert os.path.exists(path) and await b.get(lent) == payload(lent, 100) and a.used == 100
        assert a.read_written(again) == payload(again, 100)
        assert await b.write_for_owner(again, payload(again, 100))  # another file renamed over the one read
        await a.put(again, payload(again, 100))
        assert writes == [a.own.block_path(again.name)] and await a.get(again) == payload(again, 100)
    finally:
        await a.aclose()
        await b.aclose()
