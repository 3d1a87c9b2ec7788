"""A node of several workers estimates and heats as one gateway (gateway.admin.nodefeed): its
shadow estimates ("what more cache would buy") replay every worker's GETs, as one worker serving
all the traffic would, through the model of the node's store (N stores of 1/N of each quota, as
`gateway advise --workers N`), and the access heat its first worker counts (the replication
controller's input) holds every worker's reads.

The same GETs are sent to one gateway, then to a node of 3 workers (gateways in this process
sharing a run folder, as under `gateway serve`), each GET to a worker drawn at random as the
kernel hands out connections. Every object is read twice in a row (a Parquet reader's footer,
then its body): one store hits the second read, while a worker that saw only its own share
would miss it two times in three. `cache.shadow_rate = 1`: every GET is replayed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import re
import shutil
import tempfile
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx

from gateway.advisor.simulate import replay, spec_from_settings
from gateway.advisor.trace import Read
from gateway.config import AdminSettings, CacheSettings
from gateway.node.workers import WorkerSet
from tests.support import GatewayProcess, RunningGateway, base_settings, client
from tests.waiting import wait_for

KiB = 1024
OBJECTS = 120
READS = 600  # objects read, each twice
TOKEN = "admin-token-for-tests"
# The node's shadows replay the other workers' GETs up to a feed interval (0.25 s) after their
# answer, so their order differs a little from one gateway's: measured 0.000-0.004 apart.
TOLERANCE = 0.02
CACHE = CacheSettings(block_size=64 * KiB, memory_quota=1024 * KiB, readahead_blocks=0, shadow_rate=1.0)


@contextlib.contextmanager
def gateways(origin_endpoint: str, count: int) -> Iterator[list[RunningGateway]]:
    settings = dataclasses.replace(base_settings(origin_endpoint), cache=CACHE, admin=AdminSettings(token=TOKEN))
    run_dir = tempfile.mkdtemp(prefix="gw-")  # short: a unix socket's path has at most 107 bytes
    secret = os.urandom(32)
    sets = [None] if count == 1 else [WorkerSet(i, count, run_dir, secret) for i in range(count)]
    try:
        with contextlib.ExitStack() as stack:
            yield [stack.enter_context(RunningGateway(settings, workers=w)) for w in sets]
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def node_stats(gateway: RunningGateway | GatewayProcess) -> dict[str, Any]:
    answer = httpx.get(f"{gateway.endpoint}/_gateway/stats", headers={"authorization": f"Bearer {TOKEN}"}, timeout=10)
    assert answer.status_code == 200
    return answer.json()  # type: ignore[no-any-return]


def serve(origin_endpoint: str, count: int, bucket: str, reads: list[str]) -> tuple[dict[str, Any], Counter[str]]:
    """The GETs `reads` sent to `count` workers: (the node's shadow estimates, the first worker's
    heat by key) once every GET is in them."""
    pick = random.Random(11)
    with gateways(origin_endpoint, count) as workers:
        s3 = [client(worker.endpoint) for worker in workers]
        for key in reads:
            s3[pick.randrange(count)].get_object(Bucket=bucket, Key=key)["Body"].read()
        asked = workers[-1]  # (any worker answers for the node)
        shadow = wait_for(lambda: (lambda s: s if s["gets"] == len(reads) else None)(node_stats(asked)["shadow"]),
                          f"the node's shadow fed all {len(reads)} GETs")
        heat = workers[0].server.config.app.s3.engine.heat  # what the replication controller reads
        seen = wait_for(lambda: (lambda h: h if sum(h.values()) == len(reads) else None)(
            Counter({key: hits for b, key, hits in heat.top(OBJECTS) if b == bucket})),
            f"the first worker's heat holding all {len(reads)} GETs")
        if count > 1:
            dropped = sum(w.server.config.app.feed.dropped for w in workers)
            assert dropped == 0
    return shadow, seen


def test_a_node_of_workers_estimates_and_heats_as_one_gateway(origin_endpoint: str, clean_origin: str) -> None:
    rng = random.Random(5)
    origin = client(origin_endpoint, ("origin-key", "origin-secret"))
    bucket = f"nodewide-{uuid.uuid4().hex[:10]}"
    origin.create_bucket(Bucket=bucket)
    keys = [f"obj-{i:03d}" for i in range(OBJECTS)]
    sizes = {key: rng.randrange(16 * KiB, 64 * KiB) for key in keys}
    for key in keys:
        origin.put_object(Bucket=bucket, Key=key, Body=rng.randbytes(sizes[key]))
    weights = [1 / (rank + 1) ** 0.9 for rank in range(OBJECTS)]
    reads = [key for key in rng.choices(keys, weights, k=READS) for _ in range(2)]

    alone, alone_heat = serve(origin_endpoint, 1, bucket, reads)
    node, node_heat = serve(origin_endpoint, 3, bucket, reads)

    assert node_heat == alone_heat == Counter(reads)  # every worker's reads, each once
    gets = [Read(bucket, key, 0, 0, sizes[key] - 1, sizes[key]) for key in reads]
    for name, times in (("1x", 1), ("2x", 2), ("4x", 4)):
        one, many = alone["shadows"][name]["hit_ratio"], node["shadows"][name]["hit_ratio"]
        # What the advisor's replay of the GETs in the order sent says of one store and of the node's three.
        one_store, three = (replay(gets, spec_from_settings(CACHE, workers=n).scaled(times)).object_hit_ratio
                            for n in (1, 3))
        print(f"shadow {name}: one gateway {one:.4f} (replay {one_store:.4f}), a node of 3 workers {many:.4f} "
              f"(replay {three:.4f})")
        assert abs(one - one_store) <= TOLERANCE and abs(many - three) <= TOLERANCE
    assert alone["shadows"]["1x"]["hit_ratio"] >= 0.5  # (each second read hits: the test can tell)


def test_gateway_serve_with_workers_counts_every_workers_reads_in_its_heat(origin_endpoint: str,
                                                                          clean_origin: str) -> None:
    # `gateway serve --workers 3` (real processes): GETs on connections of their own, which the
    # kernel hands to any worker, are all in the node's hottest objects, each counted once.
    origin = client(origin_endpoint, ("origin-key", "origin-secret"))
    origin.create_bucket(Bucket="heat")
    reads = {f"k{n}": 3 + n for n in range(5)}
    for key in reads:
        origin.put_object(Bucket="heat", Key=key, Body=key.encode() * 1000)
    node = GatewayProcess(origin_endpoint, workers=3, GATEWAY_ADMIN_TOKEN=TOKEN).start(timeout=60)
    try:
        for key, times in reads.items():
            for _ in range(times):
                client(node.endpoint, max_pool_connections=1).get_object(Bucket="heat", Key=key)["Body"].read()

        def hottest() -> dict[str, int] | None:
            found = {hot["key"]: hot["hits"] for hot in node_stats(node)["hot_objects"] if hot["bucket"] == "heat"}
            return found if found == reads else None

        wait_for(hottest, f"every worker's GETs in the node's heat: {reads}")
        metrics = httpx.get(f"{node.endpoint}/_gateway/metrics", headers={"authorization": f"Bearer {TOKEN}"},
                            timeout=10).text
        datagrams = {outcome: float(value) for outcome, value in
                     re.findall(r'^gateway_node_feed_datagrams_total\{outcome="(\w+)"\} (\S+)$', metrics, re.M)}
        # What workers 1 and 2 served came this way (how many of the GETs they got is the kernel's choice).
        assert datagrams["received"] == datagrams["sent"] and datagrams["dropped"] == 0
    finally:
        node.stop()
