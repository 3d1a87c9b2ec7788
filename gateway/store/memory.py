"""The memory tier: blocks held as bytes in a dict, bounded by a byte quota."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from gateway.store.blocks import BlockId
from gateway.store.policy import EvictionPolicy
from gateway.store.stats import TierStats


def _always(block_id: BlockId) -> bool:
    return True


class MemoryTier:
    """Event loop only, lock-free. Its methods are those of every tier (gateway.store.tier.Tier),
    asynchronous like a disk's, but none of them ever awaits: each runs to its end at once.

    Invariants: `used` (the sum of the held blocks' lengths) never exceeds `quota`; the
    policy holds exactly the names in the dict. A block larger than the quota, or one that
    only fits by evicting blocks `evictable` refuses (pinned), is not stored.
    `evictable` is installed by TieredStore; alone, every block is evictable.
    """

    medium = "memory"

    def __init__(self, quota: int, policy: EvictionPolicy, name: str = "mem") -> None:
        if quota < 0:
            raise ValueError(f"quota must be >= 0, not {quota}")
        self.quota = quota
        self.policy = policy
        self.name = name
        self.stats = TierStats()
        self.evictable: Callable[[BlockId], bool] = _always
        self._blocks: dict[str, tuple[BlockId, bytes]] = {}
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

    async def put(self, block_id: BlockId, data: bytes) -> list[BlockId]:
        """Store a block; returns the ids evicted to make room."""
        return [victim for victim, _ in self._put(block_id, data)]

    async def put_demoting(self, block_id: BlockId, data: bytes) -> list[tuple[BlockId, bytes | None]]:
        """Store a block; returns the evicted blocks with their bytes, to move down a tier."""
        return list(self._put(block_id, data))

    async def remove(self, block_id: BlockId) -> bool:
        """Forget a block; True if it was held."""
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
        size = len(data)
        if size > self.quota:
            self.stats.rejected += 1
            return []
        evicted: list[tuple[BlockId, bytes]] = []
        while self._used + size > self.quota:
            victim = self.policy.victim(self._evictable_name)
            if victim is None:
                break
            held = self._blocks.pop(victim)
            self._used -= len(held[1])
            self.stats.evictions += 1
            evicted.append(held)
        if self._used + size > self.quota:
            self.stats.rejected += 1
            return evicted
        self._blocks[name] = (block_id, bytes(data))
        self._used += size
        self.policy.insert(name, size)
        return evicted

    def _evictable_name(self, name: str) -> bool:
        return self.evictable(self._blocks[name][0])

    def __repr__(self) -> str:
        return f"MemoryTier(name={self.name!r}, used={self._used}, quota={self.quota}, blocks={len(self._blocks)})"
