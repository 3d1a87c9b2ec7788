"""Single-flight: concurrent askers of the same thing share one piece of work."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SingleFlight(Generic[K, V]):
    """One task per key at a time, awaited by everyone who asks for that key meanwhile.

    Event loop only. The work runs as its own task: an asker that goes away (cancelled)
    does not cancel it for the others, and a failure nobody waited for is not logged as
    an unretrieved exception. The key is forgotten as soon as the work ends, so the next
    asker starts a new flight (a cached result is the caller's business).
    """

    def __init__(self) -> None:
        self._flights: dict[K, asyncio.Future[V]] = {}

    def __contains__(self, key: object) -> bool:
        return key in self._flights

    def __len__(self) -> int:
        return len(self._flights)

    def joined(self, key: K) -> asyncio.Future[V] | None:
        """The flight under way for `key`, if any."""
        return self._flights.get(key)

    def start(self, key: K, work: Callable[[], Awaitable[V]]) -> asyncio.Future[V]:
        """The flight for `key`: the one under way, else `work()` started now."""
        flight = self._flights.get(key)
        if flight is None:
            flight = asyncio.ensure_future(work())
            self._flights[key] = flight
            flight.add_done_callback(lambda done: self._landed(key, done))
        return flight

    async def run(self, key: K, work: Callable[[], Awaitable[V]]) -> V:
        """`start`, then wait for it without cancelling it when the asker goes away."""
        return await asyncio.shield(self.start(key, work))

    def _landed(self, key: K, done: asyncio.Future[V]) -> None:
        if self._flights.get(key) is done:
            del self._flights[key]
        if not done.cancelled():
            done.exception()  # retrieved: a failure nobody waited for is not an error to log


class Coming(Generic[K]):
    """Work under way that brings a stretch [lo, hi) of something (a part of a block that a run
    without a reader brings: engine.tails): who wants what lies within it waits for the work to
    end, then looks where the work keeps what it brought. Event loop only."""

    def __init__(self) -> None:
        self._coming: dict[K, tuple[int, int, asyncio.Future[None]]] = {}

    def __contains__(self, key: object) -> bool:
        return key in self._coming

    def add(self, key: K, lo: int, hi: int, work: asyncio.Future[None]) -> None:
        """`work` brings [lo, hi) of `key` (forgotten when it ends)."""
        self._coming[key] = (lo, hi, work)

        def ended(_: asyncio.Future[None]) -> None:
            if key in self._coming and self._coming[key][2] is work:
                del self._coming[key]

        work.add_done_callback(ended)

    async def waited(self, key: K, lo: int, hi: int) -> bool:
        """Whether work bringing [lo, hi) of `key` was under way: then it ended (whatever became of it)."""
        coming = self._coming.get(key)
        if coming is None or not coming[0] <= lo < hi <= coming[1]:
            return False
        await asyncio.wait([coming[2]])
        return True
