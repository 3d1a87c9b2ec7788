"""The parts of a shared tier (store.shared) that keep parts of blocks (store.pieces) on tmpfs, and
the files a worker writes for the block's owner worker to take in (a piece it brought; a block it
lent, engine.lending): see store.shared's docstring. A mixin of SharedTier, whose attributes it uses."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable

from gateway.lru import LRU
from gateway.store import blockfile, pieces
from gateway.store.blockfile import BadBlockError, encode_header
from gateway.store.blocks import BlockId, checksum
from gateway.store.disk import DiskTier
from gateway.store.hitnotes import HitNotes
from gateway.store.policy import EvictionPolicy
from gateway.store.stats import TierStats

log = logging.getLogger("gateway.store")


class SharedPieces:
    """SharedTier's pieces and files written for their owners (set by SharedTier.__init__)."""

    own: DiskTier
    name: str
    owns: Callable[[BlockId], bool]
    policy: EvictionPolicy
    stats: TierStats
    notes: HitNotes | None
    _inline: bool  # on tmpfs
    _adopting: dict[str, asyncio.Task[None]]
    _writers: dict[str, tuple[asyncio.Lock, list[int]]]
    _read_written: LRU[str, tuple[int, int, int]]  # blocks read by read_written, not put yet: their file's identity

    def _noted(self, block_id: BlockId) -> None:
        """A hit of another worker's block: noted to that worker (a store of 16 bytes)."""
        if self.notes is not None:
            if self.notes.note(block_id):
                self.stats.notes_sent += 1
            else:
                self.stats.notes_dropped += 1

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
        if self.notes is None or not await self.own.file_work(lambda b: self._write_for_owner(b, raw), piece):
            return (lo, b""), []
        if not self.notes.note(piece):  # its owner would never count it: not left in the folder
            self.stats.notes_dropped += 1
            await self.own.file_work(lambda b: self._unlink_quiet(self.own.block_path(b.name)), piece)
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

    async def _keep_own_piece(self, piece: BlockId, raw: bytes, in_place: tuple[int, int, int] | None = None
                              ) -> list[tuple[BlockId, bytes | None]]:
        """The piece (`encoded` bytes) in this worker's part, in place of the one held before. Its file
        is replaced, never deleted first: a worker reading the piece meanwhile reads the old one.
        `in_place`: the identity of the file `raw` was read from, kept while it is still that file."""
        await self.own.remove(piece, keep_file=True)
        victims = await self.own.put_demoting(piece, raw, in_place=in_place)
        if piece not in self.own:  # (not kept after all: no quota left but pinned blocks)
            await self.own.file_work(lambda b: self._unlink_quiet(self.own.block_path(b.name)), piece)
        return [(victim, None if pieces.is_piece(victim) else kept) for victim, kept in victims]

    def _write_for_owner(self, piece: BlockId, raw: bytes) -> bool:
        """The own part's file work: the piece's file, for the worker that owns it to take in."""
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
        bytes read from the file (checked), which is then this part's own as it is (written again
        only if another was renamed over it meanwhile)."""
        path = self.own.block_path(name)
        try:
            piece, length, _ = blockfile.read_entry(path, name)  # (on tmpfs: a read from memory)
        except (BadBlockError, OSError):  # no file (a hit on a block gone since), or a bad one
            return
        if not pieces.is_piece(piece) or not self.owns(piece) or length == size:
            return
        if pieces.block_of(piece) in self.own:  # whole here since: the piece is of no more use
            await self.own.file_work(lambda _: self._unlink_quiet(path), piece)
            return
        found = blockfile.identity_or_none(path)  # (before the read: a file renamed over it meanwhile is written again)
        raw = self._read_piece(piece)
        if raw is not None:
            await self._keep_own_piece(piece, raw, found)

    async def write_for_owner(self, block_id: BlockId, data: bytes) -> int:
        """On tmpfs, a block another worker owns written for it to take in (engine.lending): the file's inode, or 0."""
        path = self.own.block_path(block_id.name)
        return 0 if not self._inline or self.owns(block_id) else int(await self.own.file_work(
            lambda b: self._write_for_owner(b, data) and os.stat(path).st_ino, block_id) or 0)

    def read_written(self, block_id: BlockId) -> bytes | None:
        """The block another worker wrote for this one (`write_for_owner`), read and checked now (never
        through a mapping kept), or None. The file read is remembered: this worker's `put` of the block
        then takes it into its part as it is, while it is still that file, instead of writing it again."""
        path = self.own.block_path(block_id.name)
        try:
            found = blockfile.identity(path)  # (before the read: a file renamed over it meanwhile is written again)
        except OSError:
            return None
        data = self._read_piece(block_id)
        if data is not None:
            self._read_written.put(block_id.name, found)
        return data

    def drop_written(self, block_id: BlockId, inode: int = 0) -> None:
        """Delete a file `write_for_owner` wrote: the owner's call, unless it kept the block; the
        lender's (`inode`: the owner was not told), if it is still that file. (An unlink in memory.)"""
        path = self.own.block_path(block_id.name)
        with contextlib.suppress(OSError):
            if (os.stat(path).st_ino == inode) if inode else \
                    (self._inline and self.owns(block_id) and block_id not in self.own):
                os.unlink(path)
