"""gateway.periodic: rounds every interval whatever a round does, and loops that run until
cancelled stop once cancelled, even when a call inside drops the cancellation."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gateway.periodic import run_every, stop_if_cancelled
from tests.waiting import turns


async def test_a_failed_round_is_logged_and_the_next_one_comes(caplog):
    pauses: list[float] = []
    rounds: list[int] = []

    async def pausing(pause: float) -> None:
        if len(pauses) == 4:
            raise asyncio.CancelledError  # the node stops
        pauses.append(pause)

    async def work() -> None:
        rounds.append(len(rounds) + 1)
        if len(rounds) == 2:
            raise OSError("the disk said no")

    logger = logging.getLogger("gateway.tests.periodic")
    with pytest.raises(asyncio.CancelledError), caplog.at_level(logging.ERROR, logger=logger.name):
        await run_every(30.0, work, "freeing blocks", logger=logger, sleep=pausing)
    assert pauses == [30.0] * 4 and rounds == [1, 2, 3, 4]  # the failure did not end the rounds
    records = [r for r in caplog.records if r.name == logger.name]
    assert [r.getMessage() for r in records] == ["freeing blocks failed"] and records[0].exc_info is not None


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
