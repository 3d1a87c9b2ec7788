"""The simulator makes the live store's moves: the same tier answers every read, for both
policies, with and without promotion, across memory + two disk tiers."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from gateway.advisor.simulate import BlockNames, SimNode, SimStore, StoreSpec, TierSpec, replay, tiers_for
from gateway.advisor.synth import zipf_reads
from gateway.advisor.trace import Read
from gateway.node.workers import placement
from gateway.store.blocks import BlockId
from gateway.store.disk import DiskTier
from gateway.store.memory import MemoryTier
from gateway.store.policy import make_policy
from gateway.store.tiers import TieredStore

KiB = 1024


@pytest.mark.parametrize("policy", ["lru", "s3fifo"])
@pytest.mark.parametrize("promote", [True, False])
async def test_simulator_matches_the_tiered_store_step_by_step(tmp_path: Path, policy: str, promote: bool) -> None:
    quotas = {"mem": 24 * KiB, "disk0": 64 * KiB, "disk1": 96 * KiB}
    memory = MemoryTier(quotas["mem"], make_policy(policy, quotas["mem"]))
    disks = [DiskTier(str(tmp_path / name), quotas[name], make_policy(policy, quotas[name]), name=name,
                      medium="ssd" if name == "disk0" else "hdd") for name in ("disk0", "disk1")]
    live = TieredStore(memory, disks, promote=promote)
    await live.open()
    sim = SimStore(StoreSpec((TierSpec("mem", "memory", quotas["mem"]), TierSpec("disk0", "ssd", quotas["disk0"]),
                              TierSpec("disk1", "hdd", quotas["disk1"])), policy, 4 * KiB, promote))
    names = ["mem", "disk0", "disk1"]
    rng = random.Random(7)
    try:
        for step in range(1500):
            key = f"k{min(int(rng.paretovariate(0.8)), 80)}"
            size = 1 * KiB + (hash(key) % 4) * KiB  # a block's size is fixed by its name
            block = BlockId("b", key, "v", 0)
            got = await live.get(block)
            level = sim.get(block.name)
            assert (got[1] if got else None) == (names[level] if level >= 0 else None), f"step {step}"
            if got is None:
                await live.put(block, bytes(size))
                sim.put(block.name, size)
            for tier, simulated in zip(live.levels, sim.levels):
                assert {b.name for b in tier} == set(simulated.sizes), f"step {step}: {tier.name}"
        assert (live.promotions, live.demotions) == (sim.promotions, sim.demotions)
    finally:
        await live.aclose()


def test_x_cache_answers_and_byte_accounting() -> None:
    block = 1024**2
    spec = StoreSpec(tiers_for(2 * block, 4 * block), "lru", block, promote=True, readahead=0)
    reads = [
        Read("b", "a", 0, 0, 3 * block - 1, 3 * block),  # miss, 3 blocks
        Read("b", "a", 0, 0, block - 1, 3 * block),  # block 0: demoted to SSD by blocks 1, 2 -> hit-disk
        Read("b", "a", 0, 2 * block, 3 * block - 1, 3 * block),  # block 2 still in memory -> hit-mem
        Read("b", "a", 0, block // 2, 4 * block - 1, 4 * block),  # block 3 never seen -> partial
    ]
    c = replay(reads, spec)
    assert c.answers == {"hit-mem": 1, "hit-disk": 1, "partial": 1, "miss": 1}
    assert c.reads == 4 and c.block_reads == 3 + 1 + 1 + 4
    assert c.read_bytes == 3 * block + block + block + (4 * block - block // 2)
    assert c.miss_bytes == 3 * block + block  # the first read and block 3 of the last
    # One origin request per stretch of blocks a read missed: the first read's three, then block 3.
    assert c.origin_requests == 2 and c.origin_bytes == 4 * block


def test_short_last_blocks_and_readahead_of_sequential_readers() -> None:
    block = 1024**2
    size = 5 * block + 10
    spec = StoreSpec(tiers_for(0, 64 * block), "s3fifo", block, readahead=2)
    reads = [Read("b", "seq", 0, 0, block - 1, size), Read("b", "seq", 0, block, 2 * block - 1, size),
             Read("b", "seq", 0, 2 * block, 3 * block - 1, size), Read("b", "seq", 0, 3 * block, size - 1, size)]
    c = replay(reads, spec)
    # The second read follows the first: blocks 2 and 3 are fetched ahead, so reads 3 and 4
    # find them; block 4 (10 bytes long) is fetched ahead by the third read.
    assert c.answers["miss"] == 2 and c.answers["hit-disk"] == 1 and c.answers["partial"] == 1
    assert c.prefetches == 3
    assert c.origin_bytes == size  # every block once, the last one 10 bytes


def test_a_parquet_read_fetches_the_footer_block() -> None:
    block = 1024**2
    spec = StoreSpec(tiers_for(0, 64 * block), "lru", block, readahead=0)
    c = replay([Read("b", "t.parquet", 0, 0, 99, 8 * block), Read("b", "t.parquet", 0, 8 * block - 8, 8 * block - 1, 8 * block)],
               spec)
    assert c.answers == {"hit-mem": 0, "hit-disk": 1, "partial": 0, "miss": 1}


def test_a_new_version_misses() -> None:
    spec = StoreSpec(tiers_for(0, 1024**3), "lru")
    c = replay([Read("b", "k", 0, 0, 99, 100), Read("b", "k", 1, 0, 99, 100), Read("b", "k", 1, 0, 99, 100)], spec)
    assert c.answers["miss"] == 2 and c.answers["hit-disk"] == 1


def test_no_memory_tier_means_hits_are_hit_disk() -> None:
    spec = StoreSpec(tiers_for(0, 1024**3), "lru")
    c = replay([Read("b", "k", 0, 0, 99, 100)] * 2, spec)
    assert c.answers["hit-disk"] == 1 and c.answers["hit-mem"] == 0


@pytest.mark.parametrize("policy", ["lru", "s3fifo"])
@pytest.mark.parametrize("workers", [2, 3, 4])
def test_a_node_of_workers_is_its_parts_each_over_its_own_blocks(policy: str, workers: int) -> None:
    """StoreSpec.workers: each block in its owner's store (the node's placement), each store 1/N
    of every quota; with one block per object, the node's replay is each part's share of the
    trace replayed into a store of 1/N, added up."""
    reads = zipf_reads(4000, 600, object_size=(16 * KiB, 64 * KiB), seed=3)
    spec = StoreSpec(tiers_for(256 * KiB, 1024 * KiB), policy, 64 * KiB, True, 0)
    node = replay(reads, dataclasses.replace(spec, workers=workers))
    part = StoreSpec(tuple(TierSpec(t.name, t.medium, t.quota // workers) for t in spec.tiers), policy, 64 * KiB,
                     True, 0)
    parts = [replay([r for r in reads if placement(r.bucket, r.key, 0) % workers == i], part) for i in range(workers)]
    assert node.miss_blocks == sum(p.miss_blocks for p in parts)
    assert node.block_hits == [sum(p.block_hits[level] for p in parts) for level in range(2)]
    assert node.answers == {answer: sum(p.answers[answer] for p in parts) for answer in node.answers}
    assert node.promotions == sum(p.promotions for p in parts) > 0
    one = replay(reads, spec)
    assert node.miss_blocks != one.miss_blocks  # the split is a different cache


def test_a_node_keeps_each_block_of_an_object_in_its_owners_part() -> None:
    spec = StoreSpec(tiers_for(12288 * KiB, 0), "lru", 64 * KiB, True, 0, workers=3)
    names = BlockNames()
    reads = [Read("b", f"k{i}", 0, 0, 1024 * KiB - 1, 1024 * KiB) for i in range(4)]  # 16 blocks each
    counters = replay(reads + reads, spec, names=names)
    assert counters.miss_blocks == 64 and counters.origin_requests == 4  # a stretch of misses is one request
    assert counters.block_hits == [64] and counters.answers == {"hit-mem": 4, "hit-disk": 0, "partial": 0, "miss": 4}
    node = SimNode(spec)
    assert [part.spec.tiers[0].quota for part in node.parts] == [4096 * KiB] * 3
    owners = {}
    for read in reads:
        for index, store in zip(range(16), node.owners(read.bucket, read.key, range(16), names)):
            owners[names[(read.bucket, read.key, "0", index)]] = placement(read.bucket, read.key, index) % 3
            store.put(names[(read.bucket, read.key, "0", index)], 64 * KiB)
    assert len(set(owners.values())) == 3
    for name, owner in owners.items():
        assert [name in part for part in node.parts] == [i == owner for i in range(3)]
