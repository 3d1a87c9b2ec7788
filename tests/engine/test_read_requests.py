"""Reads.read_object never asks the origin more than going to S3 directly would: at most one GET
for each read, whatever the worker holds of the object already (blocks whole, parts of blocks:
store.pieces), and about the bytes it reads. Over a small origin in memory that counts what it is
sent (tests.engine.origin), so that hypothesis can try many sequences of reads."""

from __future__ import annotations

import asyncio

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gateway.bytebudget import ByteBudget
from gateway.config import CacheSettings
from gateway.engine.fetch import BlockFetcher
from gateway.engine.reads import Reads
from gateway.engine.runs import GRANULE
from gateway.objects import meta_from_headers
from gateway.store.memory import MemoryTier
from gateway.store.policy import make_policy
from gateway.store.tiers import TieredStore
from tests.engine.origin import MemoryOrigin

BLOCK = 4 * GRANULE
SETTINGS = CacheSettings(block_size=BLOCK, readahead_blocks=0)  # (readahead: requests no read asked)
BODY = bytes(range(256)) * ((5 * BLOCK + 1000) // 256)  # five blocks and a short sixth
SIZE = len(BODY)

Read = tuple[int, int]  # its first and last byte

_READS = st.one_of(
    st.tuples(st.integers(0, SIZE - 1), st.integers(1, SIZE)).map(lambda r: (r[0], min(r[0] + r[1], SIZE) - 1)),
    st.integers(1, SIZE).map(lambda n: (SIZE - n, SIZE - 1)),  # a suffix
    st.just((0, SIZE - 1)),  # the whole object
)


async def _read_all(sequence: list[Read]) -> list[tuple[int, int]]:
    """(origin GETs, bytes they asked for) of each read of `sequence`, in turn, each read's bytes checked."""
    origin = MemoryOrigin()
    origin.put("b", "k", BODY)
    meta = meta_from_headers((await origin.send("HEAD", "b", "k")).header_items)
    store = TieredStore(MemoryTier(64 * BLOCK, make_policy("lru", 64 * BLOCK)), [])
    budget = ByteBudget(SETTINGS.read_buffer)

    async def changed(bucket: str, key: str) -> None:
        raise AssertionError("the object never changes here")

    fetch = BlockFetcher(origin, store, SETTINGS, budget, changed)
    reads = Reads(origin, fetch, SETTINGS, budget, changed)
    costs = []
    for start, end in sequence:
        sent = len(origin.sent)
        async with await reads.read_object("b", "k", meta, start=start, end=end) as read:
            got = read.body
            if got is None:
                assert read.chunks is not None
                got = b"".join([chunk async for chunk in read.chunks])
        assert got == BODY[start:end + 1], (start, end)
        await _settled(fetch)
        asked = origin.sent[sent:]
        costs.append((len(asked), sum(_length(headers.get("range", "")) for _, _, _, headers in asked)))
    return costs


async def _settled(fetch: BlockFetcher) -> None:
    """Until the runs' pumps and background fetches of the reads before are done (a run goes on a
    moment after its read was answered, keeping what it brought)."""
    for _ in range(100):
        await asyncio.sleep(0)
        if not fetch.background:
            return


def _length(asked: str) -> int:
    first, _, last = asked.removeprefix("bytes=").partition("-")
    return min(int(last), SIZE - 1) - int(first) + 1 if first and last else SIZE


@settings(max_examples=300, deadline=None)
@given(st.lists(_READS, min_size=1, max_size=6))
@example([(0, 2), (0, SIZE - 1)])  # a piece of block 0, then the whole object
@example([(SIZE - 16384, SIZE - 1), (0, SIZE - 1)])  # a piece of the last block, then the whole object
@example([(BLOCK + 100_000, BLOCK + 104_095), (0, 4 * BLOCK - 1)])  # a piece inside block 1, then blocks 0-3
@example([(2 * BLOCK, 3 * BLOCK - 1), (0, SIZE - 1)])  # block 2 whole, then the whole object
@example([(BLOCK + 10, 3 * BLOCK + 9), (5000, 4 * BLOCK + 4999)])  # blocks 1-2 whole, 3 in part; then 0-4
def test_a_read_asks_the_origin_once_at_most_and_for_about_its_bytes(sequence: list[Read]) -> None:
    for (start, end), (requests, asked) in zip(sequence, asyncio.run(_read_all(sequence))):
        assert requests <= 1, (sequence, start, end, requests)
        assert asked <= end - start + 1 + 2 * GRANULE, (sequence, start, end, asked)
