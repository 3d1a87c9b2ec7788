"""The tiered store: memory over disks, with promotion, demotion, pinning and TTLs."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from gateway.lru import LRU
from gateway.store import pieces
from gateway.store.blocks import BlockId
from gateway.store.memory import MemoryTier
from gateway.store.shared import SharedTier
from gateway.store.tier import Tier
from gateway.store.transit import Transit

_HELD_OBJECTS = 65536  # objects remembered by holds_object, the least recently kept out first


class TieredStore:
    """One node's block cache: levels [memory, disk0, disk1, ...] (Alluxio's tieredstore.levels).

    - put() stores into the highest level that accepts the block (a level refuses when the
      block exceeds its quota, only pinned blocks are left to evict, or the disk is
      unhealthy: a failing disk degrades the store to fewer tiers). A level's victims go
      down to the next level that accepts them; the last level's victims are freed. Each
      level's own policy picks its victims; a demoted block enters the lower level's policy
      as a new insert, like any other block.
    - get() looks from the top; with `promote` (CACHE_PROMOTE) a hit below level 0 is
      copied into level 0, which demotes level 0's victims in turn. The lower copy stays:
      a block may live in two levels at once, and removal removes every copy. A block another
      worker of the node owns is promoted by that worker, when it takes this hit's note
      (store.hitnotes): only an owner writes into its part of the tiers.
    - Pinned (bucket, key prefix) blocks are never chosen as victims, in any level: the
      store installs its predicate as each tier's `evictable`. Admin purges and TTLs still
      remove them. The configured pins are fixed; `set_pinned` replaces the runtime ones.
    - Part of a block (a piece, store.pieces) is kept in memory (`keeps_pieces`): a memory tier
      of this worker's own, or the memory tier the node's workers share, where the block's owner
      worker keeps it (store.shared); never on a disk. A block under a TTL is not kept in part. A
      piece that makes a block its owner keeps whole is stored as the block.
    - A (bucket, key prefix, seconds) TTL frees blocks that long after they were first
      stored (the most specific prefix wins). Expired blocks are misses on get(), and
      expire() sweeps them. Disk blocks found at start carry their file's age.

    Event loop only. Every tier stays within its quota at all times, whatever interleaves.
    """

    def __init__(
        self,
        memory: MemoryTier | SharedTier | None,
        disks: Iterable[Tier],
        *,
        promote: bool = True,
        pinned: tuple[tuple[str, str], ...] = (),
        ttl: tuple[tuple[str, str, float], ...] = (),
        clock: Callable[[], float] = time.monotonic,
        owns: Callable[[BlockId], bool] = lambda block_id: True,
    ) -> None:
        self.memory = memory
        # Where parts of blocks are kept: the memory tier, this worker's own or the node's (on
        # tmpfs), in its quota and under its policy, as blocks are. Not in a tier of their own beside
        # it: a fixed share of the quota set aside for them cost the whole blocks 1.2-1.4 points of
        # hit ratio (tests/advisor/test_workers_against_advisor.py).
        self.pieces = memory if isinstance(memory, MemoryTier) or (
            isinstance(memory, SharedTier) and memory.medium == "memory") else None
        self.owns = owns  # the blocks this worker keeps (store.shared): all of them, alone
        self.disks = list(disks)
        self.levels: list[Tier] = ([memory] if memory is not None else []) + self.disks
        names = [tier.name for tier in self.levels]
        if len(set(names)) != len(names):
            raise ValueError(f"tier names must be distinct: {names}")
        self.promote = promote
        self._clock = clock
        self.config_pins = tuple(dict.fromkeys(pinned))
        self._pinned: dict[str, tuple[str, ...]] = {}
        self.set_pinned(())
        self._ttl: dict[str, list[tuple[str, float]]] = {}
        for bucket, prefix, seconds in ttl:
            if seconds <= 0:
                raise ValueError(f"TTL for {bucket}/{prefix} must be > 0, not {seconds}")
            self._ttl.setdefault(bucket, []).append((prefix, seconds))
        for rules in self._ttl.values():
            rules.sort(key=lambda rule: len(rule[0]), reverse=True)
        self._born: dict[str, tuple[BlockId, float]] = {}  # only blocks under a TTL
        # Objects some version of which had blocks kept here (found at start, or put since), the
        # most recent last: what `holds_object` answers.
        self._objects: LRU[tuple[str, str], None] = LRU(_HELD_OBJECTS)
        self.misses = 0
        self.expired = 0
        self.promotions = 0
        self.demotions = 0
        self.freed = 0
        for tier in self.levels:
            tier.evictable = self._evictable
        self._promoting: set[asyncio.Task[None]] = set()
        self._transit = Transit(self.levels)
        if promote and isinstance(memory, SharedTier):  # the owner promotes what other workers hit
            for tier in self.disks:
                if isinstance(tier, SharedTier):
                    tier.promote_noted = self._promote_noted
        self._seed_ages()

    # --- rules ------------------------------------------------------------------------------

    @property
    def pinned(self) -> list[tuple[str, str]]:
        """Every pinned (bucket, prefix): the configured ones and those set at runtime."""
        return sorted({(bucket, prefix) for bucket, prefixes in self._pinned.items() for prefix in prefixes})

    def set_pinned(self, runtime: Iterable[tuple[str, str]]) -> None:
        """Replace the pins set at runtime (admin API); the configured pins always stay.
        Blocks under a pin removed here become evictable again at once."""
        pinned: dict[str, tuple[str, ...]] = {}
        for bucket, prefix in dict.fromkeys((*self.config_pins, *runtime)):
            pinned[bucket] = (*pinned.get(bucket, ()), prefix)
        self._pinned = pinned

    def is_pinned(self, block_id: BlockId) -> bool:
        prefixes = self._pinned.get(block_id.bucket)
        return prefixes is not None and block_id.key.startswith(prefixes)

    def ttl_of(self, block_id: BlockId) -> float | None:
        for prefix, seconds in self._ttl.get(block_id.bucket, ()):
            if block_id.key.startswith(prefix):
                return seconds
        return None

    def _evictable(self, block_id: BlockId) -> bool:
        return not self.is_pinned(block_id)

    # --- lifecycle --------------------------------------------------------------------------

    async def open(self) -> None:
        """Open every tier (a disk rebuilds its index) and learn the ages of what they hold."""
        for tier in self.levels:
            await tier.open()
            for block_id in tier:
                self._note_object(block_id)
        self._seed_ages()

    async def aclose(self) -> None:
        for task in list(self._promoting):
            task.cancel()
        for tier in self.levels:
            await tier.aclose()

    # --- reads and writes -------------------------------------------------------------------

    def __contains__(self, block_id: object) -> bool:
        return any(block_id in tier for tier in self.levels) or self._transit.holds(block_id)

    async def get(self, block_id: BlockId) -> tuple[bytes, str] | None:
        """(data, tier name) or None. Never raises for cache trouble: that is a miss. A block
        on its way down a level is read once it is there (store.transit)."""
        if await self._expired_now(block_id):
            return None
        found = await self._from_levels(block_id)
        if found is None and self._transit.holds(block_id):
            await self._transit.settled()
            found = await self._from_levels(block_id)
        if found is None and self.owns(block_id):  # else its owner counts the miss (a worker of a node of several)
            self.misses += 1
        return found

    async def _from_levels(self, block_id: BlockId) -> tuple[bytes, str] | None:
        for level, tier in enumerate(self.levels):
            data = await tier.get(block_id)
            if data is None:
                continue
            if self._promotes(level, block_id):
                self.promotions += 1
                await self._store_at(0, block_id, data)
            return data, tier.name
        return None

    async def touch(self, block_id: BlockId, data: bytes | None = None) -> str | None:
        """The name of the tier that holds the block, its hit counted as `get` counts it, without
        reading it (Tier.touch): for a block whose bytes the caller has already (a run of the origin
        brought it again, between blocks the run fetches). With `data`, the whole block, a hit below
        memory is promoted as `get` promotes it. None, counting nothing, when no tier holds it."""
        if await self._expired_now(block_id):
            return None
        for level, tier in enumerate(self.levels):
            if not tier.touch(block_id):
                continue
            if data is not None and self._promotes(level, block_id):
                self.promotions += 1
                await self._store_at(0, block_id, data)
            return tier.name
        return None

    def _promotes(self, level: int, block_id: BlockId) -> bool:
        """Whether a hit at `level` copies the block into level 0 (CACHE_PROMOTE). Another worker's
        block is promoted by its owner, when it takes this hit's note."""
        return self.promote and level > 0 and block_id not in self.levels[0] and self.owns(block_id)

    async def _expired_now(self, block_id: BlockId) -> bool:
        """Whether the block is past its TTL: then removed from every level, a miss."""
        if not self._is_expired(block_id):
            return False
        await self._remove_everywhere(block_id)
        self.expired += 1
        self.misses += 1
        return True

    def get_now(self, block_id: BlockId) -> tuple[bytes | memoryview, str] | None:
        """`get` without an await: (data, tier name) when a tier can answer at once (memory, a
        disk's page cache), counted as `get` counts that hit; None, counting nothing, otherwise,
        and for a block `get` would promote (that takes an await: `get` answers it, in order
        with the reads around it). The hit path below ASGI asks this way."""
        if self._is_expired(block_id):
            return None
        for level, tier in enumerate(self.levels):
            if level > 0 and self.promote and block_id not in self.levels[0]:
                return None
            data = tier.get_now(block_id)
            if data is not None:
                return data, tier.name
        return None

    @property
    def sees_other_workers(self) -> bool:
        """Whether `in` knows the blocks the node's other workers hold: every level is this
        worker's alone or a shared one in memory (on tmpfs, where looking costs no disk access)."""
        return all(not isinstance(tier, SharedTier) or tier.medium == "memory" for tier in self.levels)

    def in_shared_memory(self, block_id: BlockId) -> bool:
        """Whether this worker keeps the block in its part of the node's shared memory tier."""
        memory = self.memory
        return isinstance(memory, SharedTier) and memory.owns(block_id) and block_id in memory.own

    def from_shared_memory(self, block_id: BlockId) -> bytes | None:
        """The block from the file another worker keeps it in (the node's shared memory tier),
        uncounted: that worker counted the read when it was asked for the block."""
        memory = self.memory
        data = memory.read_other(block_id) if isinstance(memory, SharedTier) else None
        return None if data is None else bytes(data)

    def _promote_noted(self, tier: SharedTier, block_id: BlockId) -> None:
        """Another worker hit a block this worker keeps in a level below memory: promote it
        (CACHE_PROMOTE) as this worker's own hit would, in a task of its own."""
        if block_id not in self.levels[0]:
            task = asyncio.get_running_loop().create_task(self._promote(tier, block_id))
            self._promoting.add(task)
            task.add_done_callback(self._promoting.discard)

    async def _promote(self, tier: SharedTier, block_id: BlockId) -> None:
        data = await tier.read_own(block_id) if block_id in tier else None
        if data is not None and block_id not in self.levels[0]:  # (still: the read took an await)
            self.promotions += 1
            await self._store_at(0, block_id, data)

    @property
    def keeps_pieces(self) -> bool:
        """Whether parts of blocks can be kept (a memory tier, this worker's own or on tmpfs)."""
        return self.pieces is not None and self.pieces.quota > 0

    def piece(self, block_id: BlockId) -> tuple[int, bytes] | None:
        """(lo, bytes) of the part of the block kept here, uncounted; None when none is."""
        piece = self.pieces.piece(block_id) if self.pieces is not None else None
        return None if piece is None else (piece[0], bytes(piece[1]))

    def piece_hit(self, block_id: BlockId, lo: int, hi: int) -> bytes | None:
        """Bytes [lo, hi) of a block not held whole, from its piece, counted as a memory hit;
        None, counting nothing, when no piece holds them all. No await."""
        kept = self.pieces.piece_hit(block_id, lo, hi) if self.pieces is not None else None
        return None if kept is None else bytes(kept)  # (from a shared tier: a view of the piece's file)

    async def put_piece(self, block_id: BlockId, lo: int, data: bytes, length: int) -> tuple[int, bytes]:
        """Keep bytes [lo, lo + len(data)) of a block of `length` bytes, joined with the part of
        it kept already; the piece now kept ((lo, b"") when none is). Whole, it is the block."""
        held = self.pieces
        if held is None or self.ttl_of(block_id) is not None or block_id in self:
            return lo, b""
        joined = pieces.join(self.piece(block_id), lo, data)
        if joined[0] == 0 and len(joined[1]) == length and self.owns(block_id):
            await self.put(block_id, joined[1])
            return joined
        victims: list[tuple[BlockId, bytes]] | list[tuple[BlockId, bytes | None]]
        with self._transit.putting():
            if isinstance(held, MemoryTier):
                kept, victims = held.put_piece(block_id, lo, data)
            else:  # the node's shared tier: kept by the block's owner worker (store.shared)
                kept, victims = await held.put_piece(block_id, lo, data)
            if kept[1] and self.owns(block_id):  # (as `put` notes only the blocks this worker keeps)
                self._note_object(block_id)
            await self._send_down(0, victims)
        return kept

    def missed(self) -> None:
        """A block no tier was asked for was fetched (a run of the engine brought it): one more miss."""
        self.misses += 1

    def holds_object(self, bucket: str, key: str) -> bool:
        """Whether blocks of some version of the object were kept here lately (perhaps evicted
        since): a cold read then asks for its metadata alone first, as the blocks may serve it."""
        return (bucket, key) in self._objects

    def _note_object(self, block_id: BlockId) -> None:
        self._objects.put((block_id.bucket, block_id.key), None)

    async def put(self, block_id: BlockId, data: bytes) -> None:
        """Cache a block in the highest level that takes it; victims cascade down."""
        if self.owns(block_id):
            self._note_object(block_id)
        if self.ttl_of(block_id) is not None and block_id not in self:
            self._born[block_id.name] = (block_id, self._clock())
        await self._sink(0, block_id, data)

    async def remove(self, block_id: BlockId) -> bool:
        """Remove a block from every level; True if any held it."""
        held = block_id in self
        await self._remove_everywhere(block_id)
        return held

    async def expire(self) -> int:
        """Free every block past its TTL; returns how many."""
        now = self._clock()
        due = [
            block_id
            for block_id, born in list(self._born.values())
            if (ttl := self.ttl_of(block_id)) is not None and now - born >= ttl
        ]
        expired = 0
        for block_id in due:
            if block_id in self:  # else it already went unnoticed (a bad block dropped on read)
                expired += 1
            await self._remove_everywhere(block_id)
        self.expired += expired
        return expired

    async def evict_prefix(self, bucket: str, prefix: str) -> int:
        """Remove every block of keys under bucket/prefix from every level (admin purge, pins
        included); returns how many distinct blocks were removed."""
        targets = {
            block_id.name: block_id
            for tier in self.levels
            for block_id in tier
            if block_id.bucket == bucket and block_id.key.startswith(prefix)
        }
        for block_id in targets.values():
            await self._remove_everywhere(block_id)
        if isinstance(self.pieces, MemoryTier):  # (a shared tier's pieces are blocks of their own: gone above)
            self.pieces.drop_pieces(bucket, prefix)
        return sum(1 for block_id in targets.values() if not pieces.is_piece(block_id))

    def stats(self) -> dict[str, Any]:
        tiers: dict[str, dict[str, Any]] = {}
        for tier in self.levels:
            tiers[tier.name] = {
                "medium": tier.medium,
                "used": tier.used,
                "quota": tier.quota,
                "blocks": len(tier),
                "healthy": tier.healthy,
                **tier.stats.as_dict(),
            }
        return {
            "tiers": tiers,
            "hits": sum(tier.stats.hits for tier in self.levels),
            "misses": self.misses,
            "expired": self.expired,
            "promotions": self.promotions,
            "demotions": self.demotions,
            "freed": self.freed,
        }

    # --- placement --------------------------------------------------------------------------

    async def _sink(self, level: int, block_id: BlockId, data: bytes) -> None:
        """Store at the first level from `level` down that takes the block, else free it."""
        for lower in range(level, len(self.levels)):
            if block_id in self.levels[lower]:
                return  # a copy is already there (it was promoted from it)
            if await self._store_at(lower, block_id, data):
                return
        self._forget_if_gone(block_id)

    async def _store_at(self, level: int, block_id: BlockId, data: bytes) -> bool:
        """Put into one level and send its victims down; True if the level kept the block."""
        tier = self.levels[level]
        if level == len(self.levels) - 1:  # the victims are freed: no need to read them back
            await self._send_down(level, [(victim, None) for victim in await tier.put(block_id, data)])
            return block_id in tier
        with self._transit.putting():
            victims = await tier.put_demoting(block_id, data)
            stored = block_id in tier
            await self._send_down(level, victims)
        return stored

    async def _send_down(self, level: int, victims: Sequence[tuple[BlockId, bytes | None]]) -> None:
        """Level `level`'s victims go down to the next level that takes them (from the last: freed)."""
        last = level == len(self.levels) - 1
        moving = set() if last else {victim.name for victim, victim_data in victims if victim_data is not None}
        with self._transit.moving(moving):
            for victim, victim_data in victims:
                if last or victim_data is None:
                    self.freed += 1
                    self._forget_if_gone(victim)
                else:
                    self.demotions += 1
                    await self._sink(level + 1, victim, victim_data)

    async def _remove_everywhere(self, block_id: BlockId) -> None:
        for tier in self.levels:
            await tier.remove(block_id)
        self._born.pop(block_id.name, None)

    # --- ages -------------------------------------------------------------------------------

    def _is_expired(self, block_id: BlockId) -> bool:
        ttl = self.ttl_of(block_id)
        if ttl is None:
            return False
        born = self._born.get(block_id.name)
        if born is None:
            if block_id not in self:
                return False
            born = self._seed(block_id)
        return self._clock() - born[1] >= ttl

    def _seed_ages(self) -> None:
        if not self._ttl:
            return
        for tier in self.levels:
            for block_id in tier:
                if block_id.name not in self._born and self.ttl_of(block_id) is not None:
                    self._seed(block_id)

    def _seed(self, block_id: BlockId) -> tuple[BlockId, float]:
        age = 0.0
        for tier in self.levels:
            tier_age = tier.age(block_id)
            if tier_age is not None:
                age = max(age, tier_age)
        born = (block_id, self._clock() - age)
        self._born[block_id.name] = born
        return born

    def _forget_if_gone(self, block_id: BlockId) -> None:
        if block_id.name in self._born and block_id not in self:
            del self._born[block_id.name]
