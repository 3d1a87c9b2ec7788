"""Trying again: how long to pause after a failure (a backoff) and the loop that tries, pauses
and gives up (Retry), as redis-py pairs its Retry with backoff objects. The origin client,
the invalidation listener and the SQS consumer all pause and give up this way."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")

__all__ = ["ExponentialBackoff", "Retry", "FOREVER"]

FOREVER = -1  # Retry(retries=FOREVER): never give up (until cancelled)


@dataclass(frozen=True, slots=True)
class ExponentialBackoff:
    """`base` after the first failure, doubling with each failure in a row up to `cap`; then
    `jitter` of it drawn at random and taken off: 0 pauses exactly that, 0.5 between half and
    all of it ("equal jitter"). `draw` gives numbers in [0, 1) (tests give their own)."""

    base: float
    cap: float = float("inf")
    jitter: float = 0.0
    draw: Callable[[], float] = field(default=random.random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.base < 0 or self.cap < 0 or not 0 <= self.jitter <= 1:
            raise ValueError(f"{self!r}: base and cap are not negative, jitter is within [0, 1]")

    def compute(self, failures: int) -> float:
        """The pause after `failures` failures in a row (1: the first)."""
        pause = min(self.cap, self.base * 2.0 ** min(max(failures, 1) - 1, 64))
        return pause * (1 - self.jitter * self.draw())


async def _nothing(failures: int, outcome: object) -> None:
    return None


def _never(answer: object) -> bool:
    return False


class Retry:
    """Call `do()` until it answers, at most `retries` times more after the first (FOREVER:
    no limit), pausing `backoff.compute(n)` after the n-th failure in a row.

    A failure is an exception among `errors` (any other, and cancellation, passes at once),
    or an answer that `again(answer)` says to try again. Before each pause `failed(n, error
    or answer)` is awaited (to log it, or close the answer); once the retries are spent, the
    last answer is returned, or the last error raised.
    """

    def __init__(self, backoff: ExponentialBackoff, retries: int,
                 errors: tuple[type[BaseException], ...] = (Exception,), *,
                 sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> None:
        self.backoff = backoff
        self.retries = retries
        self.errors = errors
        self._sleep = sleep

    async def call(self, do: Callable[[], Awaitable[T]], *, again: Callable[[T], bool] = _never,
                   failed: Callable[[int, BaseException | T], Awaitable[None]] = _nothing) -> T:
        failures = 0
        while True:
            try:
                answer = await do()
            except self.errors as error:
                failures += 1
                if not self._more(failures):
                    raise
                await failed(failures, error)
            else:
                if not again(answer):
                    return answer
                failures += 1
                if not self._more(failures):
                    return answer
                await failed(failures, answer)
            await self._sleep(self.backoff.compute(failures))

    def _more(self, failures: int) -> bool:
        return self.retries == FOREVER or failures <= self.retries
