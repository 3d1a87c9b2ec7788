"""Shared test helpers for tests/store: block ids, deterministic data, fault-injecting tiers."""

from __future__ import annotations

import errno
import hashlib
import mmap
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from gateway.store import blockfile, resident
from gateway.store.blocks import BlockId, checksum
from gateway.store.disk import DiskTier
from tests.waiting import wait_for


def bid(key: str, index: int = 0, *, bucket: str = "bkt", version: str = "v1") -> BlockId:
    return BlockId(bucket, key, version, index)


def payload(block_id: BlockId, size: int) -> bytes:
    """Bytes that differ for every block and every size, so a mix-up cannot go unnoticed."""
    seed = hashlib.sha256(f"{block_id.name}:{size}".encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def write_block(root: Path | str, block: BlockId, data: bytes) -> str:
    """A block file written as a tier writes it, under `root`; its path."""
    path = blockfile.block_path(str(root), block.name)
    blockfile.write_file(path, blockfile.encode_header(block, len(data), checksum(data)), data, fsync=False,
                         unlink=os.unlink)
    return path


def flip_last_byte(path: str) -> None:
    with open(path, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        byte = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([byte[0] ^ 0x01]))


def change_files(action: str, block: BlockId, blocks: dict[BlockId, bytes], root: Path) -> None:
    """What may happen to a block's file between two reads: "delete" it, "write" it (again),
    "swap" another block's file in under its name, "flip" a byte of it in place; any other
    action changes nothing. `blocks`: every block's bytes, in the order "swap" takes the next."""
    path = blockfile.block_path(str(root), block.name)
    exists = os.path.exists(path)
    if action == "delete" and exists:
        os.unlink(path)
    elif action == "write":
        write_block(root, block, blocks[block])
    elif action == "swap":
        order = list(blocks)
        other = order[(order.index(block) + 1) % len(order)]
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.replace(write_block(root, other, blocks[other]), path)
    elif action == "flip" and exists:
        flip_last_byte(path)


def out_of_page_cache(path: str) -> str:
    """The file written to the disk and dropped from the page cache, as mincore sees it; the
    test is skipped if the kernel keeps it there (POSIX_FADV_DONTNEED drops only the pages no
    one holds at that moment)."""
    def dropped() -> bool:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            mapping = mmap.mmap(fd, 0, access=mmap.ACCESS_COPY)  # (not blockfile's: tests count its maps)
        finally:
            os.close(fd)
        try:
            address = resident.address_of(mapping)
            return address is not None and not resident.Pages(address, len(mapping)).resident()
        finally:
            mapping.close()

    try:
        wait_for(dropped, "the kernel drops the file from its page cache", within=1)
    except AssertionError:
        pytest.skip("the kernel kept the file in its page cache, which the test needs out of it")
    return path


class Clock:
    """An injectable clock."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class FailingDisk(DiskTier):
    """A disk whose writes fail with `fail` (an errno) while it is set; counts attempts."""

    fail: int | None = None
    attempts = 0

    def _write_file(self, path: str, header: bytes, data: bytes) -> None:
        self.attempts += 1
        if self.fail is not None:
            raise OSError(self.fail, os.strerror(self.fail), path)
        super()._write_file(path, header, data)


class FullDisk(FailingDisk):
    fail = errno.ENOSPC


class GatedDisk(DiskTier):
    """A disk whose writes wait for `gate`, to hold a write in flight."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.gate = threading.Event()
        self.writing = threading.Event()

    def _write_file(self, path: str, header: bytes, data: bytes) -> None:
        self.writing.set()
        assert self.gate.wait(10)
        super()._write_file(path, header, data)


def lru_order(policy: Any) -> list[str]:
    """The keys of an LRU policy, the next victim first, the policy left as it was (each key
    refused in turn goes to the back: after a whole pass, the order is the same)."""
    order: list[str] = []
    assert policy.victim(lambda key: bool(order.append(key))) is None
    return order


class ReadCountingDisk(DiskTier):
    """A disk that counts the block files it reads: in its threads, or on the loop from the page cache."""

    reads = 0

    def _read_block(self, path: str, block_id: BlockId) -> bytes:
        self.reads += 1
        return super()._read_block(path, block_id)

    def _read_cached(self, path: str, entry: Any) -> bytes | memoryview | None:
        data = super()._read_cached(path, entry)
        self.reads += data is not None
        return data


def files_under(root: str) -> list[str]:
    return sorted(os.path.join(folder, name) for folder, _, names in os.walk(root) for name in names)
