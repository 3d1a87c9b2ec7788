"""The shared state (Level2 and Invalidations on one RedisHandle) against a real redis-server:
expiry, invalidation, pub/sub, outages."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator, Callable

import pytest

from gateway.cluster.shared import Shared
from gateway.config import RedisSettings
from tests.waiting import eventually

Received = list[tuple[str, str | None]]


@pytest.fixture
async def make_shared(clean_redis) -> AsyncIterator[Callable[..., Shared]]:
    """Shared instances on the test Redis (short timeouts), closed after the test."""
    made: list[Shared] = []
    listeners: list[asyncio.Task[None]] = []

    def make(node_id: str, *, listen: Received | None = None, resyncs: list[float] | None = None,
             deadline: float = 1.0, socket_timeout: float = 1.0) -> Shared:
        # A second for an answer: a loaded CI machine made a 0.3 s timeout lose a write (then
        # the read after it found nothing). A test of a hung Redis asks for less.
        shared = Shared.connect(RedisSettings(url=clean_redis.url, socket_timeout=socket_timeout, retry_interval=0.2,
                                              invalidation_timeout=deadline), node_id=node_id)
        made.append(shared)
        if listen is not None:
            on_resync = (lambda: resyncs.append(time.monotonic())) if resyncs is not None else None
            listeners.append(asyncio.create_task(
                shared.invalidation.listen(lambda bucket, key: listen.append((bucket, key)), on_resync=on_resync)))
        return shared

    yield make
    for task in listeners:
        task.cancel()
    # Bounded: a listener that runs on once cancelled fails the test here, by name, instead
    # of hanging the run.
    running: set[asyncio.Task[None]] = set()
    if listeners:
        done, running = await asyncio.wait(listeners, timeout=10)
        await asyncio.gather(*done, return_exceptions=True)
    for task in running:
        task.cancel()  # again, so that the test's event loop can close
    for shared in made:
        await shared.aclose()
    if clean_redis.proc is None:
        clean_redis.start()
    assert not running, f"invalidation listeners still running 10 s after they were cancelled: {running}"


async def test_metadata_lives_as_long_as_its_ttl(make_shared):
    """On Redis's clock, which no test moves: the entry is watched as it ages, until it expires."""
    shared = make_shared("a")
    key = ("b", "k", "")
    put = time.monotonic()
    await shared.level2.put_meta(key, b"payload", ttl=0.4)
    found = await shared.level2.get_meta(key)
    assert found is not None and found[0] == b"payload" and 0 <= found[1] < 0.3
    ages: list[float] = []

    async def expired() -> bool:
        found = await shared.level2.get_meta(key)
        if found is not None:
            ages.append(found[1])
        return found is None
    await eventually(expired, "the entry expires")
    assert time.monotonic() - put >= 0.4 - 0.01  # not before its TTL (Redis rounds to the millisecond)
    assert ages == sorted(ages) and 0.25 <= ages[-1] < 0.4  # its age, on Redis's clock, until then
    assert await make_shared("other").level2.get_meta(("b", "missing", "")) is None


async def test_invalidating_a_key_drops_every_version_of_it(make_shared):
    a, b = make_shared("a"), make_shared("b")
    for key in [("bkt", "k", ""), ("bkt", "k", "v1"), ("bkt", "k2", ""), ("other", "k", "")]:
        await a.level2.put_meta(key, repr(key).encode(), ttl=30)
    await a.invalidation.invalidate("bkt", "k")
    assert await b.level2.get_meta(("bkt", "k", "")) is None
    assert await b.level2.get_meta(("bkt", "k", "v1")) is None
    assert (await b.level2.get_meta(("bkt", "k2", "")))[0] == repr(("bkt", "k2", "")).encode()
    assert await b.level2.get_meta(("other", "k", "")) is not None


async def test_listing_pages_are_dropped_when_their_prefix_can_hold_the_key(make_shared):
    a, b = make_shared("a"), make_shared("b")
    pages = {prefix: ("bkt", prefix, (("list-type", "2"),)) for prefix in ["", "a/", "a/b/", "a/c/", "z/"]}
    for prefix, key in pages.items():
        await a.level2.put_listing(key, f"page {prefix}".encode(), ttl=30)
    await a.level2.put_listing(("other", "", ()), b"elsewhere", ttl=30)
    found = await b.level2.get_listing(pages["a/"])
    assert found is not None and found[0] == b"page a/"
    await a.invalidation.invalidate("bkt", "a/b/new")
    for prefix in ["", "a/", "a/b/"]:
        assert await b.level2.get_listing(pages[prefix]) is None, prefix
    for prefix in ["a/c/", "z/"]:
        assert await b.level2.get_listing(pages[prefix]) is not None, prefix
    await a.invalidation.invalidate("bkt", None)  # the whole bucket: every page and all its metadata
    assert await b.level2.get_listing(pages["z/"]) is None
    assert await b.level2.get_listing(("other", "", ())) is not None


async def test_listing_pages_expire(make_shared):
    shared = make_shared("a")
    put = time.monotonic()
    await shared.level2.put_listing(("bkt", "", ()), b"page", ttl=0.3)
    assert (await shared.level2.get_listing(("bkt", "", ())))[0] == b"page"

    async def expired() -> bool:
        return await shared.level2.get_listing(("bkt", "", ())) is None
    await eventually(expired, "the page expires")
    assert time.monotonic() - put >= 0.3 - 0.01  # not before its TTL (on Redis's clock)


async def test_bucket_invalidation_reaches_metadata_on_every_node(make_shared):
    got_b: Received = []
    a, b = make_shared("a"), make_shared("b", listen=got_b)
    await asyncio.wait_for(b.invalidation.subscribed.wait(), 3)
    await b.level2.put_meta(("bkt", "k", ""), b"old", ttl=30)  # b knows the bucket's generation now
    assert await a.level2.get_meta(("bkt", "k", "")) is not None
    await a.invalidation.invalidate("bkt", None)
    await eventually(lambda: ("bkt", None) in got_b, "b hears the bucket's invalidation")
    assert await a.level2.get_meta(("bkt", "k", "")) is None
    assert await b.level2.get_meta(("bkt", "k", "")) is None  # b moved to the new generation
    assert await make_shared("c").level2.get_meta(("bkt", "k", "")) is None


async def test_invalidations_reach_other_nodes_not_the_sender(make_shared):
    got_a: Received = []
    got_b: Received = []
    a, b = make_shared("a", listen=got_a), make_shared("b", listen=got_b)
    await asyncio.wait_for(asyncio.gather(a.invalidation.subscribed.wait(), b.invalidation.subscribed.wait()), 3)
    await a.invalidation.invalidate("bkt", "dir/k")
    await b.invalidation.invalidate("bkt", None)
    await eventually(lambda: got_b == [("bkt", "dir/k")] and got_a == [("bkt", None)], "each hears the other")
    # The channel delivers in order: a heard b's message, published after its own, and b hears
    # a last one from a, published after b's: had either heard itself, it would have by now.
    await a.invalidation.invalidate("bkt", "last")
    await eventually(lambda: ("bkt", "last") in got_b, "b hears a's last")
    assert got_a == [("bkt", None)] and got_b == [("bkt", "dir/k"), ("bkt", "last")]  # nobody hears itself


async def test_redis_down_means_no_shared_state_not_errors(make_shared, clean_redis, caplog):
    got_b: Received = []
    resyncs: list[float] = []
    a, b = make_shared("a"), make_shared("b", listen=got_b, resyncs=resyncs)
    await asyncio.wait_for(b.invalidation.subscribed.wait(), 3)
    await a.level2.put_meta(("bkt", "k", ""), b"x", ttl=30)
    clean_redis.stop()

    started = time.monotonic()
    assert await a.level2.get_meta(("bkt", "k", "")) is None
    await a.level2.put_meta(("bkt", "k", ""), b"x", ttl=30)
    await a.level2.put_listing(("bkt", "", ()), b"page", ttl=30)
    assert await a.level2.get_listing(("bkt", "", ())) is None
    assert time.monotonic() - started < 1.0  # one failed call at most, then the circuit is open
    assert sum(a.redis.errors.values()) >= 1 and a.redis.skipped >= 1
    # An invalidation is tried again until the deadline after the outage was noticed (by then
    # no node trusts its caches), then kept for later.
    confirmation = await a.invalidation.invalidate("bkt", "written-during-the-outage")
    assert confirmation.expected is None and time.monotonic() - started < 1.25 + 0.5
    await eventually(lambda: not b.invalidation.subscribed.is_set(), "b loses the channel")
    await eventually(lambda: b.redis.errors["listen"] >= 3, "b tries the channel again, and fails")  # still one outage
    assert a.redis.errors["get_meta"] == 1  # one timeout, then the circuit stayed open
    assert sum(r.getMessage().startswith("Redis unavailable") for r in caplog.records) == 2  # once per node

    clean_redis.start()
    await asyncio.wait_for(b.invalidation.subscribed.wait(), 5)  # b resubscribed by itself
    assert len(resyncs) == 2  # at the start, and after the outage

    async def stored() -> bool:  # once past retry_interval, a tries Redis again
        await a.level2.put_meta(("bkt", "k", ""), b"back", ttl=30)
        found = await a.level2.get_meta(("bkt", "k", ""))
        return found is not None and found[0] == b"back"
    await eventually(stored, "a stores in Redis again")
    # The invalidation a could not send went out as soon as Redis answered (b, subscribed
    # again after it, dropped what it had cached instead).
    await eventually(lambda: not a.invalidation._pending, "a sends what it kept")
    got_a: Received = []
    listener = asyncio.create_task(a.invalidation.listen(lambda bucket, key: got_a.append((bucket, key))))
    try:
        await eventually(lambda: a.invalidation.subscribed.is_set(), "a subscribes")
    finally:
        listener.cancel()
        await asyncio.gather(listener, return_exceptions=True)
    await a.invalidation.invalidate("bkt", "after")
    await eventually(lambda: ("bkt", "after") in got_b, "b hears a's invalidation")


async def test_an_answer_fetched_before_an_invalidation_is_not_shared_after_it(make_shared):
    """A node that asked Redis, then the origin, stores what it learnt only if no invalidation
    of the key (of the bucket, for listings) came in between: else it may predate the write."""
    a, b = make_shared("a"), make_shared("b")
    key, page = ("bkt", "k", ""), ("bkt", "", (("list-type", "2"),))
    assert await a.level2.get_meta(key) is None and await a.level2.get_listing(page) is None
    await b.invalidation.invalidate("bkt", "k")  # a write lands while a asks the origin
    await a.level2.put_meta(key, b"from before the write", ttl=30)
    await a.level2.put_listing(page, b"listing from before the write", ttl=30)
    assert await b.level2.get_meta(key) is None and await b.level2.get_listing(page) is None
    assert a.redis.errors["put_meta_raced"] == 1 and a.redis.errors["put_listing_raced"] == 1
    # With no invalidation in between, what was fetched is shared.
    assert await a.level2.get_meta(key) is None and await a.level2.get_listing(page) is None
    await a.level2.put_meta(key, b"fresh", ttl=30)
    await a.level2.put_listing(page, b"fresh listing", ttl=30)
    assert (await b.level2.get_meta(key))[0] == b"fresh" and (await b.level2.get_listing(page))[0] == b"fresh listing"
    # A revalidation (the entry was there) is dropped the same way; and a bucket-wide
    # invalidation counts for the bucket's listings.
    assert (await a.level2.get_meta(key))[0] == b"fresh" and (await a.level2.get_listing(page))[0] == b"fresh listing"
    await b.invalidation.invalidate("bkt", "k")
    await b.invalidation.invalidate("bkt", None)
    await a.level2.put_meta(key, b"revalidated before the write", ttl=30)
    await a.level2.put_listing(page, b"listing revalidated before", ttl=30)
    assert await b.level2.get_meta(key) is None and await b.level2.get_listing(page) is None


async def test_a_write_waits_for_every_listening_node_to_confirm(make_shared):
    got_b: Received = []
    got_c: Received = []
    a = make_shared("a", listen=[], deadline=0.5)
    b, c = make_shared("b", listen=got_b, deadline=0.5), make_shared("c", listen=got_c, deadline=0.5)
    await eventually(lambda: a.invalidation.listening() and b.invalidation.listening() and c.invalidation.listening(),
                     "a, b and c listen")
    confirmation = await a.invalidation.invalidate("bkt", "k")
    assert confirmation.expected == 3  # a itself, b and c subscribed
    assert await confirmation.wait() is True
    assert ("bkt", "k") in got_b and ("bkt", "k") in got_c  # applied before they confirmed
    assert a.invalidation.confirmations["confirmed"] == 1

    # c is held back: a waits the deadline, by the end of which c no longer trusts its caches.
    c.invalidation.hold_listener_until = time.monotonic() + 1.5
    confirmation = await a.invalidation.invalidate("bkt", "k2")
    started = time.monotonic()
    assert await confirmation.wait() is False
    assert 0.3 < time.monotonic() - started < 0.6
    assert confirmation.confirmed == 2 and a.invalidation.confirmations["unconfirmed"] == 1
    assert not c.invalidation.listening() and b.invalidation.listening()
    assert ("bkt", "k2") not in got_c
    await eventually(lambda: c.invalidation.listening(), "c, released, listens again")  # it applied what it missed
    assert ("bkt", "k2") in got_c


async def test_a_node_knows_within_the_deadline_that_redis_stopped_answering(make_shared, clean_redis):
    b = make_shared("b", listen=[], deadline=0.5, socket_timeout=0.3)
    await eventually(lambda: b.invalidation.listening(), "b listens")
    clean_redis.proc.send_signal(signal.SIGSTOP)
    try:
        stopped = time.monotonic()
        await eventually(lambda: not b.invalidation.listening(), "b stops listening", within=2)
        assert time.monotonic() - stopped < 0.5 + 0.2  # its last PONG answered a PING sent before the stop
        # A write during the hang, by a node that was listening too: unsent, it waits the
        # deadline from when this node found Redis unreachable.
        a = make_shared("a", deadline=0.5, socket_timeout=0.3)
        confirmation = await a.invalidation.invalidate("bkt", "k")
        assert confirmation.expected is None and a.invalidation.confirmations["unsent"] == 1
        assert await confirmation.wait() is False
    finally:
        clean_redis.proc.send_signal(signal.SIGCONT)
    await eventually(lambda: b.invalidation.listening(), "b listens again")
