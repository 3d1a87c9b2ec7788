"""A token bucket: at most `burst` events at once, and `rate` a second after that."""

from __future__ import annotations

import time
from collections.abc import Callable


class TokenBucket:
    """`take()` says whether one more event may happen now. Event loop only (no locks)."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        if rate < 0 or burst < 1:
            raise ValueError("a token bucket needs rate >= 0 and burst >= 1")
        self.rate, self.burst = rate, burst
        self._clock = clock
        self._tokens = float(burst)
        self._at = clock()

    def take(self) -> bool:
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    def __repr__(self) -> str:
        return f"TokenBucket(rate={self.rate}, burst={self.burst}, tokens={self._tokens:.1f})"
