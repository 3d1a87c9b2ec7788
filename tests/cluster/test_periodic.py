"""Loops that run until cancelled stop once cancelled, even when a call inside drops the cancellation."""

from __future__ import annotations

import asyncio

from gateway.cluster.periodic import stop_if_cancelled
from tests.waiting import turns


async def test_a_loop_stops_when_a_call_drops_its_cancellation():
    """On Python 3.11, `asyncio.wait_for` (redis-py writes every command through it) returns
    the result and drops a cancellation that lands as the awaited write finishes: a loop of
    such calls cancelled at any point of a round still stops, at its next `stop_if_cancelled`."""

    async def write() -> None:
        return None

    async def loop() -> None:
        while True:
            await asyncio.wait_for(write(), 1)
            stop_if_cancelled()

    for yields in range(8):  # cancelled at each step of a round, some within wait_for's window
        task = asyncio.create_task(loop())
        await turns(yields)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=2)
        if not done:
            task.cancel()
            await asyncio.wait({task}, timeout=2)
        assert task in done and task.cancelled(), f"cancelled after {yields} yields, the loop ran on"
