"""A cold HEAD's tail (engine.tails) serves the footer read that follows through another worker
of the node, or another node of the fleet: the tail's blocks are kept as a cold read's are (by
the worker owning the object's first block, which answers the node's HEADs; lent to their owner
node in a fleet), so HEAD and footer read cost the origin one GET in all, wherever each goes.

Two workers of a node without Redis (WorkerSet 0 and 1 of one run folder), and three nodes on
one Redis (tests/integration/test_fleet.py's fleet), over moto; objects are written to moto
directly, and the gateways' origin requests are counted."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

from gateway.engine import Engine
from gateway.node.workers import WorkerSet, placement
from tests.integration.test_fleet import BLOCK, engine, fleet, make_fleet, owner_of  # noqa: F401
from tests.support import RunningGateway, base_settings, client
from tests.waiting import wait_for

KiB = 1024


def origin_requests(*gateways: RunningGateway) -> Counter[str]:
    total: Counter[str] = Counter()
    for gateway in gateways:
        total.update(engine(gateway).origin.requests)
    return total


def get_body(s3, key: str, byte_range: str | None = None) -> bytes:  # type: ignore[no-untyped-def]
    """A GET's body (presigned: no x-amz-checksum-mode, which a whole object's read answers from a HEAD)."""
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "bkt", "Key": key})
    response = httpx.get(url, headers={"range": byte_range} if byte_range else {}, timeout=30)
    assert response.status_code == (206 if byte_range else 200), response.text
    return response.content


@pytest.fixture
def two_workers(clean_origin: str) -> Iterator[tuple[RunningGateway, RunningGateway]]:
    run_dir = tempfile.mkdtemp(prefix="gw-tail-")  # short: it holds the workers' unix sockets
    started: list[RunningGateway] = []
    try:
        for i in range(2):
            started.append(RunningGateway(base_settings(clean_origin), workers=WorkerSet(i, 2, run_dir, b"s")).__enter__())
        client(clean_origin, ("origin-key", "origin-secret")).create_bucket(Bucket="bkt")
        yield started[0], started[1]
    finally:
        for gateway in started:
            gateway.__exit__()
        shutil.rmtree(run_dir, ignore_errors=True)


def test_a_head_through_a_worker_then_the_footer_through_either_cost_one_origin_get(two_workers, direct):
    first, second = two_workers
    workers = (first, second)
    key = next(f"small-{n}.parquet" for n in range(100) if placement("bkt", f"small-{n}.parquet", 0) % 2 == 1)
    body = b"PAR1" + os.urandom(20 * KiB) + b"PAR1"
    direct.put_object(Bucket="bkt", Key=key, Body=body)
    before = origin_requests(*workers)
    # Worker 0 does not own the object: worker 1 answers its HEAD, from the GET of the object's tail.
    assert client(first.endpoint).head_object(Bucket="bkt", Key=key)["ContentLength"] == len(body)
    assert origin_requests(*workers) - before == {"GET": 1}
    assert engine(second).metadata.stats["meta_head_by_tail"] == 1
    for worker in (second, first):
        s3 = client(worker.endpoint)
        assert get_body(s3, key, "bytes=-8") == body[-8:]
        assert get_body(s3, key) == body  # (all of a small object came with the HEAD)
    assert origin_requests(*workers) - before == {"GET": 1}


def test_a_head_through_a_node_then_the_footer_through_another_cost_one_origin_get(fleet, direct):  # noqa: F811
    body = b"PAR1" + os.urandom(BLOCK // 2) + b"PAR1"  # within the tail: the object's one block, whole
    direct.put_object(Bucket="bkt", Key="k", Body=body)
    owner = owner_of(0, fleet.nodes)
    other = next(node for node in fleet.nodes if node is not owner)
    before = origin_requests(*fleet.nodes)
    assert client(other.endpoint).head_object(Bucket="bkt", Key="k")["ContentLength"] == len(body)
    assert origin_requests(*fleet.nodes) - before == {"GET": 1}
    owning: Engine = engine(owner)
    wait_for(lambda: owning.fetch is not None and owning.fetch.stats["take"] == 1, "the owner takes the tail's block")
    for node in fleet.nodes:  # (the metadata from Redis, the block from its owner)
        assert get_body(client(node.endpoint), "k", "bytes=-8") == body[-8:]
    assert origin_requests(*fleet.nodes) - before == {"GET": 1}
