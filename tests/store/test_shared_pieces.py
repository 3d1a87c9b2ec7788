"""Parts of blocks in the memory tier a node's workers share (store.shared, store.pieces): kept by
the block's owner worker, in its quota and under its policy, read by every worker."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

from gateway.store import pieces
from gateway.store.blocks import BlockId
from gateway.store.hitnotes import HitNotes
from gateway.store.policy import make_policy
from gateway.store.shared import SharedTier
from gateway.store.tiers import TieredStore
from tests.store.helpers import bid, payload
from tests.waiting import eventually

BLOCK = 64 * 1024


def even(block: BlockId) -> bool:
    return block.index % 2 == 0


def workers(root: Path, quota: int) -> tuple[SharedTier, SharedTier]:
    """Worker 0 owns the even blocks, worker 1 the odd ones; hits and pieces are noted between them
    (each takes the other's notes every NOTES_EVERY once open)."""
    def part(index: int) -> SharedTier:
        owns = even if index == 0 else (lambda b: not even(b))
        return SharedTier(str(root / "mem"), quota, make_policy("lru", quota), owns, medium="memory", name="mem",
                          notes=HitNotes(str(root / "notes"), "mem", index, 2, lambda b: b.index % 2))
    return part(0), part(1)


@contextlib.asynccontextmanager
async def opened(root: Path, quota: int) -> AsyncIterator[tuple[SharedTier, SharedTier]]:
    """`workers`, open, and closed after."""
    a, b = workers(root, quota)
    await a.open()
    await b.open()
    try:
        yield a, b
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_piece_the_owner_keeps_is_a_hit_on_every_worker(tmp_path: Path) -> None:
    async with opened(tmp_path, 10 * BLOCK) as (a, b):
        block = bid("k", 0)  # a's
        data = payload(block, BLOCK)
        store = TieredStore(a, [], owns=even)
        assert store.keeps_pieces
        assert await store.put_piece(block, 1000, data[1000:5000], BLOCK) == (1000, data[1000:5000])
        assert a.used == 4000 + 8 and pieces.piece_id(block) in a  # in a's quota: the piece and where it starts
        assert b.piece_hit(block, 2000, 3000) == data[2000:3000]  # read on b, from a's file
        assert b.piece_hit(block, 0, 3000) is None  # not all of it there
        assert block not in a and block not in b and len(b) == 0
        await store.put_piece(block, 5000, data[5000:9000], BLOCK)  # the next bytes join it
        assert a.piece(block) == (1000, data[1000:9000]) and a.used == 8000 + 8
        await store.put(block, data)  # the whole block: its piece goes
        assert a.piece(block) is None and a.used == BLOCK


async def test_a_piece_of_another_workers_block_is_written_for_it_and_counted_in_its_quota(tmp_path: Path) -> None:
    async with opened(tmp_path, 10 * BLOCK) as (a, b):
        block = bid("k", 1)  # b's
        data = payload(block, BLOCK)
        store = TieredStore(a, [], owns=even)
        assert await store.put_piece(block, 0, data[:4096], BLOCK) == (0, data[:4096])
        assert a.used == 0 and a.piece_hit(block, 10, 20) == data[10:20]  # written by a, for b
        assert b.piece(block) == (0, data[:4096])
        await eventually(lambda: b.used == 4096 + 8 and pieces.piece_id(block) in b, what="b takes the piece in")
        assert a.used == 0
        await store.put_piece(block, 4096, data[4096:8192], BLOCK)  # joined on a, taken in again by b
        await eventually(lambda: b.used == 8192 + 8 and pieces.piece_id(block) in b, what="b counts the piece grown")
        assert b.piece_hit(block, 0, 8192) == data[:8192]
        # A piece a makes whole is still b's to keep (as a piece: b keeps the block whole when it fetches it).
        assert await store.put_piece(block, 8192, data[8192:], BLOCK) == (0, data)
        await eventually(lambda: b.used == BLOCK + 8 and pieces.piece_id(block) in b, what="b counts the whole piece")
        assert block not in b and a.piece_hit(block, 0, BLOCK) == data


async def test_the_owner_takes_a_piece_another_worker_wrote_as_that_file_not_written_again(tmp_path: Path) -> None:
    """The piece's bytes cross tmpfs once: the owner reads the file (checked) and keeps it as it is."""
    async with opened(tmp_path, 10 * BLOCK) as (a, b):
        block = bid("k", 1)  # b's
        data = payload(block, BLOCK)
        writes: list[str] = []
        write = b.own._write_file
        b.own._write_file = lambda path, head, raw: (writes.append(path), write(path, head, raw))[1]  # type: ignore[method-assign]
        assert (await a.put_piece(block, 0, data[:4096]))[0] == (0, data[:4096])  # written by a, for b
        path = b.own.block_path(pieces.piece_id(block).name)
        inode = os.stat(path).st_ino
        await eventually(lambda: pieces.piece_id(block) in b, what="b takes the piece in")
        assert writes == [] and os.stat(path).st_ino == inode and b.used == 4096 + 8
        assert b.piece_hit(block, 0, 4096) == data[:4096] and a.piece_hit(block, 0, 4096) == data[:4096]


async def test_pieces_are_evicted_under_pressure_as_blocks_are_and_never_demoted(tmp_path: Path) -> None:
    async with opened(tmp_path, 3 * BLOCK) as (a, b):
        blocks = [bid(f"k{i}", 0) for i in range(4)]  # all a's
        store = TieredStore(a, [], owns=even)
        await store.put_piece(blocks[0], 0, payload(blocks[0], BLOCK)[:BLOCK // 2], BLOCK)
        for block in blocks[1:]:  # three whole blocks: room for them only if the piece goes
            await store.put(block, payload(block, BLOCK))
        assert a.piece(blocks[0]) is None and b.piece(blocks[0]) is None  # its file gone too
        assert a.used <= a.quota and [x for x in blocks if x in a] == blocks[1:]
        assert store.freed == 1 and store.demotions == 0


async def test_a_piece_written_for_an_owner_that_holds_the_block_whole_by_then_is_deleted(tmp_path: Path) -> None:
    async with opened(tmp_path, 10 * BLOCK) as (a, b):
        block = bid("k", 1)  # b's
        data = payload(block, BLOCK)
        assert (await a.put_piece(block, 0, data[:4096]))[0] == (0, data[:4096])  # written by a, for b
        await b.put(block, data)  # before b took the piece in
        await eventually(lambda: b.piece(block) is None, what="b deletes the piece it has no use for")
        assert b.used == BLOCK and pieces.piece_id(block) not in b


async def test_a_piece_written_again_is_never_missing_and_no_join_is_lost(tmp_path: Path) -> None:
    """The owner writes a piece again in place of the old one: another worker reading it meanwhile
    reads the old piece (never none), and two writes of one piece at once (bytes the owner joins, a
    file another worker wrote being taken in) each see the other's: the piece ends with both."""
    async with opened(tmp_path, 10 * BLOCK) as (a, b):
        block = bid("k", 0)  # a's
        data = payload(block, BLOCK)
        store = TieredStore(a, [], owns=even)
        await store.put_piece(block, 0, data[:4000], BLOCK)
        seen: list[tuple[int, bytes | memoryview] | None] = []
        put, write = a.own.put_demoting, asyncio.Event()

        async def watched(piece: BlockId, raw: bytes, **kept: object) -> object:  # b reads while a writes the piece again
            seen.append(b.piece(block))
            write.set()
            return await put(piece, raw, **kept)  # type: ignore[arg-type]
        a.own.put_demoting = watched  # type: ignore[method-assign]
        first = asyncio.create_task(store.put_piece(block, 4000, data[4000:8000], BLOCK))
        await write.wait()
        second = asyncio.create_task(store.put_piece(block, 8000, data[8000:12000], BLOCK))
        await asyncio.gather(first, second)
        assert seen[0] == (0, data[:4000])  # the old piece, while the new one was being written
        assert a.piece(block) == (0, data[:12000]) and b.piece(block) == (0, data[:12000])
