"""Block files read through mappings kept open, as Varnish's file storage and nginx's
`open_file_cache` keep theirs. Two kinds of tier use them:

- the memory tier of a node of several workers (store.shared), which is files on tmpfs: a
  hit copies (or hands out a view of) its block, checked once when mapped, instead of opening,
  reading and closing the file and checking its CRC each time (four system calls and a
  checksum per hit, which cost a node of two workers more than half of its throughput on 4 KiB
  hits). A file is memory there, and a block file is never written again once renamed into
  place (store.blockfile), so what was checked when it was mapped stays true;
- the large blocks of a disk tier (`verify`, store.openfiles), whose page cache the kernel may
  drop and read again from the disk. A block is checked against its CRC-32C when mapped, and
  again whenever its bytes may have come from the disk since (docs/security.md, promise 2):
  when a page of it is no longer mapped in the worker (store.resident), which is how the
  kernel takes a page back, or its file changed (compared on every read). While every page
  stays mapped, the bytes are the memory that was checked, as the memory tier's are (at 1 MiB,
  the CRC took a quarter of a disk hit's CPU; asking the page table, a tenth of that). A block
  is read from its mapping only while the page cache holds all of it (else a thread reads it:
  the event loop never waits for a disk).

A block of VIEW_SIZE or more is handed out as a read-only view of its mapping: the answer is
written to the socket from the page cache's pages, as nginx's sendfile would, with no copy in
the worker. Smaller ones are copied (a copy costs less than a view kept alive).

On tmpfs a file is mapped at its second read, as nginx caches a response at its
`proxy_cache_min_uses`: a block read once (most blocks of a cold scan) costs one pread, not a
mapping made and undone. A disk tier maps a file when it first reads it on the event loop,
which it does only for a file it read or wrote lately (store.disk).

Nor is a block file ever truncated: a mapped file cut short by hand would kill the worker
(SIGBUS) when it reads past the new end; the cache folders are the gateway user's alone.

A mapping outlives its file's deletion (an eviction), holding its pages and the same bytes,
which stay right: a block's bytes never change under its name (BlockId). Two bounds keep that
memory small:

- a mapping is compared with its file (device, inode and ctime) again `recheck` seconds after
  it was last compared (on a disk: on every read, one stat), and dropped if the file is gone,
  another one, or was written to (the next read maps it again, and checks it);
- the mappings of one tier hold at most `budget` bytes and `most` files (each is one memory
  area of the process), the least recently read dropped first.

A mapping dropped while a view of it is still being sent is unmapped when that view is done.
The worker's own blocks are answered from its index first (store.disk), or from a mapping its
index drops with the block (DiskTier._forget; store.shared), so a block it evicted is never read
from a mapping; another worker's block on tmpfs may be read from a mapping for
up to `recheck` seconds after its owner evicted it (on a disk, the file is compared on every
read). Event loop only.
"""

from __future__ import annotations

import mmap
import time
from collections.abc import Callable
from dataclasses import dataclass

from gateway.lru import LRU
from gateway.store import blockfile
from gateway.store.blockfile import BadBlockError
from gateway.store.blocks import BlockId, checksum
from gateway.store.resident import Pages, address_of

__all__ = ["CACHED_SIZE", "VIEW_SIZE", "BlockMapping", "MappedBlocks"]

VIEW_SIZE = 64 * 1024
CACHED_SIZE = 4 * 1024 * 1024  # the largest block read from a disk's page cache on the loop (its CRC: ~0.25 ms)


@dataclass(slots=True)
class BlockMapping:
    """A block file's mapping kept, its bytes checked when it was made."""

    mapping: mmap.mmap
    data: memoryview  # the block's bytes, within the mapping, read-only
    crc: int
    path: str
    identity: tuple[int, int, int]  # blockfile.identity of the file when mapped
    checked: float  # monotonic: when the file was last found to be this one
    pages: Pages | None = None  # with `verify`: the pages of the block's bytes (store.resident)


class MappedBlocks:
    """Checked mappings of block files, by block name, least recently read first."""

    def __init__(self, budget: int, *, most: int = 4096, recheck: float = 1.0, verify: bool = False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.budget = budget
        self.recheck = recheck
        self.verify = verify
        self.clock = clock  # (what `checked` is read on)
        self._maps: LRU[str, BlockMapping] = LRU(most, dropped=self._unmap)
        # For a caller that answers a hit of a block mapped and compared lately itself, as `held` would,
        # without its frame (store.shared, on tmpfs): the dict's own look-up, and marking it read.
        self.mapping_of: Callable[[str], BlockMapping | None] = self._maps.get
        self.mark_read: Callable[[str], None] = self._maps.touch
        self._read_once: LRU[str, None] = LRU(most)  # names read once, not mapped
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._maps)

    def __contains__(self, name: object) -> bool:
        return name in self._maps

    def held(self, name: str) -> bytes | memoryview | None:
        """The bytes of a block whose file is mapped, or None (not mapped; with `verify`, not
        all in the page cache). With `verify`, BadBlockError when they fail their CRC (the
        mapping is dropped)."""
        held = self._maps.get(name)
        if held is None:
            return None
        now = self.clock()
        if (self.verify or now - held.checked >= self.recheck) and not self._still_there(held, now):
            self._drop(name)
            return None
        if held.pages is not None and not held.pages.mapped():
            # A page left this worker's memory since the block was checked: it may come from the
            # disk again (checking it maps every page again).
            if not held.pages.resident():
                return None
            if checksum(held.data) != held.crc:
                self._drop(name)
                raise BadBlockError("checksum mismatch")
        self._maps.touch(name)  # (held: just read)
        data = held.data  # (_handed's, without its frame: every hit of a block mapped asks this)
        return data[:] if len(data) >= VIEW_SIZE else data.tobytes()

    def read(self, path: str, block_id: BlockId) -> bytes | memoryview:
        """A block on tmpfs, checked: from its mapping; else read, and mapped if it was read
        once before. Raises as blockfile.read_block does: FileNotFoundError, BadBlockError,
        OSError."""
        name = block_id.name
        block = self.held(name)
        if block is not None:
            return block
        if name not in self._read_once:  # its first read: not mapped
            self._read_once.put(name, None)
            return blockfile.read_block(path, block_id)
        self._read_once.pop(name)
        mapping, identity = blockfile.map_file(path)
        return self._keep(name, path, mapping, identity, None, block_id)

    def cached(self, path: str, block_id: BlockId) -> bytes | memoryview | None:
        """A block on a disk (`verify`), checked: from its mapping, or mapped now, while the
        page cache holds all of its file; else None (and for a file over CACHED_SIZE and a header).
        Raises FileNotFoundError, BadBlockError, OSError."""
        name = block_id.name
        if name in self._maps:
            data = self.held(name)
            if data is not None or name in self._maps:
                return data
        mapping, identity = blockfile.map_file(path, private=True)
        address = address_of(mapping)
        if len(mapping) > CACHED_SIZE + blockfile.MAX_HEADER or address is None \
                or not Pages(address, len(mapping)).resident():
            mapping.close()
            return None
        return self._keep(name, path, mapping, identity, address, block_id)

    def _keep(self, name: str, path: str, mapping: mmap.mmap, identity: tuple[int, int, int], address: int | None,
              block_id: BlockId) -> bytes | memoryview:
        """Check a new mapping and keep it; `address` (a disk's: `verify`) is where it starts."""
        try:
            data, crc = blockfile.check_mapped(mapping, block_id)
        except BaseException:
            mapping.close()
            raise
        if len(data) > self.budget:
            block = data.tobytes()
            _close(mapping, data)
            return block
        pages = None if address is None else Pages(address + len(mapping) - len(data), len(data))
        self.forget(name)  # (a mapping of the block's former file)
        self._maps.put(name, BlockMapping(mapping, data, crc, path, identity, self.clock(), pages))
        self.bytes += len(data)
        while self.bytes > self.budget and (oldest := self._maps.pop_oldest()) is not None:
            self._unmap(*oldest)
        return _handed(data)

    def close(self) -> None:
        while (oldest := self._maps.pop_oldest()) is not None:
            self._unmap(*oldest)

    def forget(self, name: str) -> None:
        """Drop the mapping of a block whose file is deleted (its pages are then freed)."""
        if name in self._maps:
            self._drop(name)

    def _still_there(self, held: BlockMapping, now: float) -> bool:
        try:
            if blockfile.identity(held.path) != held.identity:
                return False
        except OSError:
            return False
        held.checked = now
        return True

    def _drop(self, name: str) -> None:
        held = self._maps.pop(name)
        if held is not None:
            self._unmap(name, held)

    def _unmap(self, name: str, held: BlockMapping) -> None:
        """Release a mapping no longer held (dropped, or pushed out past `most`)."""
        self.bytes -= len(held.data)
        _close(held.mapping, held.data)


def _handed(data: memoryview) -> bytes | memoryview:
    """What a read hands out: a view of its own (the mapping's may be released while it is
    sent) or, for a small block, a copy."""
    return data[:] if len(data) >= VIEW_SIZE else data.tobytes()


def _close(mapping: mmap.mmap, data: memoryview) -> None:
    data.release()
    try:
        mapping.close()
    except BufferError:  # a view handed out is still being sent: unmapped when the last one goes
        pass
