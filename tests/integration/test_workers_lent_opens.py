"""A block one worker read from the origin and lent to its owner answers the next worker's cold
read of the object (engine.serving): the owner holds the block and was told the metadata by the
worker that read it (engine.metadata, `_tell_owner`; one not told asks the origin for that alone,
a HEAD, `_describe_taken`) instead of the asker reading the block from the origin again.

Before, with 3 workers or more, a worker that knew nothing of an object opened it at the origin
whenever the owner held its block only as lent (by a third worker): 4 workers of a node made
some 150 such GETs in 6,000 (docs/advisor.md, "Against a node of several workers").
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from gateway.config import CacheSettings
from gateway.node.workers import WorkerSet
from tests.support import RunningGateway, base_settings, client
from tests.waiting import wait_for

KiB = 1024
BLOCK = 64 * KiB
DATA = os.urandom(BLOCK // 2)  # one block


@contextlib.contextmanager
def three_workers(origin_endpoint: str, tmp_path: Path) -> Iterator[list[RunningGateway]]:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    secret = secrets.token_bytes(32)
    cache = CacheSettings(block_size=BLOCK, memory_quota=4 * 1024 * KiB, readahead_blocks=0)
    settings = dataclasses.replace(base_settings(origin_endpoint), cache=cache)
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(RunningGateway(settings, workers=WorkerSet(i, 3, str(run_dir), secret)))
               for i in range(3)]


def origin_requests(workers: list[RunningGateway]) -> Counter[str]:
    total: Counter[str] = Counter()
    for worker in workers:
        total.update(worker.server.config.app.s3.engine.origin.requests)
    return total


def test_a_block_lent_to_its_owner_answers_a_third_workers_cold_read(
    origin_endpoint: str, clean_origin: str, tmp_path: Path,
) -> None:
    origin = client(clean_origin)
    origin.create_bucket(Bucket="bkt")
    keys = [f"k-{i}" for i in range(40) if WorkerSet(0, 3, "x", b"x").owns("bkt", f"k-{i}", 0)][:3]
    for key in keys:
        origin.put_object(Bucket="bkt", Key=key, Body=DATA, ContentType="text/x-lent")
    with three_workers(origin_endpoint, tmp_path) as workers:
        owner = workers[0].server.config.app.s3.engine
        s3 = [client(w.endpoint) for w in workers]
        for key in keys:  # worker 1 reads each cold: one GET, and the block lent to worker 0
            assert s3[1].get_object(Bucket="bkt", Key=key)["Body"].read() == DATA
        wait_for(lambda: owner.opens.fetch.stats["take"] == len(keys), "worker 0 takes the blocks worker 1 lends")
        # (and is told their metadata by worker 1, whose origin answered it: engine.metadata._tell_owner)
        wait_for(lambda: owner.metadata.stats["meta_told"] == len(keys), "worker 0 is told the metadata")
        before = origin_requests(workers)
        assert before["GET"] == len(keys)
        for key in keys:  # worker 2 knows nothing of them: worker 0 answers from the blocks it took
            got = s3[2].get_object(Bucket="bkt", Key=key)
            assert got["Body"].read() == DATA and got["ContentType"] == "text/x-lent"
            assert got["ResponseMetadata"]["HTTPHeaders"]["x-cache"] == "hit-mem"
        after = origin_requests(workers)
        assert after["GET"] == before["GET"]  # no block read again
        assert after["HEAD"] == before["HEAD"]  # the owner was told each one's metadata: no HEAD
        for key in keys:  # and now it knows: worker 0 itself, then worker 2 again, ask the origin nothing
            assert s3[0].get_object(Bucket="bkt", Key=key)["Body"].read() == DATA
        assert origin_requests(workers) == after
