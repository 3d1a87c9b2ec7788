"""BlockFetcher.block: a block from the tiers, else from its sources in order (the worker of this
node that owns it, then the fleet's owners), a source that does not answer skipped, the origin
after the last; once however many readers wait; a block another node asked for never asked of a
third; an owner that finds the object changed gives the asker that answer.

The sources are real ones of a small kind (engine.sources.BlockSource): another worker or node,
with its own fetcher and tiers over the same in-memory origin, answering as Serving.serve_block
answers and as Siblings and Peers take that answer."""

from __future__ import annotations

import asyncio

import pytest

from gateway.bytebudget import ByteBudget
from gateway.cluster.peers import PeerRefused
from gateway.config import CacheSettings
from gateway.engine.fetch import BlockFetcher
from gateway.engine.sources import Ask, Got, Unanswered, take_refusal, version_of
from gateway.errors import S3Error
from gateway.objects import ObjectChanged, ObjectMeta, meta_from_headers
from gateway.store.blocks import BlockId
from gateway.store.memory import MemoryTier
from gateway.store.policy import make_policy
from gateway.store.tiers import TieredStore
from tests.engine.origin import MemoryOrigin
from tests.waiting import eventually

BLOCK = 64 * 1024
SETTINGS = CacheSettings(block_size=BLOCK)
BODY = bytes(range(256)) * (BLOCK * 3 // 256)  # three blocks


def tiers() -> TieredStore:
    return TieredStore(MemoryTier(16 * BLOCK, make_policy("lru", 16 * BLOCK)), [])


class Changes:
    """What a fetcher is told of objects that changed at the origin (its `on_changed`)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    async def __call__(self, bucket: str, key: str) -> None:
        self.seen.append((bucket, key))


class Owner:
    """Another worker of this node (`fleet` False) or another node (`fleet` True) that owns every
    block: its own fetcher and tiers. `down`: it does not answer; `gate`: it answers once set."""

    def __init__(self, origin: MemoryOrigin, changes: Changes, *, fleet: bool) -> None:
        self.fetch = BlockFetcher(origin, tiers(), SETTINGS, ByteBudget(SETTINGS.read_buffer), Changes())
        self.counts_miss = fleet  # (another worker counts its own misses)
        self.fleet = fleet
        self.down = False
        self.gate: asyncio.Event | None = None
        self.asked: list[tuple[int, bool]] = []  # (block index, may ask the fleet)
        self._changes = changes

    def asking(self, block: BlockId, meta: ObjectMeta, *, from_peers: bool, replicas: int | None) -> Ask | None:
        if self.fleet and not from_peers:
            return None
        return lambda: self.block(block, meta, from_peers)

    async def block(self, block: BlockId, meta: ObjectMeta, from_peers: bool) -> Got:
        self.asked.append((block.index, from_peers))
        if self.gate is not None:
            await self.gate.wait()
        if self.down:
            raise Unanswered()
        try:
            return await self.fetch.sourced(block, meta, from_peers=False)
        except ObjectChanged as exc:  # as Serving answers it, and the asker takes that answer
            await take_refusal(block.bucket, block.key, PeerRefused(exc, changed=True), self._changes)
            raise AssertionError("a change is the asker's answer too") from exc


async def described(origin: MemoryOrigin, key: str = "k") -> ObjectMeta:
    return meta_from_headers((await origin.send("HEAD", "b", key)).header_items)


def block_of(meta: ObjectMeta, index: int, key: str = "k") -> BlockId:
    return BlockId("b", key, version_of(meta), index)


@pytest.fixture
def origin() -> MemoryOrigin:
    origin = MemoryOrigin()
    origin.put("b", "k", BODY)
    return origin


def fetcher(origin: MemoryOrigin, changes: Changes, *, worker: Owner | None = None,
            node: Owner | None = None) -> BlockFetcher:
    return BlockFetcher(origin, tiers(), SETTINGS, ByteBudget(SETTINGS.read_buffer), changes,
                        siblings=worker, peers=node)  # type: ignore[arg-type]  # (sources of a small kind)


async def test_the_owner_worker_is_asked_first_and_the_fleet_after_it(origin: MemoryOrigin):
    changes = Changes()
    worker, node = Owner(origin, changes, fleet=False), Owner(origin, changes, fleet=True)
    fetch = fetcher(origin, changes, worker=worker, node=node)
    meta = await described(origin)
    assert await fetch.block(block_of(meta, 1), meta) == BODY[BLOCK:2 * BLOCK]
    assert worker.asked == [(1, True)] and node.asked == []
    assert origin.gets("k") == 1  # the owner worker's GET
    assert fetch.stats["block_miss"] == 0 and worker.fetch.stats["block_miss"] == 1  # counted once, by the owner
    worker.down = True
    assert await fetch.block(block_of(meta, 2), meta) == BODY[2 * BLOCK:]
    assert worker.asked[-1] == (2, True) and node.asked == [(2, True)]  # skipped: the fleet's owner answers
    assert fetch.stats["block_miss"] == 1 and origin.gets("k") == 2


async def test_when_no_source_answers_the_block_comes_from_the_origin_once(origin: MemoryOrigin):
    changes = Changes()
    worker, node = Owner(origin, changes, fleet=False), Owner(origin, changes, fleet=True)
    worker.down = node.down = True
    fetch = fetcher(origin, changes, worker=worker, node=node)
    meta = await described(origin)
    block = block_of(meta, 0)
    assert await fetch.block(block, meta) == BODY[:BLOCK]
    assert worker.asked == [(0, True)] and node.asked == [(0, True)]
    assert origin.gets("k") == 1 and fetch.stats["origin_block_fetch"] == 1 and fetch.stats["block_miss"] == 1
    assert await fetch.block(block, meta) == BODY[:BLOCK]  # kept: a hit, nobody asked again
    assert len(worker.asked) == 1 and origin.gets("k") == 1 and fetch.stats["block_hit_mem"] == 1


async def test_a_block_another_node_asked_for_is_never_asked_of_a_third(origin: MemoryOrigin):
    changes = Changes()
    worker, node = Owner(origin, changes, fleet=False), Owner(origin, changes, fleet=True)
    worker.down = True
    fetch = fetcher(origin, changes, worker=worker, node=node)
    meta = await described(origin)
    assert await fetch.block(block_of(meta, 0), meta, from_peers=False) == BODY[:BLOCK]
    assert worker.asked == [(0, False)]  # this node's owner worker, told not to ask the fleet either
    assert node.asked == [] and origin.gets("k") == 1


async def test_readers_of_a_block_a_slow_source_brings_ask_it_once(origin: MemoryOrigin):
    changes = Changes()
    node = Owner(origin, changes, fleet=True)
    node.gate = asyncio.Event()
    fetch = fetcher(origin, changes, node=node)
    meta = await described(origin)
    block = block_of(meta, 1)
    readers = [asyncio.create_task(fetch.block(block, meta)) for _ in range(5)]
    await eventually(lambda: fetch.stats["block_wait"] == 4, "the other readers wait for the first")
    assert fetch.fetching(block) and node.asked == [(1, True)]
    readers[0].cancel()  # a reader going away does not cancel what the others wait for
    node.gate.set()
    assert await asyncio.gather(*readers[1:]) == [BODY[BLOCK:2 * BLOCK]] * 4
    assert node.asked == [(1, True)] and origin.gets("k") == 1 and fetch.stats["block_miss"] == 1
    assert not fetch.fetching(block)


async def test_a_slow_source_that_then_fails_leaves_the_block_to_the_origin_once(origin: MemoryOrigin):
    changes = Changes()
    node = Owner(origin, changes, fleet=True)
    node.gate, node.down = asyncio.Event(), True
    fetch = fetcher(origin, changes, node=node)
    meta = await described(origin)
    readers = [asyncio.create_task(fetch.block(block_of(meta, 2), meta)) for _ in range(3)]
    await eventually(lambda: fetch.stats["block_wait"] == 2, "the other readers wait for the first")
    node.gate.set()
    assert await asyncio.gather(*readers) == [BODY[2 * BLOCK:]] * 3
    assert origin.gets("k") == 1 and fetch.stats["origin_block_fetch"] == 1


async def test_an_owner_that_finds_the_object_changed_gives_that_answer(origin: MemoryOrigin):
    changes = Changes()
    worker, node = Owner(origin, changes, fleet=False), Owner(origin, changes, fleet=True)
    fetch = fetcher(origin, changes, worker=worker, node=node)
    meta = await described(origin)
    origin.put("b", "k", b"another version")  # behind the gateway's back
    with pytest.raises(ObjectChanged):
        await fetch.block(block_of(meta, 0), meta)
    assert changes.seen == [("b", "k")]  # the asker forgets what it knew of the object
    assert node.asked == [] and origin.gets("k") == 1  # neither the fleet nor the origin asked after that answer
    assert fetch.store.get_now(block_of(meta, 0)) is None


async def test_without_sources_a_changed_object_is_found_by_the_origin_fetch(origin: MemoryOrigin):
    changes = Changes()
    fetch = fetcher(origin, changes)
    meta = await described(origin)
    origin.put("b", "k", b"another version")
    with pytest.raises(ObjectChanged):
        await fetch.block(block_of(meta, 0), meta)
    assert changes.seen == [("b", "k")] and fetch.store.get_now(block_of(meta, 0)) is None


async def test_an_origin_error_reaches_every_reader_and_the_next_read_asks_again(origin: MemoryOrigin):
    changes = Changes()
    fetch = fetcher(origin, changes)
    meta = await described(origin)
    origin.down = True
    with pytest.raises(S3Error):
        await fetch.block(block_of(meta, 0), meta)
    origin.down = False
    assert await fetch.block(block_of(meta, 0), meta) == BODY[:BLOCK]
    assert origin.gets("k") == 2
