"""What a cold ranged GET of an engine's size costs in time through the gateway: when its first
byte and its last byte arrive, directly from the shaped origin and through a fresh gateway.

Engines read a columnar file's footer by a suffix range, then its column chunks and stripes by
ranges of tens of KiB to several MiB at offsets that are not block bounds. For each size of
--sizes, --reads objects of --object-size bytes are read once each at a random offset (a suffix
range for `-N`), directly and through the gateway (the order swaps every read), each request
signed by botocore as SDKs sign; every object is new to the gateway, so every read through it is
cold. Printed per size: the time to the first byte of the body and to its last (medians), the
gateway's added time for each (gateway minus direct for the same read: median and p90), the
gateway's CPU per read, and the bytes its processes wrote and read per read (mean: the answer and
the origin's bytes, plus, with several workers, the memory tier's files on tmpfs); with the origin
requests of each setup counted at the shaped proxy.

The origin is moto behind bench/shaped_proxy.py (+25 ms first byte, 80 MB/s per connection: as
bench/engines.py); the gateway is a `gateway serve` process (server.workers default: one per core).

    .venv/bin/python bench/cold_ranges.py [--sizes=-65536,262144,1048576,4194304] [--reads 12] [--workers 1] [--profile PATH]
        [--run-folder /run/s3gw-huge]   # a tmpfs: mount -t tmpfs -o size=2g,huge=within_size tmpfs /run/s3gw-huge
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import cache_serving as cs
import cold_requests as cr
import workloads as wl

ORIGIN_KINDS = cr.ORIGIN_KINDS  # (the shaped proxy's request kinds, as bench/cold_requests.py counts them)


def fill(moto: str, count: int, size: int) -> list[str]:
    """`count` objects of `size` random bytes, written to moto itself; their keys."""
    s3 = wl.client(moto, cs.ORIGIN_CREDENTIALS, attempts=5)
    s3.create_bucket(Bucket=wl.BUCKET)
    body = os.urandom(size)
    keys = [f"tables/part-{number:05d}.parquet" for number in range(count)]
    for key in keys:
        s3.put_object(Bucket=wl.BUCKET, Key=key, Body=body)
    return keys


def timed_read(s3, key: str, range_: str) -> tuple[float, float, int]:  # type: ignore[no-untyped-def]
    """(ms to the body's first byte, ms to its last, bytes) of one ranged GET."""
    start = time.perf_counter()
    body = s3.get_object(Bucket=wl.BUCKET, Key=key, Range=range_)["Body"]
    got = len(body.read(1))
    first = time.perf_counter()
    while chunk := body.read(1 << 16):
        got += len(chunk)
    last = time.perf_counter()
    return (first - start) * 1e3, (last - start) * 1e3, got


def tree_io(pid: int) -> tuple[int, int]:
    """(bytes written, bytes read) so far by the write and read system calls of `pid` and its live
    descendants (/proc/PID/io: sockets and files alike; a node of several workers writes each block
    it keeps to tmpfs, and reads back what another worker wrote for it)."""
    written = read = 0
    for one in cs.tree(pid):
        try:
            with open(f"/proc/{one}/io") as fh:
                counts = dict(line.split(": ") for line in fh.read().splitlines())
        except OSError:
            continue
        written, read = written + int(counts["wchar"]), read + int(counts["rchar"])
    return written, read


def range_for(size: int, object_size: int, rng: random.Random) -> str:
    if size < 0:
        return f"bytes={size}"
    start = rng.randrange(4, object_size - size)
    return f"bytes={start}-{start + size - 1}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="-65536,262144,1048576,4194304",
                        help="read sizes in bytes, comma-separated; -N: a suffix range of N bytes")
    parser.add_argument("--reads", type=int, default=12, help="reads of each size per setup (each of a new object)")
    parser.add_argument("--object-size", type=int, default=8 << 20, help="bytes of each object")
    parser.add_argument("--latency", default="25ms", help="origin: added before every answer's first byte")
    parser.add_argument("--rate", default="80MB", help="origin: bytes/s per connection each way")
    parser.add_argument("--workers", type=int, default=0, help="server.workers (0: the default, one per core)")
    parser.add_argument("--run-folder", default="", help="server.run_folder (a tmpfs: say, one mounted with huge=within_size)")
    parser.add_argument("--seed", type=int, default=7, help="of the random offsets")
    parser.add_argument("--profile", default="", metavar="PATH",
                        help="py-spy record (raw, --subprocesses, --nonblocking) of the gateway's processes, written here")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="cold-ranges-"))
    version = wl.header("bench/cold_ranges.py: cold ranged GETs, directly and through a fresh gateway",
                        args.latency, args.rate,
                        f"sizes {sizes}, {args.reads} reads each, objects of {args.object_size} B; gateway: "
                        f"server.workers {args.workers or f'default ({os.cpu_count()} cores)'}"
                        f"{f', server.run_folder {args.run_folder}' if args.run_folder else ''}")
    load_start = wl.loadavg()
    code = wl.snapshot_code(tmp)
    rng = random.Random(args.seed)
    result: dict[int, dict[str, list[float]]] = {}
    counted = {"direct": dict.fromkeys(ORIGIN_KINDS, 0), "gateway": dict.fromkeys(ORIGIN_KINDS, 0)}
    with wl.shaped_moto(tmp, args.latency, args.rate) as (moto, proxy):
        keys = fill(moto, len(sizes) * args.reads + 1, args.object_size)
        gw = wl.gateway("gw", proxy, tmp, code, {"GATEWAY_METADATA_TTL": "10m", "GATEWAY_LISTING_TTL": "10m",
                                                 **({"GATEWAY_SERVER_WORKERS": str(args.workers)} if args.workers else {}),
                                                 **({"GATEWAY_SERVER_RUN_FOLDER": args.run_folder} if args.run_folder else {})})
        gw.start()
        print(f"gateway pid {gw.pid}", flush=True)
        try:
            clients = {"direct": wl.client(proxy, cs.ORIGIN_CREDENTIALS, pool=1), "gateway": wl.client(gw.endpoint, pool=1)}
            for s3 in clients.values():  # connections made and botocore's first-call work done, on an object not measured
                timed_read(s3, keys[-1], "bytes=0-99")
            tree_cpu = cr.TreeCpu(gw.pid)
            spy = cr.profiler(gw.pid, args.profile, 1000, False) if args.profile else None
            with wl.Cpu() as load:
                for position, size in enumerate(sizes):
                    rows = result[size] = {k: [] for k in ("d_first", "d_last", "g_first", "g_last", "cpu", "wrote", "read")}
                    for number in range(args.reads):
                        key = keys[position * args.reads + number]
                        range_ = range_for(size, args.object_size, rng)
                        for setup in (("direct", "gateway") if number % 2 == 0 else ("gateway", "direct")):
                            before, cpu, io = cr.origin_counts(proxy), tree_cpu(), tree_io(gw.pid)
                            first, last, got = timed_read(clients[setup], key, range_)
                            if setup == "gateway":
                                time.sleep(0.05)  # what the gateway does after its answer lands on this read
                                rows["cpu"].append((tree_cpu() - cpu) / 1e6)
                                rows["wrote"].append((tree_io(gw.pid)[0] - io[0]) / (1 << 20))
                                rows["read"].append((tree_io(gw.pid)[1] - io[1]) / (1 << 20))
                            assert got == abs(size), (setup, range_, got)
                            after = cr.origin_counts(proxy)
                            for k in ORIGIN_KINDS:
                                counted[setup][k] += after[k] - before[k]
                            rows[("d_" if setup == "direct" else "g_") + "first"].append(first)
                            rows[("d_" if setup == "direct" else "g_") + "last"].append(last)
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(timeout=60)
        finally:
            gw.stop()
    table = []
    for size, rows in result.items():
        added_first = [g - d for d, g in zip(rows["d_first"], rows["g_first"])]
        added_last = [g - d for d, g in zip(rows["d_last"], rows["g_last"])]
        table.append((f"bytes={size}" if size < 0 else f"{size} B", len(added_last),
                      f"{statistics.median(rows['d_first']):.1f} / {statistics.median(rows['g_first']):.1f}",
                      f"{statistics.median(added_first):.1f} ({cr.percentile(added_first, 0.9):.1f})",
                      f"{statistics.median(rows['d_last']):.1f} / {statistics.median(rows['g_last']):.1f}",
                      f"{statistics.median(added_last):.1f} ({cr.percentile(added_last, 0.9):.1f})",
                      f"{statistics.median(rows['cpu']):.2f}",
                      f"{statistics.mean(rows['wrote']):.2f} / {statistics.mean(rows['read']):.2f}"))
    print(wl.markdown(["read", "n", "first byte ms, direct / gateway", "added (p90)", "last byte ms, direct / gateway",
                       "added (p90)", "gateway CPU ms/read", "gateway MiB written / read per read"], table))
    print("origin requests (at the shaped proxy): " + "; ".join(
        f"{setup} " + ", ".join(f"{k} {counted[setup][k]}" for k in ORIGIN_KINDS) for setup in counted))
    print(f"other load during the run: {load.other:.2f} cores; {load_start} at the start, {wl.loadavg()} at the end; "
          f"code {version}")
    wl.tidy(tmp)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
