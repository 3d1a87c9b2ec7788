"""store.tiers: demotion, promotion, pinning, TTLs, purges and quotas across the levels."""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.store.blocks import BlockId
from gateway.store.disk import DiskTier
from gateway.store.memory import MemoryTier
from gateway.store.policy import make_policy
from gateway.store.tiers import TieredStore
from tests.store.helpers import Clock, FullDisk, GatedDisk, ReadCountingDisk, bid, files_under, lru_order, payload

BLOCK = 10

MakeStore = Callable[..., Awaitable[TieredStore]]


async def build_store(
    root: Path,
    quotas: tuple[int, ...] = (2 * BLOCK, 2 * BLOCK, 2 * BLOCK),
    *,
    memory: bool = True,
    policy: str = "lru",
    disk_classes: tuple[type[DiskTier], ...] = (),
    **kwargs: object,
) -> TieredStore:
    levels = list(quotas)
    mem = MemoryTier(levels.pop(0), make_policy(policy, quotas[0])) if memory else None
    disks = []
    for n, quota in enumerate(levels):
        cls = disk_classes[n] if n < len(disk_classes) else DiskTier
        disks.append(cls(str(root / f"disk{n}"), quota, make_policy(policy, quota), name=f"disk{n}", medium="ssd" if n == 0 else "hdd"))
    store = TieredStore(mem, disks, **kwargs)  # type: ignore[arg-type]
    await store.open()
    return store


@pytest.fixture
async def stores(tmp_path: Path) -> AsyncIterator[MakeStore]:
    made: list[TieredStore] = []

    async def make(*args: object, **kwargs: object) -> TieredStore:
        store = await build_store(tmp_path, *args, **kwargs)  # type: ignore[arg-type]
        made.append(store)
        return store

    yield make
    for store in made:
        await store.aclose()


def where(store: TieredStore, block_id: BlockId) -> list[str]:
    return [tier.name for tier in store.levels if block_id in tier]


def assert_within_quotas(store: TieredStore) -> None:
    for tier in store.levels:
        assert tier.used <= tier.quota, tier


# --- demotion ------------------------------------------------------------------------------------


async def test_demotion_chain_mem_disk0_disk1_then_freed(stores: MakeStore) -> None:
    store = await stores(promote=False)
    blocks = [bid(f"k{i}") for i in range(10)]
    for block in blocks:
        await store.put(block, payload(block, BLOCK))
        assert_within_quotas(store)
    assert [where(store, b) for b in blocks] == [[]] * 4 + [["disk1"]] * 2 + [["disk0"]] * 2 + [["mem"]] * 2
    for block, tier in [(blocks[9], "mem"), (blocks[7], "disk0"), (blocks[5], "disk1")]:
        assert await store.get(block) == (payload(block, BLOCK), tier)
    assert await store.get(blocks[0]) is None
    stats = store.stats()
    assert stats["freed"] == 4 and stats["misses"] == 1 and stats["hits"] == 3
    assert stats["tiers"]["disk1"]["evictions"] == 4
    # Nothing leaked on disk: one file per block held.
    for disk in store.disks:
        assert len(files_under(disk.path)) == len(disk)


async def test_a_load_larger_than_the_whole_cache(stores: MakeStore) -> None:
    store = await stores((500, 1000, 2000), policy="s3fifo")
    for i in range(600):
        block = bid(f"obj{i % 150}", i)
        await store.put(block, payload(block, 1 + (i * 37) % 120))
        assert_within_quotas(store)
        if i % 3 == 0:
            hit = await store.get(bid(f"obj{(i * 7) % 150}", i // 2))
            assert hit is None or hit[0] == payload(bid(f"obj{(i * 7) % 150}", i // 2), len(hit[0]))
    assert store.stats()["freed"] > 0


async def test_a_failing_disk_is_skipped_by_demotion(stores: MakeStore) -> None:
    store = await stores(disk_classes=(FullDisk,), promote=False)
    blocks = [bid(f"k{i}") for i in range(4)]
    for block in blocks:
        await store.put(block, payload(block, BLOCK))
    assert [where(store, b) for b in blocks] == [["disk1"], ["disk1"], ["mem"], ["mem"]]
    assert not store.stats()["tiers"]["disk0"]["healthy"]


async def test_a_block_the_memory_tier_cannot_hold_goes_to_disk(stores: MakeStore) -> None:
    store = await stores((BLOCK, 5 * BLOCK, 5 * BLOCK))
    big = bid("big")
    await store.put(big, payload(big, 3 * BLOCK))
    assert where(store, big) == ["disk0"]
    assert await store.get(big) == (payload(big, 3 * BLOCK), "disk0")  # promotion cannot take it either
    assert where(store, big) == ["disk0"]


async def _wait_until(condition: Callable[[], bool]) -> None:
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("not within 10 s")


@pytest.mark.parametrize("memory", [True, False])
async def test_a_block_on_its_way_down_a_level_is_held_and_read_not_missed(stores: MakeStore, memory: bool) -> None:
    # A put evicts A from the top level; A goes down a level in the disk tiers' threads, held there
    # at the gate: with a memory tier, A is being written to disk0; without, disk0 read A back and
    # is writing the new block, A to go to disk1 then. Meanwhile no level's index holds A. Before,
    # `in` said no and `get` missed: the engine fetched A again from the origin.
    store = await stores((BLOCK, BLOCK, 2 * BLOCK) if memory else (BLOCK, 2 * BLOCK), memory=memory,
                         disk_classes=(GatedDisk,), promote=False)
    gated = store.disks[0]
    assert isinstance(gated, GatedDisk)
    a, b = bid("a"), bid("b")
    if not memory:
        gated.gate.set()
    await store.put(a, payload(a, BLOCK))
    gated.gate.clear()
    gated.writing.clear()
    putting = asyncio.ensure_future(store.put(b, payload(b, BLOCK)))
    await _wait_until(gated.writing.is_set)
    assert where(store, a) == [] and a in store
    reading = asyncio.ensure_future(store.get(a))
    await asyncio.sleep(0.05)
    assert not reading.done()  # it waits for the put
    gated.gate.set()
    assert await reading == (payload(a, BLOCK), "disk0" if memory else "disk1")
    await putting
    assert store.stats()["misses"] == 0 and a in store


async def test_a_read_of_a_block_no_put_is_moving_does_not_wait(stores: MakeStore) -> None:
    store = await stores((BLOCK, BLOCK, 2 * BLOCK), disk_classes=(GatedDisk,), promote=False)
    gated = store.disks[0]
    assert isinstance(gated, GatedDisk)
    a, b = bid("a"), bid("b")
    await store.put(a, payload(a, BLOCK))
    putting = asyncio.ensure_future(store.put(b, payload(b, BLOCK)))  # A on its way to disk0, held
    await _wait_until(gated.writing.is_set)
    assert await asyncio.wait_for(store.get(bid("other")), 1) is None and bid("other") not in store
    gated.gate.set()
    await putting


# --- promotion -----------------------------------------------------------------------------------


async def test_promotion_copies_a_lower_hit_into_memory(stores: MakeStore) -> None:
    store = await stores(promote=True)
    blocks = [bid(f"k{i}") for i in range(6)]
    for block in blocks:
        await store.put(block, payload(block, BLOCK))
    assert where(store, blocks[0]) == ["disk1"]
    assert await store.get(blocks[0]) == (payload(blocks[0], BLOCK), "disk1")
    assert where(store, blocks[0]) == ["mem", "disk1"]  # a copy: the lower one stays
    assert await store.get(blocks[0]) == (payload(blocks[0], BLOCK), "mem")
    # Promotion demoted memory's oldest (k4) into disk0, whose oldest (k2) went to disk1,
    # whose oldest (k1) was freed.
    assert where(store, blocks[4]) == ["disk0"]
    assert where(store, blocks[2]) == ["disk1"]
    assert where(store, blocks[1]) == []
    assert store.stats()["promotions"] == 1
    assert_within_quotas(store)


async def test_a_hit_without_an_await_leaves_promotion_to_get(stores: MakeStore) -> None:
    # get_now (the hit path below ASGI) answers from memory, and from a disk when nothing is to be
    # promoted; a block get would copy into memory is get's to answer.
    store = await stores(promote=True)
    blocks = [bid(f"k{i}") for i in range(6)]
    for block in blocks:
        await store.put(block, payload(block, BLOCK))
    assert store.get_now(blocks[0]) is None and where(store, blocks[0]) == ["disk1"]
    assert await store.get(blocks[0]) == (payload(blocks[0], BLOCK), "disk1")
    assert store.get_now(blocks[0]) == (payload(blocks[0], BLOCK), "mem")
    assert store.get_now(bid("never-stored")) is None
    unpromoted = await stores(promote=False)
    for block in blocks:
        await unpromoted.put(block, payload(block, BLOCK))
    assert unpromoted.get_now(blocks[0]) == (payload(blocks[0], BLOCK), "disk1")


async def test_touch_counts_a_hit_without_reading_and_promotes_with_the_bytes_given(stores: MakeStore) -> None:
    # A block whose bytes the caller has (a run brought it again): its tier's hit, the tier's policy
    # told, no file read; promoted as get promotes it when the bytes come with it.
    store = await stores(promote=True, disk_classes=(ReadCountingDisk, ReadCountingDisk))
    blocks = [bid(f"k{i}") for i in range(6)]
    for block in blocks:
        await store.put(block, payload(block, BLOCK))
    disk1 = store.disks[1]
    assert isinstance(disk1, ReadCountingDisk) and where(store, blocks[0]) == ["disk1"]
    assert await store.touch(bid("never-stored")) is None and store.stats()["hits"] == 0
    assert await store.touch(blocks[0]) == "disk1" and where(store, blocks[0]) == ["disk1"]  # no bytes: not promoted
    assert disk1.stats.hits == 1 and disk1.reads == 0
    assert lru_order(disk1.policy)[-1] == blocks[0].name  # the policy saw the hit
    assert await store.touch(blocks[0], payload(blocks[0], BLOCK)) == "disk1"
    assert where(store, blocks[0]) == ["mem", "disk1"] and store.stats()["promotions"] == 1
    assert await store.touch(blocks[0]) == "mem" and store.stats()["hits"] == 3
    assert await store.get(blocks[0]) == (payload(blocks[0], BLOCK), "mem")


async def test_promotion_off_leaves_blocks_where_they_are(stores: MakeStore) -> None:
    store = await stores(promote=False)
    blocks = [bid(f"k{i}") for i in range(6)]
    for block in blocks:
        await store.put(block, payload(block, BLOCK))
    for _ in range(3):
        assert await store.get(blocks[0]) == (payload(blocks[0], BLOCK), "disk1")
    assert where(store, blocks[0]) == ["disk1"]
    assert store.stats()["promotions"] == 0


async def test_promotion_without_a_memory_tier_goes_to_the_first_disk(stores: MakeStore) -> None:
    store = await stores((2 * BLOCK, 2 * BLOCK), memory=False)
    blocks = [bid(f"k{i}") for i in range(4)]
    for block in blocks:
        await store.put(block, payload(block, BLOCK))
    assert await store.get(blocks[0]) == (payload(blocks[0], BLOCK), "disk1")
    assert where(store, blocks[0]) == ["disk0", "disk1"]


async def test_removal_removes_every_copy(stores: MakeStore) -> None:
    store = await stores()
    blocks = [bid(f"k{i}") for i in range(6)]
    for block in blocks:
        await store.put(block, payload(block, BLOCK))
    await store.get(blocks[0])
    assert len(where(store, blocks[0])) == 2
    assert await store.remove(blocks[0]) is True
    assert where(store, blocks[0]) == [] and await store.get(blocks[0]) is None
    assert await store.remove(blocks[0]) is False


# --- pinning -------------------------------------------------------------------------------------


async def test_pinned_blocks_survive_pressure(stores: MakeStore) -> None:
    store = await stores((2 * BLOCK, 3 * BLOCK, 2 * BLOCK), pinned=(("bkt", "hot/"),), promote=False)
    hot = [bid("hot/a"), bid("hot/b")]
    for block in hot:
        await store.put(block, payload(block, BLOCK))
    for i in range(50):
        block = bid(f"cold/{i}")
        await store.put(block, payload(block, BLOCK))
        assert_within_quotas(store)
        assert all(where(store, h) == ["mem"] for h in hot)
    # Memory holds only pinned blocks, so cold blocks start one level down.
    assert where(store, bid("cold/49")) == ["disk0"]
    assert store.is_pinned(hot[0]) and not store.is_pinned(bid("hot")) and not store.is_pinned(bid("hot/a", bucket="other"))


async def test_runtime_pins_come_and_go_and_configured_pins_stay(stores: MakeStore) -> None:
    store = await stores((2 * BLOCK,), pinned=(("bkt", "conf/"),), promote=False)
    store.set_pinned([("bkt", "hot/"), ("bkt", "conf/")])
    assert store.pinned == [("bkt", "conf/"), ("bkt", "hot/")]
    hot = bid("hot/a")
    await store.put(hot, payload(hot, BLOCK))
    for i in range(5):
        await store.put(bid(f"cold/{i}"), payload(bid(f"cold/{i}"), BLOCK))
    assert hot in store  # pinned at runtime: never the victim
    store.set_pinned([])
    assert store.pinned == [("bkt", "conf/")] and store.is_pinned(bid("conf/x"))
    for i in range(5, 10):
        await store.put(bid(f"cold/{i}"), payload(bid(f"cold/{i}"), BLOCK))
    assert hot not in store  # unpinned: evictable again


async def test_pinned_blocks_are_pinned_in_every_tier(stores: MakeStore) -> None:
    store = await stores((BLOCK, 2 * BLOCK, 2 * BLOCK), pinned=(("bkt", "hot/"),), promote=False)
    hot = bid("hot/a")
    await store.put(hot, payload(hot, BLOCK))
    await store.put(bid("x"), payload(bid("x"), BLOCK))  # hot is pinned in mem: x goes to disk0
    assert where(store, hot) == ["mem"]
    # Once in a disk tier (a purge of memory, say), it stays there too.
    assert store.memory is not None
    await store.memory.remove(hot)
    await store.disks[0].put(hot, payload(hot, BLOCK))
    for i in range(20):
        await store.put(bid(f"c{i}"), payload(bid(f"c{i}"), BLOCK))
    assert where(store, hot) == ["disk0"]


# --- TTL -----------------------------------------------------------------------------------------


async def test_ttl_expires_on_get_and_by_sweep(stores: MakeStore) -> None:
    clock = Clock()
    store = await stores((5 * BLOCK, 5 * BLOCK, 5 * BLOCK), ttl=(("bkt", "tmp/", 10.0), ("bkt", "tmp/long/", 100.0)), clock=clock)
    short, long, forever = bid("tmp/a"), bid("tmp/long/a"), bid("keep/a")
    for block in (short, long, forever):
        await store.put(block, payload(block, BLOCK))
    clock.now += 5
    assert (await store.get(short)) is not None
    clock.now += 6
    assert await store.get(short) is None  # 11 s old
    assert where(store, short) == []
    assert await store.get(long) is not None and await store.get(forever) is not None  # the most specific rule wins
    assert store.stats()["expired"] == 1

    c, d = bid("tmp/c"), bid("tmp/d")
    await store.put(c, payload(c, BLOCK))
    clock.now += 4
    await store.put(d, payload(d, BLOCK))
    clock.now += 7  # c is 11 s old, d 7 s
    assert await store.expire() == 1
    assert where(store, c) == [] and where(store, d) != []
    clock.now += 200
    assert await store.expire() == 2  # d, and the long one
    assert where(store, forever) != [] and store.stats()["expired"] == 4
    assert await store.touch(long) is None and store.stats()["expired"] == 4  # swept already
    soon = bid("tmp/soon")
    await store.put(soon, payload(soon, BLOCK))
    clock.now += 11
    assert await store.touch(soon) is None and where(store, soon) == []  # past its TTL: removed, as get does
    assert store.stats()["expired"] == 5


async def test_a_refetched_block_gets_a_fresh_ttl(stores: MakeStore) -> None:
    clock = Clock()
    store = await stores(ttl=(("bkt", "", 10.0),), clock=clock)
    block = bid("k")
    await store.put(block, payload(block, BLOCK))
    clock.now += 11
    assert await store.get(block) is None
    await store.put(block, payload(block, BLOCK))
    clock.now += 5
    assert await store.get(block) is not None


async def test_ttl_counts_the_age_of_blocks_found_on_disk_at_start(tmp_path: Path) -> None:
    disk = DiskTier(str(tmp_path / "d"), 1000, make_policy("lru", 1000), name="disk0")
    await disk.open()
    old, new = bid("tmp/old"), bid("tmp/new")
    await disk.put(old, payload(old, BLOCK))
    await disk.put(new, payload(new, BLOCK))
    await disk.aclose()
    past = time.time() - 100
    os.utime(disk.block_path(old.name), (past, past))

    reopened = DiskTier(str(tmp_path / "d"), 1000, make_policy("lru", 1000), name="disk0")
    store = TieredStore(None, [reopened], ttl=(("bkt", "tmp/", 50.0),))
    try:
        await store.open()
        assert await store.get(old) is None
        assert await store.get(new) is not None
    finally:
        await store.aclose()


# --- purge and stats -----------------------------------------------------------------------------


async def test_evict_prefix_removes_matching_blocks_from_every_tier(stores: MakeStore) -> None:
    store = await stores((3 * BLOCK, 3 * BLOCK, 3 * BLOCK), pinned=(("bkt", "a/"),))
    a_blocks = [bid("a/x", i) for i in range(4)]
    others = [bid("b/x", 0), bid("a/x", 0, bucket="other")]
    for block in [*a_blocks, *others]:
        await store.put(block, payload(block, BLOCK))
    await store.get(a_blocks[0])  # promoted: two copies of one block
    assert await store.evict_prefix("bkt", "a/") == 4  # pinned or not: a purge is a purge
    assert all(where(store, b) == [] for b in a_blocks)
    assert all(where(store, b) != [] for b in others)
    assert await store.evict_prefix("bkt", "a/") == 0


async def test_stats_shape(stores: MakeStore) -> None:
    store = await stores()
    block = bid("k")
    await store.put(block, payload(block, BLOCK))
    await store.get(block)
    await store.get(bid("missing"))
    stats = store.stats()
    assert list(stats["tiers"]) == ["mem", "disk0", "disk1"]
    assert stats["tiers"]["mem"] == {
        "medium": "memory", "used": BLOCK, "quota": 2 * BLOCK, "blocks": 1, "healthy": True,
        "hits": 1, "page_cache_hits": 0, "misses": 1, "evictions": 0, "rejected": 0, "bad_blocks": 0, "read_errors": 0, "write_errors": 0,
        "notes_sent": 0, "notes_dropped": 0, "notes_taken": 0,
    }
    assert stats["tiers"]["disk1"]["medium"] == "hdd"
    assert (stats["hits"], stats["misses"]) == (1, 1)


async def test_tier_names_must_be_distinct(tmp_path: Path) -> None:
    disk = DiskTier(str(tmp_path), 10, make_policy("lru", 10), name="mem")
    try:
        with pytest.raises(ValueError, match="distinct"):
            TieredStore(MemoryTier(10, make_policy("lru", 10)), [disk])
    finally:
        await disk.aclose()


async def test_a_bad_block_in_a_lower_tier_is_a_miss_then_refetched(stores: MakeStore) -> None:
    store = await stores(promote=False)
    blocks = [bid(f"k{i}") for i in range(3)]
    for block in blocks:
        await store.put(block, payload(block, BLOCK))
    assert where(store, blocks[0]) == ["disk0"]
    path = store.disks[0].block_path(blocks[0].name)
    Path(path).write_bytes(Path(path).read_bytes()[:-1] + b"!")
    assert await store.get(blocks[0]) is None
    assert store.stats()["tiers"]["disk0"]["bad_blocks"] == 1
    await store.put(blocks[0], payload(blocks[0], BLOCK))
    assert (await store.get(blocks[0])) == (payload(blocks[0], BLOCK), "mem")


# --- every tier within its quota, whatever the sequence ------------------------------------------

ops = st.lists(
    st.tuples(
        st.sampled_from(["put", "put", "get", "remove"]),
        st.integers(min_value=0, max_value=15),  # key
        st.integers(min_value=1, max_value=40),  # size of a put
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=40)
@given(
    ops=ops,
    quotas=st.tuples(st.integers(0, 60), st.integers(0, 80), st.integers(0, 80)),
    policy=st.sampled_from(["lru", "s3fifo"]),
    promote=st.booleans(),
    pinned=st.booleans(),
)
def test_every_tier_stays_within_quota_and_hits_are_exact(
    ops: list[tuple[str, int, int]], quotas: tuple[int, int, int], policy: str, promote: bool, pinned: bool
) -> None:
    async def run(root: Path) -> None:
        store = await build_store(root, quotas, policy=policy, promote=promote, pinned=(("bkt", "k1"),) if pinned else ())
        sizes: dict[BlockId, int] = {}  # the size each block was first put with (blocks are immutable)
        try:
            for op, key, size in ops:
                block = bid(f"k{key}")
                if op == "put":
                    size = sizes.setdefault(block, size)
                    await store.put(block, payload(block, size))
                elif op == "get":
                    hit = await store.get(block)
                    if hit is not None:
                        assert hit[0] == payload(block, sizes[block])
                else:
                    await store.remove(block)
                    assert block not in store
                for tier in store.levels:
                    assert tier.used <= tier.quota
                    assert tier.used == sum(sizes[b] for b in tier)
            for disk in store.disks:
                assert set(files_under(disk.path)) == {disk.block_path(b.name) for b in disk}
        finally:
            await store.aclose()

    with tempfile.TemporaryDirectory() as root:
        asyncio.run(run(Path(root)))
