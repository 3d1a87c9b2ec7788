"""A read racing overwrites of its object is answered from one version of it, whole: S3 answers
a GET from one version, and so does the gateway, whether it knew the object's metadata or not.
(Before, a multi-block cold read took its first block from one origin answer and the rest from
others, pinned by If-Match: an overwrite in between cut the answer off after its headers.)"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import secrets
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.cluster.placement import owners, placement_name
from gateway.config import CacheSettings, ClusterSettings, DiskTierSettings, MetadataSettings, RedisSettings
from gateway.node.workers import WorkerSet
from tests.support import GatewayProcess, RunningGateway, base_settings, client
from tests.waiting import wait_for

KiB = 1024
BLOCK = 64 * KiB
OLD = os.urandom(24 * BLOCK)
NEW = os.urandom(20 * BLOCK + 77)  # another length: a mix of the two could not pass for either


@pytest.fixture
def racing(start_gateway, clean_origin, direct) -> Iterator[tuple[RunningGateway, object, threading.Event]]:
    gateway = start_gateway(cache=CacheSettings(block_size=BLOCK, memory_quota=8 * 1024 * KiB, readahead_blocks=2))
    direct.create_bucket(Bucket="bkt")
    yield gateway, direct, threading.Event()


def overwriting(direct, key: str, stop: threading.Event) -> threading.Thread:  # type: ignore[no-untyped-def]
    """Another client putting the two versions in turn, straight to the origin, until `stop`."""
    def run() -> None:
        turn = 0
        while not stop.is_set():
            direct.put_object(Bucket="bkt", Key=key, Body=(OLD, NEW)[turn % 2])
            turn += 1
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def read_whole(gateway: RunningGateway | GatewayProcess, key: str) -> bytes:
    url = client(gateway.endpoint).generate_presigned_url("get_object", Params={"Bucket": "bkt", "Key": key})
    with httpx.stream("GET", url, timeout=30) as response:  # a cut body raises here
        assert response.status_code == 200
        body = response.read()
        assert len(body) == int(response.headers["content-length"])
    return body


def test_cold_reads_racing_overwrites_get_one_version_whole(racing):
    gateway, direct, stop = racing
    for i in range(12):  # a key the gateway never saw each time: its metadata and bytes from one GET
        key = f"cold-{i}"
        direct.put_object(Bucket="bkt", Key=key, Body=OLD)
        writer = overwriting(direct, key, stop)
        try:
            got = read_whole(gateway, key)
        finally:
            stop.set()
            writer.join()
            stop.clear()
        assert got in (OLD, NEW)


def test_reads_of_known_metadata_racing_overwrites_get_one_version_whole(racing):
    gateway, direct, stop = racing
    direct.put_object(Bucket="bkt", Key="k", Body=OLD)
    writer = overwriting(direct, "k", stop)
    try:
        for _ in range(12):
            # The metadata is forgotten each time, the blocks of the versions read are not: the read
            # asks for the metadata alone, then for the blocks it misses, pinned to that version.
            gateway.purge_caches()
            assert read_whole(gateway, "k") in (OLD, NEW)
    finally:
        stop.set()
        writer.join()


def test_reads_through_a_node_of_three_workers_racing_overwrites_get_one_version_whole(clean_origin, direct):
    # Each read on a connection of its own, so any worker answers it; the blocks of a read belong
    # to all three, and the worker reading fetches them in one origin answer (lending the others').
    direct.create_bucket(Bucket="bkt")
    stop = threading.Event()
    with GatewayProcess(clean_origin, workers=3, GATEWAY_CACHE_BLOCK_SIZE="64KiB") as node:
        for i in range(6):
            key = f"node-{i}"
            direct.put_object(Bucket="bkt", Key=key, Body=OLD)
            writer = overwriting(direct, key, stop)
            try:
                got = [read_whole(node, key) for _ in range(3)]  # the first cold, the others not
            finally:
                stop.set()
                writer.join()
                stop.clear()
            assert all(body in (OLD, NEW) for body in got)


# --- a node of workers with a disk tier, and a fleet: every put a version of its own --------------


def tagged(base: bytes, turn: int) -> bytes:
    """`base` with each block's first 8 bytes replaced by `turn`: each put a version (and ETag) of its
    own, whose blocks no cache holds yet, and a read mixing two versions shows in its tags."""
    tag = turn.to_bytes(8, "big")
    return b"".join(tag + base[i + 8:i + BLOCK] for i in range(0, len(base), BLOCK))


def read_retrying(gateway: RunningGateway, key: str) -> bytes:
    """`read_whole`, asked again (as SDKs retry) while the answer is a 503 that came before any byte:
    the object changed under the read, and again under its second try (Engine.get_object)."""
    url = client(gateway.endpoint).generate_presigned_url("get_object", Params={"Bucket": "bkt", "Key": key})
    for _ in range(20):
        with httpx.stream("GET", url, timeout=30) as response:  # a cut body raises here
            if response.status_code == 503:
                response.read()
                continue
            assert response.status_code == 200
            body = response.read()
            assert len(body) == int(response.headers["content-length"])
            return body
    raise AssertionError("20 answers in a row were 503")


def one_version(body: bytes) -> bool:
    base = {len(OLD): OLD, len(NEW): NEW}.get(len(body))
    return base is not None and body == tagged(base, int.from_bytes(body[:8], "big"))


def overwriting_anew(direct, key: str, stop: threading.Event) -> threading.Thread:  # type: ignore[no-untyped-def]
    """`overwriting`, each put a new version."""
    def run() -> None:
        turn = 1
        while not stop.is_set():
            direct.put_object(Bucket="bkt", Key=key, Body=tagged((OLD, NEW)[turn % 2], turn))
            turn += 1
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@contextlib.contextmanager
def node_with_a_disk(origin: str, folder: Path, workers: int = 2) -> Iterator[list[RunningGateway]]:
    """A node of `workers` workers (in this process, tests/support.RunningGateway) whose cache has a
    disk tier: a worker does not see which blocks the others hold (TieredStore.sees_other_workers)."""
    (folder / "run").mkdir()
    secret = secrets.token_bytes(32)
    cache = CacheSettings(block_size=BLOCK, memory_quota=4 * 1024 * KiB, readahead_blocks=2,
                          disk=(DiskTierSettings(path=str(folder / "disk"), quota=64 * 1024 * KiB),))
    settings = dataclasses.replace(base_settings(origin), cache=cache, metadata=MetadataSettings(strict=True))
    node = [RunningGateway(settings, workers=WorkerSet(i, workers, str(folder / "run"), secret))
            for i in range(workers)]
    with contextlib.ExitStack() as stack:
        for worker in node:
            stack.enter_context(worker)
        yield node


def test_reads_through_a_node_of_workers_with_a_disk_tier_racing_overwrites_get_one_version_whole(
        clean_origin, direct, tmp_path):
    # In strict mode every read asks the origin for the metadata (a conditional HEAD): it learns of
    # each new version, and then reads blocks of it that no worker holds. The blocks another worker
    # owns were fetched one by one after the answer's headers (If-Match): cut by the next overwrite.
    direct.create_bucket(Bucket="bkt")
    direct.put_object(Bucket="bkt", Key="k", Body=tagged(OLD, 0))
    stop = threading.Event()
    with node_with_a_disk(clean_origin, tmp_path) as node:
        writer = overwriting_anew(direct, "k", stop)
        try:
            got = [read_retrying(node[i % 2], "k") for i in range(12)]
        finally:
            stop.set()
            writer.join()
    assert all(one_version(body) for body in got)


def blocks_held(gateway: RunningGateway) -> set[int]:
    """The blocks a gateway (a worker: its own part) holds in its tiers."""
    return {b.index for tier in gateway.server.config.app.s3.engine.store.levels for b in tier}


def origin_gets(*gateways: RunningGateway) -> int:
    return sum(Counter(g.server.config.app.s3.engine.origin.requests)["GET"] for g in gateways)


def test_a_read_through_a_node_of_workers_with_a_disk_tier_is_one_origin_get(clean_origin, direct, tmp_path):
    direct.create_bucket(Bucket="bkt")
    direct.put_object(Bucket="bkt", Key="k", Body=OLD)
    with node_with_a_disk(clean_origin, tmp_path) as node:
        s3 = client(node[0].endpoint)
        s3.head_object(Bucket="bkt", Key="k")  # the metadata known, no block held
        before = origin_gets(*node)
        assert read_whole(node[0], "k") == OLD
        assert origin_gets(*node) - before == 1  # one GET for the blocks of both workers
        wait_for(lambda: sum(len(blocks_held(w)) for w in node) == len(OLD) // BLOCK, "each block with its owner",
                 within=10)
        before = origin_gets(*node)
        assert read_whole(node[1], "k") == OLD
        assert origin_gets(*node) == before


SECRET = "overwrite-race-fleet-secret"


def fleet_of(start_gateway, redis_url: str, nodes: int, **sections: object) -> list[RunningGateway]:  # type: ignore[no-untyped-def]
    """`nodes` gateways on one Redis that see each other (single workers, memory tier)."""
    settings = {
        "redis": RedisSettings(url=redis_url, socket_timeout=0.3, retry_interval=0.2),
        "cluster": ClusterSettings(secret=SECRET, heartbeat_interval=0.2, member_ttl=2.0,
                                   peer_connect_timeout=1.0, peer_read_timeout=5.0),
        "cache": CacheSettings(block_size=BLOCK, memory_quota=32 * 1024 * KiB, readahead_blocks=2),
        **sections,
    }
    fleet = [start_gateway(**settings) for _ in range(nodes)]

    def settled() -> bool:
        apps = [g.server.config.app for g in fleet]
        ids = {app.fleet.me.id for app in apps}
        return all(set(app.fleet.membership.ids) == ids and app.s3.engine.shared.invalidation.listening()
                   for app in apps)

    wait_for(settled, "the nodes see each other and listen", within=10)
    return fleet


def test_reads_through_a_fleet_racing_overwrites_get_one_version_whole(start_gateway, clean_redis, direct):
    # Strict metadata, as above: each read learns of a new version, whose blocks the fleet does not
    # hold. A block another node owned was fetched by that node after the answer's headers went out.
    fleet = fleet_of(start_gateway, clean_redis.url, 3, metadata=MetadataSettings(strict=True))
    direct.create_bucket(Bucket="bkt")
    direct.put_object(Bucket="bkt", Key="k", Body=tagged(OLD, 0))
    stop = threading.Event()
    writer = overwriting_anew(direct, "k", stop)
    try:
        got = [read_retrying(fleet[i % 3], "k") for i in range(12)]
    finally:
        stop.set()
        writer.join()
    assert all(one_version(body) for body in got)


def test_a_cold_read_through_a_fleet_is_one_origin_get_and_its_blocks_go_to_their_owners(
        start_gateway, clean_redis, direct):
    fleet = fleet_of(start_gateway, clean_redis.url, 3)
    direct.create_bucket(Bucket="bkt")
    direct.put_object(Bucket="bkt", Key="k", Body=OLD)
    ids = {g.server.config.app.fleet.me.id: g for g in fleet}
    owner = {i: ids[owners(placement_name("bkt", "k", i), ids)[0]] for i in range(len(OLD) // BLOCK)}
    reader = next(g for g in fleet if g is not owner[0])  # the first block another node's
    before = origin_gets(*fleet)
    assert read_whole(reader, "k") == OLD  # nothing known of it: metadata and blocks from one GET
    assert origin_gets(*fleet) - before == 1
    for g in fleet:  # each node ends up with the blocks it owns (taken from the reader), and only those
        wait_for(lambda g=g: blocks_held(g) == {i for i, o in owner.items() if o is g}, "each node holds its own blocks",
                 within=10)
    before = origin_gets(*fleet)
    for g in fleet:
        assert read_whole(g, "k") == OLD
    assert origin_gets(*fleet) == before


def test_a_read_of_known_metadata_through_a_fleet_is_one_origin_get(start_gateway, clean_redis, direct):
    fleet = fleet_of(start_gateway, clean_redis.url, 3)
    direct.create_bucket(Bucket="bkt")
    direct.put_object(Bucket="bkt", Key="k", Body=OLD)
    # The metadata known (Redis too), no block: a HEAD asking for checksums is the origin's HEAD (another
    # is a GET of the object's tail, engine.tails, which brings its last block).
    client(fleet[0].endpoint).head_object(Bucket="bkt", Key="k", ChecksumMode="ENABLED")
    before = origin_gets(*fleet)
    assert read_whole(fleet[1], "k") == OLD
    assert origin_gets(*fleet) - before == 1
    # A read of blocks all owned by other nodes, which hold none of them, says it missed.
    ids = {g.server.config.app.fleet.me.id: g for g in fleet}
    key = next(k for k in (f"far-{i}" for i in range(1000))
               if all(ids[owners(placement_name("bkt", k, i), ids)[0]] is not fleet[1] for i in range(3)))
    direct.put_object(Bucket="bkt", Key=key, Body=OLD[:3 * BLOCK])
    client(fleet[1].endpoint).head_object(Bucket="bkt", Key=key, ChecksumMode="ENABLED")
    got = client(fleet[1].endpoint).get_object(Bucket="bkt", Key=key, Range="bytes=0-")
    assert got["Body"].read() == OLD[:3 * BLOCK] and got["ResponseMetadata"]["HTTPHeaders"]["x-cache"] == "miss"


TOKEN = "overwrite-race-admin-token"


def admin(node: GatewayProcess, what: str) -> httpx.Response:
    response = httpx.get(f"{node.endpoint}/_gateway/{what}", headers={"authorization": f"Bearer {TOKEN}"},
                         timeout=10)
    response.raise_for_status()
    return response


def node_gets(node: GatewayProcess) -> int:
    """The node's origin GETs so far, all its workers' (the admin API's metrics)."""
    text = admin(node, "metrics").text
    assert re.search(r"^gateway_workers_answered 2\.0$", text, re.M), text[-2000:]
    match = re.search(r'^gateway_origin_requests_total\{method="GET"\} (\S+)$', text, re.M)
    return int(float(match[1])) if match else 0


def node_blocks(node: GatewayProcess) -> int:
    return sum(tier["blocks"] for tier in admin(node, "stats").json()["tiers"])


def test_a_cold_read_through_a_fleet_of_nodes_of_workers_is_one_origin_get(clean_origin, clean_redis, direct,
                                                                             tmp_path):
    # Two nodes of two workers with disk tiers: the node reading asks the other which blocks it holds
    # (that node asks its workers), runs the rest, and offers the other node its blocks, which the
    # worker of that node owning each takes from the worker of this one that lent it.
    direct.create_bucket(Bucket="bkt")
    direct.put_object(Bucket="bkt", Key="k", Body=OLD)
    env = {"GATEWAY_REDIS_URL": clean_redis.url, "GATEWAY_CLUSTER_SECRET": SECRET,
           "GATEWAY_CLUSTER_HEARTBEAT_INTERVAL": "0.2", "GATEWAY_CLUSTER_MEMBER_TTL": "2",
           "GATEWAY_CACHE_BLOCK_SIZE": "64KiB", "GATEWAY_CACHE_READAHEAD_BLOCKS": "0", "GATEWAY_ADMIN_TOKEN": TOKEN}
    nodes = [GatewayProcess(clean_origin, workers=2, **env, GATEWAY_CACHE_DISK=json.dumps(
        [{"path": str(tmp_path / f"disk{i}"), "quota": "64MiB"}])) for i in range(2)]
    with contextlib.ExitStack() as stack:
        for node in nodes:
            stack.enter_context(node)
        wait_for(lambda: all(len(admin(n, "stats").json()["members"]) == 2 for n in nodes), "the nodes see each other",
                 within=10)
        before = sum(node_gets(n) for n in nodes)
        assert read_whole(nodes[0], "k") == OLD
        assert sum(node_gets(n) for n in nodes) - before == 1
        wait_for(lambda: sum(node_blocks(n) for n in nodes) == len(OLD) // BLOCK,  # each block once, with its owner
                 "the blocks with their owners", within=10)
        for node in (nodes[1], nodes[0]):
            assert read_whole(node, "k") == OLD
        assert sum(node_gets(n) for n in nodes) - before == 1
