"""Which cache block size: cold reads through the gateway from a shaped (S3-like) origin.

The block is the unit of every origin fetch, so its size trades read amplification (a
64 KiB ranged read, as Parquet/ORC readers issue for column chunks, fetches a whole
block before it answers) against requests per byte (a sequential read of a large object
costs one origin request per block, each paying the origin's time to first byte). For
each block size this script starts a fresh gateway (`python -m gateway.cli serve`, empty
cache, default settings otherwise) in front of bench/shaped_origin.py with a first-byte
latency and a per-connection rate, and measures, with SigV4-signed requests:

  random 64K   cold 64 KiB ranged GETs at random offsets, one per never-read 256 MiB
               object, 8 at a time: p50/p99 latency
  seq 256M     one cold GET of a whole never-read 256 MiB object (one client connection;
               the gateway fetches `readahead_blocks` blocks in parallel): MB/s
  files 1M     cold GETs of never-read 1 MiB objects, 16 at a time: requests/s

    .venv/bin/python bench/block_size.py [--sizes 1MiB,4MiB,8MiB] [--latency 20ms] [--rate 80MB]

Objects are hard links of one file, so the origin's page cache holds them all; the shaping
is what makes the origin behave like a remote store. All processes share this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cache_serving as cs  # noqa: E402  (the serving benchmark's processes and signer)

KiB, MiB = 1024, 1024 * 1024
BIG = 256 * MiB


async def _get_all(endpoint: str, requests: Sequence[tuple[str, str | None]], concurrency: int,
                   expect_bytes: Sequence[int]) -> tuple[list[float], float]:
    """Latencies of each GET (path, Range or None) and the wall time of the whole batch."""
    signer = cs.HeaderSigner(urlsplit(endpoint).netloc, cs.USER)
    queue = list(enumerate(requests))
    latencies: list[float] = []

    async def worker(session: aiohttp.ClientSession) -> None:
        while queue:
            i, (path, byte_range) = queue.pop()
            headers = signer(path) | ({"range": byte_range} if byte_range else {})
            t0 = time.perf_counter()
            async with session.get(endpoint + path, headers=headers) as resp:
                got = 0
                async for chunk in resp.content.iter_any():
                    got += len(chunk)
                if resp.status not in (200, 206) or got != expect_bytes[i]:
                    raise SystemExit(f"GET {path} {byte_range}: {resp.status}, {got} bytes")
            latencies.append(time.perf_counter() - t0)

    started = time.perf_counter()
    timeout = aiohttp.ClientTimeout(total=None, sock_read=120)
    async with aiohttp.ClientSession(timeout=timeout, auto_decompress=False) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return latencies, time.perf_counter() - started


def _links(root: Path, source: Path, prefix: str, count: int) -> list[str]:
    keys = []
    for i in range(count):
        key = f"{prefix}/{i:05d}"
        target = root / cs.BUCKET / key
        target.parent.mkdir(parents=True, exist_ok=True)
        target.hardlink_to(source)
        keys.append(key)
    return keys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1MiB,4MiB,8MiB",
                        help="block sizes to compare; SIZE:N also sets cache.readahead_blocks to N")
    parser.add_argument("--latency", default="20ms", help="shaped origin: time to first byte")
    parser.add_argument("--rate", default="80MB", help="shaped origin: bytes/s per connection")
    parser.add_argument("--random-reads", type=int, default=48)
    parser.add_argument("--files", type=int, default=160)
    args = parser.parse_args(argv)
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]

    print(f"machine: {cs.machine()}")
    print(f"gateway code: {cs.code_version()}; origin: bench/shaped_origin.py, first byte {args.latency}, "
          f"{args.rate}/s per connection; each block size on a fresh gateway (empty cache)\n", flush=True)
    rows = []
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gateway-blocksize-")))
        root = tmp / "objects"
        (root / cs.BUCKET).mkdir(parents=True)
        big, small = tmp / "big.bin", tmp / "small.bin"
        big.write_bytes(os.urandom(BIG))
        small.write_bytes(os.urandom(MiB))
        origin = stack.enter_context(cs.shaped_origin_process(root, tmp, args.latency, args.rate))
        for label in sizes:
            size_text, _, readahead = label.partition(":")
            block = cs.parse_size(size_text, "--sizes")
            env = {"GATEWAY_CACHE_BLOCK_SIZE": str(block)}
            if readahead:
                env["GATEWAY_CACHE_READAHEAD_BLOCKS"] = readahead
            gw = cs.Gateway(f"gw-{label.replace(':', '-ra')}", origin, env, tmp)
            gw.start()
            try:
                tag = label.replace(":", "-ra")
                keys = _links(root, big, f"rand-{tag}", args.random_reads)
                offsets = [random.randrange(0, BIG - 64 * KiB) for _ in keys]
                requests = [(f"/{cs.BUCKET}/{k}", f"bytes={o}-{o + 64 * KiB - 1}") for k, o in zip(keys, offsets)]
                lat, _ = asyncio.run(_get_all(gw.endpoint, requests, 8, [64 * KiB] * len(keys)))
                lat.sort()
                seq_key = _links(root, big, f"seq-{tag}", 1)[0]
                _, seq_seconds = asyncio.run(_get_all(gw.endpoint, [(f"/{cs.BUCKET}/{seq_key}", None)], 1, [BIG]))
                files = _links(root, small, f"files-{tag}", args.files)
                _, files_seconds = asyncio.run(_get_all(gw.endpoint, [(f"/{cs.BUCKET}/{k}", None) for k in files],
                                                        16, [MiB] * len(files)))
                gw.record_peak()
            finally:
                gw.stop()
            row = (label, statistics.median(lat) * 1e3, cs._percentile(lat, 99) * 1e3, block / (64 * KiB),
                   BIG / seq_seconds / 1e6, len(files) / files_seconds, gw.peak_rss / 1e6)
            rows.append(row)
            print(f"  block {label:>6}: random 64K p50 {row[1]:7.1f} ms p99 {row[2]:7.1f} ms (fetches {row[3]:.0f}x "
                  f"the bytes read); seq 256M {row[4]:7.1f} MB/s; files 1M {row[5]:6.1f} req/s; "
                  f"peak RSS {row[6]:.0f} MB", flush=True)

    print("\n| block | random 64K p50 ms | random 64K p99 ms | bytes fetched per byte read | seq 256M MB/s "
          "| 1 MiB files req/s | peak RSS MB |")
    print("|---|---|---|---|---|---|---|")
    for label, p50, p99, amp, seq, files_rate, rss in rows:
        print(f"| {label} | {p50:.1f} | {p99:.1f} | {amp:.0f} | {seq:.0f} | {files_rate:.0f} | {rss:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
