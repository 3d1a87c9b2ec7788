"""Background work done every few seconds for as long as the node runs."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from gateway import log


async def run_every(interval: float, work: Callable[[], Awaitable[None]], what: str) -> None:
    """Call `work` every `interval` seconds until cancelled; a failure is logged and the next
    round comes anyway.

    A cancellation can be lost inside a Redis call (see `stop_if_cancelled`): the loop checks
    after every round whether its task is being cancelled, and stops then.
    """
    while True:
        await asyncio.sleep(interval)
        try:
            await work()
        except Exception:  # a bug or an outage here must not stop the rounds
            log.cluster.exception("%s failed", what)
        stop_if_cancelled()


def stop_if_cancelled() -> None:
    """Raise CancelledError if the current task was asked to stop: for loops that run until
    cancelled and make Redis calls, to call once a round.

    A cancellation can be lost inside a Redis call. It can come back as the call's timeout
    error, when it arrives while the call is timing out; and on Python 3.11 `asyncio.wait_for`,
    through which redis-py writes every command (ping, publish, ...), returns the result and
    drops the cancellation when it arrives in the loop iteration in which the write finished
    (fixed in 3.12). The task's `cancelling()` count stays up either way: a loop that did not
    check it would run on, and whoever awaits the cancelled task would wait forever.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
