"""The published query-engine workloads on a real engine: Trino 476 (one node) with the Hive connector,
its native S3 file system pointed at the origin directly or at the gateway (cold, then warm).

The origin is moto behind bench/shaped_proxy.py (first byte +25 ms, 80 MB/s per connection by
default); the gateway is a `gateway serve` process in front of that proxy. Trino's file metastore
lives in the bucket, so table and partition metadata are S3 reads too, as they are in a Hive
metastore-less deployment. The tables are written once through a catalog pointed at moto itself
(no shaping), then every workload runs once on that catalog to warm Trino's JIT, before timing:

- scan: an I/O-heavy scan of `orders` (tpch --scale, Parquet) with a selective LIKE filter;
- small files: `small` (one small Parquet file per day, --days partitions) aggregated by date;
- cpu: a CPU-heavy aggregation over `orders`, run --repeat times in a row;
- metadata: a query over the partition metadata of `small` (`"small$partitions"`) and a point
  lookup of one day (partition pruning: the metastore is read, one file is);

each on: the origin directly, the gateway cold (a gateway started for that workload: empty cache) and
the gateway warm (the same workload again on that gateway); the origin's figure is the faster of two
passes. The answers of every setup must be the same.

    .venv/bin/python bench/engines.py [--scale sf1] [--days 120] [--repeat 3] [--latency 25ms] [--rate 80MB]

Needs what `make test-engines` fetches (Trino 476 in ~/.cache/s3gw-engines, Temurin JDK 25).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import cache_serving as cs
import workloads as wl

from tests.engines.jvm import TrinoServer, sorted_rows, trino_home
from tests.engines.support import hive_catalog

TOKEN = "bench-engines-admin-token-0000000000000001"


def workloads(days: int, repeat: int) -> dict[str, list[str]]:
    return {
        "scan (selective filter)": ["SELECT count(*), round(sum(totalprice), 2) FROM orders "
                                    "WHERE comment LIKE '%special%requests%' AND orderstatus = 'F'"],
        f"small files by date ({days} files)": ["SELECT orderdate, count(*), round(sum(totalprice), 2) FROM small "
                                                "GROUP BY orderdate ORDER BY orderdate"],
        f"cpu-heavy (x{repeat})": ["SELECT orderpriority, count(DISTINCT custkey), "
                                   "round(approx_percentile(totalprice, 0.5), -2), "
                                   "max(length(regexp_replace(comment, '[aeiou]+', ''))) FROM orders GROUP BY 1"] * repeat,
        f"metadata ({days} partitions)": ['SELECT count(*), min(orderdate), max(orderdate) FROM "small$partitions"',
                                          "SELECT count(*) FROM small WHERE orderdate = DATE '1992-01-15'"],
    }


def header(what: str, latency: str, rate: str, extra: str) -> str:
    """What runs where (bench/workloads.py's header, without the nginx version it asks cs.machine for)."""
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "?")
    version = cs.code_version()
    print(what)
    print(f"machine: {model}, {os.cpu_count()} cores, {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB; "
          f"Python {sys.version.split()[0]}")
    print(f"gateway code: {version}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; {wl.loadavg()}")
    print(f"origin: moto S3 server behind bench/shaped_proxy.py: +{latency} before the first byte of every answer, "
          f"{rate}/s per connection each way")
    print(extra)
    print(f"NOTE: Trino, gateway, proxy and moto share these {os.cpu_count()} cores over loopback.\n", flush=True)
    return version


def origin_requests(endpoint: str) -> int:
    """gateway_origin_requests_total summed over methods, from the gateway's metrics."""
    text = httpx.get(endpoint + "/_gateway/metrics", headers={"authorization": f"Bearer {TOKEN}"}, timeout=10).text
    return int(sum(float(m) for m in re.findall(r"^gateway_origin_requests_total\{[^}]*\} (\S+)$", text, re.M)))


def run_pass(trino: TrinoServer, catalog: str, plan: dict[str, list[str]]) -> dict[str, tuple[float, list]]:
    results = {}
    for name, queries in plan.items():
        t0 = time.monotonic()
        answers = [sorted_rows(trino.query(sql, catalog=catalog, schema="bench")) for sql in queries]
        results[name] = (time.monotonic() - t0, answers)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", default="sf1", help="tpch schema of the orders table (tiny, sf1, ...)")
    parser.add_argument("--days", type=int, default=120, help="partitions (one file each) of the small-files table")
    parser.add_argument("--repeat", type=int, default=3, help="runs of the CPU-heavy query per pass")
    parser.add_argument("--latency", default="25ms", help="origin: added before every answer's first byte")
    parser.add_argument("--rate", default="80MB", help="origin: bytes/s per connection each way")
    parser.add_argument("--memory-quota", default="2GiB", help="the gateway's cache.memory_quota")
    parser.add_argument("--chart", default="", help="PNG path (default: engines.png in a temp folder)")
    args = parser.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="gateway-engines-"))
    chart = Path(args.chart) if args.chart else tmp / "engines.png"
    version = header("bench/engines.py: Trino 476 (Hive connector, native S3, file metastore in the bucket)",
                        args.latency, args.rate,
                        f"orders from tpch.{args.scale} (Parquet), small: {args.days} daily partitions of one file; "
                        f"gateway: metadata.ttl = listing.ttl = metadata.negative_ttl = 10m, cache.memory_quota "
                        f"{args.memory_quota}; Trino: one node, -Xmx2G, task.concurrency 2")
    code = wl.snapshot_code(tmp)
    plan = workloads(args.days, args.repeat)
    rows = []
    with ExitStack() as stack:
        moto, origin = stack.enter_context(wl.shaped_moto(tmp, args.latency, args.rate))
        wl.client(moto, cs.ORIGIN_CREDENTIALS, attempts=5).create_bucket(Bucket=wl.BUCKET)
        env = {"GATEWAY_METADATA_TTL": "10m", "GATEWAY_LISTING_TTL": "10m", "GATEWAY_METADATA_NEGATIVE_TTL": "10m",
               "GATEWAY_CACHE_MEMORY_QUOTA": str(cs.parse_size(args.memory_quota, "--memory-quota")),
               "GATEWAY_ADMIN_TOKEN": TOKEN}
        gw = wl.gateway("gw", origin, tmp, code, env)
        catalogs = {name: {**hive_catalog(endpoint, keys), "hive.metastore.catalog.dir": f"s3://{wl.BUCKET}/metastore"}
                    for name, endpoint, keys in (("load", moto, cs.ORIGIN_CREDENTIALS),
                                                 ("direct", origin, cs.ORIGIN_CREDENTIALS),
                                                 ("gw", gw.endpoint, cs.USER))}
        catalogs["tpch"] = {"connector.name": "tpch"}
        t0 = time.monotonic()
        trino = stack.enter_context(TrinoServer(trino_home(), tmp / "trino", catalogs))
        print(f"== Trino started in {trino.started_in:.0f}s (since the script began: {time.monotonic() - t0:.0f}s)")
        t0 = time.monotonic()
        trino.query("CREATE SCHEMA load.bench")
        trino.query("CREATE TABLE load.bench.orders WITH (format = 'PARQUET') AS SELECT * FROM "
                    f"tpch.{args.scale}.orders")
        trino.query("CREATE TABLE load.bench.small WITH (format = 'PARQUET', partitioned_by = ARRAY['orderdate']) AS "
                    "SELECT orderkey, custkey, totalprice, orderstatus, orderdate FROM tpch.tiny.orders "
                    f"WHERE orderdate < DATE '1992-01-01' + INTERVAL '{args.days}' DAY")
        size = sum(o["Size"] for page in wl.client(moto, cs.ORIGIN_CREDENTIALS).get_paginator("list_objects_v2")
                   .paginate(Bucket=wl.BUCKET) for o in page.get("Contents", []))
        print(f"== tables written to moto in {time.monotonic() - t0:.0f}s ({size / 1e6:.0f} MB in the bucket); "
              f"{wl.loadavg()}", flush=True)
        run_pass(trino, "load", plan)  # Trino's JIT warms up on the unshaped catalog
        with wl.Cpu() as cpu:  # two passes, the faster of each kept: the origin has no cache to warm
            first, second = run_pass(trino, "direct", plan), run_pass(trino, "direct", plan)
        direct = {name: min(first[name], second[name], key=lambda r: r[0]) for name in plan}
        for name in plan:
            if first[name][1] != second[name][1]:
                raise SystemExit(f"{name}: two passes on the origin gave different answers")
            print(f"   origin directly  {name:<32} passes {first[name][0]:7.2f} s and {second[name][0]:7.2f} s")
        for name, (seconds, _) in direct.items():
            rows.append((name, "origin", seconds, 1.0, "-", "-", "-"))
        print(f"   (CPU: ours {cpu.own:.1f} s, other load {cpu.other:.2f})", flush=True)
        stack.callback(gw.stop)
        for name in plan:  # each workload on a fresh gateway (empty cache): cold, then the same again: warm
            gw.stop()
            gw.start()
            for phase in ("cold", "warm"):
                before = origin_requests(gw.endpoint)
                with wl.Cpu(gw) as cpu:
                    seconds, answers = run_pass(trino, "gw", {name: plan[name]})[name]
                asked = origin_requests(gw.endpoint) - before
                if answers != direct[name][1]:
                    raise SystemExit(f"{name}: the gateway's answer differs from the origin's")
                speedup = direct[name][0] / seconds
                print(f"   gateway {phase:<8} {name:<32} {seconds:7.2f} s  speedup {speedup:5.2f}x  origin requests "
                      f"{asked}  (CPU: gateway {cpu.gateway:.1f} s, ours {cpu.own:.1f} s, other load {cpu.other:.2f})",
                      flush=True)
                rows.append((name, f"gw {phase}", seconds, speedup, asked, round(cpu.gateway, 1), round(cpu.other, 2)))

    print("\n" + wl.markdown(["workload", "setup", "seconds", "speedup vs origin", "origin requests", "gateway CPU s",
                              "other load"], rows))
    print(f"\nAt the end: {wl.loadavg()}")
    series = {setup: [r[2] for r in rows if r[1] == setup] for setup in ("origin", "gw cold", "gw warm")}
    wl.bar_chart(chart, "Trino 476 on the shaped origin, directly and through the gateway: seconds (lower is better)",
                 [name.replace(" (", "\n(") for name in plan], series, "seconds",
                 note=f"origin: moto + shaped_proxy (+{args.latency} first byte, {args.rate}/s per connection); "
                      f"tpch.{args.scale} orders; {version}; {time.strftime('%Y-%m-%d')}")
    wl.tidy(tmp, chart)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
