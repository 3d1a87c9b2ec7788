"""The memory tier: blocks held as bytes in a dict, bounded by a byte quota; and partial
blocks (store.pieces), each one contiguous piece of a block, within the same quota."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from gateway.store import pieces
from gateway.store.blocks import BlockId
from gateway.store.policy import EvictionPolicy
from gateway.store.stats import TierStats


PIECE = "piece:"  # what a piece's name in the policy starts with (a block's name is hex)


def _always(block_id: BlockId) -> bool:
    return True


class MemoryTier:
    """Event loop only, lock-free. Its methods are those of every tier (gateway.store.tier.Tier),
    asynchronous like a disk's, but none of them ever awaits: each runs to its end at once.

    Invariants: `used` (the sum of the held blocks' and pieces' lengths) never exceeds
    `quota`; the policy holds exactly the names in the dict and the pieces' names (PIECE +
    the block's name). A block larger than the quota, or one that only fits by evicting
    blocks `evictable` refuses (pinned), is not stored. `evictable` is installed by
    TieredStore; alone, every block is evictable.

    A piece (`put_piece`) is part of a block not held whole: one per block, joined with the
    next piece of the same block that overlaps or touches it, dropped when the whole block is
    stored. A piece is not a block: `in`, `len`, iteration and `get` know whole blocks only,
    and an evicted piece is freed, never demoted.
    """

    medium = "memory"
    leaving: frozenset[str] = frozenset()  # (its puts never await: a victim is returned at once)

    def __init__(self, quota: int, policy: EvictionPolicy, name: str = "mem") -> None:
        if quota < 0:
            raise ValueError(f"quota must be >= 0, not {quota}")
        self.quota = quota
        self.policy = policy
        self.name = name
        self.stats = TierStats()
        self.evictable: Callable[[BlockId], bool] = _always
        self._blocks: dict[str, tuple[BlockId, bytes]] = {}
        self._pieces: dict[str, tuple[BlockId, int, bytes]] = {}  # PIECE + block name -> (block, lo, bytes)
        self._used = 0

    @property
    def used(self) -> int:
        return self._used

    @property
    def healthy(self) -> bool:
        return True

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, block_id: object) -> bool:
        return isinstance(block_id, BlockId) and block_id.name in self._blocks

    def __iter__(self) -> Iterator[BlockId]:
        return iter([block_id for block_id, _ in self._blocks.values()])

    def age(self, block_id: BlockId) -> float | None:
        return None  # nothing in memory outlives the process, so no block's age is carried over

    async def open(self) -> None:
        pass

    async def aclose(self) -> None:
        pass

    async def get(self, block_id: BlockId) -> bytes | None:
        data = self.get_now(block_id)
        if data is None:
            self.stats.misses += 1
        return data

    def get_now(self, block_id: BlockId) -> bytes | None:
        """A held block, counted as `get` counts a hit; None, counting nothing, otherwise. No
        await: the hit path below ASGI asks this way."""
        held = self._blocks.get(block_id.name)
        if held is None:
            return None
        self.policy.access(block_id.name)
        self.stats.hits += 1
        return held[1]

    def touch(self, block_id: BlockId) -> bool:
        """A hit of a held block whose bytes the caller has already, counted as `get` counts it
        (the policy's access, the stats) without reading it; False, counting nothing, if not held."""
        if block_id.name not in self._blocks:
            return False
        self.policy.access(block_id.name)
        self.stats.hits += 1
        return True

    async def put(self, block_id: BlockId, data: bytes) -> list[BlockId]:
        """Store a block; returns the ids evicted to make room."""
        return [victim for victim, _ in self._put(block_id, data)]

    async def put_demoting(self, block_id: BlockId, data: bytes) -> list[tuple[BlockId, bytes | None]]:
        """Store a block; returns the evicted blocks with their bytes, to move down a tier."""
        return list(self._put(block_id, data))

    @property
    def pieces(self) -> int:
        """How many partial blocks are held."""
        return len(self._pieces)

    def piece(self, block_id: BlockId) -> tuple[int, bytes] | None:
        """(lo, bytes) of the block's piece, uncounted; None when there is none."""
        held = self._pieces.get(PIECE + block_id.name)
        return None if held is None else (held[1], held[2])

    def piece_hit(self, block_id: BlockId, lo: int, hi: int) -> bytes | None:
        """Bytes [lo, hi) of the block from its piece, counted as a hit; None, counting nothing,
        when no piece holds them all."""
        name = PIECE + block_id.name
        held = self._pieces.get(name)
        if held is None or not pieces.covers(held[1], held[1] + len(held[2]), lo, hi):
            return None
        self.policy.access(name)
        self.stats.hits += 1
        start = lo - held[1]
        return held[2] if start == 0 and hi - lo == len(held[2]) else held[2][start:hi - held[1]]

    def put_piece(self, block_id: BlockId, lo: int, data: bytes) -> tuple[tuple[int, bytes], list[tuple[BlockId, bytes]]]:
        """Keep bytes [lo, lo + len(data)) of a block not held whole, joined with its piece
        (store.pieces.join). Returns the piece now held ((lo, b"") when none is: not taken) and
        the blocks evicted to make room, to move down a tier."""
        if block_id.name in self._blocks or not data:
            return (lo, b""), []
        name = PIECE + block_id.name
        old = self._pieces.pop(name, None)
        joined = pieces.join(None if old is None else (old[1], old[2]), lo, bytes(data))
        if old is not None:
            self._used -= len(old[2])
            self.policy.remove(name)
        evicted = self._make_room(len(joined[1]))
        if evicted is None or self._used + len(joined[1]) > self.quota:
            return (lo, b""), evicted or []
        self._pieces[name] = (block_id, joined[0], joined[1])
        self._used += len(joined[1])
        self.policy.insert(name, len(joined[1]))
        return joined, evicted

    def drop_pieces(self, bucket: str, prefix: str) -> int:
        """Forget the pieces of blocks of keys under bucket/prefix; returns how many."""
        names = [n for n, (b, _, _) in self._pieces.items() if b.bucket == bucket and b.key.startswith(prefix)]
        for name in names:
            self._drop_piece(name)
        return len(names)

    def _drop_piece(self, name: str) -> None:
        held = self._pieces.pop(name, None)
        if held is not None:
            self._used -= len(held[2])
            self.policy.remove(name)

    async def remove(self, block_id: BlockId) -> bool:
        """Forget a block (and its piece); True if the whole block was held."""
        self._drop_piece(PIECE + block_id.name)
        held = self._blocks.pop(block_id.name, None)
        if held is None:
            return False
        self._used -= len(held[1])
        self.policy.remove(block_id.name)
        return True

    def _put(self, block_id: BlockId, data: bytes) -> list[tuple[BlockId, bytes]]:
        """A block already held is left as it is (blocks are immutable under their name)."""
        name = block_id.name
        if name in self._blocks:
            return []
        self._drop_piece(PIECE + name)  # the whole block holds its bytes now
        size = len(data)
        evicted = self._make_room(size)
        if evicted is None:
            return []
        if self._used + size > self.quota:
            return evicted
        self._blocks[name] = (block_id, bytes(data))
        self._used += size
        self.policy.insert(name, size)
        return evicted

    def _make_room(self, size: int) -> list[tuple[BlockId, bytes]] | None:
        """Evict until `size` more bytes fit: the evicted blocks (pieces evicted are freed). None
        when `size` exceeds the quota; when only pinned blocks are left, the evicted so far
        (`used` + size then still exceeds the quota). Either way counted as rejected."""
        if size > self.quota:
            self.stats.rejected += 1
            return None
        evicted: list[tuple[BlockId, bytes]] = []
        while self._used + size > self.quota:
            victim = self.policy.victim(self._evictable_name)
            if victim is None:
                self.stats.rejected += 1
                break
            self.stats.evictions += 1
            if victim.startswith(PIECE):
                piece = self._pieces.pop(victim)
                self._used -= len(piece[2])
                continue
            held = self._blocks.pop(victim)
            self._used -= len(held[1])
            evicted.append(held)
        return evicted

    def _evictable_name(self, name: str) -> bool:
        if name.startswith(PIECE):
            return self.evictable(self._pieces[name][0])
        return self.evictable(self._blocks[name][0])

    def __repr__(self) -> str:
        return f"MemoryTier(name={self.name!r}, used={self._used}, quota={self.quota}, blocks={len(self._blocks)})"
