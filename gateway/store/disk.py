"""The disk tier: one file per block in a fan-out of folders, all file work in a thread pool (on tmpfs, on
the event loop: store.filework). The index, the quota and the policy live here, on the event loop; the
file format and file operations in store.blockfile."""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from gateway.store import blockfile
from gateway.store.blockfile import BadBlockError, encode_header
from gateway.store.blocks import BlockId, checksum
from gateway.store.filework import FileWork
from gateway.store.mapped import CACHED_SIZE, MappedBlocks
from gateway.store.openfiles import MAPPED_BYTES, OpenBlockFiles
from gateway.store.policy import EvictionPolicy
from gateway.store.stats import TierStats

log = logging.getLogger("gateway.store")

T = TypeVar("T")

__all__ = ["BadBlockError", "DiskTier"]

WARM = 60.0  # seconds after its last use that a block file's inode is taken to be in memory
_MAPPED = 64 * 1024 * 1024  # the most bytes a tier on tmpfs keeps mapped (store.mapped), at most 1/8 of its quota


@dataclass(slots=True)
class _Entry:
    block_id: BlockId
    size: int  # data bytes; the header (~100 bytes) is not counted against the quota
    mtime: float  # wall clock, from the file at open()
    warm: float = 0.0  # monotonic: when this tier last read or wrote the file (its inode is cached)


class DiskTier:
    """One folder of block files with a byte quota.

    The index, the policy and the counters live on the event loop and change only there;
    every file operation runs in this tier's own bounded thread pool (on tmpfs, at once on the
    loop: store.filework), one whole unit per hop (open+fstat+pread+verify, or
    evict+write+rename). `used` counts indexed blocks plus writes in flight, so it never
    exceeds `quota`.

    Degrades, never fails: no disk error escapes get/put/remove. A bad block is deleted,
    counted and reported as a miss; a failed write marks the tier unhealthy for `backoff`
    seconds, during which put() stores nothing (reads still try).
    `evictable` is installed by TieredStore (pinning); alone, every block is evictable.
    """

    def __init__(
        self,
        path: str,
        quota: int,
        policy: EvictionPolicy,
        *,
        medium: str = "ssd",
        name: str,
        threads: int = 4,
        fsync: bool = False,
        backoff: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        keeps: Callable[[BlockId], bool] | None = None,
    ) -> None:
        if quota < 0:
            raise ValueError(f"quota must be >= 0, not {quota}")
        self.path = os.path.abspath(path)
        self.quota = quota
        self.policy = policy
        self.medium = medium
        self.name = name
        self.fsync = fsync
        self.backoff = backoff
        self.stats = TierStats()
        self.evictable: Callable[[BlockId], bool] = lambda block_id: True
        self._clock = clock
        # The folder may be shared by the workers of a node (store.shared): the index then
        # takes only the blocks this worker `keeps`, and leaves the others' files alone.
        self.keeps = keeps
        self._work = FileWork(name, threads, inline=medium == "memory")  # (on tmpfs: on the loop)
        self._index: dict[str, _Entry] = {}
        self._pending: dict[str, int] = {}  # name -> bytes reserved by a write in flight
        self._cancelled: set[str] = set()  # removed while their write was in flight
        self.leaving: set[str] = set()  # a demoting put's victims, out of the index until its hop has read them
        self._used = 0
        self._unhealthy_until: float | None = None
        self._opened = False
        self._closed = False
        # Read on the event loop: on tmpfs through mapped files; on a disk through files kept (page cache only).
        self.files = (MappedBlocks(min(_MAPPED, quota // 8)) if medium == "memory"
                      else OpenBlockFiles(mapped_budget=min(MAPPED_BYTES, quota)))

    # --- state ------------------------------------------------------------------------------

    @property
    def used(self) -> int:
        return self._used

    @property
    def healthy(self) -> bool:
        return self._unhealthy_until is None or self._clock() >= self._unhealthy_until

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, block_id: object) -> bool:
        return isinstance(block_id, BlockId) and block_id.name in self._index

    def __iter__(self) -> Iterator[BlockId]:
        return iter([entry.block_id for entry in self._index.values()])

    def age(self, block_id: BlockId) -> float | None:
        """Seconds since the block was written (wall clock; survives a restart)."""
        entry = self._index.get(block_id.name)
        return None if entry is None else max(0.0, time.time() - entry.mtime)

    def block_path(self, name: str) -> str:
        return blockfile.block_path(self.path, name)

    # --- lifecycle --------------------------------------------------------------------------

    async def open(self) -> None:
        """Rebuild the index from the folders (headers only), oldest file first into the
        policy; delete leftover temporaries and files with bad headers; evict any excess
        over the quota. A folder that cannot be read leaves the tier empty and unhealthy."""
        if self._opened or self._closed:
            return
        self._opened = True
        try:
            found, bad, temporaries = await self._work.run(self._scan)
        except (OSError, RuntimeError) as exc:  # RuntimeError: the pool is shut down
            log.warning("disk tier %s: cannot scan %s: %s", self.name, self.path, exc)
            self.stats.read_errors += 1
            self._mark_unhealthy(exc)
            return
        self.stats.bad_blocks += bad
        found.sort(key=lambda entry: entry.mtime)
        for entry in found:
            name = entry.block_id.name
            if name in self._index or name in self._pending:
                continue
            self._index[name] = entry
            self._used += entry.size
            self.policy.insert(name, entry.size)
        excess = [self.block_path(entry.block_id.name) for entry in self._evict_for(0)]
        if excess:
            try:
                await self._work.run(self._unlink_all, excess)
            except RuntimeError as exc:  # the pool is shut down; unlink errors are logged inside
                log.warning("disk tier %s: cannot delete blocks over the quota: %s", self.name, exc)
        log.info("disk tier %s: %d blocks, %d bytes at open (%d bad and %d temporary files deleted, %d over quota)",
                 self.name, len(self._index), self._used, bad, temporaries, len(excess))

    async def aclose(self) -> None:
        """Stop taking work and wait for the thread pool to finish what it has."""
        if self._closed:
            return
        self._closed = True
        self.files.close()
        await self._work.shutdown()

    # --- the tier ---------------------------------------------------------------------------

    async def get(self, block_id: BlockId) -> bytes | None:
        """The verified bytes of a block, or None (a miss) on any trouble."""
        entry = self._index.get(block_id.name)
        if entry is None or self._closed:
            self.stats.misses += 1
            return None
        path = self.block_path(block_id.name)
        try:
            cached = self._read_cached(path, entry)
            data = bytes(cached) if cached is not None else \
                await self._work.run(self._fetch, path, block_id, self._read_block)
        except Exception as exc:  # noqa: BLE001 -- a cache failure never fails the read (STYLE.md)
            self._read_failed(block_id, entry, exc)
            return None
        return self._hit(entry, data)

    def get_now(self, block_id: BlockId) -> bytes | memoryview | None:
        """`get` without an await (store.mapped): on tmpfs any block; on a disk one of at most 4 MiB
        all in the page cache. None, counting nothing, if not held or to be read in a thread."""
        name, files = block_id.name, self.files
        entry, mapped = self._index.get(name), files if isinstance(files, MappedBlocks) else None
        if entry is None or self._closed:
            return None
        try:  # on tmpfs, a block mapped already is read without making its path
            data = mapped.held(name) if mapped is not None else self._read_cached(self.block_path(name), entry)
            if data is None and mapped is not None:
                data = self._fetch(self.block_path(name), block_id, mapped.read)
        except Exception as exc:  # noqa: BLE001 -- as in get
            self._read_failed(block_id, entry, exc)
            return None
        return None if data is None else self._hit(entry, data, warm=mapped is None)  # (on tmpfs, `warm` is never asked)

    def touch(self, block_id: BlockId) -> bool:
        """A held block's hit counted as `get` counts it, its file not read (Tier.touch); False if not held."""
        entry = None if self._closed else self._index.get(block_id.name)
        return entry is not None and self._hit(entry, True, warm=False)  # (unread: its inode no warmer)

    def _read_cached(self, path: str, entry: _Entry) -> bytes | memoryview | None:
        """A disk block read on the loop through its file kept, when the page cache holds it all
        and the file was used lately; else None (for the threads, which deal with a bad file)."""
        if not isinstance(self.files, OpenBlockFiles) or entry.size > CACHED_SIZE or self._clock() - entry.warm > WARM:
            return None
        try:
            data = self.files.read_cached(path, entry.block_id)
        except (BadBlockError, OSError):
            return None
        if data is not None:
            self.stats.page_cache_hits += 1
        return data

    def _hit(self, entry: _Entry, data: T, warm: bool = True) -> T:
        if warm:
            entry.warm = self._clock()
        self.stats.hits += 1
        self.policy.access(entry.block_id.name)
        return data

    def _read_failed(self, block_id: BlockId, entry: _Entry, error: Exception) -> None:
        """Count a failed read as a miss; a bad or vanished file leaves the index."""
        name = block_id.name
        if isinstance(error, BadBlockError):
            log.warning("disk tier %s: dropped bad block %s (%s/%s #%d): %s", self.name, name, block_id.bucket,
                        block_id.key, block_id.index, error)
            self.stats.bad_blocks += 1
            self._drop(name, entry)
        elif isinstance(error, FileNotFoundError):
            self._drop(name, entry)  # deleted behind our back, or evicted while we read
        elif isinstance(error, (OSError, RuntimeError)):  # RuntimeError: the pool is shut down
            log.warning("disk tier %s: cannot read block %s: %s", self.name, name, error)
            self.stats.read_errors += 1
        else:  # a bug is a miss too
            log.error("disk tier %s: unexpected error reading block %s", self.name, name, exc_info=error)
            self.stats.read_errors += 1
        self.stats.misses += 1

    async def put(self, block_id: BlockId, data: bytes) -> list[BlockId]:
        """Store a block; returns the ids evicted to make room, whose files are deleted."""
        return [victim for victim, _ in await self._put(block_id, data, take=False)]

    async def put_demoting(self, block_id: BlockId, data: bytes, *, in_place: tuple[int, int, int] | None = None
                           ) -> list[tuple[BlockId, bytes | None]]:
        """Store a block; returns the evicted blocks with their verified bytes (read in the same hop
        that deletes them) to move down a tier (None: unreadable, gone). `in_place`: the identity of
        the block's file at its path (another worker wrote it: store.shared), kept while it is that."""
        return await self._put(block_id, data, take=True, in_place=in_place)

    async def remove(self, block_id: BlockId, *, keep_file: bool = False) -> bool:
        """Forget a block and delete its file (`keep_file`: left for the caller to write again, readers
        finding the old one until then); True if it was held or being written."""
        name = block_id.name
        entry = self._index.pop(name, None)
        if entry is not None:
            self._forget(name, entry.size)
            self.policy.remove(name)
        pending = name in self._pending
        if pending:
            self._cancelled.add(name)  # _settle_put deletes the file when the write lands
        if entry is None or keep_file:
            return pending or entry is not None
        try:
            await asyncio.shield(self._work.run(self._unlink_quiet, self.block_path(name)))
        except RuntimeError as exc:  # the pool is shut down; unlink errors are logged inside
            log.warning("disk tier %s: cannot delete block %s: %s", self.name, name, exc)
        return True

    # --- put, in three steps: decide on the loop, work in a thread, settle on the loop -------

    async def _put(self, block_id: BlockId, data: bytes, *, take: bool,
                   in_place: tuple[int, int, int] | None = None) -> list[tuple[BlockId, bytes | None]]:
        name = block_id.name
        if self._closed or name in self._index or name in self._pending:
            return []
        size = len(data)
        if size > self.quota or not self.healthy:
            self.stats.rejected += 1
            return []
        victims = [entry.block_id for entry in self._evict_for(size)]
        store = self._used + size <= self.quota
        if store:
            self._pending[name] = size
            self._used += size
        else:
            self.stats.rejected += 1  # only pinned blocks left to evict; the victims still go
        settle = functools.partial(self._settle_put, block_id, size, store)
        work = functools.partial(self._store, block_id, data if store else None, victims, take, in_place)
        try:
            future = self._work.run(work)
        except RuntimeError as exc:  # the pool is shut down
            settle(exc)
            return [(victim, None) for victim in victims]
        leaving = {victim.name for victim in victims} if take else set()  # read back in the hop
        self.leaving |= leaving
        try:
            outcome = await asyncio.shield(future)
        except asyncio.CancelledError:
            # Our caller went away; the write goes on, and is settled when it lands.
            future.add_done_callback(functools.partial(self._settle_later, settle))
            raise
        except Exception as exc:  # noqa: BLE001 -- a cache failure never fails the caller (STYLE.md); settle logs it
            settle(exc)
            return [(victim, None) for victim in victims]
        finally:
            self.leaving -= leaving
        taken, bad, write_error = outcome
        self.stats.bad_blocks += bad
        settle(write_error)
        return taken

    def _settle_later(self, settle: Callable[[BaseException | None], None], done: asyncio.Future[Any]) -> None:
        if done.cancelled():
            settle(asyncio.CancelledError())
        elif (exc := done.exception()) is not None:
            settle(exc)
        else:
            _, bad, write_error = done.result()
            self.stats.bad_blocks += bad
            settle(write_error)

    def _settle_put(self, block_id: BlockId, size: int, stored: bool, error: BaseException | None) -> None:
        """On the loop, after the write hop: index the block or give its reservation back."""
        if error is not None and not isinstance(error, (OSError, asyncio.CancelledError)):
            self.stats.write_errors += 1
            log.error("disk tier %s: unexpected error storing block %s", self.name, block_id.name, exc_info=error)
        if not stored:
            return
        name = block_id.name
        self._pending.pop(name, None)
        cancelled = name in self._cancelled
        self._cancelled.discard(name)
        if error is None and not cancelled:
            self._index[name] = _Entry(block_id, size, time.time(), self._clock())
            self.policy.insert(name, size)
            if self._unhealthy_until is not None:
                log.info("disk tier %s: writable again", self.name)
                self._unhealthy_until = None
            return
        self._used -= size
        if isinstance(error, OSError):
            self.stats.write_errors += 1
            self._mark_unhealthy(error)
        if error is None:  # written, then removed meanwhile: take the file back
            try:
                self._work.run(self._unlink_quiet, self.block_path(name))
            except RuntimeError:
                pass

    def _mark_unhealthy(self, exc: BaseException) -> None:
        if self.healthy:
            log.warning("disk tier %s: %s; not writing for %.0fs (%s)", self.name, exc, self.backoff,
                        errno.errorcode.get(getattr(exc, "errno", 0) or 0, "error"))
        self._unhealthy_until = self._clock() + self.backoff

    def _evict_for(self, size: int) -> list[_Entry]:
        """Take the policy's victims out of the index until `size` more bytes fit the quota
        (or nothing evictable is left); the caller deletes or demotes their files."""
        evicted = []
        while self._used + size > self.quota:
            victim = self.policy.victim(self._evictable_name)
            if victim is None:
                break
            entry = self._index.pop(victim)
            self._forget(victim, entry.size)
            self.stats.evictions += 1
            evicted.append(entry)
        return evicted

    def _evictable_name(self, name: str) -> bool:
        return self.evictable(self._index[name].block_id)

    def _drop(self, name: str, entry: _Entry) -> None:
        if self._index.get(name) is entry:
            del self._index[name]
            self._forget(name, entry.size)
            self.policy.remove(name)

    def _forget(self, name: str, size: int) -> None:  # a block out of the index
        self._used -= size
        self.files.forget(name)

    async def file_work(self, read: Callable[[BlockId], T], block_id: BlockId) -> T | None:
        """`read(block_id)` as this tier's file work (store.shared: another worker's block); None once closed."""
        try:
            return await self._work.run(read, block_id)
        except RuntimeError:  # the pool is shut down
            return None

    # --- the file work: in the threads (on tmpfs, on the loop), never touching the index -----

    def _store(self, block_id: BlockId, data: bytes | None, victims: list[BlockId], take: bool,
               in_place: tuple[int, int, int] | None) -> tuple[list[tuple[BlockId, bytes | None]], int, OSError | None]:
        """Evict (reading the victims first if `take`), then write the new block (unless `in_place`)."""
        taken: list[tuple[BlockId, bytes | None]] = []
        bad = 0
        for victim in victims:
            path = self.block_path(victim.name)
            victim_data: bytes | None = None
            if take:
                try:
                    victim_data = self._fetch(path, victim, self._read_block)
                except BadBlockError:
                    bad += 1  # already deleted; reported with None, not demoted
                except OSError:
                    pass
            self._unlink_quiet(path)
            taken.append((victim, victim_data))
        path = self.block_path(block_id.name)
        if data is None or (in_place is not None and blockfile.identity_or_none(path) == in_place):
            return taken, bad, None
        try:
            self._write_file(path, encode_header(block_id, len(data), checksum(data)), data)
        except OSError as exc:
            return taken, bad, exc
        return taken, bad, None

    def _write_file(self, path: str, header: bytes, data: bytes) -> None:
        blockfile.write_file(path, header, data, fsync=self.fsync, unlink=self._unlink_quiet)

    def _fetch(self, path: str, block_id: BlockId, read: Callable[[str, BlockId], T]) -> T:
        """Read and verify one block; a bad file is deleted before BadBlockError is raised."""
        try:
            return read(path, block_id)
        except BadBlockError:
            self._unlink_quiet(path)
            raise

    def _read_block(self, path: str, block_id: BlockId) -> bytes:
        return blockfile.read_block(path, block_id)

    def _scan(self) -> tuple[list[_Entry], int, int]:
        """Every block file's entry (those it `keeps`); deletes temporaries and bad files."""
        found, bad, temporaries = blockfile.scan(self.path, self.keeps, self._unlink_quiet, self.name)
        return [_Entry(*entry) for entry in found], bad, temporaries

    def _unlink_all(self, paths: list[str]) -> None:
        list(map(self._unlink_quiet, paths))

    def _unlink_quiet(self, path: str) -> None:
        blockfile.unlink_quiet(path, self.name)

