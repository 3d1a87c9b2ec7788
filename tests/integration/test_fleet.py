"""Three (then four) gateways on one Redis act as one cache: every block is fetched from the
origin once, by its owner, and read by the others from it; a node that goes away costs
speed, never a failed read; the peer API opens only to the cluster secret."""

from __future__ import annotations

import dataclasses
import os
import socket
import threading
import time
from collections import Counter

import httpx
import pytest
import redis
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from gateway.cluster.peers import AUTH_HEADER, BLOCK_PATH, encode_query, sign
from gateway.cluster.placement import owners, placement_name
from gateway.config import AdminSettings, CacheSettings, ClusterSettings, RedisSettings
from gateway.engine import Engine
from gateway.store.blocks import BlockId
from tests.support import ADMIN, RunningGateway, base_settings, client
from tests.waiting import wait_for

KiB = 1024
BLOCK = 64 * KiB
SECRET = "fleet-secret-for-the-tests"
TOKEN = "fleet-admin-token"


def engine(gateway: RunningGateway) -> Engine:
    return gateway.server.config.app.s3.engine


def node_id(gateway: RunningGateway) -> str:
    return gateway.server.config.app.fleet.me.id


def view(gateway: RunningGateway) -> set[str]:
    return set(gateway.server.config.app.fleet.membership.ids)


def origin_requests(*gateways: RunningGateway) -> Counter[str]:
    total: Counter[str] = Counter()
    for gateway in gateways:
        total.update(engine(gateway).origin.requests)
    return total



def owner_of(index: int, members: list[RunningGateway], key: str = "k") -> RunningGateway:
    ids = {node_id(g): g for g in members}
    return ids[owners(placement_name("bkt", key, index), ids)[0]]


class Fleet:
    """The running nodes of one test, and how to start another."""

    def __init__(self, start_gateway, origin: str, redis_url: str) -> None:  # type: ignore[no-untyped-def]
        settings = base_settings(origin)
        self.sections = {
            "redis": RedisSettings(url=redis_url, socket_timeout=0.3, retry_interval=0.2),
            "cluster": ClusterSettings(secret=SECRET, heartbeat_interval=0.2, member_ttl=1.0,
                                       peer_connect_timeout=0.5, peer_read_timeout=1.0),
            "cache": CacheSettings(block_size=BLOCK, memory_quota=32 * 1024 * KiB, readahead_blocks=2,
                                   read_buffer=4 * 1024 * KiB),
            "metadata": dataclasses.replace(settings.metadata, ttl=60.0),
            "admin": AdminSettings(token=TOKEN),
        }
        self._start = start_gateway
        self.nodes: list[RunningGateway] = []

    def start(self) -> RunningGateway:
        node = self._start(**self.sections)
        self.nodes.append(node)
        return node

    def settled(self, nodes: list[RunningGateway]) -> None:
        """Wait until every node in `nodes` sees exactly them."""
        ids = {node_id(n) for n in nodes}
        try:
            # Each sees the others, and trusts its caches again (past the distrust that follows
            # a new subscription to the invalidation channel: Invalidations.listening).
            wait_for(lambda: all(view(n) == ids and engine(n).shared.invalidation.listening() for n in nodes),
                     "every node sees the fleet and listens")
        except AssertionError:
            raise AssertionError(f"want {sorted(ids)}, views {[sorted(view(n)) for n in nodes]}") from None


@pytest.fixture
def make_fleet(start_gateway, clean_origin, clean_redis):
    """make_fleet(**cluster settings): three nodes that see each other, and a bucket."""
    def make(**cluster: object) -> Fleet:
        nodes = Fleet(start_gateway, clean_origin, clean_redis.url)
        nodes.sections["cluster"] = dataclasses.replace(nodes.sections["cluster"], **cluster)  # type: ignore[arg-type]
        for _ in range(3):
            nodes.start()
        nodes.settled(nodes.nodes)
        client(nodes.nodes[0].endpoint).create_bucket(Bucket="bkt")
        made.append(nodes)
        return nodes

    made: list[Fleet] = []
    yield make
    for nodes in made:  # stopped here, so that a node still running shows up as this test's failure
        for node in nodes.nodes:
            started = time.monotonic()
            node.__exit__()
            assert not node.thread.is_alive(), f"a node did not stop within {time.monotonic() - started:.1f} s"


@pytest.fixture
def fleet(make_fleet):
    return make_fleet()


def read_all(gateways: list[RunningGateway], key: str, *, ranged: bool = True) -> list[tuple[bytes, str]]:
    """The whole object through each gateway at once: (bytes, x-cache) per gateway."""
    results: list[tuple[bytes, str] | BaseException] = [b""] * len(gateways)  # type: ignore[list-item]
    barrier = threading.Barrier(len(gateways))

    def read(i: int) -> None:
        s3 = client(gateways[i].endpoint)
        barrier.wait()
        try:
            got = s3.get_object(Bucket="bkt", Key=key, **({"Range": "bytes=0-"} if ranged else {}))
            results[i] = (got["Body"].read(), got["ResponseMetadata"]["HTTPHeaders"]["x-cache"])
        except BaseException as exc:  # reported below, in the test's thread
            results[i] = exc

    threads = [threading.Thread(target=read, args=(i,)) for i in range(len(gateways))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results  # type: ignore[return-value]


def test_a_cold_object_read_through_every_node_costs_one_origin_get_per_block(fleet, direct):
    data = os.urandom(7 * BLOCK + 999)
    direct.put_object(Bucket="bkt", Key="k", Body=data)
    before = origin_requests(*fleet.nodes)
    for body, _ in read_all(fleet.nodes, "k"):
        assert body == data
    # No HEAD (the metadata came with the first bytes), and fewer GETs than blocks: a node reads
    # what no owner holds from the origin in one GET, keeping the blocks it owns and offering the
    # others to their owners.
    sent = origin_requests(*fleet.nodes) - before
    assert set(sent) == {"GET"} and sent["GET"] <= 8
    # Each block ends with its owner (the offers are taken after the reads), and only the owners keep blocks.
    for index in range(8):
        owner = owner_of(index, fleet.nodes)
        wait_for(lambda: [n for n in fleet.nodes if any(b.index == index for b in _blocks(n))] == [owner],
                 "the block held by its owner alone")
    # Whole-object reads (with checksums: a HEAD first) through every node again: no GET.
    before = origin_requests(*fleet.nodes)
    for body, source in read_all(fleet.nodes, "k", ranged=False):
        assert body == data and source in ("hit-peer", "hit-mem")
    assert origin_requests(*fleet.nodes)["GET"] == before["GET"]


def _blocks(gateway: RunningGateway) -> list[BlockId]:
    return list(engine(gateway).store.memory)


def test_x_cache_says_where_the_blocks_came_from(fleet, direct):
    data = os.urandom(2 * BLOCK)
    direct.put_object(Bucket="bkt", Key="k", Body=data)
    owner = owner_of(0, fleet.nodes)
    other = next(n for n in fleet.nodes if n is not owner)
    s3_owner, s3_other = client(owner.endpoint), client(other.endpoint)
    first = s3_other.get_object(Bucket="bkt", Key="k", Range="bytes=0-99")
    assert first["Body"].read() == data[:100]
    assert first["ResponseMetadata"]["HTTPHeaders"]["x-cache"] == "miss"  # opened by the owner for us
    again = s3_other.get_object(Bucket="bkt", Key="k", Range="bytes=100-199")
    assert again["Body"].read() == data[100:200]
    assert again["ResponseMetadata"]["HTTPHeaders"]["x-cache"] == "hit-peer"
    at_owner = s3_owner.get_object(Bucket="bkt", Key="k", Range="bytes=0-99")
    assert at_owner["Body"].read() == data[:100]
    assert at_owner["ResponseMetadata"]["HTTPHeaders"]["x-cache"] == "hit-mem"
    # The admin stats show the live members.
    stats = httpx.get(other.endpoint + "/_gateway/stats", headers={"authorization": f"Bearer {TOKEN}"}).json()
    assert sorted(stats["members"]) == sorted(node_id(n) for n in fleet.nodes)
    assert stats["node"] == node_id(other)
    assert stats["served_bytes"]["peer"] >= 100


def test_a_node_that_stops_costs_speed_never_a_read(fleet, direct, clean_redis):
    a, b, c = fleet.nodes
    data = os.urandom(9 * BLOCK + 5)
    direct.put_object(Bucket="bkt", Key="k", Body=data)
    for body, _ in read_all([a, b, c], "k"):
        assert body == data
    c_id, c_url = node_id(c), c.server.config.app.fleet.me.url
    c.__exit__()
    fleet.nodes.remove(c)
    # Before the others notice: keep C registered as if it had crashed, with a last
    # heartbeat far in the future, so that A and B go on asking it.
    r = redis.Redis(port=clean_redis.port)
    r.zadd("gw:fleet:{members}", {c_id: int(time.time() * 1000) + 60_000})
    r.hset("gw:fleet:{members}:urls", c_id, c_url)
    wait_for(lambda: c_id in view(a) and c_id in view(b), "A and B see C (again, had they seen it leave)")
    fresh = os.urandom(9 * BLOCK + 7)
    ids = [node_id(a), node_id(b), c_id]
    # A key of which C owns a block (with random node ids, "fresh" alone had none 1 time in 58).
    fresh_key = next(key for key in (f"fresh-{n}" for n in range(100))
                     if any(owners(placement_name("bkt", key, i), ids)[0] == c_id for i in range(10)))
    direct.put_object(Bucket="bkt", Key=fresh_key, Body=fresh)
    for key, want in (("k", data), (fresh_key, fresh)):
        for body, _ in read_all([a, b], key):
            assert body == want
    assert engine(a).stats["peer_failure"] + engine(b).stats["peer_failure"] > 0
    # Once it is gone from Redis (deregistered, or its heartbeats stopped) both notice.
    r.zrem("gw:fleet:{members}", c_id)
    fleet.settled([a, b])
    for key, want in (("k", data), (fresh_key, fresh)):
        for body, _ in read_all([a, b], key):
            assert body == want


def test_a_clean_stop_is_noticed_within_a_heartbeat(fleet, direct):
    a, b, c = fleet.nodes
    data = os.urandom(5 * BLOCK)
    direct.put_object(Bucket="bkt", Key="k", Body=data)
    read_all([a, b, c], "k")
    c.__exit__()  # deregisters on the way out
    fleet.nodes.remove(c)
    for body, _ in read_all([a, b], "k"):  # at once: noticed or not, reads work
        assert body == data
    fleet.settled([a, b])
    for body, _ in read_all([a, b], "k"):
        assert body == data


def test_a_peer_that_hangs_is_skipped_after_the_read_timeout(fleet, direct, clean_redis):
    a, b, _ = fleet.nodes
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(64)  # connections are accepted by the kernel and never answered
    try:
        r = redis.Redis(port=clean_redis.port)
        r.zadd("gw:fleet:{members}", {"hung": int(time.time() * 1000) + 60_000})
        r.hset("gw:fleet:{members}:urls", "hung", f"http://127.0.0.1:{hung.getsockname()[1]}")
        wait_for(lambda: "hung" in view(a) and "hung" in view(b), "A and B see the hung node")
        data = os.urandom(6 * BLOCK)
        direct.put_object(Bucket="bkt", Key="k", Body=data)
        started = time.monotonic()
        for body, _ in read_all([a, b], "k"):
            assert body == data
        assert time.monotonic() - started < 30
        r.zrem("gw:fleet:{members}", "hung")
    finally:
        hung.close()


def test_a_fourth_node_takes_over_only_its_share(fleet, direct):
    a, b, c = fleet.nodes
    data = os.urandom(40 * BLOCK)
    direct.put_object(Bucket="bkt", Key="k", Body=data)
    assert client(a.endpoint).get_object(Bucket="bkt", Key="k", Range="bytes=0-")["Body"].read() == data
    old_owner = {i: owner_of(i, [a, b, c]) for i in range(40)}
    d = fleet.start()
    fleet.settled([a, b, c, d])
    new_owner = {i: owner_of(i, [a, b, c, d]) for i in range(40)}
    moved = [i for i in range(40) if new_owner[i] is not old_owner[i]]
    assert moved and all(new_owner[i] is d for i in moved)  # only blocks D now owns
    before = origin_requests(a, b, c, d)
    fetched_before = sum(engine(n).fetch.stats["origin_block_fetch"] for n in (a, b, c, d))
    for node in (a, b, c, d):
        got = client(node.endpoint).get_object(Bucket="bkt", Key="k", Range="bytes=0-")
        assert got["Body"].read() == data
        # D takes the blocks of its share that the read brought (offered once they were sent).
        wait_for(lambda: engine(node).fetch.lending.waiting == 0, "the offers taken")
    # D's share came from the origin once, each block in the run of the first read that found D
    # without it (one GET for the read, which brings the blocks held between D's again without
    # keeping them), and D keeps it; nothing else was kept anew.
    sent = origin_requests(a, b, c, d) - before
    assert sum(engine(n).fetch.stats["origin_block_fetch"] for n in (a, b, c, d)) - fetched_before == len(moved)
    assert set(sent) == {"GET"} and sent["GET"] <= len(moved)
    assert {b.index for b in _blocks(d)} == set(moved)


def test_the_peer_api_opens_only_to_the_cluster_secret(fleet, direct, gateway):
    data = os.urandom(BLOCK + 10)
    etag = direct.put_object(Bucket="bkt", Key="k", Body=data)["ETag"]
    node = fleet.nodes[0]
    query = encode_query([("bucket", "bkt"), ("key", "k"), ("etag", etag), ("vid", ""),
                          ("size", str(len(data))), ("index", "1")])
    url = f"{node.endpoint}{BLOCK_PATH}?{query}"

    def get(headers: dict[str, str]) -> httpx.Response:
        return httpx.get(url, headers=headers, timeout=10)

    assert get({}).status_code == 401
    assert get({AUTH_HEADER: "v1 12 nonsense"}).status_code == 403
    assert get({AUTH_HEADER: sign(b"not-the-secret", "GET", BLOCK_PATH, query)}).status_code == 403
    stale = sign(SECRET.encode(), "GET", BLOCK_PATH, query, when=int(time.time()) - 3600)
    assert get({AUTH_HEADER: stale}).status_code == 403
    other_query = sign(SECRET.encode(), "GET", BLOCK_PATH, query.replace("index=1", "index=0"))
    assert get({AUTH_HEADER: other_query}).status_code == 403  # the signature covers the query
    # S3 credentials (SigV4, an admin user's) mean nothing here.
    request = AWSRequest(method="GET", url=url, headers={"host": node.endpoint.split("//")[1]})
    SigV4Auth(Credentials(*ADMIN), "s3", "us-east-1").add_auth(request)
    assert get(dict(request.headers.items())).status_code == 401
    # Signed with the secret: the block.
    good = get({AUTH_HEADER: sign(SECRET.encode(), "GET", BLOCK_PATH, query)})
    assert good.status_code == 200 and good.content == data[BLOCK:]
    # An S3 error the owner's origin gave comes back as such.
    missing = query.replace("key=k", "key=absent")
    refused = httpx.get(f"{node.endpoint}{BLOCK_PATH}?{missing}",
                        headers={AUTH_HEADER: sign(SECRET.encode(), "GET", BLOCK_PATH, missing)}, timeout=10)
    assert refused.status_code == 424 and refused.json()["status"] == 404
    # Without a fleet the route does not exist: it is an S3 request like any other.
    alone = httpx.get(f"{gateway.endpoint}{BLOCK_PATH}?{query}",
                      headers={AUTH_HEADER: sign(SECRET.encode(), "GET", BLOCK_PATH, query)})
    assert alone.status_code != 200 and alone.content.startswith(b"<?xml")


def test_redis_outage_keeps_serving_and_nodes_register_again(fleet, direct, clean_redis):
    a, b, c = fleet.nodes
    data = os.urandom(6 * BLOCK)
    direct.put_object(Bucket="bkt", Key="k", Body=data)
    for body, _ in read_all([a, b, c], "k"):
        assert body == data
    beats = {id(n): n.server.config.app.fleet.membership.beats for n in (a, b, c)}
    clean_redis.stop()
    # The last view is kept: blocks still come from their owners; new objects too.
    during = os.urandom(4 * BLOCK + 3)
    direct.put_object(Bucket="bkt", Key="during", Body=during)
    for key, want in (("k", data), ("during", during)):
        for body, _ in read_all([a, b, c], key):
            assert body == want
    assert all(len(view(n)) == 3 for n in (a, b, c))
    clean_redis.start()  # empty: every node must register again by itself
    r = redis.Redis(port=clean_redis.port)
    ids = sorted(node_id(n) for n in (a, b, c))
    wait_for(lambda: sorted(m.decode() for m in r.zrange("gw:fleet:{members}", 0, -1)) == ids,
             "every node registered again", within=10)
    # Redis ran a node's beat before the node hears back and counts it: wait for the count too.
    wait_for(lambda: all(n.server.config.app.fleet.membership.beats > beats[id(n)] for n in (a, b, c)),
             "a heartbeat of every node")
    for body, _ in read_all([a, b, c], "during"):
        assert body == during


def test_an_object_changed_behind_the_fleet_is_noticed_through_a_peer(fleet, direct):
    old, new = os.urandom(2 * BLOCK), os.urandom(2 * BLOCK)
    direct.put_object(Bucket="bkt", Key="k", Body=old)
    owner = owner_of(1, fleet.nodes)
    reading = next(n for n in fleet.nodes if n is not owner)
    reader = client(reading.endpoint)
    # The reader trusts what it caches only while it is known to hear invalidations.
    wait_for(lambda: engine(reading).shared.invalidation.listening(), "the reading node listens")
    assert reader.get_object(Bucket="bkt", Key="k", Range="bytes=0-9")["Body"].read() == old[:10]
    direct.put_object(Bucket="bkt", Key="k", Body=new)  # behind the gateway: same size, new ETag
    # The reader still describes the old version; the owner's If-Match fails at the origin,
    # the owner says so, and the reader describes the object again and serves the new one
    # (as a node alone does when its own If-Match fails).
    refetched = engine(owner).origin.requests["GET"]
    got = reader.get_object(Bucket="bkt", Key="k", Range=f"bytes={BLOCK}-{BLOCK + 9}")
    assert got["Body"].read() == new[BLOCK:BLOCK + 10]
    assert got["ETag"] == direct.head_object(Bucket="bkt", Key="k")["ETag"]
    assert engine(owner).origin.requests["GET"] - refetched == 2  # the refused old block, the new one
    assert client(owner.endpoint).get_object(Bucket="bkt", Key="k")["Body"].read() == new


def test_with_two_replicas_each_block_is_kept_twice_and_fetched_once(make_fleet, direct):
    fleet = make_fleet(replicas=2)
    data = os.urandom(12 * BLOCK)
    direct.put_object(Bucket="bkt", Key="k", Body=data)
    before = origin_requests(*fleet.nodes)
    for body, _ in read_all(fleet.nodes, "k"):
        assert body == data
    sent = origin_requests(*fleet.nodes) - before
    assert set(sent) == {"GET"} and sent["GET"] <= 12  # (one run may bring blocks of several owners)
    ids = {node_id(n): n for n in fleet.nodes}
    for index in range(12):  # (blocks a node's run brought are offered to their owners, taken after the reads)
        keepers = {ids[i] for i in owners(placement_name("bkt", "k", index), ids, 2)}
        wait_for(lambda: {n for n in fleet.nodes if any(b.index == index for b in _blocks(n))} == keepers,
                 "the block held by its two owners")


def test_passive_cache_keeps_what_a_node_read_from_peers(make_fleet, direct):
    fleet = make_fleet(passive_cache=True)
    data = os.urandom(6 * BLOCK)
    direct.put_object(Bucket="bkt", Key="k", Body=data)
    node = fleet.nodes[0]
    s3 = client(node.endpoint)
    assert s3.get_object(Bucket="bkt", Key="k", Range="bytes=0-")["Body"].read() == data
    assert {b.index for b in _blocks(node)} == set(range(6))
    again = s3.get_object(Bucket="bkt", Key="k", Range="bytes=0-")
    assert again["Body"].read() == data and again["ResponseMetadata"]["HTTPHeaders"]["x-cache"] == "hit-mem"


def test_a_write_through_the_fleet_is_read_back_at_once_by_every_node(fleet):
    s3 = [client(n.endpoint) for n in fleet.nodes]
    for round_ in range(3):  # within the moment an owner remembers a cold open
        body = os.urandom(BLOCK + round_)
        s3[round_].put_object(Bucket="bkt", Key="k", Body=body)
        for reader in s3:
            assert reader.get_object(Bucket="bkt", Key="k", Range="bytes=0-")["Body"].read() == body
