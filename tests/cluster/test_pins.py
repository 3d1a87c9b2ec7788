"""RuntimePins against a real redis-server: shared by the nodes, kept across restarts and outages."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from gateway.cluster.pins import Pin, RuntimePins
from gateway.cluster.redis_handle import RedisHandle
from gateway.config import RedisSettings
from tests.waiting import eventually


class Applied:
    """What a node's block store was last told to pin at runtime."""

    def __init__(self) -> None:
        self.pins: set[Pin] = set()

    def __call__(self, pins: object) -> None:
        self.pins = set(pins)  # type: ignore[call-overload]


@pytest.fixture
async def make_pins(clean_redis) -> AsyncIterator[Callable[..., tuple[RuntimePins, Applied]]]:
    made: list[RedisHandle] = []
    tasks: list[asyncio.Task[None]] = []

    def make(*, configured: tuple[Pin, ...] = (), refresh: float = 0.05, run: bool = False) -> tuple[RuntimePins, Applied]:
        redis = RedisHandle(RedisSettings(url=clean_redis.url, socket_timeout=0.3, retry_interval=0.2))
        made.append(redis)
        applied = Applied()
        pins = RuntimePins(configured, applied, redis, refresh=refresh)
        if run:
            tasks.append(asyncio.create_task(pins.run()))
        return pins, applied

    yield make
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for redis in made:
        await redis.aclose()
    if clean_redis.proc is None:
        clean_redis.start()


async def test_a_pin_reaches_the_other_nodes_and_a_restarted_one(make_pins):
    a, applied_a = make_pins(configured=(("bkt", "conf/"),))
    b, applied_b = make_pins(run=True)
    assert await a.set(("bkt", "hot/"), True)
    assert applied_a.pins == {("bkt", "hot/")} and a.pins == [("bkt", "conf/"), ("bkt", "hot/")]
    await eventually(lambda: applied_b.pins == {("bkt", "hot/")}, "b applies the pin")
    restarted, applied_restarted = make_pins()
    await restarted.refresh()
    assert applied_restarted.pins == {("bkt", "hot/")}
    assert await b.set(("bkt", "hot/"), False)
    await a.refresh()
    assert applied_a.pins == set() and a.pins == [("bkt", "conf/")]


async def test_a_pin_made_while_redis_is_down_is_written_when_it_is_back(make_pins, clean_redis):
    a, applied_a = make_pins()
    b, applied_b = make_pins()
    clean_redis.stop()
    assert not await a.set(("bkt", "late/"), True)
    assert applied_a.pins == {("bkt", "late/")}  # in force here at once
    await a.refresh()  # Redis still down: nothing changes, nothing is lost
    assert applied_a.pins == {("bkt", "late/")}
    clean_redis.start()

    async def shared() -> bool:  # once past the circuit's retry interval, a writes the pin it kept
        await a.refresh()
        await b.refresh()
        return applied_b.pins == {("bkt", "late/")}
    await eventually(shared, "the pin made during the outage reaches b")
    assert applied_a.pins == {("bkt", "late/")}


async def test_without_redis_pins_are_this_nodes_own():
    applied = Applied()
    pins = RuntimePins((), applied)
    assert await pins.set(("bkt", "p/"), True)
    await pins.refresh()
    assert applied.pins == {("bkt", "p/")} and pins.is_runtime(("bkt", "p/"))
