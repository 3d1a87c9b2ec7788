"""Blocks between two levels of the tiered store: evicted from one level by a put, on their way
into the next. No level's index holds such a block meanwhile (a disk tier drops its victims from
the index before its threads read them back, and the level below indexes a block once its
threads wrote it), so a read of it then missed, and the block was fetched again from the origin
a moment before it landed in the lower level. A read waits for the puts under way instead."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Iterator

from gateway.store.blocks import BlockId
from gateway.store.tier import Tier

_PATIENCE = 2.0  # seconds a read waits for the puts under way (a disk that hangs: the read goes on, a miss)


class Transit:
    """The blocks in transit between `levels` (a TieredStore's), and the puts moving them. Event loop only."""

    def __init__(self, levels: Iterable[Tier]) -> None:
        self._levels = list(levels)
        self._moving: set[str] = set()  # read back from their level, being stored in the next
        self._puts: set[asyncio.Future[None]] = set()

    def holds(self, block_id: object) -> bool:
        """Whether the block is on its way down: a level's put is reading it back (Tier.leaving),
        or it is being stored in the level below."""
        name = block_id.name if isinstance(block_id, BlockId) else None
        return name in self._moving or any(name in tier.leaving for tier in self._levels)

    @contextlib.contextmanager
    def putting(self) -> Iterator[None]:
        """A put whose level's victims go down (`settled` waits for it)."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._puts.add(done)
        try:
            yield
        finally:
            self._puts.discard(done)
            done.set_result(None)

    @contextlib.contextmanager
    def moving(self, names: set[str]) -> Iterator[None]:
        """Victims read back, being stored in the level below."""
        self._moving |= names
        try:
            yield
        finally:
            self._moving -= names

    async def settled(self) -> None:
        """Once every put under way is done (its victims are in a lower level, or freed), or `_PATIENCE`."""
        if self._puts:
            await asyncio.wait(set(self._puts), timeout=_PATIENCE)
