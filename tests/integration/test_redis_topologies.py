"""Gateways on a real 3-master Redis Cluster and on a Sentinel-watched master: the fleet works
as on one Redis, and a master going down costs speed, never a wrong or failed answer.

The fleet tests of test_fleet.py that exercise Redis run here again, unchanged: imported
into this module, its `make_fleet` takes this module's `clean_redis`, the Redis Cluster.
"""

from __future__ import annotations

import os

import pytest

from gateway.config import RedisSettings
from tests.integration import test_fleet as on_one_redis
from tests.integration import test_fleet_load, test_replication
from tests.integration.test_fleet import (
    BLOCK,
    engine,
    node_id,
    read_all,
    view,
)
from tests.support import client
from tests.waiting import wait_for

make_fleet, fleet = on_one_redis.make_fleet, on_one_redis.fleet
test_a_cold_object_read_through_every_node_costs_one_origin_get_per_block = (
    on_one_redis.test_a_cold_object_read_through_every_node_costs_one_origin_get_per_block)
test_a_write_through_the_fleet_is_read_back_at_once_by_every_node = (
    on_one_redis.test_a_write_through_the_fleet_is_read_back_at_once_by_every_node)
# Hot-object replication (its lease, heat and counts share the {ctl} tag) and a fleet load.
test_a_hot_object_ends_up_on_every_node_and_a_cold_one_on_one = (
    test_replication.test_a_hot_object_ends_up_on_every_node_and_a_cold_one_on_one)
test_load_with_replicas_keeps_each_block_on_that_many_nodes = (
    test_fleet_load.test_load_with_replicas_keeps_each_block_on_that_many_nodes)


@pytest.fixture
def clean_redis(clean_redis_cluster):  # type: ignore[no-untyped-def]
    """Instead of the single server: the 3-master Redis Cluster, running and empty."""
    return clean_redis_cluster


def test_the_fleet_shares_state_on_every_master(fleet, direct, clean_redis_cluster):
    for i in range(12):
        direct.put_object(Bucket="bkt", Key=f"k{i}", Body=b"x" * (i + 1))
    s3 = client(fleet.nodes[0].endpoint)
    for i in range(12):
        assert s3.get_object(Bucket="bkt", Key=f"k{i}")["Body"].read() == b"x" * (i + 1)
    masters = clean_redis_cluster.masters()
    holding = [bool(master.keys("gw:m:bkt:*")) for master in masters]
    assert sum(holding) >= 2, holding  # object metadata spreads over the masters
    assert sum(len(master.keys("gw:fleet:{members}")) for master in masters) == 1


def test_a_cluster_master_down_keeps_the_fleet_answering(fleet, direct, clean_redis_cluster):
    a, b, c = fleet.nodes
    data = os.urandom(5 * BLOCK + 7)
    direct.put_object(Bucket="bkt", Key="k", Body=data)
    for body, _ in read_all([a, b, c], "k"):
        assert body == data
    clean_redis_cluster.stop(1)  # and with it the cluster, once the others notice (1 s)
    try:
        during = os.urandom(3 * BLOCK + 1)
        client(b.endpoint).put_object(Bucket="bkt", Key="during", Body=during)
        for key, want in (("k", data), ("during", during)):
            for body, _ in read_all([a, b, c], key):
                assert body == want
        listing = client(c.endpoint).list_objects_v2(Bucket="bkt")
        assert sorted(o["Key"] for o in listing["Contents"]) == ["during", "k"]
        assert all(len(view(n)) == 3 for n in (a, b, c))  # the last view is kept
        assert any(sum(engine(n).shared.redis.errors.values()) for n in (a, b, c))
    finally:
        clean_redis_cluster.start()
    # Back by itself: every node is registered again and shares metadata again.
    ids = sorted(node_id(n) for n in (a, b, c))
    cluster = clean_redis_cluster.client()
    wait_for(lambda: sorted(m.decode() for m in cluster.zrange("gw:fleet:{members}", 0, -1)) == ids,
             "every node registered again", within=10)
    after = os.urandom(BLOCK)
    client(a.endpoint).put_object(Bucket="bkt", Key="during", Body=after)
    for body, _ in read_all([a, b, c], "during"):
        assert body == after


def test_a_gateway_follows_a_sentinel_failover(start_gateway, clean_origin, direct, clean_redis_sentinel):
    gateway = start_gateway(redis=RedisSettings(url=clean_redis_sentinel.url, socket_timeout=0.3,
                                                retry_interval=0.2))
    shared = engine(gateway).shared
    s3 = client(gateway.endpoint)
    s3.create_bucket(Bucket="bkt")
    for key in ("before", "during", "after"):
        direct.put_object(Bucket="bkt", Key=key, Body=key.encode())
    assert s3.get_object(Bucket="bkt", Key="before")["Body"].read() == b"before"
    wait_for(lambda: clean_redis_sentinel.master.client().keys("gw:m:bkt:*"), "metadata shared on the master")

    old = clean_redis_sentinel.master
    old.stop()
    assert s3.get_object(Bucket="bkt", Key="during")["Body"].read() == b"during"  # Redis down: served
    clean_redis_sentinel.promoted()
    new = clean_redis_sentinel.master
    assert new is not old

    assert s3.get_object(Bucket="bkt", Key="before")["Body"].read() == b"before"

    def written() -> bool:
        engine(gateway).purge()
        assert s3.get_object(Bucket="bkt", Key="after")["Body"].read() == b"after"
        return bool(new.client().keys("gw:m:bkt:*after*"))
    wait_for(written, "the new master takes the node's writes", interval=0.1)
    assert shared.redis.errors and shared.redis.down_since is None
