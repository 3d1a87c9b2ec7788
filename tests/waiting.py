"""Waiting in tests: for a condition, within a bound, never for a fixed time.

`wait_for` (threads) and `eventually` (coroutines) ask `check` until it answers something
true and return that answer; an error in `ignoring` counts as "not yet". Past `within`
seconds they fail with an AssertionError naming `what` and the last answer or error, so a
test that waits too long says what it was waiting for. `turns` lets an event loop run a
number of rounds: steps, not time."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

INTERVAL = 0.02  # seconds between two questions: short against every bound the tests wait within


class _Waiting:
    """One wait: its deadline, and the last answer or error (for the message when it fails)."""

    def __init__(self, what: str, within: float, ignoring: tuple[type[BaseException], ...]) -> None:
        self.what, self.within, self.ignoring = what, within, ignoring
        self.deadline = time.monotonic() + within
        self.last: object = None

    def ask(self, check: Callable[[], T]) -> T | None:
        """`check`'s answer when it is true; None (not yet) otherwise, or failing once late."""
        try:
            answer: T | BaseException = check()
        except self.ignoring as exc:
            answer = exc
        return self.judge(answer)

    def judge(self, answer: T | BaseException) -> T | None:
        if answer and not isinstance(answer, BaseException):
            return answer
        self.last = answer
        if time.monotonic() > self.deadline:
            raise AssertionError(f"not within {self.within:g} s: {self.what} (last: {self.last!r})")
        return None


def wait_for(check: Callable[[], T], what: str, *, within: float = 5.0,
             ignoring: tuple[type[BaseException], ...] = (), interval: float = INTERVAL) -> T:
    """Call `check` until it answers something true, and return that; see the module."""
    waiting = _Waiting(what, within, ignoring)
    while (answer := waiting.ask(check)) is None:
        time.sleep(interval)  # the one poll of the threaded tests: between two questions, not a wait for an outcome
    return answer


async def eventually(check: Callable[[], T | Awaitable[T]], what: str, *, within: float = 5.0,
                     ignoring: tuple[type[BaseException], ...] = (), interval: float = INTERVAL) -> T:
    """`wait_for` in a coroutine, whose `check` may be a coroutine function; the event loop
    runs between two questions."""
    waiting = _Waiting(what, within, ignoring)
    while True:
        try:
            answer = check()
            if inspect.isawaitable(answer):
                answer = await answer
        except waiting.ignoring as exc:
            answer = exc
        if (judged := waiting.judge(answer)) is not None:  # type: ignore[arg-type]
            return judged
        await asyncio.sleep(interval)  # the one poll of the asyncio tests: between two questions


async def turns(count: int) -> None:
    """Let the event loop run `count` rounds (every task ready to run takes a step in each)."""
    for _ in range(count):
        await asyncio.sleep(0)  # not time: asyncio's way of handing the loop one round
