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
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator

from gateway.lru import LRU
from gateway.store import blockfile, pieces
from gateway.store.blockfile import BadBlockError, encode_header
from gateway.store.blocks import BlockId, checksum
from gateway.store.disk import WARM, DiskTier
from gateway.store.hitnotes import HitNotes, NotedPolicy
from gateway.store.mapped import VIEW_SIZE, MappedBlocks
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
        self._read_lately: LRU[str, float] = LRU(_WARM_FILES)  # others' files on a disk: name -> when read
        self._adopting: dict[str, asyncio.Task[None]] = {}  # pieces other workers wrote, being taken in
        self._writers: dict[str, tuple[asyncio.Lock, list[int]]] = {}  # pieces being written again here (_one_writer)
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
        taken, promote, inline = 0, self.promote_noted, self._inline
        index, access, mark = self.own._index, self.policy.access, pieces.PIECE_MARK  # (once per take, not per note)
        for name in self.notes.drain():
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
        """A block this worker keeps here, read uncounted in its threads (to promote another worker's hit)."""
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
        victims = await self.own.put_demoting(block_id, data)
        if block_id in self.own and (piece := pieces.piece_id(block_id)) in self.own:
            await self.own.remove(piece)
        return [(victim, None if pieces.is_piece(victim) else kept) for victim, kept in victims]

    # --- parts of blocks (store.pieces), on tmpfs --------------------------------------------

    def piece(self, block_id: BlockId) -> tuple[int, bytes | memoryview] | None:
        """(lo, bytes) of the block's piece, whichever worker keeps it, uncounted; None when none is."""
        raw = self._read_piece(pieces.piece_id(block_id)) if self._inline else None
        return None if raw is None else pieces.decoded(raw)

    def _read_piece(self, piece: BlockId) -> bytes | None:
        """A piece's file read now (on tmpfs: from memory), never through a mapping kept: a piece
        grows under its name (a new file renamed over the old one), a block never changes."""
        try:
            return blockfile.read_block(self.own.block_path(piece.name), piece)
        except FileNotFoundError:
            return None
        except (BadBlockError, OSError) as exc:  # (its owner deletes a bad one when it next writes the piece)
            log.info("tier %s: piece %s unreadable: %s", self.name, piece.name, exc)
            return None

    def piece_hit(self, block_id: BlockId, lo: int, hi: int) -> bytes | memoryview | None:
        """Bytes [lo, hi) of the block from its piece, counted as a hit (noted to the piece's
        owner); None, counting nothing, when no piece holds them all."""
        held = self.piece(block_id)
        if held is None or not pieces.covers(held[0], held[0] + len(held[1]), lo, hi):
            return None
        piece = pieces.piece_id(block_id)
        if self.owns(piece):
            if piece.name in self.policy:  # (else written by another worker, not taken in yet)
                self.policy.access(piece.name)
        else:
            self._noted(piece)
        self.stats.hits += 1
        return held[1][lo - held[0]:hi - held[0]]

    async def put_piece(self, block_id: BlockId, lo: int, data: bytes
                        ) -> tuple[tuple[int, bytes], list[tuple[BlockId, bytes | None]]]:
        """Keep bytes [lo, lo + len(data)) of a block not held whole, joined with its piece: in
        this worker's part when it owns the block, else written for its owner and noted to it
        (`_adopt`). The piece now kept ((lo, b"") when none is) and the blocks evicted here."""
        if not self._inline or not data:
            return (lo, b""), []
        if self.owns(block_id):
            async with self._one_writer(pieces.piece_id(block_id).name):
                return await self._join_own_piece(block_id, lo, data)
        held = self.piece(block_id)
        joined = pieces.join(None if held is None else (held[0], bytes(held[1])), lo, bytes(data))
        piece, raw = pieces.piece_id(block_id), pieces.encoded(*joined)
        if self.notes is None or not await self.own.in_thread(lambda b: self._write_for_owner(b, raw), piece):
            return (lo, b""), []
        if not self.notes.note(piece):  # its owner would never count it: not left in the folder
            self.stats.notes_dropped += 1
            await self.own.in_thread(lambda b: self._unlink_quiet(self.own.block_path(b.name)), piece)
            return (lo, b""), []
        self.stats.notes_sent += 1
        return joined, []

    async def _join_own_piece(self, block_id: BlockId, lo: int, data: bytes
                              ) -> tuple[tuple[int, bytes], list[tuple[BlockId, bytes | None]]]:
        """put_piece of a block this worker owns (under `_one_writer`)."""
        held = self.piece(block_id)
        joined = pieces.join(None if held is None else (held[0], bytes(held[1])), lo, bytes(data))
        piece = pieces.piece_id(block_id)
        victims = await self._keep_own_piece(piece, pieces.encoded(*joined))
        return (joined if piece in self.own else (lo, b"")), victims

    @contextlib.asynccontextmanager
    async def _one_writer(self, name: str) -> AsyncIterator[None]:
        """This worker's writes of one piece of its own, one at a time: joining bytes it brought and
        taking in a file another worker wrote each read the piece, then write it again (two at once
        would keep the one read first, and lose what the other joined)."""
        lock, users = self._writers.setdefault(name, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if not users[0]:
                del self._writers[name]

    async def _keep_own_piece(self, piece: BlockId, raw: bytes) -> list[tuple[BlockId, bytes | None]]:
        """The piece (`encoded` bytes) in this worker's part, in place of the one held before. Its file
        is replaced, never deleted first: a worker reading the piece meanwhile reads the old one."""
        await self.own.remove(piece, keep_file=True)
        victims = await self.own.put_demoting(piece, raw)
        if piece not in self.own:  # (not kept after all: no quota left but pinned blocks)
            await self.own.in_thread(lambda b: self._unlink_quiet(self.own.block_path(b.name)), piece)
        return [(victim, None if pieces.is_piece(victim) else kept) for victim, kept in victims]

    def _write_for_owner(self, piece: BlockId, raw: bytes) -> bool:
        """In the own part's threads: the piece's file, for the worker that owns it to take in."""
        try:
            blockfile.write_file(self.own.block_path(piece.name), encode_header(piece, len(raw), checksum(raw)), raw,
                                 fsync=False, unlink=self._unlink_quiet)
        except OSError as exc:
            log.info("tier %s: piece %s for its owner not written: %s", self.name, piece.name, exc)
            return False
        return True

    def _unlink_quiet(self, path: str) -> None:
        blockfile.unlink_quiet(path, self.name)

    def _adopt_later(self, name: str, size: int | None) -> None:
        """`_adopt` in a task of its own, one at a time for a name (two at once would each
        remove the file the other writes)."""
        if name not in self._adopting:
            task = self._adopting[name] = asyncio.get_running_loop().create_task(self._adopt(name, size))
            task.add_done_callback(lambda _: self._adopting.pop(name, None))

    async def _adopt(self, name: str, size: int | None) -> None:
        async with self._one_writer(name):
            await self._adopt_one(name, size)

    async def _adopt_one(self, name: str, size: int | None) -> None:
        """Take into this worker's part the piece another worker wrote under `name` for it (noted
        to it), unless its part holds that piece already (`size`: the bytes it counts for it): its
        bytes read from the file, which is then written again as this part's own."""
        path = self.own.block_path(name)
        try:
            piece, length, _ = blockfile.read_entry(path, name)  # (on tmpfs: a read from memory)
        except (BadBlockError, OSError):  # no file (a hit on a block gone since), or a bad one
            return
        if not pieces.is_piece(piece) or not self.owns(piece) or length == size:
            return
        if pieces.block_of(piece) in self.own:  # whole here since: the piece is of no more use
            await self.own.in_thread(lambda _: self._unlink_quiet(path), piece)
            return
        raw = self._read_piece(piece)
        if raw is not None:
            await self._keep_own_piece(piece, raw)

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
