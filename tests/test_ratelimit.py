"""The token bucket (gateway.engine.ratelimit), with a clock the test moves."""

from __future__ import annotations

import pytest

from gateway.engine.ratelimit import TokenBucket


def test_a_burst_then_the_rate() -> None:
    now = [100.0]
    bucket = TokenBucket(2.0, 5, clock=lambda: now[0])
    assert [bucket.take() for _ in range(7)] == [True] * 5 + [False] * 2
    now[0] += 0.4  # 0.8 of a token
    assert not bucket.take()
    now[0] += 0.1  # one token now
    assert bucket.take() and not bucket.take()
    now[0] += 3600.0  # idle: never more than the burst
    assert sum(bucket.take() for _ in range(20)) == 5


def test_no_rate_means_the_burst_once() -> None:
    now = [0.0]
    bucket = TokenBucket(0.0, 2, clock=lambda: now[0])
    now[0] += 10.0
    assert [bucket.take() for _ in range(3)] == [True, True, False]


def test_nonsense_is_refused() -> None:
    with pytest.raises(ValueError):
        TokenBucket(1.0, 0)
