"""CPU per block GET of the gateway's origin client: aiohttp (Origin.send) against the range
client (Origin.get_block, gateway/rangeclient/), in one process, one run.

Starts bench/shaped_origin.py (no delay, no rate cap) on a folder with one object, then in
this process GETs its first `--size` bytes `--gets` times, `--concurrency` at a time, through
each client in turn (alternating, `--rounds` times), and prints the process's CPU (user and
system) and minor page faults per GET. `--keep` keeps every body received, as a cache filling
up does: each body is then new memory the kernel faults in page by page, a cost of its own
that both clients pay. The process keeps freed large allocations as a gateway process does
(gateway.run.keep_large_allocations).

    .venv/bin/python bench/origin_client.py
    .venv/bin/python bench/origin_client.py --keep --concurrency 32 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import uvloop

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import cache_serving as cs  # noqa: E402
from gateway.config import OriginSettings, parse_size  # noqa: E402
from gateway.origin import Origin  # noqa: E402
from gateway.run import keep_large_allocations  # noqa: E402


async def measure(endpoint: str, client: str, size: int, gets: int, concurrency: int, keep: bool) -> dict[str, float]:
    origin = Origin(OriginSettings(endpoint=endpoint, access_key="a", secret_key="s"))
    kept: list[bytes] = []
    slots = asyncio.Semaphore(concurrency)
    headers = {"range": f"bytes=0-{size - 1}"}

    async def one() -> None:
        async with slots:
            if client == "aiohttp":
                response = await origin.send("GET", cs.BUCKET, "object", headers=headers)
            else:
                response = await origin.get_block(cs.BUCKET, "object", headers=headers)
            data = await response.read_at_most(size)
            if len(data) != size:
                raise SystemExit(f"{client}: {len(data)} of {size} bytes")
            if keep:
                kept.append(data)

    await asyncio.gather(*(one() for _ in range(2 * concurrency)))  # connections opened, buffers made
    kept.clear()
    before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    await asyncio.gather(*(one() for _ in range(gets)))
    after, seconds = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - started
    await origin.aclose()
    return {"user": (after.ru_utime - before.ru_utime) / gets * 1e6,
            "system": (after.ru_stime - before.ru_stime) / gets * 1e6,
            "faults": (after.ru_minflt - before.ru_minflt) / gets, "rate": gets / seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="1MiB", help="bytes per GET (one block)")
    parser.add_argument("--gets", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--keep", action="store_true", help="keep every body (a cache filling up)")
    args = parser.parse_args()
    size = parse_size(args.size, "--size")
    keep_large_allocations()
    tmp = Path(tempfile.mkdtemp(prefix="origin-client-"))
    (tmp / cs.BUCKET).mkdir(parents=True)
    (tmp / cs.BUCKET / "object").write_bytes(os.urandom(size))
    print(f"{args.size} GETs, {args.concurrency} at a time, bodies {'kept' if args.keep else 'dropped'}; "
          f"code {cs.code_version()}; load average {os.getloadavg()[0]:.2f}")
    totals: dict[str, list[float]] = {"aiohttp": [], "range": []}
    with cs.shaped_origin_process(tmp, tmp, "0", "0") as endpoint:
        for round_ in range(args.rounds):
            for client in (["aiohttp", "range"] if round_ % 2 == 0 else ["range", "aiohttp"]):
                got = uvloop.run(measure(endpoint, client, size, args.gets, args.concurrency, args.keep))
                totals[client].append(got["user"] + got["system"])
                print(f"  round {round_ + 1} {client:8s} user {got['user']:6.0f} us  system {got['system']:6.0f} us"
                      f"  per GET; {got['faults']:5.0f} page faults per GET; {got['rate']:6.0f} GETs/s", flush=True)
    medians = {name: statistics.median(values) for name, values in totals.items()}
    print(f"median CPU per GET: aiohttp {medians['aiohttp']:,.0f} us, range client {medians['range']:,.0f} us "
          f"({medians['range'] / medians['aiohttp']:.2f}x); load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
