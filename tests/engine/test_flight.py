"""SingleFlight: one piece of work per key at a time, shared by everyone who asks meanwhile."""

from __future__ import annotations

import asyncio
import gc

import pytest

from gateway.engine.flight import SingleFlight
from tests.waiting import eventually


class Work:
    """Work that waits for `done` to be set, then answers `answer` (or raises `error`);
    counts how many times it ran."""

    def __init__(self, answer: object = "answer", error: Exception | None = None) -> None:
        self.answer, self.error = answer, error
        self.started = 0
        self.done = asyncio.Event()

    async def __call__(self) -> object:
        self.started += 1
        await self.done.wait()
        if self.error is not None:
            raise self.error
        return self.answer


async def test_askers_of_one_key_share_one_run():
    flights: SingleFlight[str, object] = SingleFlight()
    work = Work()
    askers = [asyncio.create_task(flights.run("k", work)) for _ in range(5)]
    await eventually(lambda: work.started, "the work starts")
    assert "k" in flights and len(flights) == 1 and flights.joined("k") is not None
    work.done.set()
    assert await asyncio.gather(*askers) == ["answer"] * 5
    assert work.started == 1


async def test_each_key_has_its_own_run():
    flights: SingleFlight[str, object] = SingleFlight()
    first, second = Work("one"), Work("two")
    a, b = asyncio.create_task(flights.run("a", first)), asyncio.create_task(flights.run("b", second))
    await eventually(lambda: first.started and second.started, "both run")
    assert len(flights) == 2
    second.done.set()
    assert await b == "two" and not a.done()  # b's end does not wait for a's
    first.done.set()
    assert await a == "one"


async def test_the_key_is_forgotten_when_the_work_ends_and_the_next_asker_runs_it_again():
    flights: SingleFlight[str, object] = SingleFlight()
    work = Work()
    work.done.set()
    assert await flights.run("k", work) == "answer"
    assert "k" not in flights and flights.joined("k") is None
    assert await flights.run("k", work) == "answer"
    assert work.started == 2  # no result is kept: that is the caller's business


async def test_an_asker_that_goes_away_does_not_cancel_the_work_of_the_others():
    flights: SingleFlight[str, object] = SingleFlight()
    work = Work()
    leaving, staying = asyncio.create_task(flights.run("k", work)), asyncio.create_task(flights.run("k", work))
    await eventually(lambda: work.started, "the work starts")
    leaving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leaving
    flight = flights.joined("k")
    assert flight is not None and not flight.cancelled()
    work.done.set()
    assert await staying == "answer" and work.started == 1


async def test_a_failure_reaches_every_asker_and_the_next_asker_tries_again():
    flights: SingleFlight[str, object] = SingleFlight()
    failing = Work(error=LookupError("no such thing"))
    askers = [asyncio.create_task(flights.run("k", failing)) for _ in range(3)]
    await eventually(lambda: failing.started, "the work starts")
    failing.done.set()
    results = await asyncio.gather(*askers, return_exceptions=True)
    assert all(isinstance(r, LookupError) for r in results) and failing.started == 1
    working = Work()
    working.done.set()
    assert await flights.run("k", working) == "answer"


async def test_a_failure_nobody_waited_for_is_not_reported_as_never_retrieved():
    loop = asyncio.get_running_loop()
    reported: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _, context: reported.append(context))
    try:
        flights: SingleFlight[str, object] = SingleFlight()
        failing = Work(error=LookupError("nobody asks"))
        flight = flights.start("k", failing)
        await eventually(lambda: failing.started, "the work starts")
        failing.done.set()
        await asyncio.wait({flight})
        assert "k" not in flights
        del flight
        gc.collect()  # a future whose exception was never retrieved complains as it is collected
        assert reported == []
    finally:
        loop.set_exception_handler(None)


async def test_start_hands_back_the_flight_under_way():
    flights: SingleFlight[str, object] = SingleFlight()
    work, other = Work(), Work("other")
    first = flights.start("k", work)
    assert flights.start("k", other) is first and flights.joined("k") is first
    work.done.set()
    assert await first == "answer" and other.started == 0
