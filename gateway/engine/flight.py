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
