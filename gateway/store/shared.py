"""A tier whose folder the workers of one node share (gateway.node.workers): each worker
indexes, writes and evicts the blocks it owns, within its share of the quota, and reads
any other block straight from the file its owner wrote.

Why files: a block is then held once per node however many workers serve it, and a hit
needs no hop to another process. A file is written under a temporary name and renamed,
so a reader only ever finds whole blocks; an eviction unlinks it, and a reader that
opened it first still reads it whole. Every read verifies the block's checksum and
header (store.blockfile), so a file caught in any state is a whole block or a miss.

On a disk, another worker's block is read in this worker's threads the first time, and on the
event loop after that while its file was read lately (its inode is then in memory) and the page
cache holds all of it, through its file kept open or mapped (store.openfiles, compared with its
path), as the worker's own blocks are (store.disk): a hit of a node of several workers is then
answered below ASGI whichever worker owns the block.

Every hit served from another worker's block is noted to that worker (store.hitnotes: a
ring of names in shared memory per pair of workers), which takes the notes into its eviction
policy every `NOTES_EVERY` seconds and before it chooses a victim: each owner's policy learns
recency and frequency from the whole node's traffic, as one worker's would. With CACHE_PROMOTE
the owner also promotes a block of a lower level that another worker hit (TieredStore).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator

from gateway.store import blockfile
from gateway.store.blockfile import BadBlockError
from gateway.store.blocks import BlockId
from gateway.store.disk import WARM, DiskTier
from gateway.store.hitnotes import HitNotes, NotedPolicy
from gateway.store.mapped import MappedBlocks
from gateway.store.openfiles import OpenBlockFiles
from gateway.store.policy import EvictionPolicy
from gateway.store.stats import TierStats

log = logging.getLogger("gateway.store")

__all__ = ["SharedTier"]

_WARM_FILES = 65536  # other workers' block files remembered as read lately (names and times)
NOTES_EVERY = 0.05  # seconds between two takes of the other workers' notes (and before each victim)


class SharedTier:
    """This worker's part of a shared folder (`own`: an ordinary DiskTier that keeps only the
    blocks `owns` names), and reads of the other parts. Event loop only.

    A block another worker owns is never stored here (`put` keeps nothing): its owner
    fetched it and holds it, or will. On tmpfs (medium "memory") reads run on the event loop
    (`get_now`, a copy from memory); on a disk they run in the own part's threads.
    """

    def __init__(self, path: str, quota: int, policy: EvictionPolicy, owns: Callable[[BlockId], bool], *,
                 medium: str, name: str, notes: HitNotes | None = None) -> None:
        self.policy = policy
        self.notes = notes  # the hits served from other workers' blocks, told to them; theirs, to this one
        self._take_later: asyncio.TimerHandle | None = None
        # Installed by TieredStore on a level below memory with CACHE_PROMOTE: a block of this
        # worker's that another worker hit here is promoted by this worker, as its own hit would be.
        self.promote_noted: Callable[[SharedTier, BlockId], None] | None = None
        if notes is not None:
            policy = NotedPolicy(policy, self.take_notes)
        self.own = DiskTier(path, quota, policy, medium=medium, name=name, keeps=owns)
        self.owns = owns
        self.name = name
        self.medium = medium
        self.quota = quota
        self.stats: TierStats = self.own.stats
        self._inline = medium == "memory"
        self._clock = time.monotonic
        self._read_lately: OrderedDict[str, float] = OrderedDict()  # others' files on a disk: name -> when read
        self._others_open = OpenBlockFiles(recheck=1.0)  # kept, as the own part keeps its own

    # --- what the own part answers ----------------------------------------------------------

    @property
    def evictable(self) -> Callable[[BlockId], bool]:
        return self.own.evictable

    @evictable.setter
    def evictable(self, value: Callable[[BlockId], bool]) -> None:
        self.own.evictable = value

    @property
    def used(self) -> int:
        return self.own.used

    @property
    def healthy(self) -> bool:
        return self.own.healthy

    def __len__(self) -> int:
        return len(self.own)

    def __iter__(self) -> Iterator[BlockId]:
        return iter(self.own)

    def age(self, block_id: BlockId) -> float | None:
        """Seconds since the block was written, by whichever worker owns it (on tmpfs)."""
        if self.owns(block_id) or not self._inline:
            return self.own.age(block_id)
        try:
            return max(0.0, time.time() - os.stat(self.own.block_path(block_id.name)).st_mtime)
        except OSError:
            return None

    async def open(self) -> None:
        await self.own.open()
        if self.notes is not None:
            try:
                self.notes.open()
            except OSError as exc:  # the rings are a hint: without them each worker learns from its own hits
                log.warning("tier %s: no hit notes between the workers (%s): each evicts from its own hits", self.name, exc)
                self.notes.close()
                self.notes = None
                return
            self._take_later = asyncio.get_running_loop().call_later(NOTES_EVERY, self._take_periodically)

    async def aclose(self) -> None:
        self._others_open.close()
        if self._take_later is not None:
            self._take_later.cancel()
            self._take_later = None
        if self.notes is not None:
            self.notes.close()
            self.notes = None  # (hits served while closing are not counted as notes lost)
        await self.own.aclose()

    # --- the other workers' hits ------------------------------------------------------------

    def _noted(self, block_id: BlockId) -> None:
        """A hit of another worker's block: noted to that worker (a store of 16 bytes)."""
        if self.notes is not None:
            if self.notes.note(block_id):
                self.stats.notes_sent += 1
            else:
                self.stats.notes_dropped += 1

    def take_notes(self) -> int:
        """Take into this worker's policy the hits other workers served from its blocks since
        the last take; returns how many (of blocks it still holds: the others are gone)."""
        if self.notes is None:
            return 0
        policy, taken, promote = self.policy, 0, self.promote_noted
        for name in self.notes.drain():
            if name in policy:
                policy.access(name)
                taken += 1
                if promote is not None and (entry := self.own._index.get(name)) is not None:  # (its own part's index)
                    promote(self, entry.block_id)
        self.stats.notes_taken += taken
        return taken

    async def read_own(self, block_id: BlockId) -> bytes | None:
        """A block this worker keeps here, read uncounted (a hit another worker served and
        counted, promoted by this one): in the own part's threads."""
        data = await self.own.in_thread(self.read_other, block_id)
        return None if data is None else bytes(data)

    def _take_periodically(self) -> None:
        self.take_notes()
        self._take_later = asyncio.get_running_loop().call_later(NOTES_EVERY, self._take_periodically)

    def __contains__(self, block_id: object) -> bool:
        """Held here, or (on tmpfs, where asking costs no disk access) by the worker that owns it."""
        if not isinstance(block_id, BlockId):
            return False
        if self.owns(block_id):
            return block_id in self.own
        return self._inline and os.path.exists(self.own.block_path(block_id.name))

    # --- reads and writes -------------------------------------------------------------------

    async def get(self, block_id: BlockId) -> bytes | None:
        if self.owns(block_id):
            if not self._inline:
                return await self.own.get(block_id)
            if block_id not in self.own:
                self.stats.misses += 1
                return None
            data = self.own.get_now(block_id)  # on tmpfs a read is a copy from memory: no thread hop
            return None if data is None else bytes(data)
        if self._inline:
            data = self.read_other(block_id)
        elif (data := self._read_other_cached(block_id)) is None:
            data = await self.own.in_thread(self.read_other, block_id)
            if data is not None:
                self._note_read(block_id.name)
        if data is None:  # a miss is the owner's to count, when it is asked for the block
            return None
        self.stats.hits += 1
        self._noted(block_id)
        return bytes(data)

    def get_now(self, block_id: BlockId) -> bytes | memoryview | None:
        """A held block (counted as a hit), or None, counting nothing: on tmpfs any block; on a
        disk one this worker keeps, from the page cache (DiskTier.get_now)."""
        if self.owns(block_id):
            return self.own.get_now(block_id)
        data = self.read_other(block_id) if self._inline else self._read_other_cached(block_id)
        if data is not None:
            self.stats.hits += 1
            self._noted(block_id)
        return data

    async def put(self, block_id: BlockId, data: bytes) -> list[BlockId]:
        return await self.own.put(block_id, data) if self.owns(block_id) else []

    async def put_demoting(self, block_id: BlockId, data: bytes) -> list[tuple[BlockId, bytes | None]]:
        return await self.own.put_demoting(block_id, data) if self.owns(block_id) else []

    async def remove(self, block_id: BlockId) -> bool:
        """Remove a block this worker owns (another's is its owner's to remove)."""
        return await self.own.remove(block_id) if self.owns(block_id) else False

    def read_other(self, block_id: BlockId) -> bytes | memoryview | None:
        """The block another worker owns, from its file, or None: on tmpfs through the file's
        mapping (event loop), on a disk read whole (threads). A bad file is left to its owner
        (which deletes it when it next reads it): this worker never changes another's part."""
        files = self.own.files
        mapped = files if isinstance(files, MappedBlocks) else None  # on tmpfs: through the file's mapping
        if mapped is not None and (data := mapped.held(block_id.name)) is not None:
            return data
        path = self.own.block_path(block_id.name)
        try:
            return blockfile.read_block(path, block_id) if mapped is None else mapped.read(path, block_id)
        except FileNotFoundError:
            return None
        except (BadBlockError, OSError) as exc:
            log.info("tier %s: block %s of another worker unreadable: %s", self.name, block_id.name, exc)
            return None

    def _read_other_cached(self, block_id: BlockId) -> bytes | memoryview | None:
        """Another worker's block on a disk, read on the event loop through its file kept if the
        file was read lately and the page cache holds it all; else None (for the threads, which
        also see a bad file)."""
        name = block_id.name
        read = self._read_lately.get(name)
        if read is None or self._clock() - read > WARM:
            return None
        try:
            data = self._others_open.read_cached(self.own.block_path(name), block_id)
        except (BadBlockError, OSError):  # and the threads' read leaves a bad file to its owner
            self._others_open.forget(name)
            return None
        if data is None:
            return None
        self.stats.page_cache_hits += 1
        self._note_read(name)
        return data

    def _note_read(self, name: str) -> None:
        self._read_lately[name] = self._clock()
        self._read_lately.move_to_end(name)
        if len(self._read_lately) > _WARM_FILES:
            self._read_lately.popitem(last=False)

    def __repr__(self) -> str:
        return f"SharedTier({self.own!r})"
