"""A cold HEAD answered from a GET of the object's tail (engine.tails), over an origin in memory
that counts what it is sent and can answer as servers other than S3 do: a 416 to a suffix range
of an empty object (S3 answers 200), a range ignored (the whole object, 200). Whatever the origin
answers, the HEAD says what the object is, and costs the origin no more than it must."""

from __future__ import annotations

import asyncio

from gateway.bytebudget import ByteBudget
from gateway.config import CacheSettings, MetadataSettings
from gateway.engine.coherence import Coherence
from gateway.engine.fetch import BlockFetcher
from gateway.engine.metadata import Metadata
from gateway.engine.opens import Opens
from gateway.engine.reads import Reads
from gateway.engine.runs import GRANULE, Want
from gateway.store.memory import MemoryTier
from gateway.store.policy import make_policy
from gateway.store.tiers import TieredStore
from tests.engine.origin import MemoryOrigin

BLOCK = 4 * GRANULE
SETTINGS = CacheSettings(block_size=BLOCK, readahead_blocks=0)


class Node:
    """Metadata, a block fetcher and reads of one worker before a MemoryOrigin holding bucket `b`."""

    def __init__(self) -> None:
        self.origin = MemoryOrigin()
        self.origin.create_bucket("b")
        store = TieredStore(MemoryTier(64 * BLOCK, make_policy("lru", 64 * BLOCK)), [])
        budget = ByteBudget(SETTINGS.read_buffer)
        coherence = Coherence(None)

        async def changed(bucket: str, key: str) -> None:
            raise AssertionError("the object never changes here")

        self.fetch = BlockFetcher(self.origin, store, SETTINGS, budget, changed, coherence=coherence)
        self.metadata = Metadata(self.origin, MetadataSettings(), coherence, fetch=self.fetch,
                                 opens=Opens(self.fetch, coherence))
        self.reads = Reads(self.origin, self.fetch, SETTINGS, budget, changed)

    async def footer(self, key: str, suffix: int) -> bytes:
        """A cold read of the last `suffix` bytes, as Engine.get_object makes one: its metadata and bytes from
        one GET (Metadata.head_object with `want`), the run that GET started claimed by the read."""
        head = await self.metadata.head_object("b", key, want=Want(suffix=suffix))
        size = head.meta.size
        async with await self.reads.read_object("b", key, head.meta, start=size - suffix, end=size - 1,
                                                first=head.first) as read:
            if read.body is not None:
                return bytes(read.body)
            assert read.chunks is not None
            return b"".join([bytes(chunk) async for chunk in read.chunks])

    async def settled(self) -> None:
        for _ in range(100):
            await asyncio.sleep(0)
            if not self.fetch.background:
                return


async def test_an_empty_object_is_one_get_where_the_origin_answers_200_and_a_head_more_where_416():
    for status, sent in ((200, {"GET": 1}), (416, {"GET": 1, "HEAD": 1})):
        node = Node()
        node.origin.empty_suffix = status
        node.origin.put("b", "empty", b"")
        head = await node.metadata.head_object("b", "empty")
        assert head.meta.size == 0 and head.meta.etag == '"d41d8cd98f00b204e9800998ecf8427e"'
        assert dict(node.origin.requests) == sent
        assert node.metadata.stats["meta_head_tail_refused"] == (status == 416)


async def test_an_origin_that_ignores_the_range_costs_the_head_no_download():
    node = Node()
    node.origin.ranges = False
    body = bytes(range(256)) * (40 * BLOCK // 256)
    node.origin.put("b", "big", body)
    head = await node.metadata.head_object("b", "big")
    assert head.meta.size == len(body) and dict(node.origin.requests) == {"GET": 1}
    await node.settled()
    assert sum(1 for _ in node.fetch.store.memory or ()) <= 1  # the run was closed: no 40 blocks kept
    assert node.fetch.budget.used == 0


async def test_a_head_and_a_suffix_read_at_once_are_one_get_in_either_order():
    for head_first in (True, False):
        node = Node()
        body = bytes(range(256)) * ((3 * BLOCK + 1000) // 256)
        node.origin.put("b", "k", body)
        node.origin.hold()
        started = []
        for head in (head_first, not head_first):
            started.append(asyncio.ensure_future(node.metadata.head_object("b", "k") if head else node.footer("k", 8)))
            await asyncio.sleep(0)
        await asyncio.sleep(0.01)
        node.origin.release()
        got = await asyncio.gather(*started)
        expected = [len(body), body[-8:]] if head_first else [body[-8:], len(body)]
        assert [g if isinstance(g, bytes) else g.meta.size for g in got] == expected
        assert dict(node.origin.requests) == {"GET": 1}, head_first


async def test_a_cold_read_of_a_suffix_within_the_tail_waits_for_the_head_s_get():
    node = Node()
    body = bytes(range(256)) * ((3 * BLOCK + 1000) // 256)
    node.origin.put("b", "k", body)
    node.origin.hold()
    head = asyncio.ensure_future(node.metadata.head_object("b", "k"))
    await asyncio.sleep(0)
    joined = asyncio.ensure_future(node.metadata.head_object("b", "k", want=Want(suffix=GRANULE)))
    far = asyncio.ensure_future(node.metadata.head_object("b", "k", want=Want(suffix=2 * BLOCK)))  # beyond the tail
    await asyncio.sleep(0.01)
    node.origin.release()
    assert {(await f).meta.size for f in (head, joined, far)} == {len(body)}
    assert dict(node.origin.requests) == {"GET": 2}  # the HEAD's tail and the far read's own
