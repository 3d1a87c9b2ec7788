"""Background work done every few seconds for as long as the node runs (fleet heartbeats,
runtime pins, replication rounds, the store's expiry), and how such loops stop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from gateway import log


async def run_every(interval: float, work: Callable[[], Awaitable[object]], what: str, *,
                    logger: logging.Logger = log.cluster,
                    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> None:
    """Call `work` every `interval` seconds until cancelled; a failure is logged (to `logger`)
    and the next round comes anyway. (`sleep`: tests hand in their own.)

    A cancellation can be lost inside a Redis call (see `stop_if_cancelled`): the loop checks
    after every round whether its task is being cancelled, and stops then.
    """
    while True:
        await sleep(interval)
        try:
            await work()
        except Exception:  # a bug or an outage here must not stop the rounds
            logger.exception("%s failed", what)
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
