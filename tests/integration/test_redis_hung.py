"""A hung Redis (SIGSTOP: connections open, nothing answered) never hides an acknowledged
write (issue 14 item 6): within redis.invalidation_timeout the nodes stop trusting their
cached metadata and listings (their PINGs through the invalidation channel go unanswered),
and a write waits that long at most before it is acknowledged. Once Redis answers again
(SIGCONT) the nodes listen, confirm and answer from their caches again by themselves.

Two in-process gateways (real uvicorn) on the test's redis-server and moto, a fleet, with
TTLs of a minute so that only invalidations can explain a fresh answer.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator

import pytest

from tests.integration.test_read_after_write import (  # the two-node fixture is shared
    BUCKET, DEADLINE, Tally, _expect, _prime, _state, engine, pair,
)
from tests.support import client
from tests.waiting import wait_for

SOCKET_TIMEOUT = 0.3  # redis.socket_timeout of the shared `pair` fixture


@pytest.fixture
def hung(clean_redis) -> Iterator[callable]:  # type: ignore[valid-type]
    """hang() stops the test's redis-server with SIGSTOP; it is always continued afterwards."""
    stopped = []

    def hang() -> None:
        assert clean_redis.proc is not None
        clean_redis.proc.send_signal(signal.SIGSTOP)
        stopped.append(clean_redis.proc)

    def resume() -> None:
        while stopped:
            stopped.pop().send_signal(signal.SIGCONT)

    hang.resume = resume  # type: ignore[attr-defined]
    try:
        yield hang
    finally:
        resume()


def test_a_hung_redis_never_hides_a_write_and_is_recovered_from(pair, hung):
    a, b, s3a, s3b = pair
    for key in ("dir/over", "dir/gone"):
        s3a.put_object(Bucket=BUCKET, Key=key, Body=b"old " + key.encode())
    for key in ("dir/over", "dir/gone", "dir/new"):
        _prime([s3b], key)  # B caches them (and the 404 of dir/new)
    hits = engine(b).stats["meta_hit"]
    assert _state(s3b, "dir/over")[0] == b"old dir/over"
    assert engine(b).stats["meta_hit"] == hits + 1

    # A reader on B all along: a read that starts after a write was acknowledged must not
    # see what was there before it (it may see a later write).
    acked: dict[str, tuple[float, bytes | None]] = {}  # key -> (when acknowledged, body)
    before: dict[str, list[bytes | None]] = {k: [b"old " + k.encode()] for k in ("dir/over", "dir/gone")}
    before["dir/new"] = [None]
    stale: list[str] = []
    stop, first = threading.Event(), threading.Event()  # (first: a write was acknowledged, or the test ends)

    def read() -> None:
        s3 = client(b.endpoint)
        first.wait()
        while not stop.is_set():  # each round asks B for every acknowledged key
            for key, (at, body) in list(acked.items()):
                older = list(before[key])
                started = time.monotonic()
                got = _state(s3, key)[0]
                if started > at and got in older and got != body:
                    stale.append(f"{key}: {got!r} {started - at:.3f} s after {body!r} was acknowledged")

    reader = threading.Thread(target=read)
    reader.start()
    try:
        hung()
        stopped_at = time.monotonic()
        timings = {}
        for key, write in (("dir/over", lambda: s3a.put_object(Bucket=BUCKET, Key="dir/over", Body=b"new")),
                           ("dir/new", lambda: s3a.put_object(Bucket=BUCKET, Key="dir/new", Body=b"created")),
                           ("dir/gone", lambda: s3a.delete_object(Bucket=BUCKET, Key="dir/gone"))):
            started = time.monotonic()
            write()
            acked[key] = (time.monotonic(), {"dir/over": b"new", "dir/new": b"created", "dir/gone": None}[key])
            before[key].append(acked[key][1])
            first.set()
            timings[key] = acked[key][0] - started
            # At once, GET and LIST through B: never the old state.
            tally = Tally()
            _expect([s3b], key, acked[key][1], tally, "Redis hung")
            assert tally.stale == [], tally.stale
        # B stopped trusting its caches within the deadline (its PINGs went unanswered).
        assert not engine(b).shared.invalidation.listening()
        print(f"writes while Redis hung: {', '.join(f'{k} {t:.2f} s' for k, t in timings.items())}")
        # The first write noticed the hang (socket_timeout) and waited out the deadline from
        # then; the later ones know Redis is down.
        assert max(timings.values()) < SOCKET_TIMEOUT + DEADLINE + 1.0, timings
        assert time.monotonic() - stopped_at < 10
    finally:
        hung.resume()  # type: ignore[attr-defined]
    try:
        # Back by itself: both listen again, A's invalidations waiting for Redis went out.
        wait_for(lambda: engine(a).shared.invalidation.listening() and engine(b).shared.invalidation.listening(),
                 "both listen again", within=10)
        wait_for(lambda: not engine(a).shared.invalidation._pending, "A's invalidations replayed", within=5)
        started = time.monotonic()
        s3a.put_object(Bucket=BUCKET, Key="dir/over", Body=b"after")
        acked["dir/over"] = (time.monotonic(), b"after")
        before["dir/over"].append(b"after")
        assert time.monotonic() - started < DEADLINE, "confirmed by B again, not waited for"
        tally = Tally()
        _expect([s3b], "dir/over", b"after", tally, "Redis back")
        assert tally.stale == [], tally.stale
    finally:
        stop.set()
        first.set()
        reader.join(30)
    assert stale == [], stale[:10]
    hits = engine(b).stats["meta_hit"]
    assert _state(s3b, "dir/over")[0] == b"after"
    assert engine(b).stats["meta_hit"] == hits + 1, "B answers from its cache again"
