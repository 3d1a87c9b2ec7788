"""Block files of a disk tier kept open, as nginx's `open_file_cache` keeps files: a hit on a
block read lately is one read of its data from the open file, checked against its CRC-32C as
every read of a disk block is, instead of opening the file, reading and parsing its header and
closing it again (three system calls and a JSON parse more, which cost a 4 KiB disk hit about
as much as all the rest of it).

A file is opened and its header checked (it names the block; the lengths add up) once; the
data is read and checked on every read. Only the worker's own blocks are kept open, and the
tier closes a block's file when the block leaves its index (evicted, removed, found bad), so
an open file never holds a deleted block's disk space. At most `most` files, least recently
read closed first. Event loop only.
"""

from __future__ import annotations

import os
from collections import OrderedDict
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


class OpenBlockFiles:
    """Open block files by block name, least recently read first."""

    def __init__(self, most: int = 256) -> None:
        self.most = most
        self._files: OrderedDict[str, _Open] = OrderedDict()

    def __len__(self) -> int:
        return len(self._files)

    def read_cached(self, path: str, block_id: BlockId, largest: int) -> bytes:
        """The block's checked bytes, from the page cache only (RWF_NOWAIT), through its open
        file. Raises as blockfile.read_cached_block does: BlockingIOError (a read that would
        wait for the disk, or a block larger than `largest`), BadBlockError, OSError."""
        name = block_id.name
        held = self._files.get(name)
        if held is None:
            held = _Open(*blockfile.open_block(path, block_id, largest))
            self._files[name] = held
            while len(self._files) > self.most:
                self.forget(next(iter(self._files)))
        else:
            self._files.move_to_end(name)
        data = blockfile.pread_nowait(held.fd, held.length, held.offset)
        if len(data) != held.length or checksum(data) != held.crc:
            raise BadBlockError("checksum mismatch")
        return data

    def forget(self, name: str) -> None:
        """Close a block's file (if open)."""
        held = self._files.pop(name, None)
        if held is not None:
            os.close(held.fd)

    def close(self) -> None:
        while self._files:
            self.forget(next(iter(self._files)))
