"""The rings that carry one worker's hits of another worker's blocks to their owner
(gateway.store.hitnotes), and the owner's policy that takes them (gateway.store.shared)."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
from pathlib import Path

from gateway.store.blocks import BlockId
from gateway.store.hitnotes import HitNotes, HitRing, NotedPolicy, ring_size
from gateway.store.policy import LRUPolicy, S3FIFOPolicy
from gateway.store.shared import SharedTier
from gateway.store.tiers import TieredStore


def name(i: int) -> bytes:
    return i.to_bytes(16, "big")


def test_a_ring_gives_back_what_was_pushed_in_order_across_its_wrap(tmp_path: Path) -> None:
    writer, reader = HitRing(str(tmp_path / "r"), slots=8), HitRing(str(tmp_path / "r"), slots=8)
    assert os.path.getsize(tmp_path / "r") == ring_size(8)
    taken: list[bytes] = []
    for i in range(100):  # 100 names through 8 slots, drained every 5: wraps many times
        assert writer.push(name(i))
        if i % 5 == 4:
            taken += reader.drain()
    taken += reader.drain()
    assert taken == [name(i) for i in range(100)]
    assert reader.drain() == [] and writer.dropped == 0 and reader.written == 100


def test_a_full_ring_drops_and_counts_never_overwrites(tmp_path: Path) -> None:
    writer, reader = HitRing(str(tmp_path / "r"), slots=4), HitRing(str(tmp_path / "r"), slots=4)
    results = [writer.push(name(i)) for i in range(7)]
    assert results == [True] * 4 + [False] * 3
    assert writer.dropped == 3 and reader.dropped == 3  # in the file: either side sees it
    assert reader.drain() == [name(i) for i in range(4)]
    assert writer.push(name(9))  # room again once drained
    assert reader.drain() == [name(9)]


def test_a_ring_reopened_goes_on_where_it_was(tmp_path: Path) -> None:
    path = str(tmp_path / "r")
    first = HitRing(path, slots=4)
    first.push(name(1))
    first.close()
    again = HitRing(path, slots=4)  # a writer restarted: its count is in the file
    again.push(name(2))
    assert HitRing(path, slots=4).drain() == [name(1), name(2)]


def _write(path: str, count: int) -> None:
    ring = HitRing(path, slots=64)
    i = 0
    while i < count:  # the reader drains in its own time: retry what a full ring refused
        if ring.push(name(i)):
            i += 1


def test_two_processes_one_writing_one_draining(tmp_path: Path) -> None:
    path = str(tmp_path / "r")
    reader = HitRing(path, slots=64)
    writer = multiprocessing.get_context("spawn").Process(target=_write, args=(path, 5000))
    writer.start()
    taken: list[bytes] = []
    while len(taken) < 5000:
        taken += reader.drain()
    writer.join(30)
    assert writer.exitcode == 0
    assert taken == [name(i) for i in range(5000)]  # every name once, in order, none torn


def block(i: int) -> BlockId:
    return BlockId("b", f"k{i}", "v", 0)


def test_hit_notes_reach_the_owner_of_each_block(tmp_path: Path) -> None:
    def owner(b: BlockId) -> int:
        return int(b.key[1:]) % 3

    notes = [HitNotes(str(tmp_path), "mem", i, 3, owner, slots=16) for i in range(3)]
    for n in notes:
        n.open()
    assert notes[0].note(block(1)) and notes[0].note(block(2)) and notes[2].note(block(4))
    assert not notes[0].note(block(3))  # its own block: no ring to itself
    assert notes[1].drain() == [block(1).name, block(4).name]
    assert notes[2].drain() == [block(2).name]
    assert notes[0].drain() == []
    for n in notes:
        n.close()
    assert not notes[0].note(block(1))  # closed: nothing noted


def test_the_owner_takes_the_notes_before_it_chooses_a_victim() -> None:
    taken: list[str] = []
    inner = LRUPolicy()
    policy = NotedPolicy(inner, lambda: [inner.access(key) for key in taken])
    for key in "abc":
        policy.insert(key, 1)
    taken.append("a")  # another worker hit "a": it is no longer the least recently used
    assert policy.victim() == "b"
    assert len(policy) == 2 and "a" in policy


async def test_a_shared_tier_applies_its_siblings_hits_to_its_policy(tmp_path: Path) -> None:
    """Worker 0 owns every block; worker 1 hits one of them: in worker 0's S3-FIFO that block
    is accessed, so it goes to the main queue rather than out when the small queue is full."""
    folder = str(tmp_path / "hits")

    def tier(index: int) -> SharedTier:
        return SharedTier(str(tmp_path / "mem"), 4 * 1024, S3FIFOPolicy(4 * 1024), lambda b: index == 0,
                          medium="memory", name="mem", notes=HitNotes(folder, "mem", index, 2, lambda b: 0))

    owner, reader = tier(0), tier(1)
    await owner.open()
    await reader.open()
    try:
        for i in range(4):
            await owner.put(block(i), bytes([i]) * 1024)
        assert reader.get_now(block(0)) is not None  # worker 1's hit, noted for worker 0
        assert reader.stats.notes_sent == 1
        await owner.put(block(4), b"x" * 1024)  # the victim is chosen after the note is taken
        assert block(0) in owner and block(1) not in owner
        assert owner.stats.notes_taken == 1
    finally:
        await owner.aclose()
        await reader.aclose()


async def test_the_owner_promotes_a_disk_block_another_worker_hit(tmp_path: Path) -> None:
    """CACHE_PROMOTE in a node of workers: a block worker 1 reads from worker 0's part of the
    disk tier is copied into memory by worker 0, which owns it, once it takes the note."""
    folder = str(tmp_path / "hits")

    def store(index: int) -> TieredStore:
        def owns(b: BlockId) -> bool:
            return index == 0

        def level(path: str, name: str, medium: str) -> SharedTier:
            return SharedTier(str(tmp_path / path), 1024, LRUPolicy(), owns, medium=medium, name=name,
                              notes=HitNotes(folder, name, index, 2, lambda b: 0))

        return TieredStore(level("mem", "mem", "memory"), [level("disk", "disk0", "ssd")], owns=owns)

    owner, reader = store(0), store(1)
    await owner.open()
    await reader.open()
    try:
        await owner.put(block(0), b"a" * 1024)
        await owner.put(block(1), b"b" * 1024)  # block 0 goes down to the disk
        assert owner.memory is not None and block(0) not in owner.memory and block(0) in owner.disks[0]
        hit = await reader.get(block(0))
        assert hit is not None and hit[1] == "disk0" and reader.promotions == 0  # not the reader's to promote
        disk = owner.disks[0]
        assert isinstance(disk, SharedTier) and disk.take_notes() == 1
        async with asyncio.timeout(10):
            while owner.promotions == 0 or block(0) not in owner.memory:
                await asyncio.sleep(0.01)  # the promotion reads the block in the disk tier's threads
        assert (await reader.get(block(0)) or (b"", ""))[1] == "mem"
    finally:
        await owner.aclose()
        await reader.aclose()


async def test_without_room_for_its_rings_a_tier_serves_without_notes(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    notes = HitNotes(str(tmp_path / "file" / "hits"), "mem", 1, 2, lambda b: 0)  # a folder under a file
    tier = SharedTier(str(tmp_path / "mem"), 4096, LRUPolicy(), lambda b: True, medium="memory", name="mem",
                      notes=notes)
    await tier.open()
    try:
        assert tier.notes is None
        await tier.put(block(0), b"a" * 100)
        assert tier.get_now(block(0)) is not None and tier.take_notes() == 0
    finally:
        await tier.aclose()
