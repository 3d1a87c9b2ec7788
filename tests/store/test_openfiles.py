"""store.openfiles: a disk tier's block files kept. A small block's file is kept open, and a
read through it is the block's bytes, checked against its CRC every time (a byte changed after
the file was opened is caught); a large block's file is kept mapped (store.mapped); a file is
opened once; a block not all in the page cache, or too large for the event loop, is left to the
threads; the tier closes a block's file when the block leaves its index and all of them when it
closes; at most `most` are open."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.store import blockfile
from gateway.store.blockfile import BadBlockError
from gateway.store.blocks import BlockId
from gateway.store.disk import DiskTier
from gateway.store.mapped import CACHED_SIZE, VIEW_SIZE
from gateway.store.openfiles import OpenBlockFiles
from gateway.store.policy import make_policy
from tests.store.helpers import Clock, bid, change_files, flip_last_byte, out_of_page_cache, payload, write_block

BUDGET = 1 << 30


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def counting_opens(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    opened: list[str] = []
    open_block = blockfile.open_block

    def recording(path: str, block: BlockId, largest: int) -> tuple[int, int, int, int]:
        opened.append(path)
        return open_block(path, block, largest)

    monkeypatch.setattr(blockfile, "open_block", recording)
    return opened


@pytest.mark.parametrize("size", [0, 100, 4096, VIEW_SIZE - 1, VIEW_SIZE, 100_000])
def test_a_file_is_opened_once_and_every_read_is_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          size: int) -> None:
    opened = counting_opens(monkeypatch)
    files = OpenBlockFiles(mapped_budget=BUDGET)
    block = bid("k")
    path = write_block(tmp_path, block, payload(block, size))
    assert [files.read_cached(path, block) for _ in range(3)] == [payload(block, size)] * 3
    assert opened == [path] and len(files) == 1
    assert (block.name in files.mapped) == (size >= VIEW_SIZE)  # a large block is sent from its mapping
    if size:
        flip_last_byte(path)  # after it was opened: the next read is checked all the same
        with pytest.raises(BadBlockError):
            files.read_cached(path, block)
    files.close()
    assert len(files) == 0


def test_a_file_of_another_block_or_too_large_is_not_kept_open(tmp_path: Path) -> None:
    files = OpenBlockFiles(mapped_budget=BUDGET)
    mine, other = bid("mine"), bid("other")
    before = open_fds()
    with pytest.raises(BadBlockError):
        files.read_cached(write_block(tmp_path, other, b"x" * 10), mine)
    big = bid("big")
    assert files.read_cached(write_block(tmp_path, big, payload(big, CACHED_SIZE + 1)), big) is None  # for a thread
    assert len(files) == 0 and open_fds() == before


def test_a_large_block_out_of_the_page_cache_is_left_to_the_threads(tmp_path: Path) -> None:
    """(A small one is read with RWF_NOWAIT, which may start the disk's read and return its
    bytes if it ends at once, as a virtual disk's often does: never a wait on the loop.)"""
    files = OpenBlockFiles(mapped_budget=BUDGET)
    block = bid("cold")
    path = out_of_page_cache(write_block(tmp_path, block, payload(block, 2 * 1024 * 1024)))  # past a readahead window
    assert files.read_cached(path, block) is None and len(files) == 0


def test_at_most_most_files_are_open(tmp_path: Path) -> None:
    files = OpenBlockFiles(most=3, mapped_budget=BUDGET)
    before = open_fds()
    blocks = [bid(f"k{i}") for i in range(5)]
    for block in blocks:
        assert files.read_cached(write_block(tmp_path, block, payload(block, 10)), block) == payload(block, 10)
    assert len(files) == 3 and open_fds() == before + 3
    files.close()
    assert open_fds() == before


async def test_the_tier_closes_a_blocks_file_when_the_block_goes(tmp_path: Path) -> None:
    tier = DiskTier(str(tmp_path), 800, make_policy("lru", 800), name="ssd")
    await tier.open()
    before = open_fds()
    try:
        ids = [bid(f"k{i}") for i in range(4)]
        for block in ids[:2]:
            await tier.put(block, payload(block, 300))
            assert tier.get_now(block) == payload(block, 300)  # on the loop, through the open file
        assert isinstance(tier.files, OpenBlockFiles) and len(tier.files) == 2 and open_fds() == before + 2
        await tier.put(ids[2], payload(ids[2], 300))  # evicts ids[0]
        assert len(tier.files) == 1 and tier.get_now(ids[0]) is None
        await tier.remove(ids[1])
        assert len(tier.files) == 0 and open_fds() == before
        assert tier.get_now(ids[2]) == payload(ids[2], 300) and len(tier.files) == 1
    finally:
        await tier.aclose()
    assert len(tier.files) == 0 and open_fds() == before


def test_with_recheck_a_deleted_or_replaced_file_is_closed_at_the_next_check(tmp_path: Path) -> None:
    clock = Clock()
    files = OpenBlockFiles(recheck=1.0, mapped_budget=BUDGET, clock=clock)
    block = bid("k")
    path = write_block(tmp_path, block, payload(block, 100))
    before = open_fds()
    assert files.read_cached(path, block) == payload(block, 100)
    os.unlink(path)
    assert files.read_cached(path, block) == payload(block, 100)  # the same bytes, until the check
    clock.now += 1.0
    with pytest.raises(FileNotFoundError):
        files.read_cached(path, block)
    assert len(files) == 0 and open_fds() == before  # the deleted file's descriptor is closed
    write_block(tmp_path, block, payload(block, 100))
    assert files.read_cached(path, block) == payload(block, 100)
    os.replace(write_block(tmp_path, bid("other"), payload(block, 100)), path)  # another file at the name
    clock.now += 1.0
    with pytest.raises(BadBlockError):
        files.read_cached(path, block)
    files.close()


def test_files_left_open_are_closed_with_their_cache(tmp_path: Path) -> None:
    files = OpenBlockFiles(mapped_budget=BUDGET)
    before = open_fds()
    block = bid("k")
    files.read_cached(write_block(tmp_path, block, payload(block, 10)), block)
    assert open_fds() == before + 1
    del files  # never closed: a tier dropped without aclose
    assert open_fds() == before


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(st.sampled_from(["delete", "write", "swap", "flip", "tick"]), st.integers(0, 2)),
                      max_size=25))
def test_a_read_is_its_block_none_or_an_error(tmp_path: Path, steps: list[tuple[str, int]]) -> None:
    """Whatever happens to the files between reads (deleted, written again, another block's file
    renamed over one, a byte changed in place), a read of a small (open) or large (mapped) block
    returns that block's bytes, None or an error: never other bytes."""
    clock = Clock()
    files = OpenBlockFiles(most=2, recheck=1.0, mapped_budget=3 * VIEW_SIZE, clock=clock)
    root = tmp_path / os.urandom(4).hex()
    ids = [bid(f"k{i}") for i in range(3)]
    data = {block: payload(block, (100, VIEW_SIZE, VIEW_SIZE + 4097)[i]) for i, block in enumerate(ids)}
    paths = {block: blockfile.block_path(str(root), block.name) for block in ids}
    try:
        for action, i in steps:
            if action == "tick":
                clock.now += 0.6
            else:
                change_files(action, ids[i], data, root)
            for read in ids:  # after every step, every block read once
                try:
                    got = files.read_cached(paths[read], read)
                except (FileNotFoundError, BadBlockError):
                    continue
                assert got is None or got == data[read]
            assert len(files.mapped) <= 3 and files.mapped.bytes <= 3 * VIEW_SIZE
    finally:
        files.close()
