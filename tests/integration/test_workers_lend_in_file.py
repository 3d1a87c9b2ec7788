"""A cold read through a worker that does not own the object costs one request between the workers
beyond the read's ask of the owner: the block its run brought is written to the owner's file of
the node's shared memory tier, and the owner is told to take it in, with the object's metadata,
in one `take` (engine.lending). Before, the owner was told the metadata (`meta?told`), told to
take the block (`take`) and asked the lender for its bytes (`block?lent`): three requests.

Two workers of a node of two (WorkerSet 0 and 1 of one run folder), each a real uvicorn in this
process, over moto behind bench/shaped_proxy.py, which counts the origin's requests."""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator

import pytest

from gateway.engine import Engine
from gateway.engine.sources import version_of
from gateway.node.workers import WorkerSet, placement
from gateway.store.blocks import BlockId
from tests.servers import CountingProxy
from tests.support import RunningGateway, base_settings, client
from tests.waiting import wait_for

BUCKET = "lend-in-file"
BODY = bytes(range(256)) * 14  # 3,584 bytes: one block, a small Parquet file's size


@pytest.fixture(scope="module")
def counted(origin_endpoint: str) -> Iterator[CountingProxy]:
    proxy = CountingProxy(origin_endpoint, kinds=("GET", "HEAD", "LIST"))
    yield proxy
    proxy.close()


def engine(gateway: RunningGateway) -> Engine:
    return gateway.server.config.app.s3.engine  # type: ignore[no-any-return]


@pytest.fixture
def node(clean_origin: str, counted: CountingProxy) -> Iterator[tuple[RunningGateway, RunningGateway]]:
    settings = base_settings(counted.endpoint)
    settings = dataclasses.replace(settings, metadata=dataclasses.replace(settings.metadata, ttl=60.0))
    run_dir = tempfile.mkdtemp(prefix="gw-lend-")  # short: it holds the workers' unix sockets
    started: list[RunningGateway] = []
    try:
        for i in range(2):
            started.append(RunningGateway(settings, workers=WorkerSet(i, 2, run_dir, b"node-secret")).__enter__())
        client(clean_origin, ("origin-key", "origin-secret")).create_bucket(Bucket=BUCKET)
        yield started[0], started[1]
    finally:
        for gateway in started:
            gateway.__exit__()
        shutil.rmtree(run_dir, ignore_errors=True)


def owned_by(worker: int, stem: str) -> str:
    """A key whose first block worker `worker` of two owns."""
    return next(f"{stem}-{n}" for n in range(100) if placement(BUCKET, f"{stem}-{n}", 0) % 2 == worker)


def asked(node: tuple[RunningGateway, RunningGateway]) -> Counter[str]:
    """The requests the two workers made of each other so far, by what they asked."""
    total: Counter[str] = Counter()
    for gateway in node:
        total.update({name.removeprefix("worker_asked_"): count for name, count in engine(gateway).stats.items()
                      if name.startswith("worker_asked_")})
    return total


@pytest.mark.parametrize("read", ["bytes=-900", "whole", "bytes=0-99"])
def test_a_cold_read_through_the_other_worker_lends_the_block_and_tells_the_metadata_in_one_request(
        node, clean_origin, counted, read):  # type: ignore[no-untyped-def]
    key = owned_by(1, f"cold-{read}")
    client(clean_origin, ("origin-key", "origin-secret")).put_object(Bucket=BUCKET, Key=key, Body=BODY)
    owner = engine(node[1])
    counted.mark()
    got = client(node[0].endpoint).get_object(Bucket=BUCKET, Key=key, **({} if read == "whole" else {"Range": read}))
    assert got["Body"].read() == {"whole": BODY, "bytes=-900": BODY[-900:], "bytes=0-99": BODY[:100]}[read]
    wait_for(lambda: owner.fetch.stats["take"] == 1, "the owner takes the block in")  # type: ignore[union-attr]
    # The read's ask of the owner (which knew nothing), then one take: the block in the owner's file,
    # the metadata with it. No `lent` (the bytes through the socket), no `told` of its own.
    assert asked(node) == {"meta_cached": 1, "take_in_file": 1}
    assert owner.metadata.stats["meta_told"] == 1
    assert owner.metadata.fresh_now(BUCKET, key) is not None
    assert counted.since() == {"GET": 1}
    # The owner holds both: a read through it, and one through the other worker, ask the origin nothing.
    for gateway in (node[1], node[0]):
        again = client(gateway.endpoint).get_object(Bucket=BUCKET, Key=key, Range="bytes=4-2683")
        assert again["Body"].read() == BODY[4:2684]
        assert again["ResponseMetadata"]["HTTPHeaders"]["x-cache"] == "hit-mem"
    assert counted.since() == {"GET": 1}
    assert engine(node[0]).fetch.lending.waiting == 0  # type: ignore[union-attr]  # (nothing left offered)


def test_a_block_lent_in_its_file_is_counted_once_in_the_owners_quota(node, clean_origin):  # type: ignore[no-untyped-def]
    keys = [owned_by(1, f"quota-{i}") for i in range(3)]
    origin = client(clean_origin, ("origin-key", "origin-secret"))
    for key in keys:
        origin.put_object(Bucket=BUCKET, Key=key, Body=BODY)
    s3 = client(node[0].endpoint)
    for key in keys:
        assert s3.get_object(Bucket=BUCKET, Key=key, Range="bytes=-900")["Body"].read() == BODY[-900:]
    owner = engine(node[1])
    wait_for(lambda: owner.fetch.stats["take"] == len(keys), "the owner takes the blocks in")  # type: ignore[union-attr]
    memory = owner.store.memory  # type: ignore[union-attr]
    assert memory is not None and memory.used == len(keys) * len(BODY)  # in its quota, once each
    assert engine(node[0]).store.memory.used == 0  # type: ignore[union-attr]  # the lender keeps none


def test_a_block_lent_to_an_owner_that_does_not_answer_is_not_left_in_its_file(node, clean_origin, counted):  # type: ignore[no-untyped-def]
    key = owned_by(1, "unanswered")
    client(clean_origin, ("origin-key", "origin-secret")).put_object(Bucket=BUCKET, Key=key, Body=BODY)
    node[1].__exit__()  # the owner is gone (being restarted): its file would be in no worker's quota
    lender = engine(node[0])
    counted.mark()
    assert client(node[0].endpoint).get_object(Bucket=BUCKET, Key=key)["Body"].read() == BODY
    assert counted.since() == {"GET": 1}
    wait_for(lambda: lender.fetch.stats["lent_in_file"] == 1 and not lender.fetch.background,  # type: ignore[union-attr]
             "the lend is over")
    meta = lender.metadata.fresh_now(BUCKET, key)
    assert meta is not None
    block = BlockId(BUCKET, key, version_of(meta), 0)
    assert not os.path.exists(lender.store.memory.own.block_path(block.name))  # type: ignore[union-attr]
