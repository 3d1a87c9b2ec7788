"""What every level of the block store is, in memory or on disk: one asynchronous contract."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Set
from typing import Protocol

from gateway.store.blocks import BlockId
from gateway.store.stats import TierStats


class Tier(Protocol):
    """A level of the store (gateway.store.memory.MemoryTier, gateway.store.disk.DiskTier).

    Event loop only. `used` never exceeds `quota`; a block is immutable under its name, so a
    put of a held block changes nothing; blocks `evictable` refuses (pinned) are never
    victims. Membership, size and listing are answered at once; reading and writing may wait.
    """

    name: str
    medium: str
    quota: int
    stats: TierStats
    evictable: Callable[[BlockId], bool]

    @property
    def used(self) -> int: ...

    @property
    def healthy(self) -> bool: ...

    @property
    def leaving(self) -> Set[str]:
        """The blocks a demoting put (`put_demoting`) evicted and is reading back, by name: out of
        the index until it returns them (store.tiers waits for them rather than miss)."""

    def __len__(self) -> int: ...

    def __contains__(self, block_id: object) -> bool: ...

    def __iter__(self) -> Iterator[BlockId]: ...

    def age(self, block_id: BlockId) -> float | None:
        """Seconds since the block was first stored, when that outlives a restart (disk)."""

    async def open(self) -> None: ...

    async def aclose(self) -> None: ...

    async def get(self, block_id: BlockId) -> bytes | None:
        """The block's bytes, or None (a miss; cache trouble is a miss too)."""

    def get_now(self, block_id: BlockId) -> bytes | memoryview | None:
        """`get` without an await, when the tier can answer at once (from memory, or a disk's
        page cache); counted as `get` counts a hit. None, counting nothing, otherwise. A large
        block may be a read-only view of a file's mapping (store.mapped), to be sent, not kept."""

    def touch(self, block_id: BlockId) -> bool:
        """A hit of a held block whose bytes the caller has already (a run of the origin brought
        them again), counted as `get` counts a hit (the policy's access, the stats) without reading
        it; False, counting nothing, when it is not held."""

    async def put(self, block_id: BlockId, data: bytes) -> list[BlockId]:
        """Store a block; returns the blocks evicted to make room (they are gone)."""

    async def put_demoting(self, block_id: BlockId, data: bytes) -> list[tuple[BlockId, bytes | None]]:
        """Store a block; returns the evicted blocks with their bytes (None where they could not
        be read back), for the caller to move down a tier."""

    async def remove(self, block_id: BlockId) -> bool:
        """Forget a block; True if it was held."""
