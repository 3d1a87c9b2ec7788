"""Hot-object replication on three gateways and a real Redis: a hot object ends up on every
node and a cold one on one; a cooled object loses its extra copies; one controller at a time."""

from __future__ import annotations

import os
import time

import httpx
import redis

from gateway.cluster.placement import owners, placement_name
from tests.integration import test_fleet
from tests.integration.test_fleet import (
    BLOCK,
    TOKEN,
    _blocks,
    engine,
    node_id,
    origin_requests,
)
from tests.support import RunningGateway, client
from tests.waiting import wait_for

make_fleet = test_fleet.make_fleet  # the fleet fixture, shared

ADMIN_AUTH = {"authorization": f"Bearer {TOKEN}"}
FAST = {"heat_interval": 0.2, "heat_half_life": 60.0, "hot_threshold": 6.0}


def replication(gateway: RunningGateway):  # type: ignore[no-untyped-def]
    return gateway.server.config.app.replication


def held(gateway: RunningGateway, key: str) -> set[int]:
    return {b.index for b in _blocks(gateway) if b.key == key}


def read(gateway: RunningGateway, key: str) -> tuple[bytes, str]:
    got = client(gateway.endpoint).get_object(Bucket="bkt", Key=key)
    return got["Body"].read(), got["ResponseMetadata"]["HTTPHeaders"]["x-cache"]


def test_a_hot_object_ends_up_on_every_node_and_a_cold_one_on_one(make_fleet, direct):
    fleet = make_fleet(**FAST)
    hot, cold = os.urandom(4 * BLOCK), os.urandom(4 * BLOCK)
    direct.put_object(Bucket="bkt", Key="hot", Body=hot)
    direct.put_object(Bucket="bkt", Key="cold", Body=cold)
    assert read(fleet.nodes[0], "cold")[0] == cold
    before = origin_requests(*fleet.nodes)
    for i in range(9):  # 9 reads against a threshold of 6: every one of the 3 nodes
        assert read(fleet.nodes[i % 3], "hot")[0] == hot
    # Every node holds every block, and knows the object is hot (the leader's word reaches each
    # node through Redis, which under load can come after the blocks its peers sent it).
    wait_for(lambda: all(held(n, "hot") == {0, 1, 2, 3} and engine(n).fleet.replicas("bkt", "hot") == 3
                         for n in fleet.nodes), "every node holds the hot object, and knows it is hot", within=30)
    # Filled from the owners, not from the origin: the hot blocks were fetched once each (a node
    # owning consecutive blocks of a read fetches them in one GET).
    assert 1 <= origin_requests(*fleet.nodes)["GET"] - before["GET"] <= 4
    for node in fleet.nodes:
        assert read(node, "hot") == (hot, "hit-mem")
        assert engine(node).fleet.replicas("bkt", "hot") == 3
    ids = {node_id(n): n for n in fleet.nodes}
    for index in range(4):
        owner = ids[owners(placement_name("bkt", "cold", index), ids)[0]]
        assert {n for n in fleet.nodes if index in held(n, "cold")} == {owner}, index
    # What the admin API says about it: one controller, one hot object, the fills.
    def stats(node: RunningGateway) -> dict:  # type: ignore[type-arg]
        return httpx.get(f"{node.endpoint}/_gateway/stats", headers=ADMIN_AUTH).json()["replication"]

    wait_for(lambda: sum(stats(n)["leader"] for n in fleet.nodes) == 1, "one leader", within=10)
    for node in fleet.nodes:
        found = stats(node)
        assert found["replicas"] == [{"bucket": "bkt", "key": "hot", "replicas": 3}]
        assert found["filled_blocks"] == 4 - len(
            [i for i in range(4) if ids[owners(placement_name("bkt", "hot", i), ids)[0]] is node])
        metrics = httpx.get(f"{node.endpoint}/_gateway/metrics", headers=ADMIN_AUTH).text
        assert "gateway_hot_objects 1.0" in metrics and "gateway_replication_leader " in metrics


def test_a_cooled_object_loses_its_extra_copies(make_fleet, direct):
    fleet = make_fleet(**{**FAST, "heat_half_life": 0.5})
    data = os.urandom(4 * BLOCK)
    direct.put_object(Bucket="bkt", Key="k", Body=data)
    for i in range(30):
        assert read(fleet.nodes[i % 3], "k")[0] == data
    wait_for(lambda: all(held(n, "k") == {0, 1, 2, 3} for n in fleet.nodes), "every node holds every block", within=30)
    # No more reads: within a few half-lives the heat is gone, and so are the extra copies.
    ids = {node_id(n): n for n in fleet.nodes}
    owner_of = {i: ids[owners(placement_name("bkt", "k", i), ids)[0]] for i in range(4)}
    wait_for(lambda: all(held(n, "k") == {i for i, o in owner_of.items() if o is n} for n in fleet.nodes),
             "each node holds only the blocks it owns", within=30)
    for node in fleet.nodes:  # and every node still reads the right bytes
        assert read(node, "k")[0] == data
        assert engine(node).stats["replica_drop_blocks"] == 4 - len(held(node, "k"))


def test_one_controller_at_a_time_and_another_takes_over_when_its_lease_ends(make_fleet, clean_redis):
    fleet = make_fleet(**FAST)
    wait_for(lambda: sum(replication(n).stats.leader for n in fleet.nodes) == 1, "one leader", within=10)
    leader = next(n for n in fleet.nodes if replication(n).stats.leader)
    # The leader stops cleanly: it hands the lease over, and one of the others leads.
    fleet.nodes.remove(leader)
    leader.__exit__()
    wait_for(lambda: sum(replication(n).stats.leader for n in fleet.nodes) == 1, "one leader", within=10)
    # A controller that vanished without handing over (a crash) holds the lease until it
    # expires; then a live node takes it.
    r = redis.Redis.from_url(clean_redis.url)
    lease = next(k for k in r.keys("*fleet:{ctl}:leader*"))
    r.set(lease, "crashed-node", px=3000)
    wait_for(lambda: not any(replication(n).stats.leader for n in fleet.nodes), "no leader", within=10)
    started = time.monotonic()
    wait_for(lambda: sum(replication(n).stats.leader for n in fleet.nodes) == 1, "one leader", within=10)
    assert time.monotonic() - started < 8  # the lease had 3 s left
