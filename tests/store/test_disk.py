"""store.disk and store.blockfile: the file format, restart, corruption, degraded disks, and the thread pool."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import struct
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from gateway.store.blocks import BlockId, checksum
from gateway.store.disk import DiskTier
from gateway.store.policy import make_policy
from tests.store.helpers import Clock, FailingDisk, FullDisk, GatedDisk, bid, files_under, flip_last_byte, payload
from tests.waiting import eventually

Factory = Callable[..., DiskTier]


@pytest.fixture
async def disks(tmp_path: Path) -> AsyncIterator[Factory]:
    """Builds disk tiers on tmp_path/cache (same folder each time) and closes them all."""
    made: list[DiskTier] = []

    def make(quota: int = 10_000, *, cls: type[DiskTier] = DiskTier, policy: str = "lru", **kwargs: object) -> DiskTier:
        kwargs.setdefault("name", "ssd0")
        disk = cls(str(tmp_path / "cache"), quota, make_policy(policy, quota), **kwargs)  # type: ignore[arg-type]
        made.append(disk)
        return disk

    yield make
    for disk in made:
        await disk.aclose()


# --- the format ----------------------------------------------------------------------------------


async def test_file_layout_and_header(disks: Factory, tmp_path: Path) -> None:
    disk = disks()
    await disk.open()
    block = BlockId("bkt", "dir/ключ.parquet", '"etag"', 3)
    data = payload(block, 1000)
    await disk.put(block, data)
    name = block.name
    path = tmp_path / "cache" / name[:2] / name[2:4] / name
    assert files_under(str(tmp_path / "cache")) == [str(path)]
    raw = path.read_bytes()
    magic, version, header_length, data_length, crc = struct.unpack_from(">4sB3xIQI", raw)
    assert (magic, version, data_length, crc) == (b"GWBK", 2, 1000, checksum(data))
    assert json.loads(raw[24:header_length]) == {"bucket": "bkt", "key": "dir/ключ.parquet", "version": '"etag"', "index": 3}
    assert raw[header_length:] == data
    # Object bytes are readable by the gateway's user alone.
    assert path.stat().st_mode & 0o077 == 0 and path.parent.stat().st_mode & 0o077 == 0


async def test_a_block_of_the_previous_format_is_dropped_not_misread(disks: Factory, tmp_path: Path) -> None:
    # Format 1 stored a zlib CRC-32: after an upgrade its files are dropped at open, and
    # the blocks are fetched again, instead of failing their checks one by one.
    disk = disks()
    await disk.open()
    block = bid("old", 0)
    await disk.put(block, payload(block, 500))
    path = tmp_path / "cache" / block.name[:2] / block.name[2:4] / block.name
    await disk.aclose()
    raw = bytearray(path.read_bytes())
    raw[4] = 1
    path.write_bytes(bytes(raw))
    again = disks()
    await again.open()
    assert await again.get(block) is None and not path.exists()


# --- restart -------------------------------------------------------------------------------------


async def test_restart_rebuilds_the_index_and_serves_the_same_bytes(disks: Factory) -> None:
    first = disks()
    await first.open()
    blocks = {bid(f"k{i}", i): payload(bid(f"k{i}", i), 100 + i) for i in range(20)}
    for block, data in blocks.items():
        await first.put(block, data)
    used = first.used
    await first.aclose()

    second = disks()
    await second.open()
    assert set(second) == set(blocks) and second.used == used
    for block, data in blocks.items():
        assert await second.get(block) == data
    assert second.stats.hits == 20 and second.stats.bad_blocks == 0


async def test_restart_seeds_the_policy_oldest_file_first_and_respects_a_smaller_quota(disks: Factory, tmp_path: Path) -> None:
    first = disks()
    await first.open()
    blocks = [bid(f"k{i}") for i in range(6)]
    for block in blocks:
        await first.put(block, payload(block, 100))
    await first.aclose()
    # Make the files' ages disagree with the write order: k5 oldest ... k0 newest.
    now = time.time()
    for age, block in enumerate(reversed(blocks)):
        os.utime(first.block_path(block.name), (now - 1000 + age, now - 1000 + age))

    second = disks(350)
    await second.open()
    assert set(second) == set(blocks[:3])  # the three oldest files went to fit 350 bytes
    assert second.used == 300 and second.stats.evictions == 3
    assert len(files_under(str(tmp_path / "cache"))) == 3
    new = bid("new")
    assert await second.put(new, payload(new, 100)) == [blocks[2]]  # the oldest left


async def test_open_deletes_temporaries_and_bad_headers_and_keeps_foreign_files(disks: Factory, tmp_path: Path) -> None:
    first = disks()
    await first.open()
    good, bad = bid("good"), bid("bad")
    await first.put(good, payload(good, 100))
    await first.put(bad, payload(bad, 100))
    await first.aclose()
    folder = Path(first.block_path(good.name)).parent
    (folder / f".tmp-{good.name}-deadbeef").write_bytes(b"half a block")
    Path(first.block_path(bad.name)).write_bytes(b"XXXX" + Path(first.block_path(bad.name)).read_bytes()[4:])
    (tmp_path / "cache" / "README").write_text("not a block")
    (folder / "not-a-block").write_text("leave me")

    second = disks()
    await second.open()
    assert set(second) == {good}
    assert second.stats.bad_blocks == 1
    remaining = files_under(str(tmp_path / "cache"))
    assert remaining == sorted([second.block_path(good.name), str(tmp_path / "cache" / "README"), str(folder / "not-a-block")])


# --- corruption ----------------------------------------------------------------------------------


def truncate(path: str) -> None:
    os.truncate(path, os.path.getsize(path) - 7)


def rename_in_header(path: str) -> None:
    raw = Path(path).read_bytes()
    Path(path).write_bytes(raw.replace(b'"key":"k"', b'"key":"K"', 1))


@pytest.mark.parametrize("damage", [flip_last_byte, truncate, rename_in_header])
async def test_a_damaged_block_is_detected_dropped_and_counted(disks: Factory, damage: Callable[[str], None]) -> None:
    disk = disks()
    await disk.open()
    block, other = bid("k"), bid("other")
    await disk.put(block, payload(block, 500))
    await disk.put(other, payload(other, 500))
    damage(disk.block_path(block.name))

    assert await disk.get(block) is None
    assert disk.stats.bad_blocks == 1 and disk.stats.misses == 1
    assert block not in disk and disk.used == 500
    assert not os.path.exists(disk.block_path(block.name))
    assert await disk.get(other) == payload(other, 500)
    # Fetched again, it is stored again.
    await disk.put(block, payload(block, 500))
    assert await disk.get(block) == payload(block, 500)


async def test_a_block_file_deleted_behind_our_back_is_a_miss(disks: Factory) -> None:
    disk = disks()
    await disk.open()
    block = bid("k")
    await disk.put(block, payload(block, 10))
    os.unlink(disk.block_path(block.name))
    assert await disk.get(block) is None
    assert block not in disk and disk.used == 0 and disk.stats.bad_blocks == 0


async def test_put_demoting_hands_back_the_victims_bytes(disks: Factory) -> None:
    disk = disks(200)
    await disk.open()
    a, b, c = bid("a"), bid("b"), bid("c")
    await disk.put(a, payload(a, 100))
    await disk.put(b, payload(b, 100))
    flip_last_byte(disk.block_path(b.name))
    assert await disk.put_demoting(c, payload(c, 200)) == [(a, payload(a, 100)), (b, None)]
    assert disk.stats.bad_blocks == 1
    assert set(disk) == {c}


# --- degraded disks ------------------------------------------------------------------------------


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EACCES])
async def test_a_failing_disk_degrades_to_misses_and_backs_off(disks: Factory, code: int) -> None:
    clock = Clock()
    disk = disks(cls=FailingDisk, clock=clock, backoff=30.0)
    assert isinstance(disk, FailingDisk)
    await disk.open()
    kept = bid("kept")
    await disk.put(kept, payload(kept, 100))
    disk.fail = code

    block = bid("k")
    assert await disk.put(block, payload(block, 100)) == []
    assert block not in disk and disk.used == 100
    assert not disk.healthy and disk.stats.write_errors == 1
    assert await disk.get(block) is None
    assert await disk.get(kept) == payload(kept, 100)  # reads of an unhealthy tier still work

    attempts = disk.attempts
    await disk.put(block, payload(block, 100))
    assert disk.attempts == attempts and disk.stats.rejected == 1  # backing off: not even tried

    clock.now += 31
    assert disk.healthy
    disk.fail = None
    await disk.put(block, payload(block, 100))
    assert await disk.get(block) == payload(block, 100)
    assert disk.healthy and disk.used == 200


async def test_a_write_failing_after_the_temporary_was_written_leaves_nothing_behind(disks: Factory, tmp_path: Path) -> None:
    # os.replace onto a non-empty folder fails even for root: a real fault, no mock.
    disk = disks()
    await disk.open()
    block = bid("k")
    os.makedirs(disk.block_path(block.name))
    Path(disk.block_path(block.name), "occupied").write_text("x")
    await disk.put(block, payload(block, 100))
    assert block not in disk and disk.used == 0 and not disk.healthy
    assert files_under(str(tmp_path / "cache")) == [os.path.join(disk.block_path(block.name), "occupied")]


async def test_an_unusable_folder_leaves_an_empty_unhealthy_tier(tmp_path: Path) -> None:
    path = tmp_path / "a-file"
    path.write_text("not a folder")
    disk = DiskTier(str(path), 1000, make_policy("lru", 1000), name="ssd0")
    try:
        await disk.open()
        assert not disk.healthy and len(disk) == 0
        block = bid("k")
        assert await disk.put(block, payload(block, 10)) == []
        assert await disk.get(block) is None
    finally:
        await disk.aclose()


async def test_a_full_disk_never_raises(disks: Factory) -> None:
    disk = disks(cls=FullDisk)
    await disk.open()
    results = await asyncio.gather(*(disk.put(bid(f"k{i}"), payload(bid(f"k{i}"), 10)) for i in range(10)))
    assert results == [[]] * 10
    assert len(disk) == 0 and disk.used == 0


# --- concurrency ---------------------------------------------------------------------------------


class ThreadRecordingDisk(DiskTier):
    """Records the thread of every file operation."""

    threads: list[threading.Thread]

    def _record(self) -> None:
        self.__dict__.setdefault("threads", []).append(threading.current_thread())

    def _write_file(self, path: str, header: bytes, data: bytes) -> None:
        self._record()
        super()._write_file(path, header, data)

    def _read_block(self, path: str, block_id: BlockId) -> bytes:
        self._record()
        return super()._read_block(path, block_id)

    def _scan(self) -> tuple[list, int, int]:  # type: ignore[type-arg]
        self._record()
        return super()._scan()

    def _unlink_quiet(self, path: str) -> None:
        self._record()
        super()._unlink_quiet(path)


async def test_no_file_io_runs_on_the_event_loop_thread(tmp_path: Path) -> None:
    loop_thread = threading.current_thread()
    disk = ThreadRecordingDisk(str(tmp_path / "cache"), 300, make_policy("lru", 300), name="ssd0", threads=2)
    try:
        await disk.open()
        blocks = [bid(f"k{i}") for i in range(6)]
        for block in blocks:
            await disk.put(block, payload(block, 100))
            await disk.get(block)
        await disk.put_demoting(bid("x"), payload(bid("x"), 100))
        flip_last_byte(disk.block_path(blocks[-1].name))
        await disk.get(blocks[-1])
        await disk.remove(blocks[-2])
    finally:
        await disk.aclose()
    assert len(disk.threads) > 15
    assert loop_thread not in disk.threads
    assert all(thread.name.startswith("gateway-store-ssd0") for thread in disk.threads)


async def test_a_block_in_the_page_cache_is_read_without_a_thread(tmp_path: Path) -> None:
    """RWF_NOWAIT: read on the loop only what the kernel has in memory, up to 4 MiB; the rest,
    and larger blocks, in the tier's threads (the loop never waits for the disk)."""
    disk = ThreadRecordingDisk(str(tmp_path / "cache"), 1 << 24, make_policy("lru", 1 << 24), name="ssd0")
    try:
        await disk.open()
        small, mib, large = bid("small"), bid("mib"), bid("large")
        await disk.put(small, payload(small, 4096))
        await disk.put(mib, payload(mib, 1 << 20))
        await disk.put(large, payload(large, 5 << 20))
        disk.threads = []
        assert await disk.get(small) == payload(small, 4096)
        assert disk.stats.page_cache_hits == 1 and disk.threads == []
        assert disk.get_now(small) == payload(small, 4096) and disk.stats.page_cache_hits == 2
        assert await disk.get(mib) == payload(mib, 1 << 20) and disk.get_now(mib) == payload(mib, 1 << 20)
        assert disk.stats.page_cache_hits == 4 and disk.threads == []
        assert await disk.get(large) == payload(large, 5 << 20)
        assert disk.stats.page_cache_hits == 4 and len(disk.threads) == 1  # read in a thread
        assert disk.get_now(large) is None  # not without a thread: the hit path declines it
        for block in (small, mib):
            flip_last_byte(disk.block_path(block.name))
            assert await disk.get(block) is None  # the loop's read refused it, the thread's deleted it
            assert not os.path.exists(disk.block_path(block.name))
        assert disk.stats.bad_blocks == 2
        assert disk.stats.hits == 5 and disk.stats.misses == 2
    finally:
        await disk.aclose()


async def write_in_flight(disks: Factory) -> tuple[GatedDisk, BlockId, asyncio.Task[list[BlockId]]]:
    """A gated disk with the write of one block of 100 bytes under way, held at the gate."""
    disk = disks(cls=GatedDisk)
    assert isinstance(disk, GatedDisk)
    await disk.open()
    block = bid("k")
    task = asyncio.create_task(disk.put(block, payload(block, 100)))
    await asyncio.to_thread(disk.writing.wait, 5)
    return disk, block, task


async def test_a_cancelled_put_still_lands_and_is_accounted(disks: Factory) -> None:
    disk, block, task = await write_in_flight(disks)
    assert disk.used == 100  # reserved while in flight
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    disk.gate.set()
    await eventually(lambda: block in disk, "the cancelled put lands")
    assert await disk.get(block) == payload(block, 100)
    assert disk.used == 100


async def test_remove_during_a_write_wins(disks: Factory, tmp_path: Path) -> None:
    disk, block, task = await write_in_flight(disks)
    assert await disk.get(block) is None  # not readable until written
    assert await disk.put(block, payload(block, 100)) == []  # one write per block at a time
    assert await disk.remove(block) is True
    disk.gate.set()
    await task
    await eventually(lambda: not files_under(str(tmp_path / "cache")), "the removed block's file is gone")
    assert block not in disk and disk.used == 0
    assert files_under(str(tmp_path / "cache")) == []


async def test_concurrent_puts_and_gets_stay_within_quota(disks: Factory) -> None:
    disk = disks(1000, threads=4)
    await disk.open()
    blocks = [bid(f"k{i}") for i in range(60)]

    async def worker(offset: int) -> None:
        for i in range(40):
            block = blocks[(offset * 7 + i) % len(blocks)]
            await disk.put(block, payload(block, 90))
            assert disk.used <= disk.quota
            data = await disk.get(blocks[(offset + i * 3) % len(blocks)])
            assert data is None or len(data) == 90

    await asyncio.gather(*(worker(n) for n in range(8)))
    assert disk.used == 90 * len(disk) <= 1000
    assert set(files_under(disk.path)) == {disk.block_path(b.name) for b in disk}


async def test_a_closed_tier_is_a_miss(disks: Factory) -> None:
    disk = disks()
    await disk.open()
    block = bid("k")
    await disk.put(block, payload(block, 10))
    await disk.aclose()
    assert await disk.get(block) is None
    assert await disk.put(bid("j"), payload(bid("j"), 10)) == []
    await disk.aclose()  # idempotent
