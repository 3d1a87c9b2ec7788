"""Block files of a disk tier kept open, as nginx's `open_file_cache` keeps files: a hit on a
block read lately is one read of its data from the open file, checked against its CRC-32C as
every read of a disk block is, instead of opening the file, reading and parsing its header and
closing it again (three system calls and a JSON parse more, which cost a 4 KiB disk hit about
as much as all the rest of it).

A file is opened and its header checked (it names the block; the lengths add up) once; the
data is read and checked on every read. A tier closes its own block's file when the block
leaves its index (evicted, removed, found bad), so such a file never holds a deleted block's
disk space. Another worker's blocks (store.shared), whose evictions this worker does not see,
are kept open with `recheck`: the file is compared with its path (device and inode) again
that many seconds after it was last compared, and closed when gone or replaced. At most
`most` files, least recently read closed first. Event loop only.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from gateway.store import blockfile
from gateway.store.blockfile import BadBlockError
from gateway.store.blocks import BlockId, checksum

__all__ = ["OpenBlockFiles"]


@dataclass(slots=True)
class _Open:
    fd: int
    offset: int  # where the data starts: the header's length
    length: int
    crc: int
    inode: tuple[int, int] = (0, 0)  # (st_dev, st_ino), with `recheck`
    checked: float = 0.0  # monotonic: when the path was last found to be this file


class OpenBlockFiles:
    """Open block files by block name, least recently read first."""

    def __init__(self, most: int = 256, *, recheck: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.most = most
        self.recheck = recheck
        self._clock = clock
        self._files: OrderedDict[str, _Open] = OrderedDict()

    def __len__(self) -> int:
        return len(self._files)

    def read_cached(self, path: str, block_id: BlockId, largest: int) -> bytes:
        """The block's checked bytes, from the page cache only (RWF_NOWAIT), through its open
        file. Raises as blockfile.open_block does: BlockingIOError (a read that would wait for
        the disk, or a block larger than `largest`), BadBlockError, OSError."""
        name = block_id.name
        held = self._files.get(name)
        if held is not None and self.recheck is not None and not self._still_there(held, path):
            self.forget(name)
            held = None
        if held is None:
            held = self._files[name] = _Open(*blockfile.open_block(path, block_id, largest))
            while len(self._files) > self.most:
                self.forget(next(iter(self._files)))
            if self.recheck is not None:  # (kept first: `forget` closes it whatever happens next)
                status = os.fstat(held.fd)
                held.inode, held.checked = (status.st_dev, status.st_ino), self._clock()
        else:
            self._files.move_to_end(name)
        data = blockfile.pread_nowait(held.fd, held.length, held.offset)
        if len(data) != held.length or checksum(data) != held.crc:
            raise BadBlockError("checksum mismatch")
        return data

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
        """Close a block's file (if open)."""
        held = self._files.pop(name, None)
        if held is not None:
            os.close(held.fd)

    def close(self) -> None:
        while self._files:
            self.forget(next(iter(self._files)))

    def __del__(self) -> None:
        # A tier dropped without being closed (a failed start, a test) leaves no descriptor open.
        for held in self._files.values():
            try:
                os.close(held.fd)
            except Exception:  # noqa: BLE001 -- closed already, or the interpreter is shutting down
                pass
