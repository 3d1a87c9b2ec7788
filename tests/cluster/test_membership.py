"""Membership against a real redis-server: joins, clean departures, crashes, Redis outages."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator, Callable

import pytest

from gateway.cluster.membership import Member, Membership, identity
from gateway.cluster.redis_handle import RedisHandle
from gateway.config import ClusterSettings, RedisSettings, ServerSettings, Settings
from tests.waiting import eventually

TTL = 0.6


@pytest.fixture
async def make_member(clean_redis) -> AsyncIterator[Callable[[str], Membership]]:
    made: list[RedisHandle] = []

    def make(name: str) -> Membership:
        # A stopped Redis refuses at once; the timeout only bounds a slow answer, which a loaded
        # machine gave in 0.3 s once (CI: b's or a's first beat timed out, and a saw only itself).
        redis = RedisHandle(RedisSettings(url=clean_redis.url, socket_timeout=2.0, retry_interval=0.1))
        made.append(redis)
        return Membership(redis, Member(name, f"http://{name}:8080"), interval=0.1, ttl=TTL)

    yield make
    for redis in made:
        await redis.aclose()
    if clean_redis.proc is None:
        clean_redis.start()


async def test_members_see_each_other_and_a_clean_departure_at_the_next_beat(make_member):
    a, b, c = make_member("a"), make_member("b"), make_member("c")
    assert a.ids == ("a",)  # alone until the first heartbeat
    for m in (a, b, c):
        assert await m.heartbeat()
    await a.heartbeat()
    assert a.ids == ("a", "b", "c") and a.member("b") == Member("b", "http://b:8080")
    await c.leave()
    await a.heartbeat()
    assert a.ids == ("a", "b")


async def test_a_silent_member_expires_after_the_ttl(make_member):
    """On Redis's clock, which no test moves: a heartbeats until it no longer sees b."""
    a, b = make_member("a"), make_member("b")
    beat = time.monotonic()
    await b.heartbeat()  # its last: b crashed
    await a.heartbeat()
    assert a.ids == ("a", "b")

    async def forgotten() -> bool:
        return await a.heartbeat() and a.ids == ("a",)
    await eventually(forgotten, "a forgets b")
    assert time.monotonic() - beat >= TTL - 0.01  # not before the TTL (Redis's clock, in milliseconds)


async def test_redis_down_keeps_the_view_and_registers_again_when_back(make_member, clean_redis):
    a, b = make_member("a"), make_member("b")
    await b.heartbeat()
    await a.heartbeat()
    clean_redis.stop()
    assert not await a.heartbeat()
    assert a.ids == ("a", "b")  # the last view, while Redis is down
    clean_redis.start()  # empty
    for m in (a, b):  # once past the retry interval, each tries Redis again
        await eventually(m.heartbeat, f"{m.me.id} registers again")
    await a.heartbeat()
    assert a.ids == ("a", "b") and a.beats >= 2


def test_identity_defaults_to_the_server_address():
    settings = Settings(server=ServerSettings(host="10.1.2.3", port=9000))
    assert identity(settings) == Member("10.1.2.3:9000", "http://10.1.2.3:9000")
    named = dataclasses.replace(settings, cluster=ClusterSettings(node_id="n1", advertise_url="http://gw-1:9000/"))
    assert identity(named) == Member("n1", "http://gw-1:9000")
    wildcard = Settings(server=ServerSettings(host="0.0.0.0", port=9000))
    assert identity(wildcard).url.endswith(":9000") and "0.0.0.0" not in identity(wildcard).url
