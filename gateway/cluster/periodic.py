"""Background work done every few seconds for as long as the node runs."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from gateway import log


async def run_every(interval: float, work: Callable[[], Awaitable[None]], what: str) -> None:
    """Call `work` every `interval` seconds until cancelled; a failure is logged and the next
    round comes anyway.

    A cancellation that arrives while a Redis call is timing out can come back as that call's
    timeout error, which the loop would swallow and go on forever: it checks whether its task
    is being cancelled after every round and stops then.
    """
    while True:
        await asyncio.sleep(interval)
        try:
            await work()
        except Exception:  # a bug or an outage here must not stop the rounds
            log.cluster.exception("%s failed", what)
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise asyncio.CancelledError
