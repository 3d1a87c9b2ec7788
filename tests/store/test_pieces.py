"""store.pieces (the arithmetic of a partial block) and the pieces a MemoryTier and a TieredStore
keep: within the memory quota, joined, made whole, never demoted nor seen as blocks."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.store import pieces
from gateway.store.disk import DiskTier
from gateway.store.memory import MemoryTier
from gateway.store.policy import make_policy
from gateway.store.tiers import TieredStore
from tests.store.helpers import bid

BLOCK = bytes(range(256)) * 4  # a block of 1024 bytes whose bytes say where they are (mod 256)


@st.composite
def spans(draw: st.DrawFn, length: int = len(BLOCK)) -> tuple[int, int]:
    lo = draw(st.integers(0, length - 1))
    return lo, draw(st.integers(lo + 1, length))


@given(spans(), st.integers(1, 300))
def test_rounded_holds_the_span_within_the_block_on_granule_bounds(span: tuple[int, int], granule: int) -> None:
    lo, hi = pieces.rounded(*span, granule, len(BLOCK))
    assert lo <= span[0] and span[1] <= hi <= len(BLOCK)
    assert lo % granule == 0 and (hi % granule == 0 or hi == len(BLOCK))
    assert span[0] - lo < granule and hi - span[1] < granule


@given(spans(), spans())
def test_what_a_piece_lacks_and_the_piece_join_to_hold_the_span(piece: tuple[int, int], span: tuple[int, int]) -> None:
    if pieces.covers(*piece, *span):
        with pytest.raises(ValueError):
            pieces.lacking(piece, *span)
        return
    ask = pieces.lacking(piece, *span)
    assert ask[0] < ask[1] and ask[1] - ask[0] <= span[1] - span[0]  # never more than the span
    lo, data = pieces.join((piece[0], BLOCK[piece[0]:piece[1]]), ask[0], BLOCK[ask[0]:ask[1]])
    assert data == BLOCK[lo:lo + len(data)]  # one contiguous piece of the block's own bytes
    assert pieces.covers(lo, lo + len(data), *span)


@given(st.lists(spans(), min_size=1, max_size=8))
def test_joins_are_always_one_true_contiguous_piece(arrivals: list[tuple[int, int]]) -> None:
    held: tuple[int, bytes] | None = None
    for lo, hi in arrivals:
        before = held
        held = pieces.join(held, lo, BLOCK[lo:hi])
        assert held[1] == BLOCK[held[0]:held[0] + len(held[1])]
        assert pieces.covers(held[0], held[0] + len(held[1]), lo, hi)  # the newest bytes are always held
        if before is not None and not (hi < before[0] or before[0] + len(before[1]) < lo):
            assert pieces.covers(held[0], held[0] + len(held[1]), before[0], before[0] + len(before[1]))


@given(spans(), st.text(min_size=1, max_size=40).filter(lambda v: "\x00" not in v), st.integers(0, 10**6))
def test_a_piece_kept_as_a_block_of_its_own_reads_back_and_is_named_apart(span: tuple[int, int], version: str,
                                                                          index: int) -> None:
    block = bid("k", index, version=version)
    piece = pieces.piece_id(block)
    assert pieces.is_piece(piece) and not pieces.is_piece(block) and pieces.block_of(piece) == block
    assert piece.name != block.name and (piece.bucket, piece.key, piece.index) == (block.bucket, block.key, index)
    lo, hi = span
    assert pieces.decoded(pieces.encoded(lo, BLOCK[lo:hi])) == (lo, BLOCK[lo:hi])
    with pytest.raises(ValueError):
        pieces.decoded(pieces.encoded(lo, b""))


def test_bad_spans_are_refused() -> None:
    with pytest.raises(ValueError):
        pieces.rounded(5, 5, 4, 10)
    with pytest.raises(ValueError):
        pieces.rounded(0, 11, 4, 10)
    with pytest.raises(ValueError):
        pieces.rounded(0, 4, 0, 10)


def test_a_memory_tier_keeps_pieces_within_its_quota_and_frees_them_first_come() -> None:
    tier = MemoryTier(300, make_policy("lru", 300))
    a, b, c = bid("a"), bid("b"), bid("c")
    assert tier.put_piece(a, 100, BLOCK[100:200])[0] == (100, BLOCK[100:200])
    tier.put_piece(b, 0, BLOCK[:100])
    assert tier.used == 200 and tier.pieces == 2 and len(tier) == 0 and a not in tier
    assert tier.piece_hit(a, 120, 180) == BLOCK[120:180] and tier.stats.hits == 1
    assert tier.piece_hit(a, 50, 180) is None and tier.stats.hits == 1  # not all of it held
    tier.put_piece(c, 0, BLOCK[:200])  # b is the least recently used: freed, not demoted
    assert tier.used == 300 and tier.piece(b) is None and tier.piece(a) is not None
    assert tier.put_piece(c, 500, BLOCK[500:900])[0][1] == b""  # larger than the quota: not taken
    assert tier.stats.rejected == 1


def test_a_piece_joins_the_next_bytes_and_goes_when_the_block_is_stored_whole() -> None:
    tier = MemoryTier(4096, make_policy("s3fifo", 4096))
    a = bid("a")
    tier.put_piece(a, 100, BLOCK[100:200])
    assert tier.put_piece(a, 200, BLOCK[200:300])[0] == (100, BLOCK[100:300])
    assert tier.put_piece(a, 600, BLOCK[600:700])[0] == (600, BLOCK[600:700])  # apart: the new bytes
    assert tier.used == 100
    asyncio.run(tier.put(a, BLOCK))
    assert a in tier and tier.piece(a) is None and tier.used == len(BLOCK) and tier.pieces == 0
    assert tier.put_piece(a, 0, BLOCK[:10])[0][1] == b""  # held whole: nothing to keep in part
    asyncio.run(tier.remove(a))
    assert tier.used == 0


def test_a_store_makes_a_block_whole_from_its_pieces_and_purges_them(tmp_path: Path) -> None:
    async def scenario() -> None:
        memory = MemoryTier(4096, make_policy("lru", 4096))
        disk = DiskTier(str(tmp_path / "d"), 8192, make_policy("lru", 8192), name="disk0")
        store = TieredStore(memory, [disk])
        await store.open()
        a, b = bid("a"), bid("p/b")
        assert store.keeps_pieces
        await store.put_piece(a, 0, BLOCK[:512], len(BLOCK))
        assert a not in store and store.piece_hit(a, 0, 512) == BLOCK[:512]
        assert await store.put_piece(a, 400, BLOCK[400:], len(BLOCK)) == (0, BLOCK)
        assert a in memory and memory.pieces == 0 and store.holds_object("bkt", "a")
        assert (await store.get(a)) == (BLOCK, "mem")
        await store.put_piece(b, 10, BLOCK[10:20], len(BLOCK))
        assert await store.evict_prefix("bkt", "p/") == 0 and store.piece(b) is None and memory.used == len(BLOCK)
        await store.aclose()

    asyncio.run(scenario())


def test_a_store_under_a_ttl_or_without_a_memory_tier_keeps_no_piece(tmp_path: Path) -> None:
    async def scenario() -> None:
        timed = TieredStore(MemoryTier(4096, make_policy("lru", 4096)), [], ttl=(("bkt", "t/", 60.0),))
        assert await timed.put_piece(bid("t/a"), 0, BLOCK[:10], len(BLOCK)) == (0, b"")
        disk_only = TieredStore(None, [DiskTier(str(tmp_path / "d"), 8192, make_policy("lru", 8192), name="disk0")])
        await disk_only.open()
        assert not disk_only.keeps_pieces
        assert await disk_only.put_piece(bid("a"), 0, BLOCK[:10], len(BLOCK)) == (0, b"")
        await disk_only.aclose()

    asyncio.run(scenario())


def test_a_pieces_victims_go_down_a_tier_and_pieces_never_do(tmp_path: Path) -> None:
    async def scenario() -> None:
        memory = MemoryTier(1024 + 100, make_policy("lru", 2048))
        disk = DiskTier(str(tmp_path / "d"), 8192, make_policy("lru", 8192), name="disk0")
        store = TieredStore(memory, [disk])
        await store.open()
        whole, part = bid("whole"), bid("part")
        await store.put(whole, BLOCK)
        await store.put_piece(part, 0, BLOCK[:100], len(BLOCK))
        await store.put_piece(bid("other"), 0, BLOCK[:200], len(BLOCK))  # evicts the whole block: down it goes
        assert whole in disk and whole not in memory and store.demotions == 1
        assert memory.pieces == 2 and memory.used == 300
        await store.put(bid("next"), BLOCK)  # evicts both pieces (the oldest first): freed, never on a disk
        assert memory.pieces == 0 and len(disk) == 1 and store.demotions == 1 and bid("next") in memory
        await store.aclose()

    asyncio.run(scenario())
