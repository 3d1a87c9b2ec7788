"""ByteBudget: bytes held at once stay within the limit; waiters go first come, first served;
nobody waits forever, and nothing is lost when a waiter is cancelled."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.bytebudget import ByteBudget
from tests.waiting import eventually, turns


async def test_take_and_give_within_the_limit():
    budget = ByteBudget(100)
    assert await budget.take(60) == 60
    assert budget.try_take(50) == 0  # would pass the limit
    assert budget.try_take(40) == 40
    budget.give(60)
    budget.give(40)
    assert budget.used == 0


async def test_a_request_larger_than_the_budget_takes_the_whole_budget():
    budget = ByteBudget(100)
    assert await budget.take(500) == 100
    assert budget.used == 100


async def test_waiters_are_served_in_order_and_try_take_does_not_jump_the_queue():
    budget = ByteBudget(100)
    held = await budget.take(100)
    order: list[str] = []

    async def waiter(name: str, size: int) -> None:
        got = await budget.take(size)
        order.append(name)
        await turns(2)  # held a moment
        budget.give(got)

    tasks = [asyncio.create_task(waiter("a", 80)), asyncio.create_task(waiter("b", 10))]
    await eventually(lambda: budget.waits == 2, "both wait")
    assert budget.try_take(1) == 0  # someone is waiting: readahead must not take their turn
    budget.give(held)
    await asyncio.gather(*tasks)
    assert order == ["a", "b"]
    assert budget.used == 0 and budget.waits == 2


async def test_a_wait_is_bounded_then_the_budget_is_overdrawn():
    budget = ByteBudget(100, max_wait=0.05)
    await budget.take(100)
    got = await asyncio.wait_for(budget.take(30), 2)
    assert got == 30 and budget.used == 130 and budget.overdrawn == 1


async def test_a_cancelled_waiter_takes_nothing_and_lets_the_next_one_in():
    budget = ByteBudget(100)
    held = await budget.take(90)
    cancelled = asyncio.create_task(budget.take(50))
    behind = asyncio.create_task(budget.take(10))
    await eventually(lambda: budget.waits == 2, "both wait")
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert await asyncio.wait_for(behind, 1) == 10  # no longer queued behind the cancelled one
    budget.give(held)
    budget.give(10)
    assert budget.used == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 150), st.integers(0, 5)), min_size=1, max_size=25))
def test_random_workloads_never_exceed_the_limit_and_return_everything(jobs):
    async def run() -> None:
        budget = ByteBudget(100, max_wait=10)
        peak = 0

        async def job(size: int, pause: int) -> None:
            nonlocal peak
            got = await budget.take(size)
            peak = max(peak, budget.used)
            await turns(pause)  # held for that many rounds of the loop
            budget.give(got)

        await asyncio.wait_for(asyncio.gather(*(job(s, p) for s, p in jobs)), 10)
        assert peak <= 100 and budget.overdrawn == 0
        assert budget.used == 0 and not budget._waiters

    asyncio.run(run())
