"""What a hit note costs (gateway.store.hitnotes): a worker of a node of two reads 4 KiB blocks
its sibling owns out of their files on tmpfs (SharedTier.get_now, the tier's part of a hit),
without and with the note to the owner; then the owner takes the notes into its policy.

    .venv/bin/python bench/hit_notes.py             # 3 rounds of each
    .venv/bin/python bench/hit_notes.py --rounds 5

Prints ns per hit for each, and ns per note taken by the owner (the same process, one after the
other: the CPU of both sides, not their concurrency).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time

from gateway.node.workers import placement
from gateway.store.blocks import BlockId
from gateway.store.hitnotes import HitNotes
from gateway.store.policy import LRUPolicy
from gateway.store.shared import SharedTier


def owner(block: BlockId) -> int:
    return placement(block.bucket, block.key, block.index) % 2


async def one_round(noted: bool, reads: int) -> tuple[float, float]:
    """(ns per hit of the reader, ns per note taken by the owner)."""
    folder = tempfile.mkdtemp(dir="/dev/shm")
    try:
        def tier(index: int) -> SharedTier:
            notes = HitNotes(f"{folder}/hits", "mem", index, 2, owner) if noted else None
            return SharedTier(f"{folder}/mem", 64 << 20, LRUPolicy(), lambda b: owner(b) == index, medium="memory",
                              name="mem", notes=notes)

        own, reader = tier(0), tier(1)
        await own.open()
        await reader.open()
        blocks = [b for b in (BlockId("bkt", f"key{i}", "etag", 0) for i in range(128)) if owner(b) == 0]
        for block in blocks:
            await own.put(block, b"x" * 4096)
            reader.get_now(block)  # mapped once, as a block read again is
        own.take_notes()
        hit = take = 0.0
        for _ in range(reads // len(blocks)):
            began = time.perf_counter()
            for block in blocks:
                reader.get_now(block)
            hit += time.perf_counter() - began
            began = time.perf_counter()
            own.take_notes()
            take += time.perf_counter() - began
        await own.aclose()
        await reader.aclose()
        done = reads // len(blocks) * len(blocks)
        return hit / done * 1e9, take / done * 1e9
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reads", type=int, default=200_000)
    args = parser.parse_args()
    for _ in range(args.rounds):
        for noted in (False, True):
            hit, take = asyncio.run(one_round(noted, args.reads))
            print(f"{'with notes   ' if noted else 'without notes'}  {hit:6.0f} ns per hit" +
                  (f", {take:4.0f} ns per note taken" if noted else ""))


if __name__ == "__main__":
    main()
