"""gateway.retry: backoffs double up to their cap with the jitter asked for; Retry tries again
what it may, pauses as its backoff says, and gives up with the last error or answer."""

from __future__ import annotations

import asyncio

import pytest

from gateway.retry import FOREVER, ExponentialBackoff, Retry


def test_a_backoff_doubles_up_to_its_cap():
    backoff = ExponentialBackoff(0.5, cap=3.0)
    assert [backoff.compute(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert ExponentialBackoff(1.0).compute(2000) == 2.0 ** 64  # no overflow, however many failures


def test_jitter_takes_a_random_share_off():
    assert ExponentialBackoff(2.0, jitter=0.5, draw=lambda: 0.0).compute(1) == 2.0
    assert ExponentialBackoff(2.0, jitter=0.5, draw=lambda: 0.999).compute(1) == pytest.approx(1.001)
    drawn = [ExponentialBackoff(0.2, jitter=0.75).compute(1) for _ in range(200)]
    assert all(0.05 < pause <= 0.2 for pause in drawn) and len(set(drawn)) > 100


def test_a_backoff_refuses_what_makes_no_sense():
    for wrong in ({"base": -1.0}, {"base": 1.0, "cap": -1.0}, {"base": 1.0, "jitter": 1.5}):
        with pytest.raises(ValueError):
            ExponentialBackoff(**wrong)  # type: ignore[arg-type]


class Attempts:
    """`do` for Retry: raises or answers the next of `outcomes`; the pauses taken are kept."""

    def __init__(self, *outcomes: object) -> None:
        self.outcomes = list(outcomes)
        self.calls = 0
        self.pauses: list[float] = []
        self.failed: list[tuple[int, object]] = []

    async def do(self) -> object:
        self.calls += 1
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def wait(self, pause: float) -> None:
        self.pauses.append(pause)

    async def note(self, failures: int, outcome: object) -> None:
        self.failed.append((failures, outcome))


def retry(attempts: Attempts, retries: int, errors: tuple[type[BaseException], ...] = (OSError,)) -> Retry:
    return Retry(ExponentialBackoff(1.0, cap=4.0), retries, errors, sleep=attempts.wait)


async def test_errors_it_may_retry_are_tried_again_with_growing_pauses():
    refused = ConnectionRefusedError("refused")
    attempts = Attempts(refused, refused, "answer")
    assert await retry(attempts, 2).call(attempts.do, failed=attempts.note) == "answer"
    assert attempts.calls == 3 and attempts.pauses == [1.0, 2.0]
    assert attempts.failed == [(1, refused), (2, refused)]


async def test_once_the_retries_are_spent_the_last_error_is_raised():
    attempts = Attempts(ConnectionResetError("first"), ConnectionResetError("last"))
    with pytest.raises(ConnectionResetError, match="last"):
        await retry(attempts, 1).call(attempts.do, failed=attempts.note)
    assert attempts.calls == 2 and attempts.pauses == [1.0] and len(attempts.failed) == 1


async def test_other_errors_and_cancellation_pass_at_once():
    attempts = Attempts(KeyError("not a transport error"))
    with pytest.raises(KeyError):
        await retry(attempts, 5).call(attempts.do)
    cancelled = Attempts(asyncio.CancelledError())
    with pytest.raises(asyncio.CancelledError):
        await retry(cancelled, FOREVER, (Exception,)).call(cancelled.do)
    assert attempts.calls == cancelled.calls == 1 and attempts.pauses == cancelled.pauses == []


async def test_answers_it_is_told_to_retry_are_tried_again_and_the_last_one_returned():
    attempts = Attempts(503, 500, 503)
    answer = await retry(attempts, 2).call(attempts.do, again=lambda status: status >= 500, failed=attempts.note)
    assert answer == 503 and attempts.calls == 3  # given back, not raised: the caller reads the error
    assert attempts.failed == [(1, 503), (2, 500)]  # (closed by the caller's `failed`; the last one is its own)
    ok = Attempts(503, 200)
    assert await retry(ok, 2).call(ok.do, again=lambda status: status >= 500) == 200


async def test_forever_tries_until_an_answer():
    attempts = Attempts(*[OSError("down")] * 12, "up")
    assert await retry(attempts, FOREVER).call(attempts.do) == "up"
    assert attempts.calls == 13 and attempts.pauses == [1.0, 2.0] + [4.0] * 10
