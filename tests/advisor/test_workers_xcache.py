"""The x-cache answer of a node of workers with a disk tier says what the node held: a block one
worker reads from the file another worker keeps on the disk is a hit, not a miss (issue 39; before,
a worker that did not look in the other workers' files answered `miss`, and the read then hit the
owner's file: 0.52-0.59 of GETs logged as hits against 0.64-0.69 served from the cache).

Two workers (gateways in this process sharing one run folder, as under `gateway serve`), 64 KiB
blocks, one block of memory per worker over a disk tier: the object's blocks are owned by worker
1, which read them last, so all but one are on its disk; worker 0 reads them.
"""

from __future__ import annotations

import itertools
import uuid
from pathlib import Path

from gateway.config import CacheSettings, DiskTierSettings
from gateway.node.workers import placement
from gateway.objects import block_version
from gateway.store.blocks import BlockId
from tests.advisor.test_workers_against_advisor import counted, node, origin_gets
from tests.support import client
from tests.waiting import wait_for

KiB = 1024
BLOCK = 64 * KiB


def owned_by(worker: int, blocks: int, taken: set[str]) -> str:
    """A key all of whose first `blocks` blocks worker `worker` of two owns."""
    for n in itertools.count():
        key = f"k{n}"
        if key not in taken and all(placement(BUCKET, key, i) % 2 == worker for i in range(blocks)):
            taken.add(key)
            return key
    raise AssertionError("unreachable")


BUCKET = f"xcache-{uuid.uuid4().hex[:10]}"


def get(s3, key: str) -> tuple[bytes, str]:  # type: ignore[no-untyped-def]
    answer = s3.get_object(Bucket=BUCKET, Key=key)
    return answer["Body"].read(), answer["ResponseMetadata"]["HTTPHeaders"]["x-cache"]


def test_a_block_on_another_worker_s_disk_answers_a_hit(origin_endpoint: str, clean_origin: str, tmp_path: Path) -> None:
    taken: set[str] = set()
    one, other, four = owned_by(1, 1, taken), owned_by(1, 1, taken), owned_by(1, 4, taken)
    bodies = {one: b"1" * BLOCK, other: b"2" * BLOCK, four: bytes(range(256)) * (4 * BLOCK // 256)}
    origin = client(origin_endpoint, ("origin-key", "origin-secret"))
    origin.create_bucket(Bucket=BUCKET)
    for key, body in bodies.items():
        origin.put_object(Bucket=BUCKET, Key=key, Body=body)
    cache = CacheSettings(block_size=BLOCK, policy="lru", memory_quota=2 * BLOCK,  # one block per worker
                          disk=(DiskTierSettings(str(tmp_path / "disk"), 64 * BLOCK),), readahead_blocks=0,
                          shadow_rate=0)
    with node(origin_endpoint, tmp_path / "run", cache, 2) as workers:
        first, second = (client(worker.endpoint) for worker in workers)
        assert get(second, one) == (bodies[one], "miss")
        assert get(first, one) == (bodies[one], "hit-mem")  # in worker 1's part of the memory tier (tmpfs)
        assert get(second, other) == (bodies[other], "miss")  # `one` goes down to worker 1's disk
        # One block, read from worker 1's file on the disk: a hit, and no origin GET.
        assert get(first, one) == (bodies[one], "hit-disk")
        assert origin_gets(workers) == 2
        # Four blocks, kept by worker 1 (on its disk but for the one its memory may hold).
        assert get(second, four) == (bodies[four], "miss")
        # Worker 1 keeps the blocks after its answer (three go down to its disk, in its threads): the read
        # below is of blocks it holds, as the test means, once they are all there.
        owner = workers[1].server.config.app.s3.engine
        meta = owner.fresh_now(BUCKET, four)
        assert meta is not None
        blocks = [BlockId(BUCKET, four, block_version(meta.version_id, meta.etag), i) for i in range(4)]
        wait_for(lambda: all(block in owner.fetch.store for block in blocks), "worker 1 keeps the four blocks")
        first.head_object(Bucket=BUCKET, Key=four)  # worker 0 knows the object: its read asks the owner
        assert get(first, four) == (bodies[four], "hit-disk")
        assert origin_gets(workers) == 3


def test_a_block_its_owner_fetched_for_the_read_is_a_miss_in_x_cache_and_stats(
        origin_endpoint: str, clean_origin: str, tmp_path: Path) -> None:
    # Worker 1 owns the four blocks and says it holds them all, but the file of the first is gone
    # (as when it is evicted between the owner's answer and the read): the owner fetches it from
    # the origin for worker 0's read, and says so. Before, x-cache said hit-disk while the node's
    # stats counted that block a miss.
    taken: set[str] = set()
    four, other = owned_by(1, 4, taken), owned_by(1, 4, taken)
    body = bytes(range(256)) * (4 * BLOCK // 256)
    origin = client(origin_endpoint, ("origin-key", "origin-secret"))
    origin.create_bucket(Bucket=BUCKET)
    for key in (four, other):
        origin.put_object(Bucket=BUCKET, Key=key, Body=body)
    cache = CacheSettings(block_size=BLOCK, policy="lru", memory_quota=2 * BLOCK, shadow_rate=0,
                          disk=(DiskTierSettings(str(tmp_path / "disk"), 64 * BLOCK),), readahead_blocks=0)
    with node(origin_endpoint, tmp_path / "run", cache, 2) as workers:
        first, second = (client(worker.endpoint) for worker in workers)
        owner = workers[1].server.config.app.s3.engine
        for key in (four, other):  # worker 1 keeps the blocks of both; those of `four` all go down to its disk
            assert get(second, key) == (body, "miss")
            meta = owner.fresh_now(BUCKET, key)
            assert meta is not None
            blocks = [BlockId(BUCKET, key, block_version(meta.version_id, meta.etag), i) for i in range(4)]
            wait_for(lambda: all(block in owner.fetch.store for block in blocks), "worker 1 keeps the four blocks")
        disk = owner.fetch.store.disks[0].own
        meta = owner.fresh_now(BUCKET, four)
        assert meta is not None
        blocks = [BlockId(BUCKET, four, block_version(meta.version_id, meta.etag), i) for i in range(4)]
        assert all(block in disk for block in blocks)
        Path(disk.block_path(blocks[0].name)).unlink()
        first.head_object(Bucket=BUCKET, Key=four)  # worker 0 knows the object: its read asks the owner
        before, gets = counted(workers), origin_gets(workers)
        assert get(first, four) == (body, "partial")
        hits, misses = (now - then for now, then in zip(counted(workers), before))
        assert (hits, misses) == (3, 1)  # the node's stats: 3 of the 4 blocks held
        assert origin_gets(workers) == gets + 1
        # The owner keeps the block it fetched after its answer (down to its disk, in its threads).
        wait_for(lambda: blocks[0] in owner.fetch.store, "worker 1 keeps the block it fetched again")
        before = counted(workers)
        assert get(first, four) == (body, "hit-disk")  # now all held: x-cache and stats agree again
        hits, misses = (now - then for now, then in zip(counted(workers), before))
        assert (hits, misses) == (4, 0)
        assert origin_gets(workers) == gets + 1
