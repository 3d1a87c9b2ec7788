"""Block files on tmpfs read through mappings kept open: the memory tier of a node of several
workers (store.shared) is such files, and a hit then copies its block out of a mapping checked
once, instead of opening, reading and closing the file and checking its CRC each time (four
system calls and a checksum per hit, which cost a node of two workers more than half of its
throughput on 4 KiB hits).

A file is mapped at its second read, as nginx caches a response at its `proxy_cache_min_uses`:
a block read once (most blocks of a cold scan) costs one pread, not a mapping made and undone.

Checking once is enough: a file on tmpfs is memory, and a block file is never written again
once renamed into place (store.blockfile), so what was checked when it was mapped stays true.
Nor is one ever truncated: a mapped file cut short by hand would kill the worker (SIGBUS) when
it reads past the new end; the node's run folder is the gateway user's alone (mode 0700).

A mapping outlives its file's deletion (an eviction), holding its pages and the same bytes,
which stay right: a block's bytes never change under its name (BlockId). Two bounds keep that
memory small:

- a mapping is compared with its file (device and inode) again `recheck` seconds after it was
  last compared, and dropped if the file is gone or another one;
- the mappings of one tier hold at most `budget` bytes and `most` files (each is one memory
  area of the process), the least recently read dropped first.

The worker's own blocks are answered from its index first (store.disk), so a block it evicted
is never read from a mapping; another worker's block may be read from a mapping for up to
`recheck` seconds after its owner evicted it. Event loop only.
"""

from __future__ import annotations

import mmap
import os
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from gateway.store import blockfile
from gateway.store.blocks import BlockId

__all__ = ["MappedBlocks"]


@dataclass(slots=True)
class _Mapping:
    mapping: mmap.mmap
    data: memoryview  # the block's bytes, within the mapping
    path: str
    inode: tuple[int, int]  # (st_dev, st_ino) of the file when mapped
    checked: float  # monotonic: when the file was last found to be this one


class MappedBlocks:
    """Verified read-only mappings of block files, by block name, least recently read first."""

    def __init__(self, budget: int, *, most: int = 4096, recheck: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.budget = budget
        self.most = most
        self.recheck = recheck
        self._clock = clock
        self._maps: OrderedDict[str, _Mapping] = OrderedDict()
        self._read_once: OrderedDict[str, None] = OrderedDict()  # names read once, not mapped (at most `most`)
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._maps)

    def held(self, name: str) -> bytes | None:
        """The bytes of a block whose file is mapped (a copy), or None."""
        held = self._maps.get(name)
        if held is None:
            return None
        now = self._clock()
        if now - held.checked >= self.recheck and not self._still_there(held, now):
            self._drop(name)
            return None
        self._maps.move_to_end(name)
        return held.data.tobytes()

    def read(self, path: str, block_id: BlockId) -> bytes:
        """The block's checked bytes (a copy): from its mapping; else read, and mapped if it
        was read once before. Raises as blockfile.read_block does: FileNotFoundError,
        BadBlockError, OSError."""
        name = block_id.name
        block = self.held(name)
        if block is not None:
            return block
        if name not in self._read_once:  # its first read: not mapped
            self._read_once[name] = None
            if len(self._read_once) > self.most:
                self._read_once.popitem(last=False)
            return blockfile.read_block(path, block_id)
        del self._read_once[name]
        mapping, data, inode = blockfile.map_block(path, block_id)
        block = data.tobytes()
        if len(data) > self.budget:
            _close(mapping, data)
            return block
        self._maps[name] = _Mapping(mapping, data, path, inode, self._clock())
        self.bytes += len(data)
        while self.bytes > self.budget or len(self._maps) > self.most:
            self._drop(next(iter(self._maps)))
        return block

    def close(self) -> None:
        while self._maps:
            self._drop(next(iter(self._maps)))

    def forget(self, name: str) -> None:
        """Drop the mapping of a block whose file is deleted (its pages are then freed)."""
        if name in self._maps:
            self._drop(name)

    def _still_there(self, held: _Mapping, now: float) -> bool:
        try:
            status = os.stat(held.path)
        except OSError:
            return False
        if (status.st_dev, status.st_ino) != held.inode:
            return False
        held.checked = now
        return True

    def _drop(self, name: str) -> None:
        held = self._maps.pop(name)
        self.bytes -= len(held.data)
        _close(held.mapping, held.data)


def _close(mapping: mmap.mmap, data: memoryview) -> None:
    data.release()
    mapping.close()
