"""The published query-engine workloads and eight TPC-H queries on a real engine: Trino 476 (one node)
with the Hive connector, its native S3 file system pointed at the origin directly or at the gateway
(cold, then warm), with what each setup asked of the origin.

The origin is moto behind bench/shaped_proxy.py (first byte +25 ms, 80 MB/s per connection by
default); the gateway is a `gateway serve` process in front of that proxy. Trino's file metastore
lives in the bucket, so table and partition metadata are S3 reads too, as they are in a Hive
metastore-less deployment. The tables are written once through a catalog pointed at moto itself
(no shaping; files of at most --file-size, since moto copies a whole object to answer each range),
then every workload runs once on that catalog to warm Trino's JIT (--no-jit-pass: not), before timing:

- scan: an I/O-heavy scan of `orders` (tpch --scale, Parquet) with a selective LIKE filter;
- small files: `small` (one small Parquet file per day, --days partitions) aggregated by date,
  counted (count(*)) and filtered;
- cpu: a CPU-heavy aggregation over `orders`, run --repeat times in a row;
- metadata: a query over the partition metadata of `small` (`"small$partitions"`) and a point
  lookup of one day (partition pruning: the metastore is read, one file is);
- TPC-H --tpch (Q1, Q3, Q5, Q6, Q10, Q12, Q14, Q19 by default) over the tpch --scale tables
  written as each of --formats (parquet, orc);

each on: the origin directly, the gateway cold (a gateway started for that workload: empty cache) and
the gateway warm (the same workload again on that gateway); the origin's figure is the faster of two
passes, run just before the gateway's runs of the same workload (the machine's load drifts over a
run: all the direct passes first had the gateway's runs at another load). The answers of every setup must be the same (floating-point sums to 1e-9 relative). The
origin requests (GET of an object, HEAD, LIST) and bytes (answer bodies) of every workload and setup
are counted at the shaped proxy, which both setups pass through (its /_shaped_proxy/counters);
--requests-log writes each request of each workload and setup (method, target, Range, status, bytes);
--json PATH the results as a JSON results file, from which bench/charts.py draws docs/benchmarks.md's chart.
--preload footers,full also runs each TPC-H workload, before its cold run, on a fresh gateway into which
`gateway load` first loaded the tables the workload reads (`--footers`: only their footers; `full`:
all of them), and prints its time against direct and what the load cost the origin.

    .venv/bin/python bench/engines.py [--scale sf1] [--days 120] [--repeat 3] [--latency 25ms] [--rate 80MB]
                                      [--tpch q1,q3,q5,q6,q10,q12,q14,q19] [--formats parquet,orc] [--hms]
                                      [--orc-stripe-rows N]

--hms: the tables in a Hive metastore service (tests/engines/hms.py: Apache Hive's standalone metastore,
its own S3A on moto) shared by the three catalogs, as Hive deployments keep them.

Needs what `make test-engines` fetches (Trino 476 in ~/.cache/s3gw-engines, Temurin JDK 25).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import cast

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import cache_serving as cs
import workloads as wl

from tests.engines.hms import HiveMetastore, hms_catalog, hms_home
from tests.engines.jvm import TrinoServer, sorted_rows, trino_home
from tests.engines.support import hive_catalog
from tests.support import REGION

TOKEN = "bench-engines-admin-token-0000000000000001"
KINDS = ("GET", "HEAD", "LIST", "other")
TPCH_TABLES = ("lineitem", "orders", "customer", "part", "supplier", "nation", "region")

# TPC-H (standard substitution parameters), over the tpch connector's column names; {s} is the schema.
_Q19_TERM = ("(p.partkey = l.partkey AND p.brand = '{brand}' AND p.container IN ({containers}) "
             "AND l.quantity >= {low} AND l.quantity <= {low} + 10 AND p.size BETWEEN 1 AND {size} "
             "AND l.shipmode IN ('AIR', 'AIR REG') AND l.shipinstruct = 'DELIVER IN PERSON')")
TPCH = {
    "q1": "SELECT returnflag, linestatus, sum(quantity), sum(extendedprice), sum(extendedprice * (1 - discount)), "
          "sum(extendedprice * (1 - discount) * (1 + tax)), avg(quantity), avg(extendedprice), avg(discount), count(*) "
          "FROM {s}.lineitem WHERE shipdate <= DATE '1998-12-01' - INTERVAL '90' DAY GROUP BY 1, 2 ORDER BY 1, 2",
    "q3": "SELECT l.orderkey, sum(l.extendedprice * (1 - l.discount)) AS revenue, o.orderdate, o.shippriority "
          "FROM {s}.customer c, {s}.orders o, {s}.lineitem l WHERE c.mktsegment = 'BUILDING' AND c.custkey = o.custkey "
          "AND l.orderkey = o.orderkey AND o.orderdate < DATE '1995-03-15' AND l.shipdate > DATE '1995-03-15' "
          "GROUP BY l.orderkey, o.orderdate, o.shippriority ORDER BY revenue DESC, o.orderdate LIMIT 10",
    "q5": "SELECT n.name, sum(l.extendedprice * (1 - l.discount)) AS revenue FROM {s}.customer c, {s}.orders o, "
          "{s}.lineitem l, {s}.supplier su, {s}.nation n, {s}.region r WHERE c.custkey = o.custkey "
          "AND l.orderkey = o.orderkey AND l.suppkey = su.suppkey AND c.nationkey = su.nationkey "
          "AND su.nationkey = n.nationkey AND n.regionkey = r.regionkey AND r.name = 'ASIA' "
          "AND o.orderdate >= DATE '1994-01-01' AND o.orderdate < DATE '1995-01-01' GROUP BY n.name ORDER BY revenue DESC",
    "q6": "SELECT sum(extendedprice * discount) AS revenue FROM {s}.lineitem WHERE shipdate >= DATE '1994-01-01' "
          "AND shipdate < DATE '1995-01-01' AND discount BETWEEN 0.05 AND 0.07 AND quantity < 24",
    "q10": "SELECT c.custkey, c.name, sum(l.extendedprice * (1 - l.discount)) AS revenue, c.acctbal, n.name, c.address, "
           "c.phone, c.comment FROM {s}.customer c, {s}.orders o, {s}.lineitem l, {s}.nation n "
           "WHERE c.custkey = o.custkey AND l.orderkey = o.orderkey AND o.orderdate >= DATE '1993-10-01' "
           "AND o.orderdate < DATE '1994-01-01' AND l.returnflag = 'R' AND c.nationkey = n.nationkey "
           "GROUP BY c.custkey, c.name, c.acctbal, c.phone, n.name, c.address, c.comment ORDER BY revenue DESC LIMIT 20",
    "q12": "SELECT l.shipmode, sum(CASE WHEN o.orderpriority IN ('1-URGENT', '2-HIGH') THEN 1 ELSE 0 END), "
           "sum(CASE WHEN o.orderpriority NOT IN ('1-URGENT', '2-HIGH') THEN 1 ELSE 0 END) FROM {s}.orders o, "
           "{s}.lineitem l WHERE o.orderkey = l.orderkey AND l.shipmode IN ('MAIL', 'SHIP') "
           "AND l.commitdate < l.receiptdate AND l.shipdate < l.commitdate AND l.receiptdate >= DATE '1994-01-01' "
           "AND l.receiptdate < DATE '1995-01-01' GROUP BY l.shipmode ORDER BY l.shipmode",
    "q14": "SELECT 100.00 * sum(CASE WHEN p.type LIKE 'PROMO%' THEN l.extendedprice * (1 - l.discount) ELSE 0 END) "
           "/ sum(l.extendedprice * (1 - l.discount)) FROM {s}.lineitem l, {s}.part p WHERE l.partkey = p.partkey "
           "AND l.shipdate >= DATE '1995-09-01' AND l.shipdate < DATE '1995-10-01'",
    "q19": "SELECT sum(l.extendedprice * (1 - l.discount)) AS revenue FROM {s}.lineitem l, {s}.part p WHERE " + " OR ".join(
        _Q19_TERM.format(brand=brand, containers=containers, low=low, size=size) for brand, containers, low, size in (
            ("Brand#12", "'SM CASE', 'SM BOX', 'SM PACK', 'SM PKG'", 1, 5),
            ("Brand#23", "'MED BAG', 'MED BOX', 'MED PKG', 'MED PACK'", 10, 10),
            ("Brand#34", "'LG CASE', 'LG BOX', 'LG PACK', 'LG PKG'", 20, 15))),
}


def workloads(days: int, repeat: int, tpch: list[str], formats: list[str]) -> dict[str, list[str]]:
    plan = {
        "scan (selective filter)": ["SELECT count(*), round(sum(totalprice), 2) FROM parquet.orders "
                                    "WHERE comment LIKE '%special%requests%' AND orderstatus = 'F'"],
        f"small files by date ({days} files)": ["SELECT orderdate, count(*), round(sum(totalprice), 2) FROM small "
                                                "GROUP BY orderdate ORDER BY orderdate"],
        f"small files count(*) ({days} files)": ["SELECT count(*) FROM small"],
        f"small files filter ({days} files)": ["SELECT count(*), round(sum(totalprice), 2) FROM small "
                                               "WHERE totalprice > 300000 AND orderstatus = 'F'"],
        f"cpu-heavy (x{repeat})": ["SELECT orderpriority, count(DISTINCT custkey), "
                                   "round(approx_percentile(totalprice, 0.5), -2), "
                                   "max(length(regexp_replace(comment, '[aeiou]+', ''))) FROM parquet.orders "
                                   "GROUP BY 1"] * repeat,
        f"metadata ({days} partitions)": ['SELECT count(*), min(orderdate), max(orderdate) FROM "small$partitions"',
                                          "SELECT count(*) FROM small WHERE orderdate = DATE '1992-01-15'"],
    }
    for fmt in formats:
        for q in tpch:
            plan[f"TPC-H {q.upper()} {fmt}"] = [TPCH[q].format(s=fmt)]
    return plan


def same(a: object, b: object) -> bool:
    """Equal answers, floating-point values to 1e-9 relative (parallel sums add in any order)."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


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


@contextmanager
def counted_origin(workdir: Path, latency: str, rate: str) -> Iterator[tuple[str, str, Path]]:
    """moto's S3 server and bench/shaped_proxy.py in front of it, logging every request it relays;
    yields (moto, shaped endpoints, the proxy's request log)."""
    with wl.moto_process(workdir) as moto:
        port, log, requests = cs.free_port(), workdir / "shaped-proxy.log", workdir / "shaped-requests.tsv"
        with open(log, "wb") as fh:
            proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve().parent / "shaped_proxy.py"),
                                     "--upstream", moto.removeprefix("http://"), "--port", str(port),
                                     "--latency", latency, "--rate", rate, "--log", str(requests)],
                                    stdout=fh, stderr=subprocess.STDOUT)
        shaped = f"http://127.0.0.1:{port}"
        try:
            cs._wait_http(shaped + "/moto-api/", proc, "shaped proxy", log)
            yield moto, shaped, requests
        finally:
            cs._stop(proc)


class Counts:
    """What the shaped proxy relayed: requests and answer-body bytes by kind (GET, HEAD, LIST, other),
    and how many requests it had logged (their sequence numbers)."""

    def __init__(self, document: dict) -> None:  # type: ignore[type-arg]
        self.requests: dict[str, int] = document["requests"]
        self.bytes: dict[str, int] = document["bytes"]
        self.logged: int = document["logged"]

    def __sub__(self, other: Counts) -> Counts:
        return Counts({"requests": {k: self.requests[k] - other.requests[k] for k in KINDS},
                       "bytes": {k: self.bytes[k] - other.bytes[k] for k in KINDS}, "logged": self.logged})

    @property
    def total(self) -> int:
        return sum(self.requests.values())

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes.values())

    def brief(self) -> str:
        return (f"GET {self.requests['GET']}, HEAD {self.requests['HEAD']}, LIST {self.requests['LIST']}"
                + (f", other {self.requests['other']}" if self.requests["other"] else "")
                + f"; {self.total_bytes / 1e6:.1f} MB")


def settled(proxy: str, limit: float = 15.0) -> Counts:
    """The proxy's counts once nothing is relayed and they stopped moving for 0.3 s (a gateway's
    readahead may still be under way when the query returned), or after `limit` seconds."""
    deadline, last, still = time.monotonic() + limit, None, 0.0
    while True:
        document = httpx.get(proxy + "/_shaped_proxy/counters", timeout=10).json()
        now = time.monotonic()
        key = (document["requests"], document["bytes"], document["open"])
        if key == last and document["open"] == 0:
            if now - still >= 0.3:
                return Counts(document)
        else:
            last, still = key, now
        if now > deadline:
            print(f"   (the proxy did not settle in {limit:.0f} s: {document['open']} connections open)")
            return Counts(document)
        time.sleep(0.1)


def run_pass(trino: TrinoServer, catalog: str, plan: dict[str, list[str]], proxy: str | None = None
             ) -> dict[str, tuple[float, list, Counts | None, tuple[int, int]]]:
    """Each workload's (seconds, answers, what the proxy relayed meanwhile, its log's sequence numbers)."""
    results = {}
    for name, queries in plan.items():
        before = settled(proxy) if proxy else None
        t0 = time.monotonic()
        answers = [sorted_rows(trino.query(sql, catalog=catalog, schema="bench")) for sql in queries]
        seconds = time.monotonic() - t0
        after = settled(proxy) if proxy else None
        counts = after - before if after and before else None
        results[name] = (seconds, answers, counts, (before.logged, after.logged) if after and before else (0, 0))
    return results


def direct_passes(trino: TrinoServer, name: str, queries: list[str], origin: str
                  ) -> tuple[tuple[float, list, Counts | None, tuple[int, int]], list[tuple[str, str, int, int]]]:
    """A workload's two passes straight at the origin, just before the gateway's runs of it (so that
    the machine's load, which drifts over a run, is the same for both): the faster one (the origin
    has no cache to warm), and both passes' phases for the requests log."""
    with wl.Cpu() as cpu:
        first, second = (run_pass(trino, "direct", {name: queries}, origin)[name] for _ in range(2))
    if not same(first[1], second[1]):
        raise SystemExit(f"{name}: two passes on the origin gave different answers")
    one, two = first[2], second[2]
    assert one is not None and two is not None
    print(f"   origin directly  {name:<36} passes {first[0]:7.2f} s and {second[0]:7.2f} s; "
          f"origin: {one.brief()} / {two.brief()}  (CPU: ours {cpu.own:.1f} s, other load {cpu.other:.2f})", flush=True)
    return min(first, second, key=lambda r: r[0]), [(name, "direct 1", *first[3]), (name, "direct 2", *second[3])]


def tree_cpu(pid: int) -> float:
    """CPU seconds of a live process and its descendants (a gateway's supervisor and its workers)."""
    total = wl.process_cpu(pid)
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            total += sum(tree_cpu(int(child)) for child in children.read_text().split())
        except OSError:
            pass
    return total


TARGETS = {"cold_target": 0.95}  # every workload's cold run against direct (docs/benchmarks.md)
WHOLE_TARGETS = {"requests_target": 1.05, "bytes_target": 1.2}  # the whole workload's cold origin requests, bytes


def _over(a: float, b: float) -> float | None:
    return round(a / b, 4) if b else None


def result_row(name: str, seconds: dict[str, float], requests: dict[str, int], sizes: dict[str, int],
               kinds: dict[str, dict[str, int]] | None = None) -> dict[str, object]:
    """One workload's results as a results file holds them: for the setups direct, cold and warm, the
    seconds, the origin requests and answer bytes (and requests by kind), then the ratios the tables and
    charts show (time direct / gateway, origin requests and bytes cold / direct)."""
    row: dict[str, object] = {"workload": name}
    for setup in ("direct", "cold", "warm"):
        row.update({f"{setup}_s": round(seconds[setup], 3), f"{setup}_requests": requests[setup],
                    f"{setup}_bytes": sizes[setup], f"{setup}_mb": round(sizes[setup] / 1e6, 3)})
        if kinds is not None:
            row[f"{setup}_by_kind"] = dict(kinds[setup])
    row.update({"cold_ratio": _over(seconds["direct"], seconds["cold"]),
                "warm_ratio": _over(seconds["direct"], seconds["warm"]),
                "requests_ratio": _over(requests["cold"], requests["direct"]),
                "bytes_ratio": _over(sizes["cold"], sizes["direct"])})
    return row


def counted_row(name: str, seconds: dict[str, float], counts: dict[str, Counts]) -> dict[str, object]:
    return result_row(name, seconds, {k: c.total for k, c in counts.items()},
                      {k: c.total_bytes for k, c in counts.items()}, {k: c.requests for k, c in counts.items()})


def whole_row(rows: list[dict[str, object]]) -> dict[str, object]:
    """The whole workload: the workloads' seconds, requests and bytes summed, with the targets it is held to."""
    def total(key: str) -> float:
        return math.fsum(cast(float, row[key]) for row in rows)

    setups = ("direct", "cold", "warm")
    return {**result_row("whole workload", {s: total(f"{s}_s") for s in setups},
                         {s: int(total(f"{s}_requests")) for s in setups},
                         {s: int(total(f"{s}_bytes")) for s in setups}), **WHOLE_TARGETS}


def table_row(row: dict[str, object]) -> tuple[object, ...]:
    """A results row as a line of the printed table."""
    def times(key: str) -> str:
        value = row[key]
        return f"{value:.2f}x" if isinstance(value, float) else "-"

    name = "**whole workload**" if row["workload"] == "whole workload" else row["workload"]
    return (name, row["direct_s"], row["cold_s"], row["warm_s"], times("cold_ratio"), times("warm_ratio"),
            f"{row['cold_requests']} / {row['direct_requests']} ({times('requests_ratio')})",
            f"{row['cold_mb']:.1f} / {row['direct_mb']:.1f} MB ({times('bytes_ratio')})")


def loadable_tables(queries: list[str]) -> list[tuple[str, str]]:
    """The TPC-H tables (schema, table) that `queries` read: what `preload` loads."""
    return sorted({(schema, table) for sql in queries for schema, table in re.findall(r"\b(parquet|orc)\.(\w+)", sql)})


def preload(gateway: str, moto: str, proxy: str, queries: list[str], *, footers: bool) -> str:
    """`gateway load` (footers only, or whole) of the tables `queries` read, in the file metastore's
    folders; says how long it took and what it cost the origin against the tables' bytes."""
    from gateway.admin.client import AdminClient

    tables = loadable_tables(queries)
    before, t0 = settled(proxy), time.monotonic()
    for schema, table in tables:
        last = list(AdminClient(gateway, TOKEN, timeout=60).load(wl.BUCKET, f"metastore/{schema}/{table}/",
                                                                 footers=footers))[-1]
        if "error" in last or last["failed"]:
            raise SystemExit(f"gateway load of {schema}.{table} failed: {last}")
    seconds, cost = time.monotonic() - t0, settled(proxy) - before
    size = sum(o["Size"] for schema, table in tables for page in wl.client(moto, cs.ORIGIN_CREDENTIALS)
               .get_paginator("list_objects_v2").paginate(Bucket=wl.BUCKET, Prefix=f"metastore/{schema}/{table}/")
               for o in page.get("Contents", []))
    return (f"the load: {seconds:.1f} s, origin {cost.brief()} of {size / 1e6:.1f} MB of tables "
            f"({cost.total_bytes / size:.1%})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", default="sf1", help="tpch schema of the TPC-H tables and orders (tiny, sf1, ...)")
    parser.add_argument("--days", type=int, default=120, help="partitions (one file each) of the small-files table")
    parser.add_argument("--repeat", type=int, default=3, help="runs of the CPU-heavy query per pass")
    parser.add_argument("--tpch", default=",".join(TPCH), help="TPC-H queries to run (comma-separated; '' for none)")
    parser.add_argument("--formats", default="parquet,orc", help="file formats of the TPC-H tables")
    parser.add_argument("--file-size", default="32MB", help="the largest file the writes make (hive.target-max-file-size)")
    parser.add_argument("--orc-stripe-rows", type=int, default=0, metavar="N",
                        help="ORC files written in stripes of at most N rows (hive.orc.writer.stripe-max-rows) and "
                             "read stripe by stripe, as Trino reads stripes above hive.orc.tiny-stripe-threshold "
                             "(8 MB; set to 1 B): small tables read as production's 64 MB stripes are")
    parser.add_argument("--only", default="", help="a regular expression: run only the workloads it finds")
    parser.add_argument("--no-jit-pass", action="store_true", help="no pass on the unshaped catalog before timing")
    parser.add_argument("--hms", action="store_true",
                        help="the tables in a Hive metastore service (tests/engines/hms.py, its S3A on moto) "
                             "instead of Trino's file metastore in the bucket")
    parser.add_argument("--latency", default="25ms", help="origin: added before every answer's first byte")
    parser.add_argument("--rate", default="80MB", help="origin: bytes/s per connection each way")
    parser.add_argument("--memory-quota", default="2GiB", help="the gateway's cache.memory_quota")
    parser.add_argument("--chart", default="", help="PNG path (default: engines.png in a temp folder)")
    parser.add_argument("--requests-log", default="", help="TSV of every origin request per workload and setup")
    parser.add_argument("--preload", default="", help="also first runs after `gateway load` of the tables the "
                                                       "workload reads: footers, full (comma-separated)")
    parser.add_argument("--json", default="", metavar="PATH",
                        help="also write the results here as a JSON results file (bench/charts.py draws it)")
    args = parser.parse_args(argv)
    tpch = [q.strip().lower() for q in args.tpch.split(",") if q.strip()]
    formats = [f.strip().lower() for f in args.formats.split(",") if f.strip()]
    if unknown := [q for q in tpch if q not in TPCH] + [f for f in formats if f not in ("parquet", "orc")]:
        parser.error(f"unknown TPC-H query or format: {unknown}")
    if tpch and "parquet" not in formats:
        formats.insert(0, "parquet")  # orders, which the scan and cpu-heavy workloads read, is written as Parquet
        tpch_formats = formats[1:]
    else:
        tpch_formats = formats

    tmp = Path(tempfile.mkdtemp(prefix="gateway-engines-"))
    chart = Path(args.chart) if args.chart else tmp / "engines.png"
    metastore_kind = "Hive metastore 4.0.1 service" if args.hms else "file metastore in the bucket"
    version = header(f"bench/engines.py: Trino 476 (Hive connector, native S3, {metastore_kind})",
                     args.latency, args.rate,
                     f"TPC-H {', '.join(q.upper() for q in tpch) or 'none'} over tpch.{args.scale} as "
                     f"{' and '.join(tpch_formats)}, orders (Parquet) for scan and cpu-heavy; files of at most "
                     f"{args.file_size}"
                     + (f" (ORC in stripes of {args.orc_stripe_rows} rows, read one by one)" if args.orc_stripe_rows else "")
                     + f"; small: {args.days} daily partitions of one file; "
                     f"gateway: server.workers default (one per core), metadata.ttl = listing.ttl = metadata.negative_ttl = 10m, cache.memory_quota "
                     f"{args.memory_quota}; Trino: one node, -Xmx2G, task.concurrency 2")
    load_start = wl.loadavg()
    code = wl.snapshot_code(tmp)
    plan = workloads(args.days, args.repeat, tpch, tpch_formats)
    if args.only:
        plan = {name: sqls for name, sqls in plan.items() if re.search(args.only, name)}
    tables = set(TPCH_TABLES) if tpch else {"orders"}
    rows, details, phases = [], [], []
    with ExitStack() as stack:
        moto, origin, requests_log = stack.enter_context(counted_origin(tmp, args.latency, args.rate))
        wl.client(moto, cs.ORIGIN_CREDENTIALS, attempts=5).create_bucket(Bucket=wl.BUCKET)
        env = {"GATEWAY_METADATA_TTL": "10m", "GATEWAY_LISTING_TTL": "10m", "GATEWAY_METADATA_NEGATIVE_TTL": "10m",
               "GATEWAY_CACHE_MEMORY_QUOTA": str(cs.parse_size(args.memory_quota, "--memory-quota")),
               "GATEWAY_ADMIN_TOKEN": TOKEN}
        gw = wl.gateway("gw", origin, tmp, code, env)
        if args.hms:  # one metastore for every catalog: table and partition metadata are Thrift calls, not S3 reads
            uri = stack.enter_context(HiveMetastore(hms_home(), tmp / "hms", moto, cs.ORIGIN_CREDENTIALS, REGION)).uri
        catalogs = {name: hms_catalog(uri, endpoint, keys) if args.hms else
                    {**hive_catalog(endpoint, keys), "hive.metastore.catalog.dir": f"s3://{wl.BUCKET}/metastore"}
                    for name, endpoint, keys in (("load", moto, cs.ORIGIN_CREDENTIALS),
                                                 ("direct", origin, cs.ORIGIN_CREDENTIALS),
                                                 ("gw", gw.endpoint, cs.USER))}
        catalogs["load"]["hive.target-max-file-size"] = args.file_size
        if args.orc_stripe_rows:
            catalogs["load"]["hive.orc.writer.stripe-max-rows"] = str(args.orc_stripe_rows)
            for name in ("direct", "gw"):
                catalogs[name]["hive.orc.tiny-stripe-threshold"] = "1B"
        catalogs["tpch"] = {"connector.name": "tpch"}
        t0 = time.monotonic()
        trino = stack.enter_context(TrinoServer(trino_home(), tmp / "trino", catalogs))
        print(f"== Trino started in {trino.started_in:.0f}s (since the script began: {time.monotonic() - t0:.0f}s)")
        t0 = time.monotonic()
        # (with the metastore, each schema's folder in the bench's bucket: its warehouse is another bucket's)
        where = {name: f" WITH (location = 's3a://{wl.BUCKET}/warehouse/{name}.db')" if args.hms else ""
                 for name in ("bench", *formats)}
        trino.query(f"CREATE SCHEMA load.bench{where['bench']}")
        for fmt in formats:
            trino.query(f"CREATE SCHEMA load.{fmt}{where[fmt]}")
            for table in sorted(tables, key=TPCH_TABLES.index):
                source = f"load.parquet.{table}" if fmt != "parquet" else f"tpch.{args.scale}.{table}"
                trino.query(f"CREATE TABLE load.{fmt}.{table} WITH (format = '{fmt.upper()}') AS SELECT * FROM {source}")
        trino.query("CREATE TABLE load.bench.small WITH (format = 'PARQUET', partitioned_by = ARRAY['orderdate']) AS "
                    "SELECT orderkey, custkey, totalprice, orderstatus, orderdate FROM tpch.tiny.orders "
                    f"WHERE orderdate < DATE '1992-01-01' + INTERVAL '{args.days}' DAY")
        objects = [o for page in wl.client(moto, cs.ORIGIN_CREDENTIALS).get_paginator("list_objects_v2")
                   .paginate(Bucket=wl.BUCKET) for o in page.get("Contents", [])]
        print(f"== tables written to moto in {time.monotonic() - t0:.0f}s ({len(objects)} objects, "
              f"{sum(o['Size'] for o in objects) / 1e6:.0f} MB in the bucket, the largest "
              f"{max(o['Size'] for o in objects) / 1e6:.1f} MB); {wl.loadavg()}", flush=True)
        if not args.no_jit_pass:
            t0 = time.monotonic()
            run_pass(trino, "load", plan)  # Trino's JIT warms up on the unshaped catalog
            print(f"== JIT pass on the unshaped catalog: {time.monotonic() - t0:.0f}s; {wl.loadavg()}", flush=True)
        stack.callback(gw.stop)
        measured, direct = {}, {}
        preloads = [mode.strip() for mode in args.preload.split(",") if mode.strip()]
        for name in plan:  # each workload directly, then on a fresh gateway (empty cache): cold, then again: warm
            direct[name], direct_phases = direct_passes(trino, name, plan[name], origin)
            phases += direct_phases
            loads = preloads if loadable_tables(plan[name]) else []  # (of the TPC-H tables: none for the others)
            for mode in loads:  # first, on a fresh gateway after `gateway load` of its tables
                gw.stop()
                gw.start()
                loaded = preload(gw.endpoint, moto, origin, plan[name], footers=mode == "footers")
                seconds, answers, counts, seqs = run_pass(trino, "gw", {name: plan[name]}, origin)[name]
                phases.append((name, f"after {mode} load", *seqs))
                if not same(answers, direct[name][1]):
                    raise SystemExit(f"{name}: the gateway's answer after a {mode} load differs from the origin's")
                assert counts is not None
                print(f"   after {mode} load {name:<36} {seconds:7.2f} s  speedup {direct[name][0] / seconds:5.2f}x  "
                      f"origin: {counts.brief()}; {loaded}", flush=True)
            gw.stop()
            gw.start()
            for phase in ("cold", "warm"):
                gateway_cpu = tree_cpu(gw.pid)
                with wl.Cpu() as cpu:
                    seconds, answers, counts, seqs = run_pass(trino, "gw", {name: plan[name]}, origin)[name]
                gateway_cpu = tree_cpu(gw.pid) - gateway_cpu
                if not same(answers, direct[name][1]):
                    raise SystemExit(f"{name}: the gateway's answer differs from the origin's")
                assert counts is not None
                measured[name, phase] = (seconds, counts)
                phases.append((name, f"gateway {phase}", *seqs))
                print(f"   gateway {phase:<8} {name:<36} {seconds:7.2f} s  speedup {direct[name][0] / seconds:5.2f}x  "
                      f"origin: {counts.brief()}  (CPU: gateway {gateway_cpu:.1f} s, ours {cpu.own:.1f} s, "
                      f"other load {cpu.other:.2f})", flush=True)
                details.append((name, f"gw {phase}", seconds, *(counts.requests[k] for k in KINDS),
                                round(counts.total_bytes / 1e6, 2), round(gateway_cpu, 1), round(cpu.other, 2)))
        if args.requests_log:
            lines = requests_log.read_text().splitlines()
            with open(args.requests_log, "w") as out:
                out.write("workload\tsetup\tseq\tkind\tmethod\ttarget\trange\tstatus\tbody bytes\n")
                for name, setup, low, high in phases:
                    out.writelines(f"{name}\t{setup}\t{line}\n" for line in lines[low:high])
            print(f"requests: {args.requests_log}")

    results = []
    for name in plan:
        d_seconds, _, d_counts, _ = direct[name]
        assert d_counts is not None
        details.append((name, "direct", d_seconds, *(d_counts.requests[k] for k in KINDS),
                        round(d_counts.total_bytes / 1e6, 2), "-", "-"))
        (c_seconds, c_counts), (w_seconds, w_counts) = measured[name, "cold"], measured[name, "warm"]
        results.append(counted_row(name, {"direct": d_seconds, "cold": c_seconds, "warm": w_seconds},
                                   {"direct": d_counts, "cold": c_counts, "warm": w_counts}))
    results.append(whole_row(results))
    rows = [table_row(row) for row in results]
    details.sort(key=lambda row: (list(plan).index(row[0]), ("direct", "gw cold", "gw warm").index(row[1])))
    print("\nOrigin requests and bytes (answer bodies) as the shaped proxy counted them, per setup:\n")
    print(wl.markdown(["workload", "setup", "seconds", *KINDS, "MB", "gateway CPU s", "other load"], details))
    print("\ncold/direct and warm/direct: the direct time over the cold or warm time (above 1: faster than direct); "
          "origin requests and bytes: the cold run's over the direct run's\n")
    print(wl.markdown(["workload", "direct s", "cold s", "warm s", "cold/direct", "warm/direct speedup",
                       "origin requests cold/direct", "origin bytes cold/direct"], rows))
    print(f"\nAt the end: {wl.loadavg()}")
    if args.json:
        from bench.charts import results_document, write_results

        command = shlex.join([".venv/bin/python", "bench/engines.py", *(sys.argv[1:] if argv is None else argv)])
        write_results(args.json, results_document(
            "engines", results, command=command, commit=version, targets=TARGETS,
            machine=f"{os.cpu_count()} cores; Trino 476, one node; moto behind bench/shaped_proxy.py (+{args.latency} "
                    f"first byte, {args.rate}/s per connection); tpch.{args.scale}",
            load=f"{load_start} at the start; {wl.loadavg()} at the end"))
    series = {setup: [float(row[key]) for row in results[:-1]]  # type: ignore[arg-type]
              for key, setup in (("direct_s", "origin"), ("cold_s", "gw cold"), ("warm_s", "gw warm"))}
    wl.bar_chart(chart, "Trino 476 on the shaped origin, directly and through the gateway: seconds (lower is better)",
                 [name.replace(" (", "\n(") for name in plan], series, "seconds",
                 note=f"origin: moto + shaped_proxy (+{args.latency} first byte, {args.rate}/s per connection); "
                      f"tpch.{args.scale}; {version}; {time.strftime('%Y-%m-%d')}")
    wl.tidy(tmp, chart)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
