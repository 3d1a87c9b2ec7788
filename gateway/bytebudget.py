"""A process-wide budget of bytes, taken before a block is held and given back after."""

from __future__ import annotations

import asyncio
from collections import deque


class ByteBudget:
    """Counts bytes held at once against a limit. Event loop only.

    `take` waits its turn (first come, first served) while the budget is spent, but no
    longer than `max_wait` seconds: past that it takes the bytes anyway, so a budget held
    by clients that stopped reading slows others down without ever hanging them.
    `try_take` never waits (for work that may be skipped, such as readahead). A request
    larger than the whole budget is taken as the whole budget.
    """

    def __init__(self, limit: int, *, max_wait: float = 5.0) -> None:
        self.limit = limit
        self.used = 0
        self.max_wait = max_wait
        self.waits = 0  # takes that had to wait
        self.overdrawn = 0  # takes that went past the limit after max_wait
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    def try_take(self, size: int) -> int:
        """The bytes taken (to give back later), or 0 when they are not available now."""
        size = min(size, self.limit)
        if self._waiters or self.used + size > self.limit:
            return 0
        self.used += size
        return size

    async def take(self, size: int) -> int:
        """Take `size` bytes, waiting for them if needed; returns what to give back."""
        size = min(size, self.limit)
        if not self._waiters and self.used + size <= self.limit:
            self.used += size
            return size
        self.waits += 1
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (size, turn)
        self._waiters.append(entry)
        try:
            await asyncio.wait_for(asyncio.shield(turn), self.max_wait)
        except TimeoutError:
            if not turn.done():  # (done: granted just as the wait ran out)
                turn.cancel()
                self._waiters.remove(entry)
                self.overdrawn += 1
                self.used += size
                self._wake()
        except BaseException:
            if turn.done() and not turn.cancelled():
                self.give(size)  # granted just as we were cancelled
            else:
                turn.cancel()
                self._waiters.remove(entry)
                self._wake()
            raise
        return size

    def give(self, size: int) -> None:
        self.used -= size
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self.used + self._waiters[0][0] <= self.limit:
            size, turn = self._waiters.popleft()
            self.used += size
            turn.set_result(None)
