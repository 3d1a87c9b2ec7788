"""A node of workers hits as `gateway advise --workers N` replays its own access log, with 1, 2 or
4 workers: N stores of 1/N of each quota, each over the blocks its worker owns (store.hitnotes:
every hit a worker serves from another worker's block reaches that block's owner's eviction
policy, and with CACHE_PROMOTE its promotion).

The workers of a node run here as gateways in this process, each on its own port and its unix
socket, sharing one run folder (tests/integration/test_workers_cache.py); each GET goes to a
worker drawn at random, as the kernel hands connections to the workers of `gateway serve`.
Objects of 64-256 KiB in 256 KiB blocks (one block each), Zipf(0.9) popularity, a budget of a
third of the objects' bytes (all memory, or a quarter of it over a disk tier); the trace is the
`gateway.access` lines they logged, given to `gateway advise`. With 4 workers, at this scale
(some 20 blocks per worker), the split into 4 parts itself costs up to 2 points against one store
(SPLIT_4), which `--workers 4` models; bench/workers_advisor.py runs this at the issue's scale
(600 objects, 6,000 GETs, 32 MiB: 2-4 minutes a case here, docs/advisor.md, "Validation").
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import random
import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from gateway.advisor.trace import read_access_log
from gateway.cli import main
from gateway.config import CacheSettings, DiskTierSettings
from gateway.node.workers import WorkerSet
from tests.advisor.test_against_gateway import Lines
from tests.support import RunningGateway, base_settings, client

KiB = 1024
OBJECTS = 400
GETS = 2500
TOLERANCE = 0.005  # within half a point of the replay of the node's parts
# Workers over a disk tier, some 20-50 blocks each: one block's timing (a promotion noted a moment late)
# moves a part's ratio by more than at the scale, where bench/workers_advisor.py measured
# every case within 0.0008. 0.006 was seen once in CI with 4 workers, and once with 2 (s3fifo, at
# 50b2ac6; 8 runs of each policy here, of that code and of 3bf5e20 before it: 0.0000-0.0044).
TOLERANCE_DISK = 0.01
# Each worker evicts among its own blocks within its share of the quota: a node is N stores over
# N shares of the blocks. At this scale (some 50 blocks per worker) the replay of 2 such parts is
# within 0.013 of one store's for 30 random bucket names (a name moves every block), most within
# 0.005 (docs/advisor.md); the larger the cache, the closer.
SPLIT = 0.015
SPLIT_4 = 0.03  # 4 parts of some 20 blocks each: measured 0.001-0.020 below one store here


@contextlib.contextmanager
def access_log() -> Iterator[list[str]]:
    logger = logging.getLogger("gateway.access")
    handler, level = Lines(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@contextlib.contextmanager
def node(origin_endpoint: str, run_dir: Path, cache: CacheSettings, count: int) -> Iterator[list[RunningGateway]]:
    settings = dataclasses.replace(base_settings(origin_endpoint), cache=cache)
    if count == 1:
        sets = [None]
    else:
        run_dir.mkdir()
        secret = secrets.token_bytes(32)
        sets = [WorkerSet(i, count, str(run_dir), secret) for i in range(count)]
    workers = [RunningGateway(settings, workers=w) for w in sets]
    with contextlib.ExitStack() as stack:
        for worker in workers:
            stack.enter_context(worker)
        yield workers


def origin_gets(workers: list[RunningGateway]) -> int:
    return sum(worker.server.config.app.s3.engine.origin.requests.get("GET", 0) for worker in workers)


def counted(workers: list[RunningGateway]) -> tuple[int, int]:
    """The node's block hits and misses, as its `stats` sums them over the workers."""
    nodes = [worker.server.config.app.admin.node for worker in workers]
    return sum(node.hits for node in nodes), sum(node.misses for node in nodes)


def notes(workers: list[RunningGateway]) -> tuple[int, int]:
    """The hits of other workers' blocks noted to their owners, and the notes lost to full rings."""
    sent = dropped = 0
    for worker in workers:
        for tier in worker.server.config.app.s3.engine.store.stats()["tiers"].values():
            sent, dropped = sent + tier["notes_sent"], dropped + tier["notes_dropped"]
    return sent, dropped


@dataclasses.dataclass(frozen=True)
class NodeRun:
    """What one run of a node measured, and what the advisor says of its access log."""

    live: float  # the node's block hit ratio: 1 - its origin GETs / GETs (one block per object)
    advised: float  # `gateway advise --workers N`'s block hit ratio for the node's store
    one_store: float  # the advisor's replay of the same log as one store (`--workers 1`)
    answered: float  # the share of GETs whose x-cache answer was a hit
    fetched: int  # origin GETs
    hits: int  # the block hits and misses the node counted
    misses: int
    notes_sent: int
    notes_dropped: int
    gets: int  # GETs of the log the advisor read


def advise(log: Path, cache: CacheSettings, budget: int, workers: int) -> float:
    """The block hit ratio `gateway advise` gives the store of `cache` on a node of `workers` workers."""
    shares = "1/4" if cache.disk else "1"
    result = CliRunner().invoke(main, [
        "advise", "--log", str(log), "--budget", str(budget), "--memory-shares", shares, "--policies", cache.policy,
        "--block-size", str(cache.block_size), "--readahead", str(cache.readahead_blocks),
        "--workers", str(workers), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["settings"]["workers"] == workers
    (outcome,) = document["outcomes"]
    assert (outcome["memory_bytes"], outcome["ssd_bytes"]) == (cache.memory_quota, sum(d.quota for d in cache.disk))
    return float(outcome["block_hit_ratio"])


def run_node(origin_endpoint: str, folder: Path, *, policy: str, count: int, disk: bool, objects: int = OBJECTS,
             gets: int = GETS, seed: int = 7) -> NodeRun:
    """A node of `count` workers over moto: `objects` objects of 64-256 KiB in 256 KiB blocks (one
    block each), `gets` Zipf(0.9) GETs each sent to a worker drawn at random, a budget of a third
    of the objects' bytes (all memory, or a quarter of it over a disk tier, CACHE_PROMOTE); then
    its access log through `gateway advise`."""
    rng = random.Random(seed)
    sizes = {f"obj-{i:03d}": rng.randrange(64 * KiB, 256 * KiB) for i in range(objects)}
    origin = client(origin_endpoint, ("origin-key", "origin-secret"))
    bucket = f"one-cache-{uuid.uuid4().hex[:10]}"
    origin.create_bucket(Bucket=bucket)
    for key, size in sizes.items():
        origin.put_object(Bucket=bucket, Key=key, Body=rng.randbytes(size))
    budget = sum(sizes.values()) // 3
    budget -= budget % (16 * KiB)
    disks = (DiskTierSettings(str(folder / "disk"), budget - budget // 4),) if disk else ()
    cache = CacheSettings(block_size=256 * KiB, policy=policy, memory_quota=budget // 4 if disk else budget,
                          disk=disks, readahead_blocks=0, shadow_rate=0)
    keys = list(sizes)
    rng.shuffle(keys)
    weights = [1 / (rank + 1) ** 0.9 for rank in range(len(keys))]
    with access_log() as lines, node(origin_endpoint, folder / "run", cache, count) as workers:
        s3 = [client(worker.endpoint) for worker in workers]
        for key in rng.choices(keys, weights, k=gets):
            body = rng.choice(s3).get_object(Bucket=bucket, Key=key)["Body"].read()
            assert len(body) == sizes[key]
        sent, dropped = notes(workers)
        fetched = origin_gets(workers)
        hits, misses = counted(workers)
    log = folder / "access.log"
    log.write_text("".join(line + "\n" for line in lines))
    reads = [read for read in read_access_log(lines).reads if read.bucket == bucket]
    answered = sum(1 for read in reads if read.cache in ("hit-mem", "hit-disk")) / len(reads)
    return NodeRun(live=1 - fetched / gets, advised=advise(log, cache, budget, count),
                   one_store=advise(log, cache, budget, 1), answered=answered, fetched=fetched, hits=hits,
                   misses=misses, notes_sent=sent, notes_dropped=dropped, gets=len(reads))


@pytest.mark.parametrize("policy", ["lru", "s3fifo"])
@pytest.mark.parametrize("count", [1, 2, 4])
@pytest.mark.parametrize("disk", [False, True], ids=["memory", "memory+disk"])
def test_a_node_of_workers_hits_as_the_advisor_replays_its_log(
    origin_endpoint: str, clean_origin: str, tmp_path: Path, policy: str, count: int, disk: bool,
) -> None:
    run = run_node(origin_endpoint, tmp_path, policy=policy, count=count, disk=disk)
    print(f"{policy}, {count} workers, {'memory+disk' if disk else 'memory'}: live {run.live:.4f} (x-cache "
          f"{run.answered:.4f}), advise --workers {count} {run.advised:.4f}, one store {run.one_store:.4f}; "
          f"notes {run.notes_sent} sent, {run.notes_dropped} dropped")
    # Every block read counted once, as a hit or a miss, and a miss is an origin GET. (Before, an
    # owner asked for a cold object's block it did not hold counted a miss, and the asker counted
    # it again when it read the block from the origin: 60 misses too many in 2,500 reads.)
    # Within 2 of 2,500: a read racing a block another worker lends its owner at that moment may be
    # counted a miss that the lent block then answers, or a miss and then a hit (seen once or twice
    # in a dozen runs under load).
    assert abs(run.hits + run.misses - GETS) <= 2 and abs(run.misses - run.fetched) <= 2, run
    assert run.gets == GETS
    assert (run.notes_sent > 0) == (count > 1) and run.notes_dropped == 0
    # One block per object, fetched with one origin GET when missed: the node's block hit ratio is
    # what `gateway advise --workers N` says of its log.
    assert abs(run.live - run.advised) <= (TOLERANCE_DISK if count > 1 and disk else TOLERANCE) + 1e-9  # (a ratio's float)
    assert abs(run.live - run.one_store) <= {1: TOLERANCE, 2: SPLIT, 4: SPLIT_4}[count]
    # The x-cache answers say the same: a block read from another worker's file on a disk is a hit
    # (gateway/engine/xcache.py; before, 0.52-0.59 answered hits against 0.64-0.69 served with a disk).
    assert abs(run.answered - run.live) <= TOLERANCE
