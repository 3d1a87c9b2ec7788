"""Access heat: a bounded, decaying count of reads per object, for the hottest-objects view
and the replication controller. A node of several workers counts it in its first worker, the
others sending theirs (HeatSender, gateway.admin.nodefeed)."""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterable

ObjectKey = tuple[str, str]  # bucket, key


class HeatCounter:
    """Counts hits per (bucket, key) in at most `capacity` entries. Event loop only.

    Every `half_life` seconds all counts are halved (checked lazily on `hit` and `top`,
    once per half-life that passed), so heat follows recent traffic. When the table is full, the coldest quarter is dropped: a
    new object then starts at 1 and must earn its place, like the others did. A hit is
    a dict update; the O(n) work happens once per half-life or per capacity/4 new
    objects.
    """

    def __init__(self, capacity: int = 10_000, half_life: float = 300.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if capacity < 4:
            raise ValueError(f"capacity must be >= 4, not {capacity}")
        self.capacity = capacity
        self.half_life = half_life
        self._clock = clock
        self._counts: dict[ObjectKey, int] = {}
        self._next_halving = clock() + half_life

    def __len__(self) -> int:
        return len(self._counts)

    def hit(self, bucket: str, key: str) -> None:
        if self._clock() >= self._next_halving:
            self._decay()
        name = (bucket, key)
        count = self._counts.get(name)
        if count is None and len(self._counts) >= self.capacity:
            self._shrink()
        self._counts[name] = (count or 0) + 1

    def top(self, n: int = 20) -> list[tuple[str, str, int]]:
        """The `n` hottest objects as (bucket, key, hits), hottest first."""
        if self._clock() >= self._next_halving:  # no reads lately: the heat has cooled all the same
            self._decay()
        hottest = heapq.nlargest(n, self._counts.items(), key=lambda item: item[1])
        return [(bucket, key, count) for (bucket, key), count in hottest]

    def _decay(self) -> None:
        """Halve the counts once for every half-life that passed since the last halving."""
        now = self._clock()
        halvings = 1 + int((now - self._next_halving) // self.half_life)
        self._counts = {name: count >> halvings for name, count in self._counts.items() if count >> halvings}
        self._next_halving += halvings * self.half_life

    def add_all(self, hits: Iterable[tuple[str, str, int]]) -> None:
        """Each (bucket, key, count): `count` hits of the object at once (another worker's, a
        datagram of gateway.admin.nodefeed), the clock read once for them all."""
        if self._clock() >= self._next_halving:
            self._decay()
        for bucket, key, count in hits:
            name = (bucket, key)
            held = self._counts.get(name)
            if held is None and len(self._counts) >= self.capacity:
                self._shrink()
            self._counts[name] = (held or 0) + count

    def _shrink(self) -> None:
        keep = self.capacity - self.capacity // 4
        self._counts = dict(heapq.nlargest(keep, self._counts.items(), key=lambda item: item[1]))


class HeatSender(HeatCounter):
    """The heat of a worker that is not its node's first: its hits are kept only until they are
    taken (`take`) and sent to the first worker, which counts the node's (gateway.admin.nodefeed);
    `top` is empty, the node's heat being there. Event loop only."""

    def __init__(self, capacity: int = 10_000) -> None:
        super().__init__(capacity)
        self._pending: dict[ObjectKey, int] = {}

    def hit(self, bucket: str, key: str) -> None:
        name = (bucket, key)
        pending = self._pending
        if len(pending) < self.capacity or name in pending:  # (past that, until the next take: lost)
            pending[name] = pending.get(name, 0) + 1

    def add_all(self, hits: Iterable[tuple[str, str, int]]) -> None:
        raise TypeError("a HeatSender sends its hits, it takes none")

    def top(self, n: int = 20) -> list[tuple[str, str, int]]:
        return []

    def take(self) -> dict[ObjectKey, int]:
        """The hits since the last take, by object."""
        pending, self._pending = self._pending, {}
        return pending
