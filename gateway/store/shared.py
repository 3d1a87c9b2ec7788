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

In memory (tmpfs) the tier keeps parts of blocks too (store.pieces): a block's piece is a block
of its own (`pieces.piece_id`, owned by the block's owner worker), counted in the owner's quota
and evicted by its policy like any block, read by every worker from its file. A worker whose read
brought part of a block another worker owns writes the piece's file itself (a temporary renamed,
as every block file) and notes it to the owner, which takes it into its part (index, quota,
policy: `_adopt`) when it takes its notes: the bytes cross no socket, and only the owner ever
indexes, counts or evicts a piece. Until then (at most NOTES_EVERY) the file is counted in no
quota; one whose note is lost (a full ring) is deleted at once; a piece rewritten meanwhile by two
workers is one of their two pieces, whole (a rename): never bytes of another version or place.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Iterator, Set

from gateway.lru import LRU
from gateway.store import blockfile, pieces
from gateway.store.blockfile import BadBlockError
from gateway.store.blocks import BlockId
from gateway.store.disk import WARM, DiskTier
from gateway.store.hitnotes import HitNotes, NotedPolicy
from gateway.store.mapped import VIEW_SIZE, MappedBlocks
from gateway.store.openfiles import OpenBlockFiles
from gateway.store.sharedpieces import SharedPieces
from gateway.store.policy import EvictionPolicy
from gateway.store.stats import TierStats

log = logging.getLogger("gateway.store")

__all__ = ["SharedTier"]

_WARM_FILES = 65536  # other workers' block files remembered as read lately (names and times)
_READ_WRITTEN = 256  # blocks lent to this worker, read, and not put yet (their files' identities)
NOTES_EVERY = 0.05  # seconds between two takes of the other workers' notes (and before each victim)
NOTES_IDLE = 0.8  # at most, while none come: twice as long after each take that found none (an idle worker wakes less)


class SharedTier(SharedPieces):
    """This worker's part of a shared folder (`own`: an ordinary DiskTier that keeps only the
    blocks `owns` names), and reads of the other parts. Event loop only.

    A block another worker owns is never stored here (`put` keeps nothing): its owner
    fetched it and holds it, or will. On tmpfs (medium "memory") every file read and write runs on
    the event loop (a copy in memory: store.filework); on a disk in the own part's threads.
    """

    def __init__(self, path: str, quota: int, policy: EvictionPolicy, owns: Callable[[BlockId], bool], *,
                 medium: str, name: str, notes: HitNotes | None = None) -> None:
        self.policy = policy
        self.notes = notes  # the hits served from other workers' blocks, told to them; theirs, to this one
        self._take_later: asyncio.TimerHandle | None = None
        self._take_every = NOTES_EVERY
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
        self._read_lately: LRU[str, float] = LRU(_WARM_FILES)  # others' files on a disk: name -> when read
        self._adopting: dict[str, asyncio.Task[None]] = {}  # pieces other workers wrote, being taken in
        self._writers: dict[str, tuple[asyncio.Lock, list[int]]] = {}  # pieces being written again here (_one_writer)
        self._read_written: LRU[str, tuple[int, int, int]] = LRU(_READ_WRITTEN)  # (SharedPieces.read_written)
        self._others_open = OpenBlockFiles(recheck=1.0)  # kept, as the own part keeps its own
        self._owned: LRU[str, bool] = LRU(_WARM_FILES)  # owns() of the blocks hit lately, by name
        self._mapped = self.own.files if isinstance(self.own.files, MappedBlocks) else None  # on tmpfs: all mappings
        self._access = self.own.policy.access  # (the own part's policy's, as its hits take it)

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

    @property
    def leaving(self) -> Set[str]:
        return self.own.leaving

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
        for task in list(self._adopting.values()):
            task.cancel()
        self._others_open.close()
        if self._take_later is not None:
            self._take_later.cancel()
        if self.notes is not None:
            self.notes.close()
            self.notes = None  # (hits served while closing are not counted as notes lost)
        await self.own.aclose()

    # --- the other workers' hits ------------------------------------------------------------

    def take_notes(self) -> int:
        """Take into this worker's policy the hits other workers served from its blocks since
        the last take; returns how many (of blocks it still holds: the others are gone)."""
        if self.notes is None:
            return 0
        taken, promote, inline = 0, self.promote_noted, self._inline
        index, access, mark = self.own._index, self.policy.access, pieces.PIECE_MARK  # (once per take, not per note)
        names = self.notes.drain()
        self._take_every = NOTES_EVERY if names else min(2 * self._take_every, NOTES_IDLE)
        for name in names:
            entry = index.get(name)  # (its own part's index, whose names are its policy's)
            if entry is not None:
                access(name)
                taken += 1
                if promote is not None:
                    promote(self, entry.block_id)
            if inline and (entry is None or entry.block_id.version.endswith(mark)):  # (pieces.is_piece, inline)
                self._adopt_later(name, None if entry is None else entry.size)  # a piece another worker wrote?
        self.stats.notes_taken += taken
        return taken

    async def read_own(self, block_id: BlockId) -> bytes | None:
        """A block this worker keeps here, read uncounted as file work (to promote another worker's hit)."""
        data = await self.own.file_work(self.read_other, block_id)
        return None if data is None else bytes(data)

    def _take_periodically(self) -> None:
        self.take_notes()
        self._take_later = asyncio.get_running_loop().call_later(self._take_every, self._take_periodically)

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
            data = await self.own.file_work(self.read_other, block_id)
            if data is not None:
                self._read_lately.put(block_id.name, self._clock())
        if data is None:  # a miss is the owner's to count, when it is asked for the block
            return None
        self.stats.hits += 1
        self._noted(block_id)
        return bytes(data)

    def get_now(self, block_id: BlockId) -> bytes | memoryview | None:
        """A held block (counted as a hit), or None, counting nothing: on tmpfs any block; on a
        disk one this worker keeps, from the page cache (DiskTier.get_now). On tmpfs, one mapped
        and compared with its file lately is answered here, as the own part's get_now and
        MappedBlocks.held would (without their frames: every hit of the node asks)."""
        name = block_id.name
        mine = self._owned.get(name)  # (`owns`, asked once a block)
        if mine is None:
            mine = self.owns(block_id)
            self._owned.put(name, mine)
        mapped = self._mapped  # (an own block is mapped only while its part indexes it: DiskTier._forget)
        held = None if mapped is None else mapped.mapping_of(name)
        data: bytes | memoryview | None
        if held is not None and mapped is not None and mapped.clock() - held.checked < mapped.recheck:
            mapped.mark_read(name)
            view = held.data
            data = view[:] if len(view) >= VIEW_SIZE else view.tobytes()  # (store.mapped's _handed)
            if mine:
                self.stats.hits += 1
                self._access(name)  # (DiskTier._hit's)
                return data
        elif mine:
            return self.own.get_now(block_id)
        elif (data := self.read_other(block_id) if self._inline else self._read_other_cached(block_id)) is None:
            return None
        self.stats.hits += 1
        notes = self.notes  # (_noted's, without its frames)
        if notes is not None:
            route = notes.routes.get(name)
            if route[0].push(route[1]) if route is not None else notes.note(block_id):
                self.stats.notes_sent += 1
            else:
                self.stats.notes_dropped += 1
        return data

    def touch(self, block_id: BlockId) -> bool:
        """A hit counted as `get` counts it, the block not read (Tier.touch): one this worker keeps, in its
        part; another worker's on tmpfs, its file there (noted to its owner; on a disk, `in` sees none)."""
        if self.owns(block_id):
            return self.own.touch(block_id)
        held = self._inline and os.path.exists(self.own.block_path(block_id.name))
        if held:
            self.stats.hits += 1
            self._noted(block_id)
        return held

    async def put(self, block_id: BlockId, data: bytes) -> list[BlockId]:
        return [victim for victim, _ in await self.put_demoting(block_id, data)]

    async def put_demoting(self, block_id: BlockId, data: bytes) -> list[tuple[BlockId, bytes | None]]:
        """Store a block this worker owns (its piece goes: the block holds its bytes now); the
        evicted blocks with their bytes, to move down a tier (an evicted piece is freed)."""
        if not self.owns(block_id):
            return []
        victims = await self.own.put_demoting(block_id, data, in_place=self._read_written.pop(block_id.name))
        if block_id in self.own and (piece := pieces.piece_id(block_id)) in self.own:
            await self.own.remove(piece)
        return [(victim, None if pieces.is_piece(victim) else kept) for victim, kept in victims]

    async def remove(self, block_id: BlockId) -> bool:
        """Remove a block this worker owns (another's is its owner's to remove)."""
        return await self.own.remove(block_id) if self.owns(block_id) else False

    def read_other(self, block_id: BlockId) -> bytes | memoryview | None:
        """The block another worker owns, from its file, or None: on tmpfs through the file's
        mapping (event loop), on a disk read whole (threads). A bad file is left to its owner
        (which deletes it when it next reads it): this worker never changes another's part."""
        mapped = self._mapped  # on tmpfs: through the file's mapping
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
        """Another worker's block on a disk, read on the event loop through its file kept if it was read
        lately and the page cache holds it all; else None (for the threads, which also see a bad file)."""
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
        self._read_lately.put(name, self._clock())
        return data

    def __repr__(self) -> str:
        return f"SharedTier({self.own!r})"
