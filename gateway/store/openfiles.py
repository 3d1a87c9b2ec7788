"""Block files of a disk tier read on the event loop, kept as nginx's `open_file_cache` keeps
files: a hit on a block read lately is then one read of it, with no open, header parse or close
(which cost a 4 KiB disk hit about as much as all the rest of it).

- A block under VIEW_SIZE keeps its file open: a hit is one `preadv` of its data, from the page
  cache only (RWF_NOWAIT), checked against its CRC-32C on every read (docs/security.md,
  promise 2). Here that read costs less than asking the kernel about a mapping's pages.
- A larger block keeps its file mapped (store.mapped, `verify`) and is sent from the page
  cache's pages with no copy; its CRC is checked when its bytes may have come from the disk.

A file is opened and its header checked (it names the block; the lengths add up) once. A tier
forgets a block's file when the block leaves its index (evicted, removed, found bad), so no kept
file holds a deleted block's disk space. Another worker's blocks (store.shared), whose evictions
this worker does not see, are kept with `recheck`: an open file is compared with its path
(device and inode) again that many seconds after it was last compared, and closed when gone or
replaced; a mapping is compared on every read. At most `most` files open, least recently read
closed first. Event loop only.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from gateway.lru import LRU
from gateway.store import blockfile
from gateway.store.blockfile import BadBlockError
from gateway.store.blocks import BlockId, checksum
from gateway.store.mapped import CACHED_SIZE, VIEW_SIZE, MappedBlocks

__all__ = ["MAPPED_BYTES", "OpenBlockFiles"]

MAPPED_BYTES = 256 * 1024 * 1024  # the most bytes of large blocks kept mapped (page cache the kernel may take back)


@dataclass(slots=True)
class _Open:
    fd: int
    offset: int  # where the data starts: the header's length
    length: int
    crc: int
    inode: tuple[int, int] = (0, 0)  # (st_dev, st_ino), with `recheck`
    checked: float = 0.0  # monotonic: when the path was last found to be this file


class OpenBlockFiles:
    """Open block files (and mapped ones, `mapped`) by block name, least recently read first."""

    def __init__(self, most: int = 256, *, mapped_budget: int = MAPPED_BYTES, recheck: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.most = most
        self.recheck = recheck
        self.mapped = MappedBlocks(mapped_budget, verify=True, clock=clock)
        self._clock = clock
        # Never dropped by the LRU itself (`_open` forgets, closing the file, past `most`).
        self._files: LRU[str, _Open] = LRU(most + 1)

    def __len__(self) -> int:
        return len(self._files) + len(self.mapped)

    def read_cached(self, path: str, block_id: BlockId) -> bytes | memoryview | None:
        """The block's checked bytes if the page cache holds them all (and it is at most
        CACHED_SIZE), through its kept file; else None, for a thread to read. Raises as
        blockfile.open_block does: BadBlockError, OSError."""
        name = block_id.name
        if name in self.mapped:
            return self.mapped.cached(path, block_id)
        held = self._files.get(name)
        if held is not None and self.recheck is not None and not self._still_there(held, path):
            self.forget(name)
            held = None
        try:
            if held is None:
                held = self._open(path, block_id)
                if held is None:
                    return self.mapped.cached(path, block_id)
            else:
                self._files.use(name)
            data = blockfile.pread_nowait(held.fd, held.length, held.offset)
        except BlockingIOError:  # not all in the page cache, or too large for the event loop
            return None
        if len(data) != held.length or checksum(data) != held.crc:
            raise BadBlockError("checksum mismatch")
        return data

    def _open(self, path: str, block_id: BlockId) -> _Open | None:
        """The block's file opened and kept, or None for a block of VIEW_SIZE or more (to be
        mapped); BlockingIOError for one over CACHED_SIZE."""
        opened = _Open(*blockfile.open_block(path, block_id, CACHED_SIZE + blockfile.MAX_HEADER))
        if opened.length >= VIEW_SIZE:
            os.close(opened.fd)
            if opened.length > CACHED_SIZE:
                raise BlockingIOError("a block this large is read in a thread")
            return None
        self._files.put(block_id.name, opened)
        while len(self._files) > self.most:
            self.forget(next(iter(self._files)))
        if self.recheck is not None:  # (kept first: `forget` closes it whatever happens next)
            status = os.fstat(opened.fd)
            opened.inode, opened.checked = (status.st_dev, status.st_ino), self._clock()
        return opened

    def _still_there(self, held: _Open, path: str) -> bool:
        now = self._clock()
        if self.recheck is None or now - held.checked < self.recheck:
            return True
        try:
            status = os.stat(path)
        except OSError:
            return False
        held.checked = now
        return (status.st_dev, status.st_ino) == held.inode

    def forget(self, name: str) -> None:
        """Close a block's file or drop its mapping (if kept)."""
        held = self._files.pop(name)
        if held is not None:
            os.close(held.fd)
        self.mapped.forget(name)

    def close(self) -> None:
        while self._files:
            self.forget(next(iter(self._files)))
        self.mapped.close()

    def __del__(self) -> None:
        # A tier dropped without being closed (a failed start, a test) leaves no descriptor open.
        while (oldest := self._files.pop_oldest()) is not None:
            try:
                os.close(oldest[1].fd)
            except Exception:  # noqa: BLE001 -- closed already, or the interpreter is shutting down
                pass
