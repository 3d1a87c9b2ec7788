"""The memory tier: blocks held as bytes in a dict, bounded by a byte quota."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from gateway.store.blocks import BlockId
from gateway.store.policy import EvictionPolicy
from gateway.store.stats import TierStats


def _always(block_id: BlockId) -> bool:
    return True


class MemoryTier:
    """Event loop only: synchronous and lock-free, never awaits.

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

    def get(self, block_id: BlockId) -> bytes | None:
        held = self._blocks.get(block_id.name)
        if held is None:
            self.stats.misses += 1
            return None
        self.policy.access(block_id.name)
        self.stats.hits += 1
        return held[1]

    def put(self, block_id: BlockId, data: bytes) -> list[tuple[BlockId, bytes]]:
        """Store a block; returns the blocks evicted to make room, for the caller to demote.

        A block already held is left as it is (blocks are immutable under their name).
        """
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

    def remove(self, block: BlockId | str) -> bool:
        """Forget a block (by BlockId or name); True if it was held."""
        name = block if isinstance(block, str) else block.name
        held = self._blocks.pop(name, None)
        if held is None:
            return False
        self._used -= len(held[1])
        self.policy.remove(name)
        return True

    def _evictable_name(self, name: str) -> bool:
        return self.evictable(self._blocks[name][0])

    def __repr__(self) -> str:
        return f"MemoryTier(name={self.name!r}, used={self._used}, quota={self.quota}, blocks={len(self._blocks)})"
