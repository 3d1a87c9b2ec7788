"""The shared state on a real 3-master Redis Cluster and on a Sentinel-watched master.

The single-server tests of the shared state, Membership and RuntimePins run here again, as
they are: imported into this module, they take its `clean_redis`, which is the cluster
or the Sentinel setup. The tests that stop the single server stay there; what a failed
master does is tested below.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from gateway.cluster.connection import SentinelMaster, redis_client
from gateway.cluster.membership import Member, Membership
from gateway.cluster.shared import Shared
from gateway.config import RedisSettings
from tests.cluster.test_membership import (  # noqa: F401 (fixtures and tests, run here on each mode)
    make_member,
    test_a_silent_member_expires_after_the_ttl,
    test_members_see_each_other_and_a_clean_departure_at_the_next_beat,
)
from tests.cluster.test_pins import (  # noqa: F401
    make_pins,
    test_a_pin_reaches_the_other_nodes_and_a_restarted_one,
)
from tests.cluster.test_shared import (  # noqa: F401
    Received,
    make_shared,
    test_bucket_invalidation_reaches_metadata_on_every_node,
    test_invalidating_a_key_drops_every_version_of_it,
    test_invalidations_reach_other_nodes_not_the_sender,
    test_listing_pages_are_dropped_when_their_prefix_can_hold_the_key,
    test_listing_pages_expire,
    test_metadata_lives_as_long_as_its_ttl,
)
from tests.waiting import eventually


@pytest.fixture(params=["cluster", "sentinel"])
def clean_redis(request):  # type: ignore[no-untyped-def]
    """Instead of the single server: the Redis Cluster, or the Sentinel setup, running and empty."""
    return request.getfixturevalue(f"clean_redis_{request.param}")


def settings(url: str) -> RedisSettings:
    return RedisSettings(url=url, socket_timeout=0.3, retry_interval=0.2)


async def test_the_url_picks_the_client(clean_redis_cluster, clean_redis_sentinel, redis_server):
    for url, kind in ((clean_redis_cluster.url, RedisCluster), (clean_redis_sentinel.url, SentinelMaster),
                      (redis_server.url, Redis)):
        client = redis_client(settings(url))
        try:
            assert type(client) is kind and await client.ping()
        finally:
            await client.aclose()


async def test_keys_spread_over_the_masters(clean_redis_cluster):
    shared = Shared.connect(settings(clean_redis_cluster.url))
    try:
        for i in range(30):
            await shared.level2.put_meta((f"bucket-{i}", "k", ""), b"x", ttl=30)
            await shared.level2.put_listing((f"bucket-{i}", "", ()), b"page", ttl=30)
        assert not shared.redis.errors
        counts = [master.dbsize() for master in clean_redis_cluster.masters()]
        assert sum(counts) == 30 * 3  # an object hash, a page and its bucket's index
        assert all(count > 0 for count in counts), counts
        for i in range(30):
            assert (await shared.level2.get_meta((f"bucket-{i}", "k", "")))[0] == b"x"
            assert (await shared.level2.get_listing((f"bucket-{i}", "", ())))[0] == b"page"
    finally:
        await shared.aclose()


async def test_a_cluster_master_down_costs_shared_state_not_errors(clean_redis_cluster):
    """The master a node hears invalidations on goes down: calls fail fast (the circuit opens),
    the node listens on another one, and all is back by itself once the master is."""
    got_b: Received = []
    a = Shared.connect(settings(clean_redis_cluster.url), node_id="a")
    b = Shared.connect(settings(clean_redis_cluster.url), node_id="b")
    listener = asyncio.create_task(b.invalidation.listen(lambda bucket, key: got_b.append((bucket, key))))
    try:
        try:
            await asyncio.wait_for(b.invalidation.subscribed.wait(), 3)
            buckets = [f"bucket-{i}" for i in range(12)]
            for bucket in buckets:
                await a.level2.put_meta((bucket, "k", ""), b"x", ttl=30)
            heard_on = next(i for i, master in enumerate(clean_redis_cluster.masters())
                            if master.pubsub_numsub("gw:invalidate")[0][1])
            clean_redis_cluster.stop(heard_on)
            started = time.monotonic()
            found = [await a.level2.get_meta((bucket, "k", "")) for bucket in buckets]
            assert time.monotonic() - started < 1.5
            # A miss, not an error: a call to the master that is down failed and opened the circuit
            # (counted under its op: a get_meta, or another call of a's that came first, after which
            # the get_metas were not tried at all).
            assert None in found and sum(a.redis.errors.values()) >= 1
            await eventually(lambda: not b.invalidation.subscribed.is_set(), "b loses the channel")
            await eventually(lambda: b.invalidation.subscribed.is_set(), "b subscribes on a live node")
            assert b.redis.errors["listen"] >= 1
            await a.invalidation.invalidate("bucket-0", "k")  # fails (the cluster is down or a's circuit open): kept
            assert a.invalidation._pending
        finally:
            await asyncio.to_thread(clean_redis_cluster.start)

        async def heard() -> bool:
            await a.invalidation.invalidate("bucket-0", "k")
            return ("bucket-0", "k") in got_b
        await eventually(heard, "a writes the invalidation again once Redis is back", interval=0.1)
        await a.level2.put_meta(("bucket-1", "k", ""), b"back", ttl=30)
        assert (await a.level2.get_meta(("bucket-1", "k", "")))[0] == b"back"
        # Heard on another master, invalidations are not ordered with b's PINGs there: b
        # trusts its caches again only once back on the channel's master, by itself.
        await eventually(lambda: b.invalidation.listening(), "b listens on the channel's master", within=10)
        home = clean_redis_cluster.client().get_node_from_key("gw:invalidate").port
        assert any(master.pubsub_numsub("gw:invalidate")[0][1] for master in clean_redis_cluster.masters()
                   if master.connection_pool.connection_kwargs["port"] == home)
    finally:  # (whatever failed: no connection of theirs is left for another test's collection to find)
        listener.cancel()
        await asyncio.gather(listener, return_exceptions=True)
        await a.aclose()
        await b.aclose()


async def test_a_sentinel_failover_is_followed(clean_redis_sentinel):
    """The master dies: calls fail while the Sentinel promotes the replica, then go to the new
    master by themselves; the invalidation channel follows too."""
    got_b: Received = []
    a = Shared.connect(settings(clean_redis_sentinel.url), node_id="a")
    b = Shared.connect(settings(clean_redis_sentinel.url), node_id="b")
    members = Membership(a.redis, Member("a", "http://a:8080"), interval=0.1, ttl=5)
    listener = asyncio.create_task(b.invalidation.listen(lambda bucket, key: got_b.append((bucket, key))))
    try:
        await asyncio.wait_for(b.invalidation.subscribed.wait(), 3)
        await a.level2.put_meta(("bkt", "k", ""), b"before", ttl=30)
        assert await members.heartbeat()
        old_master = clean_redis_sentinel.master.port
        await asyncio.to_thread(clean_redis_sentinel.fail_over)
        assert clean_redis_sentinel.master.port != old_master
        await eventually(members.heartbeat, "writes work again, on the new master", interval=0.1)
        await a.level2.put_meta(("bkt", "k", ""), b"after", ttl=30)
        assert clean_redis_sentinel.master.client().exists("gw:fleet:{members}")
        await eventually(lambda: b.invalidation.subscribed.is_set(), "b, which lost the channel too, is back")
        assert (await b.level2.get_meta(("bkt", "k", "")))[0] == b"after"
        await a.invalidation.invalidate("bkt", "k")
        await eventually(lambda: ("bkt", "k") in got_b, "b hears the invalidation")
    finally:
        listener.cancel()
        await asyncio.gather(listener, return_exceptions=True)
        await a.aclose()
        await b.aclose()
