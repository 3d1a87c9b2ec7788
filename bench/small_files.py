"""Small files aggregated per date: the origin directly vs the gateway cold and warm, metadata caching on and off.

Alluxio's "small files" case: batches of 2 MB files under date prefixes, where a job
"aggregates per date": it lists each date prefix, then reads every file listed. Alluxio in
front of S3 reported 1.2x to 5.9x faster with its metadata cache, 1x to 1.35x without.

For each batch size this script creates the files at moto (one PUT, then server-side
copies), behind bench/shaped_proxy.py (first-byte latency and a per-connection rate, so
moto behaves like a remote store), and times the aggregation with boto3 (SigV4; dates one
after another, the files of a date read by --clients threads):

  origin           straight at the shaped origin
  gw cold / warm   through a freshly started gateway (empty cache), then again (warm), with
                   metadata and listing caching ON (`metadata.ttl` and `listing.ttl` =
                   --ttl: a warm pass asks the origin nothing) and OFF (both 0: every HEAD
                   and GET revalidates its metadata with a conditional HEAD, 304 keeps the
                   cached blocks; every listing goes to the origin)

and prints seconds per pass and the speedup over the origin, and writes a PNG chart.

    .venv/bin/python bench/small_files.py                       # batches 50,500 (~4 minutes)
    .venv/bin/python bench/small_files.py --batches 50,500,5000 --chart docs/img/small_files.png
    .venv/bin/python bench/small_files.py --batches 5000 --moto-key-buffer 1 --disk-quota 12GiB --modes on

The 5000-file batch is 10 GB: --moto-key-buffer 1 has moto spool every object to a temp
file (else it keeps objects under 5 MiB in memory), and --disk-quota gives the gateway a
disk tier under the run's temp folder (else a warm pass finds only the last 2 GiB).

Needs matplotlib (.venv/bin/pip install matplotlib). Results: docs/benchmarks-notes.md.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workloads as wl

cs = wl.cs


def create_batch(origin_s3, n: int, size: int, dates: int) -> dict[str, list[str]]:  # type: ignore[no-untyped-def]
    """`n` files of `size` bytes spread over `dates` date prefixes; returns {date prefix: keys}."""
    days = min(dates, n)
    by_date: dict[str, list[str]] = collections.defaultdict(list)
    for i in range(n):
        prefix = f"batch{n}/dt=2026-11-{1 + i % days:02d}/"
        by_date[prefix].append(f"{prefix}part-{i:05d}.bin")
    first = by_date[next(iter(by_date))][0]
    origin_s3.put_object(Bucket=wl.BUCKET, Key=first, Body=os.urandom(size))
    rest = [k for keys in by_date.values() for k in keys if k != first]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: origin_s3.copy_object(Bucket=wl.BUCKET, Key=k,
                                                      CopySource={"Bucket": wl.BUCKET, "Key": first}), rest))
    return dict(by_date)


def aggregate(endpoint: str, by_date: dict[str, list[str]], size: int, clients: int) -> tuple[float, collections.Counter[str]]:
    """List each date prefix, then read every file it lists; seconds and the x-cache answers seen."""
    s3 = wl.client(endpoint, pool=clients + 2)
    seen: collections.Counter[str] = collections.Counter()

    def read(key: str) -> None:
        resp = s3.get_object(Bucket=wl.BUCKET, Key=key)
        got = len(resp["Body"].read())
        if got != size:
            raise SystemExit(f"GET {key}: {got} bytes, expected {size}")
        seen[resp["ResponseMetadata"]["HTTPHeaders"].get("x-cache", "-")] += 1

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        for prefix, expected in by_date.items():
            listed = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=wl.BUCKET, Prefix=prefix)
                      for o in page.get("Contents", [])]
            if sorted(listed) != sorted(expected):
                raise SystemExit(f"list {prefix}: {len(listed)} keys, expected {len(expected)}")
            list(pool.map(read, listed))
    return time.perf_counter() - started, seen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", default="50,500", help="files per batch (Alluxio: 50,500,5000)")
    parser.add_argument("--file-size", default="2MB")
    parser.add_argument("--dates", type=int, default=10, help="date prefixes per batch")
    parser.add_argument("--clients", type=int, default=8, help="threads reading the files of a date")
    parser.add_argument("--latency", default="25ms", help="origin: added before every answer's first byte")
    parser.add_argument("--rate", default="80MB", help="origin: bytes/s per connection each way")
    parser.add_argument("--ttl", default="10m", help="metadata.ttl and listing.ttl when caching is ON")
    parser.add_argument("--memory-quota", default="2GiB", help="the gateway's cache.memory_quota")
    parser.add_argument("--disk-quota", default="",
                        help="add a disk tier of this size under the run's temp folder (e.g. 12GiB, for batches that"
                             " do not fit in --memory-quota); default: memory only")
    parser.add_argument("--modes", default="on,off", help="caching modes to run: on, off or both (default on,off)")
    parser.add_argument("--moto-key-buffer", default="",
                        help="moto's MOTO_S3_DEFAULT_KEY_BUFFER_SIZE: objects larger than this many bytes are spooled"
                             " to a temp file instead of kept in moto's memory (moto's default: 5 MiB - 1 KiB);"
                             " 1 spools every object (the 5000-file batch is 10 GB)")
    parser.add_argument("--chart", default="", help="PNG path (default: small_files.png in a temp folder)")
    args = parser.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",") if b.strip()]
    size = cs.parse_size(args.file_size, "--file-size")
    chosen = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not chosen or set(chosen) - {"on", "off"}:
        parser.error("--modes: on, off or on,off")

    tmp = Path(tempfile.mkdtemp(prefix="gateway-smallfiles-"))
    chart = Path(args.chart) if args.chart else tmp / "small_files.png"
    version = wl.header("bench/small_files.py: small files aggregated per date (list each date prefix, read every file)",
              args.latency, args.rate,
              f"files of {size:,} bytes over {args.dates} date prefixes; {args.clients} reader threads (boto3, SigV4); "
              f"caching ON: metadata.ttl = listing.ttl = {args.ttl}; OFF: both 0; cache.memory_quota {args.memory_quota}"
              f"{f', a disk tier of {args.disk_quota}' if args.disk_quota else ''}, default block size (1 MiB) and"
              f" readahead; modes {','.join(chosen)}"
              + (f"; moto MOTO_S3_DEFAULT_KEY_BUFFER_SIZE={args.moto_key_buffer} (larger objects spooled to disk)"
                 if args.moto_key_buffer else ""))
    code = wl.snapshot_code(tmp)
    modes = {"on": {"GATEWAY_METADATA_TTL": args.ttl, "GATEWAY_LISTING_TTL": args.ttl},
             "off": {"GATEWAY_METADATA_TTL": "0", "GATEWAY_LISTING_TTL": "0"}}
    modes = {m: env for m, env in modes.items() if m in chosen}
    moto_env = {}
    if args.moto_key_buffer:
        spool = tmp / "moto-spool"  # moto's spooled objects (unlinked temp files: gone when moto exits)
        spool.mkdir()
        moto_env = {"MOTO_S3_DEFAULT_KEY_BUFFER_SIZE": str(cs.parse_size(args.moto_key_buffer, "--moto-key-buffer")),
                    "TMPDIR": str(spool)}
    rows = []
    with ExitStack() as stack:
        moto, origin = stack.enter_context(wl.shaped_moto(tmp, args.latency, args.rate, moto_env=moto_env))
        moto_s3 = wl.client(moto, cs.ORIGIN_CREDENTIALS, attempts=5)  # setup only: moto may drop a connection
        moto_s3.create_bucket(Bucket=wl.BUCKET)
        for n in batches:
            t0 = time.monotonic()
            by_date = create_batch(moto_s3, n, size, args.dates)
            print(f"== {n} files ({n * size / 1e6:,.0f} MB) created in {time.monotonic() - t0:.0f}s; {wl.loadavg()}",
                  flush=True)
            with wl.Cpu() as cpu:
                direct, _ = aggregate(origin, by_date, size, args.clients)
            print(f"   origin directly: {direct:7.2f} s  (CPU: ours {cpu.own:.1f} s, other load {cpu.other:.2f})",
                  flush=True)
            rows.append((n, "-", "origin", direct, 1.0, "-", "-", cpu.own, cpu.other))
            for mode, env in modes.items():
                disk = tmp / f"disk-{n}-{mode}"
                tiers = {"GATEWAY_CACHE_DISK": json.dumps([{"path": str(disk), "quota": args.disk_quota}])} \
                    if args.disk_quota else {}
                gw = wl.gateway(f"gw-{n}-{mode}", origin, tmp, code, {**env, **tiers, "GATEWAY_CACHE_MEMORY_QUOTA":
                                                                      str(cs.parse_size(args.memory_quota, "--memory-quota"))})
                gw.start()
                try:
                    for phase in ("cold", "warm"):
                        with wl.Cpu(gw) as cpu:
                            seconds, seen = aggregate(gw.endpoint, by_date, size, args.clients)
                        answers = ", ".join(f"{k} {v}" for k, v in sorted(seen.items()))
                        print(f"   gateway {phase}, caching {mode:<3}: {seconds:7.2f} s  speedup {direct / seconds:5.2f}x"
                              f"  x-cache: {answers}  (CPU: gateway {cpu.gateway:.1f} s, ours {cpu.own:.1f} s,"
                              f" other load {cpu.other:.2f})", flush=True)
                        rows.append((n, mode, f"gw {phase}", seconds, direct / seconds, answers, cpu.gateway, cpu.own,
                                     cpu.other))
                finally:
                    gw.stop()
                    shutil.rmtree(disk, ignore_errors=True)

    print("\n" + wl.markdown(["files", "metadata+listing cache", "setup", "seconds", "speedup vs origin",
                              "x-cache answers", "gateway CPU s", "all our CPU s", "other load"], rows))
    print("\n'all our CPU s': CPU seconds of every process of this benchmark (client threads, gateway, proxy, moto);"
          f" 'other load': cores used meanwhile by processes outside it. At the end: {wl.loadavg()}")
    groups = [f"{n} files\ncache {mode}" for n in batches for mode in modes]
    series: dict[str, list[float]] = {"origin": [], "gw cold": [], "gw warm": []}
    for n in batches:
        direct = next(r[3] for r in rows if r[0] == n and r[2] == "origin")
        for mode in modes:
            series["origin"].append(direct)
            for phase in ("gw cold", "gw warm"):
                series[phase].append(next(r[3] for r in rows if r[0] == n and r[1] == mode and r[2] == phase))
    wl.bar_chart(chart, f"Small files ({size / 1e6:g} MB) aggregated per date: seconds per pass (lower is better)",
                 groups, series, "seconds",
                 note=f"origin: moto + shaped_proxy (+{args.latency} first byte, {args.rate}/s per connection); "
                      f"{args.clients} readers; {version}; {time.strftime('%Y-%m-%d')}")
    wl.tidy(tmp, chart)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
