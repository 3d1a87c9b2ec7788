"""tests/waiting.py, the one way tests wait: answers, errors that count as "not yet", and the
message of a wait that ran out."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from tests.waiting import eventually, turns, wait_for


def test_wait_for_returns_the_first_true_answer():
    answers = iter([0, None, "", "found", "later"])
    assert wait_for(lambda: next(answers), "an answer", interval=0) == "found"


def test_errors_named_count_as_not_yet_and_others_end_the_wait():
    calls = itertools.count()

    def flaky() -> bool:
        if next(calls) < 3:
            raise ConnectionRefusedError("not up yet")
        return True

    assert wait_for(flaky, "it comes up", ignoring=(OSError,), interval=0) is True
    with pytest.raises(KeyError):
        wait_for(lambda: {}["missing"], "a key", ignoring=(OSError,))


def test_a_wait_that_runs_out_says_what_it_waited_for_and_what_it_last_saw():
    with pytest.raises(AssertionError, match=r"not within 0\.05 s: the answer \(last: 0\)"):
        wait_for(lambda: 0, "the answer", within=0.05)
    def refused() -> bool:
        raise ConnectionRefusedError("down")

    with pytest.raises(AssertionError, match=r"ConnectionRefusedError\('down'\)"):
        wait_for(refused, "up", within=0.05, ignoring=(OSError,))


async def test_eventually_awaits_a_coroutine_check_and_lets_the_loop_run_between():
    ready = asyncio.Event()
    asyncio.get_running_loop().call_soon(ready.set)

    async def check() -> bool:
        return ready.is_set()

    assert await eventually(check, "the event") is True
    with pytest.raises(AssertionError, match="never"):
        await eventually(lambda: False, "never", within=0.05)


async def test_turns_hands_the_loop_over_for_as_many_rounds():
    started: list[str] = []

    async def task() -> None:
        started.append("ran")
        await asyncio.Event().wait()

    running = asyncio.create_task(task())
    await turns(0)
    assert started == []  # not handed over: the task has not run yet
    await turns(1)
    assert started == ["ran"]
    running.cancel()
