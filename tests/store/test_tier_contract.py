"""One contract for every tier: MemoryTier and DiskTier must behave alike."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from gateway.store.blocks import BlockId
from gateway.store.disk import DiskTier
from gateway.store.memory import MemoryTier
from gateway.store.policy import make_policy
from gateway.store.tier import Tier
from tests.store.helpers import bid, lru_order, payload

MakeTier = Callable[..., Awaitable[Tier]]


@pytest.fixture(params=["memory", "disk"])
async def make_tier(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MakeTier]:
    disks: list[DiskTier] = []

    async def make(quota: int, policy: str = "lru") -> Tier:
        if request.param == "memory":
            return MemoryTier(quota, make_policy(policy, quota))
        disk = DiskTier(str(tmp_path / f"disk{len(disks)}"), quota, make_policy(policy, quota), name=f"disk{len(disks)}")
        disks.append(disk)
        await disk.open()
        return disk

    yield make
    for disk in disks:
        await disk.aclose()


async def test_put_get_round_trip_and_misses(make_tier: MakeTier) -> None:
    tier = await make_tier(1000)
    a, b = bid("a"), bid("b")
    assert await tier.put(a, payload(a, 100)) == []
    assert await tier.get(a) == payload(a, 100)
    assert await tier.get(b) is None
    assert (tier.stats.hits, tier.stats.misses) == (1, 1)
    assert a in tier and b not in tier
    assert list(tier) == [a] and len(tier) == 1
    assert tier.used == 100


async def test_touch_counts_a_hit_of_a_held_block_and_nothing_else(make_tier: MakeTier) -> None:
    tier = await make_tier(1000)
    a, b = bid("a"), bid("b")
    await tier.put(a, payload(a, 100))
    await tier.put(b, payload(b, 100))
    assert tier.touch(a) is True and tier.touch(bid("c")) is False
    assert (tier.stats.hits, tier.stats.misses) == (1, 0)
    assert lru_order(tier.policy) == [b.name, a.name]  # type: ignore[attr-defined]  # (the policy saw the hit)


async def test_empty_block(make_tier: MakeTier) -> None:
    tier = await make_tier(10)
    a = bid("empty")
    await tier.put(a, b"")
    assert await tier.get(a) == b""


async def test_put_of_a_held_block_is_a_no_op(make_tier: MakeTier) -> None:
    tier = await make_tier(1000)
    a = bid("a")
    await tier.put(a, payload(a, 100))
    assert await tier.put(a, payload(a, 100)) == []
    assert tier.used == 100 and len(tier) == 1


async def test_remove(make_tier: MakeTier) -> None:
    tier = await make_tier(1000)
    a, b = bid("a"), bid("b")
    await tier.put(a, payload(a, 100))
    await tier.put(b, payload(b, 50))
    assert await tier.remove(a) is True
    assert await tier.remove(a) is False
    assert await tier.get(a) is None
    assert await tier.get(b) == payload(b, 50)
    assert tier.used == 50 and list(tier) == [b]


async def test_a_block_larger_than_the_quota_is_not_stored(make_tier: MakeTier) -> None:
    tier = await make_tier(100)
    small, exact, big = bid("small"), bid("exact"), bid("big")
    await tier.put(small, payload(small, 10))
    assert await tier.put(big, payload(big, 101)) == []
    assert big not in tier and small in tier  # nothing was evicted for it either
    await tier.put(exact, payload(exact, 100))
    assert exact in tier and small not in tier
    assert tier.used == 100


async def test_lru_eviction_order(make_tier: MakeTier) -> None:
    tier = await make_tier(30, "lru")
    a, b, c, d, e = (bid(k) for k in "abcde")
    for block in (a, b, c):
        assert await tier.put(block, payload(block, 10)) == []
    await tier.get(a)
    assert await tier.put(d, payload(d, 10)) == [b]
    assert await tier.put(e, payload(e, 10)) == [c]
    assert {*tier} == {a, d, e}
    assert tier.stats.evictions == 2
    # A larger block takes as many victims as it needs, oldest first.
    f = bid("f")
    assert await tier.put(f, payload(f, 25)) == [a, d, e]
    assert tier.used == 25


async def test_refused_blocks_are_never_evicted(make_tier: MakeTier) -> None:
    tier = await make_tier(30)
    tier.evictable = lambda block_id: not block_id.key.startswith("pin/")
    pinned = [bid("pin/1"), bid("pin/2")]
    for block in pinned:
        await tier.put(block, payload(block, 10))
    for i in range(10):
        block = bid(f"cold/{i}")
        await tier.put(block, payload(block, 10))
        assert all(p in tier for p in pinned)
        assert tier.used <= tier.quota
    # Only pinned blocks left to evict: a block that needs more room is not stored.
    big = bid("cold/big")
    await tier.put(big, payload(big, 20))
    assert big not in tier and all(p in tier for p in pinned)


@pytest.mark.parametrize("policy", ["lru", "s3fifo"])
async def test_the_tier_evicts_what_its_policy_chooses_and_stays_within_quota(make_tier: MakeTier, policy: str) -> None:
    quota = 60
    tier = await make_tier(quota, policy)
    shadow = make_policy(policy, quota)
    sizes: dict[BlockId, int] = {}
    rng = random.Random(3)
    for step in range(400):
        block = bid(f"k{rng.randrange(25)}", rng.randrange(2))
        if rng.random() < 0.5:
            data = await tier.get(block)
            if block in sizes:
                assert data == payload(block, sizes[block])
                shadow.access(block.name)
            else:
                assert data is None
            continue
        if block in sizes:
            assert await tier.put(block, payload(block, sizes[block])) == []
            continue
        size = rng.randrange(1, 25)
        expected = []
        while sum(sizes.values()) + size > quota:
            victim = shadow.victim()
            assert victim is not None
            found = next(b for b in sizes if b.name == victim)
            expected.append(found)
            del sizes[found]
        shadow.insert(block.name, size)
        sizes[block] = size
        assert await tier.put(block, payload(block, size)) == expected, step
        assert tier.used == sum(sizes.values()) <= quota
        assert set(tier) == set(sizes)


async def test_put_demoting_hands_back_the_victims_with_their_bytes(make_tier: MakeTier) -> None:
    tier = await make_tier(250)
    a, b, c = bid("a"), bid("b"), bid("c")
    await tier.put(a, payload(a, 100))
    await tier.put(b, payload(b, 100))
    assert await tier.put_demoting(c, payload(c, 200)) == [(a, payload(a, 100)), (b, payload(b, 100))]
    assert list(tier) == [c] and tier.used == 200
    assert tier.age(c) is None or tier.age(c) >= 0
