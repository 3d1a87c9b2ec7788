"""Shared test helpers for tests/store: block ids, deterministic data, fault-injecting tiers."""

from __future__ import annotations

import errno
import hashlib
import mmap
import os
import threading
import time

import pytest

from gateway.store import resident
from gateway.store.blocks import BlockId
from gateway.store.disk import DiskTier


def bid(key: str, index: int = 0, *, bucket: str = "bkt", version: str = "v1") -> BlockId:
    return BlockId(bucket, key, version, index)


def payload(block_id: BlockId, size: int) -> bytes:
    """Bytes that differ for every block and every size, so a mix-up cannot go unnoticed."""
    seed = hashlib.sha256(f"{block_id.name}:{size}".encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def out_of_page_cache(path: str) -> str:
    """The file written to the disk and dropped from the page cache, as mincore sees it; the
    test is skipped if the kernel keeps it there (POSIX_FADV_DONTNEED drops only the pages no
    one holds at that moment)."""
    for _ in range(50):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            mapping = mmap.mmap(fd, 0, access=mmap.ACCESS_COPY)  # (not blockfile's: tests count its maps)
        finally:
            os.close(fd)
        try:
            address = resident.address_of(mapping)
            if address is not None and not resident.Pages(address, len(mapping)).resident():
                return path
        finally:
            mapping.close()
        time.sleep(0.02)
    pytest.skip("the kernel kept the file in its page cache, which the test needs out of it")


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


def files_under(root: str) -> list[str]:
    return sorted(os.path.join(folder, name) for folder, _, names in os.walk(root) for name in names)
