"""The workers of one node are one block cache (gateway.store.shared, gateway.engine.siblings):
each block is fetched from the origin once and held once in the node, by the worker that
owns it, within the node's quota; every worker answers hits from any worker's blocks.

Two workers of a node run here as two gateways in this process (tests/support.RunningGateway
with a WorkerSet), each on its own TCP port and on its unix socket, sharing one run folder.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.config import CacheSettings, DiskTierSettings
from gateway.node.workers import WorkerSet
from gateway.store import blockfile
from tests.support import RunningGateway, base_settings, client
from tests.waiting import wait_for

KiB = 1024
BLOCK = 64 * KiB
DATA = os.urandom(7 * BLOCK + 999)  # 8 blocks


def origin_gets(workers: list[RunningGateway]) -> int:
    return sum(Counter(w.server.config.app.s3.engine.origin.requests)["GET"] for w in workers)


def block_files(root: str) -> list[str]:
    return [name for _, name, temporary in blockfile.block_files(root) if not temporary] if os.path.isdir(root) else []


@contextlib.contextmanager
def two_workers(origin_endpoint: str, tmp_path: Path, memory_quota: int) -> Iterator[list[RunningGateway]]:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    secret = secrets.token_bytes(32)
    cache = CacheSettings(block_size=BLOCK, memory_quota=memory_quota, readahead_blocks=0,
                          disk=(DiskTierSettings(path=str(tmp_path / "disk"), quota=4 * 1024 * KiB),))
    settings = dataclasses.replace(base_settings(origin_endpoint), cache=cache)
    workers = [RunningGateway(settings, workers=WorkerSet(i, 2, str(run_dir), secret)) for i in range(2)]
    for worker in workers:
        worker.__enter__()
    try:
        yield workers
    finally:
        for worker in workers:
            worker.__exit__()


@pytest.fixture
def node(origin_endpoint: str, clean_origin: str, tmp_path: Path) -> Iterator[list[RunningGateway]]:
    with two_workers(origin_endpoint, tmp_path, 2 * 1024 * KiB) as workers:
        yield workers


def sibling_stats(workers: list[RunningGateway]) -> Counter[str]:
    total: Counter[str] = Counter()
    for worker in workers:
        total.update(worker.server.config.app.s3.engine.siblings.stats)
    return total


def test_a_block_is_fetched_once_and_held_once_in_the_node(node):
    s3 = [client(w.endpoint) for w in node]
    s3[0].create_bucket(Bucket="bkt")
    s3[0].put_object(Bucket="bkt", Key="k", Body=DATA)
    before = origin_gets(node)
    bodies: list[bytes] = []

    def read(i: int) -> None:
        bodies.append(s3[i % 2].get_object(Bucket="bkt", Key="k")["Body"].read())

    readers = [threading.Thread(target=read, args=(i,)) for i in range(8)]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join()
    assert bodies == [DATA] * 8
    # Never more origin GETs than readers (what they would cost going to S3 themselves): a cold
    # read is one GET for all of its blocks, and readers at the same moment wait for the blocks
    # those GETs bring. Fewer than one GET per block, as each used to cost.
    fetched = origin_gets(node) - before
    assert 1 <= fetched < 8
    asked = sibling_stats(node)
    assert asked["worker_fallback"] == 0
    memory = node[0].server.config.app.workers.memory_path
    names = block_files(memory)
    assert len(names) == len(set(names)) == 8  # each block once, in the owner's part of the shared folder
    for i, worker in enumerate(node):
        store = worker.server.config.app.s3.engine.store
        own = list(store.memory)
        assert all(WorkerSet(i, 2, "x", b"x").owns(b.bucket, b.key, b.index) for b in own)
    held = sum(len(w.server.config.app.s3.engine.store.memory) for w in node)
    assert held == 8
    # Both workers now answer every block from memory, whichever worker holds it.
    for c in s3:
        got = c.get_object(Bucket="bkt", Key="k")
        assert got["Body"].read() == DATA
        assert got["ResponseMetadata"]["HTTPHeaders"]["x-cache"] == "hit-mem"
    assert origin_gets(node) - before == fetched


def test_the_node_stays_within_its_quota(node):
    s3 = [client(w.endpoint) for w in node]
    s3[0].create_bucket(Bucket="bkt")
    objects = {f"o{i}": os.urandom(3 * BLOCK) for i in range(40)}  # 7.5 MiB through a 2 + 4 MiB cache
    for i, (key, body) in enumerate(objects.items()):
        s3[i % 2].put_object(Bucket="bkt", Key=key, Body=body)
        assert s3[(i + 1) % 2].get_object(Bucket="bkt", Key=key)["Body"].read() == body
    app = node[0].server.config.app
    memory_bytes = sum(os.path.getsize(p) for p, _, t in blockfile.block_files(app.workers.memory_path) if not t)
    disk_root = app.settings.cache.disk[0].path
    disk_bytes = sum(os.path.getsize(p) for p, _, t in blockfile.block_files(disk_root) if not t)
    headers = 300 * (len(block_files(app.workers.memory_path)) + len(block_files(disk_root)))  # file headers, uncounted
    assert memory_bytes <= app.settings.cache.memory_quota + headers
    assert disk_bytes <= app.settings.cache.disk[0].quota + headers
    used = [w.server.config.app.s3.engine.store.stats()["tiers"] for w in node]
    assert sum(t["mem"]["used"] for t in used) <= app.settings.cache.memory_quota
    assert sum(t["mem"]["quota"] for t in used) == app.settings.cache.memory_quota
    # Every object still reads whole through either worker, from cache or origin.
    for i, (key, body) in enumerate(objects.items()):
        assert s3[i % 2].get_object(Bucket="bkt", Key=key, Range="bytes=100-")["Body"].read() == body[100:]


def test_a_read_answered_by_another_workers_open_says_where_its_bytes_came_from(node, clean_origin):
    # Worker 0 opens objects it owns (one ranged GET for metadata and block); worker 1, which has
    # no metadata of them, asks worker 0 for it a moment later and reads the block from worker 0's
    # file: a hit, not a miss (and no second origin GET). (Without checksum mode: a read that
    # asks for the object's checksums needs a HEAD, not an open.)
    s3 = [client(w.endpoint, response_checksum_validation="when_required") for w in node]
    origin = client(clean_origin)
    origin.create_bucket(Bucket="bkt")
    owned = [k for k in (f"small-{i}" for i in range(32)) if WorkerSet(0, 2, "x", b"x").owns("bkt", k, 0)][:4]
    for key in owned:
        origin.put_object(Bucket="bkt", Key=key, Body=DATA[:999])
    for key in owned:
        got = s3[0].get_object(Bucket="bkt", Key=key)
        assert got["Body"].read() == DATA[:999] and got["ResponseMetadata"]["HTTPHeaders"]["x-cache"] == "miss"
    before = origin_gets(node)
    for key in owned:
        got = s3[1].get_object(Bucket="bkt", Key=key)
        assert got["Body"].read() == DATA[:999] and got["ResponseMetadata"]["HTTPHeaders"]["x-cache"] == "hit-mem"
    assert origin_gets(node) == before
    assert sibling_stats(node)["worker_meta"] == len(owned)  # the metadata from worker 0 (one ask), the block from its file


def test_a_changed_object_is_read_anew_by_every_worker(node):
    s3 = [client(w.endpoint) for w in node]
    s3[0].create_bucket(Bucket="bkt")
    s3[0].put_object(Bucket="bkt", Key="k", Body=DATA)
    assert s3[1].get_object(Bucket="bkt", Key="k")["Body"].read() == DATA
    new = os.urandom(len(DATA))
    s3[1].put_object(Bucket="bkt", Key="k", Body=new)
    for c in s3:
        assert c.get_object(Bucket="bkt", Key="k")["Body"].read() == new


def test_a_worker_that_does_not_answer_costs_speed_not_answers(node):
    s3 = [client(w.endpoint) for w in node]
    s3[0].create_bucket(Bucket="bkt")
    s3[0].put_object(Bucket="bkt", Key="k", Body=DATA)
    node[1].__exit__()  # worker 1 is gone (as while it is restarted); its blocks are asked of nobody
    got = s3[0].get_object(Bucket="bkt", Key="k")
    assert got["Body"].read() == DATA
    siblings = node[0].server.config.app.s3.engine.siblings
    assert siblings.stats["worker_failure"] >= 1  # it could not be given the blocks it owns
    owned_by_1 = [i for i in range(8) if WorkerSet(0, 2, "x", b"x").owner("bkt", "k", i) == 1]
    store = node[0].server.config.app.s3.engine.store
    assert owned_by_1 and not any(b.index in owned_by_1 for b in store.memory)  # kept only by the owner


def test_without_a_memory_tier_the_owner_sends_the_block(origin_endpoint, clean_origin, tmp_path):
    """No shared memory tier to read from: blocks of the other worker come through its socket."""
    with two_workers(origin_endpoint, tmp_path, 0) as node:
        s3 = [client(w.endpoint) for w in node]
        s3[0].create_bucket(Bucket="bkt")
        s3[0].put_object(Bucket="bkt", Key="k", Body=DATA)
        before = origin_gets(node)
        assert s3[0].get_object(Bucket="bkt", Key="k")["Body"].read() == DATA
        # Worker 0's read lent worker 1 the blocks it owns; worker 1 takes them through the socket.
        lent_to_1 = {i for i in range(8) if WorkerSet(0, 2, "x", b"x").owner("bkt", "k", i) == 1}
        store = node[1].server.config.app.s3.engine.store
        wait_for(lambda: {b.index for tier in store.levels for b in tier if b.key == "k"} == lent_to_1,
                 "worker 1 takes the blocks lent to it (asynchronously)", within=10)
        assert s3[1].get_object(Bucket="bkt", Key="k")["Body"].read() == DATA
        assert origin_gets(node) - before == 1  # the first read's: worker 1 read what it took
        asked = sibling_stats(node)
        assert asked["worker_block_from_file"] == 0 and node[1].server.config.app.s3.engine.fetch.stats["take"] >= 1


def test_a_block_evicted_before_the_asker_reads_it_is_still_answered(node):
    """The owner said "in the file", and the file went before the asking worker read it (evicted
    meanwhile): a block is asked for again through the socket, an open is done here."""
    s3 = [client(w.endpoint) for w in node]
    s3[0].create_bucket(Bucket="bkt")
    # Worker 0 owns the first block: worker 1, which knows nothing of the object, asks it for that
    # block and the metadata (an open), and is told "in the file". (Worker 1 would ask worker 0 for
    # the metadata alone first, which answers it from memory: not here, as when worker 0 knew the
    # block only.)
    key = next(k for k in (f"k{i}" for i in range(64)) if WorkerSet(0, 2, "x", b"x").owns("bkt", k, 0))
    s3[0].put_object(Bucket="bkt", Key=key, Body=DATA[:999])
    for worker in node:
        store = worker.server.config.app.s3.engine.store
        store.from_shared_memory = lambda block: None  # type: ignore[method-assign]
    node[1].server.config.app.s3.engine.metadata._owner = lambda cache_key: None  # type: ignore[method-assign]
    for c in s3:
        assert c.get_object(Bucket="bkt", Key=key)["Body"].read() == DATA[:999]
    asked = sibling_stats(node)
    assert asked["worker_block_file_gone"] >= 1 and asked["worker_failure"] == 0
