"""Metadata operations (NNBench / SliveTest style): the origin directly vs the gateway.

Against moto behind bench/shaped_proxy.py (first-byte latency and a per-connection rate:
a remote-like store for writes and listings too), with boto3 clients (SigV4), it measures:

  create       --creates 0-byte objects PUT by --clients threads: operations/s
  list flat    a paginated ListObjectsV2 (1000 keys a page) of one prefix holding
               --list-keys keys (the target is 100k; created inside moto before it starts
               serving): seconds, through the gateway cold (first listing) and warm (again,
               listing cache: give --listing-ttl above the time a listing takes)
  list tree    a walk of a 4-level hierarchy (--fanout directories per level, 2 objects in
               each leaf) with delimiter "/", one listing per directory, --clients at a time
  mixed        --clients threads for --seconds, each in its own prefix seeded with 100
               objects, doing create 10%, delete 10%, copy-as-rename 10% (copy + delete),
               head 20%, read 20% (GET), list 30% (one of its 10 subfolders): operations/s
               and p50 latency per operation; with --clients-sweep 1,4,16 once per number
               of client threads K, origin and gateway

The gateway runs with its default cache settings (metadata.ttl 60 s, listing.ttl 30 s)
unless --metadata-ttl / --listing-ttl say otherwise; its own writes invalidate what they
change. All processes share this machine's cores, the boto3 threads included: with 2
cores the client's CPU caps the operations/s too. --workloads runs only some of them.

    .venv/bin/python bench/metadata_ops.py                      # ~4 minutes
    .venv/bin/python bench/metadata_ops.py --workloads list-flat --list-keys 100000 --listing-ttl 10m \
        --chart docs/img/metadata_ops_100k.png                  # ~5 minutes
    .venv/bin/python bench/metadata_ops.py --workloads mixed --clients-sweep 1,4,16   # ~3 minutes

Needs matplotlib (.venv/bin/pip install matplotlib). Results: docs/benchmarks-notes.md.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import math
import random
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workloads as wl

cs = wl.cs
MIX = (("create", 10), ("delete", 10), ("rename", 10), ("head", 20), ("read", 20), ("list", 30))


FLAT, TREE, MIXED = "bench-flat", "bench-tree", "bench-mixed"  # own buckets: moto's listing cost grows with the bucket's size


def seed(moto_s3, keys: list[str], bucket: str = wl.BUCKET, threads: int = 16) -> None:  # type: ignore[no-untyped-def]
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda k: moto_s3.put_object(Bucket=bucket, Key=k, Body=b""), keys))


def creates(endpoint: str, prefix: str, n: int, clients: int) -> float:
    s3 = wl.client(endpoint, pool=clients + 2)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(lambda i: s3.put_object(Bucket=wl.BUCKET, Key=f"{prefix}/f{i:07d}", Body=b""), range(n)))
    return n / (time.perf_counter() - t0)


def list_flat(endpoint: str, prefix: str, expected: int) -> float:
    s3 = wl.client(endpoint)
    t0 = time.perf_counter()
    got = sum(len(page.get("Contents", [])) for page in
              s3.get_paginator("list_objects_v2").paginate(Bucket=FLAT, Prefix=prefix + "/"))
    if got != expected:
        raise SystemExit(f"list {prefix}: {got} keys, expected {expected}")
    return time.perf_counter() - t0


def tree_keys(prefix: str, fanout: int, levels: int = 4) -> list[str]:
    return [f"{prefix}/" + "/".join(f"l{lv}-{d}" for lv, d in enumerate(path)) + f"/obj{j}"
            for path in itertools.product(range(fanout), repeat=levels) for j in range(2)]


def list_tree(endpoint: str, prefix: str, expected: int, clients: int) -> tuple[float, int]:
    """Walk the hierarchy level by level (one delimiter listing per directory); seconds, listings."""
    s3 = wl.client(endpoint, pool=clients + 2)

    def ls(p: str) -> tuple[list[str], int]:
        dirs, objects = [], 0
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=TREE, Prefix=p, Delimiter="/"):
            dirs += [c["Prefix"] for c in page.get("CommonPrefixes", [])]
            objects += len(page.get("Contents", []))
        return dirs, objects

    t0 = time.perf_counter()
    level, objects, listings = [prefix + "/"], 0, 0
    with ThreadPoolExecutor(clients) as pool:
        while level:
            answers = list(pool.map(ls, level))
            listings += len(level)
            level = [d for dirs, _ in answers for d in dirs]
            objects += sum(n for _, n in answers)
    if objects != expected:
        raise SystemExit(f"tree walk: {objects} objects, expected {expected}")
    return time.perf_counter() - t0, listings


def mixed(endpoint: str, moto_s3, prefix: str, clients: int, seconds: float) -> tuple[float, dict[str, list[float]], int]:  # type: ignore[no-untyped-def]
    """SliveTest-like mix; returns (ops/s, latencies per op, errors)."""
    pools = {c: [f"{prefix}/c{c}/d{i % 10}/seed{i}" for i in range(100)] for c in range(clients)}
    seed(moto_s3, [k for keys in pools.values() for k in keys], MIXED)
    s3 = wl.client(endpoint, pool=clients + 2)
    ops, weights = zip(*MIX)
    lat: dict[str, list[float]] = collections.defaultdict(list)
    errors = collections.Counter[str]()
    lock = threading.Lock()
    deadline = time.perf_counter() + seconds

    def worker(c: int) -> None:
        rnd = random.Random(c)
        keys = pools[c]
        serial = itertools.count()
        while time.perf_counter() < deadline:
            op = rnd.choices(ops, weights)[0]
            if op in ("delete", "rename") and len(keys) < 20:
                op = "create"
            t0 = time.perf_counter()
            try:
                if op == "create":
                    key = f"{prefix}/c{c}/d{rnd.randrange(10)}/n{next(serial)}"
                    s3.put_object(Bucket=MIXED, Key=key, Body=b"")
                    keys.append(key)
                elif op == "delete":
                    key = keys.pop(rnd.randrange(len(keys)))
                    s3.delete_object(Bucket=MIXED, Key=key)
                elif op == "rename":
                    i = rnd.randrange(len(keys))
                    new = f"{prefix}/c{c}/d{rnd.randrange(10)}/r{next(serial)}"
                    s3.copy_object(Bucket=MIXED, Key=new, CopySource={"Bucket": MIXED, "Key": keys[i]})
                    s3.delete_object(Bucket=MIXED, Key=keys[i])
                    keys[i] = new
                elif op == "head":
                    s3.head_object(Bucket=MIXED, Key=rnd.choice(keys))
                elif op == "read":
                    s3.get_object(Bucket=MIXED, Key=rnd.choice(keys))["Body"].read()
                else:
                    s3.list_objects_v2(Bucket=MIXED, Prefix=f"{prefix}/c{c}/d{rnd.randrange(10)}/")
            except Exception as exc:  # noqa: BLE001  (counted and shown: an error must not stop the others)
                with lock:
                    errors[f"{op}: {type(exc).__name__}: {str(exc)[:120]}"] += 1
                continue
            with lock:
                lat[op].append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(worker, range(clients)))
    elapsed = time.perf_counter() - t0
    if errors:
        print(f"   errors: {dict(errors)}", flush=True)
    return sum(len(v) for v in lat.values()) / elapsed, dict(lat), sum(errors.values())


WORKLOADS = ("create", "list-flat", "list-tree", "mixed")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=f"some of {','.join(WORKLOADS)} (default: all)")
    parser.add_argument("--creates", type=int, default=2000)
    parser.add_argument("--list-keys", type=int, default=20000, help="keys under the listed prefix (target: 100000)")
    parser.add_argument("--fanout", type=int, default=4, help="directories per level of the 4-level tree")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--clients-sweep", default="",
                        help="run the mixed load once per number of client threads K, e.g. 1,4,16 (default: --clients)")
    parser.add_argument("--seconds", type=float, default=20.0, help="duration of each mixed-load run")
    parser.add_argument("--metadata-ttl", default="", help="the gateway's metadata.ttl, e.g. 10m (default: its own, 60s)")
    parser.add_argument("--listing-ttl", default="",
                        help="the gateway's listing.ttl (default: its own, 30s); above the time a listing takes, "
                             "a second listing is served from the cache")
    parser.add_argument("--latency", default="25ms")
    parser.add_argument("--rate", default="80MB")
    parser.add_argument("--chart", default="", help="PNG path (default: metadata_ops.png in a temp folder); the "
                                                    "clients sweep goes next to it, as <name>-clients.png")
    args = parser.parse_args(argv)
    chosen = [w.strip() for w in args.workloads.split(",") if w.strip()]
    if unknown := set(chosen) - set(WORKLOADS):
        parser.error(f"--workloads: unknown {', '.join(sorted(unknown))} (known: {', '.join(WORKLOADS)})")
    sweep = [int(k) for k in args.clients_sweep.split(",") if k.strip()] or [args.clients]
    gw_env = {}
    if args.metadata_ttl:
        gw_env["GATEWAY_METADATA_TTL"] = args.metadata_ttl
    if args.listing_ttl:
        gw_env["GATEWAY_LISTING_TTL"] = args.listing_ttl
    settings = ", ".join(f"{k.removeprefix('GATEWAY_').lower().replace('_', '.', 1)} {v}" for k, v in gw_env.items())

    tmp = Path(tempfile.mkdtemp(prefix="gateway-metaops-"))
    chart = Path(args.chart) if args.chart else tmp / "metadata_ops.png"
    sweep_chart = chart.with_name(chart.stem + "-clients.png")
    version = wl.header("bench/metadata_ops.py: NNBench/SliveTest-style metadata operations", args.latency, args.rate,
              f"workloads {','.join(chosen)}; {args.clients} boto3 client threads (SigV4); create {args.creates}; "
              f"flat list of {args.list_keys} keys; tree {args.fanout}^4 directories x 2 objects; mixed "
              f"{args.seconds:g}s with K = {','.join(map(str, sweep))} clients; gateway cache settings: "
              f"{settings or 'its defaults (metadata.ttl 60s, listing.ttl 30s)'}")
    code = wl.snapshot_code(tmp)
    rows: list[tuple[object, ...]] = []
    mixed_rows: list[tuple[object, ...]] = []
    sweep_rows: dict[int, dict[str, float]] = collections.defaultdict(dict)
    results: dict[str, dict[str, float]] = collections.defaultdict(dict)
    tree = tree_keys("tree", args.fanout)
    preload = {FLAT: [f"flat/k{i:07d}" for i in range(args.list_keys)] if "list-flat" in chosen else [],
               TREE: tree if "list-tree" in chosen else []}
    with ExitStack() as stack:
        t0 = time.monotonic()
        moto, origin = stack.enter_context(wl.shaped_moto(tmp, args.latency, args.rate, preload=preload))
        print(f"moto started with {len(preload[FLAT])} flat keys and {len(preload[TREE])} tree keys created inside it"
              f" in {time.monotonic() - t0:.0f}s\n", flush=True)
        moto_s3 = wl.client(moto, cs.ORIGIN_CREDENTIALS, attempts=5)  # setup only: moto may drop a connection
        for bucket in (wl.BUCKET, MIXED):
            moto_s3.create_bucket(Bucket=bucket)
        gw = wl.gateway("gw-metaops", origin, tmp, code, gw_env, buckets=(wl.BUCKET, FLAT, TREE, MIXED))
        gw.start()
        stack.callback(gw.stop)
        if "create" in chosen:
            for setup, endpoint in (("origin", origin), ("gateway", gw.endpoint)):
                with wl.Cpu(gw if setup == "gateway" else None) as load:
                    rate = creates(endpoint, f"create-{setup}", args.creates, args.clients)
                rows.append(("create 0-byte", setup, f"{rate:,.0f} ops/s", "", load.gateway, load.own, load.cores))
                results["create (ops/s)"][setup] = rate
                print(f"   create   {setup:<13} {rate:8,.0f} ops/s  (CPU: gateway {load.gateway:.1f} s, ours"
                      f" {load.own:.1f} s, other load {load.cores:.2f}; {wl.loadavg()})", flush=True)
        listings = (("list flat", "list-flat", lambda ep: (list_flat(ep, "flat", args.list_keys),
                                                           -(-args.list_keys // 1000))),
                    ("list tree", "list-tree", lambda ep: list_tree(ep, "tree", len(tree), args.clients)))
        for what, name, run in listings:
            if name not in chosen:
                continue
            for setup, endpoint in (("origin", origin), ("gateway cold", gw.endpoint), ("gateway warm", gw.endpoint)):
                with wl.Cpu(gw if setup != "origin" else None) as load:
                    seconds, count = run(endpoint)
                rows.append((what, setup, f"{seconds:.2f} s", f"{count} listings", load.gateway, load.own,
                             load.cores))
                results[f"{what} (s)"][setup] = seconds
                print(f"   {what} {setup:<13} {seconds:8.2f} s ({count} listings)  (CPU: gateway {load.gateway:.1f} s,"
                      f" ours {load.own:.1f} s, other load {load.cores:.2f}; {wl.loadavg()})", flush=True)
        if "mixed" in chosen:
            for k in sweep:
                for setup, endpoint in (("origin", origin), ("gateway", gw.endpoint)):
                    with wl.Cpu(gw if setup == "gateway" else None) as load:
                        rate, lat, errors = mixed(endpoint, moto_s3, f"mixed-{setup}-k{k}", k, args.seconds)
                    label = "mixed" if len(sweep) == 1 else f"mixed, K={k}"
                    rows.append((label, setup, f"{rate:,.0f} ops/s", f"{errors} errors", load.gateway, load.own,
                                 load.cores))
                    results[f"{label} (ops/s)"][setup] = rate
                    sweep_rows[k][setup] = rate
                    sweep_rows[k][f"{setup} other"] = load.cores
                    mixed_rows.append((setup, k, f"{rate:,.0f}") + tuple(
                        f"{statistics.median(lat.get(op, [0])) * 1e3:.1f}" for op, _ in MIX) + (load.cores,))
                    print(f"   mixed    K={k:<3} {setup:<9} {rate:8,.0f} ops/s  (CPU: gateway {load.gateway:.1f} s,"
                          f" ours {load.own:.1f} s, other load {load.cores:.2f}; {wl.loadavg()})", flush=True)

    print("\n" + wl.markdown(["workload", "setup", "result", "", "gateway CPU s", "all our CPU s", "other load"],
                              rows))
    if mixed_rows:
        print("\nmixed load, p50 latency per operation (ms):\n")
        print(wl.markdown(["setup", "K", "ops/s"] + [f"{op} {w}%" for op, w in MIX] + ["other load"], mixed_rows))
    if len(sweep) > 1:
        print("\nmixed load by number of clients K (ops/s):\n")
        print(wl.markdown(["K", "origin ops/s", "gateway ops/s", "gateway / origin", "other load (origin, gateway)"],
                          [(k, f"{r['origin']:,.0f}", f"{r['gateway']:,.0f}", f"{r['gateway'] / r['origin']:.2f}x",
                            f"{r['origin other']:.2f}, {r['gateway other']:.2f}") for k, r in sweep_rows.items()]))
    print(f"\n'all our CPU s': CPU seconds of every process of this benchmark (client threads, gateway, proxy, moto);"
          f" 'other load': cores used meanwhile by processes outside it. At the end: {wl.loadavg()}")
    note = (f"origin: moto + shaped_proxy (+{args.latency} first byte, {args.rate}/s per connection); "
            f"{version}; {time.strftime('%Y-%m-%d')}")
    groups = list(results)
    setups = ["origin", "gateway", "gateway cold", "gateway warm"]
    series = {s: [results[g].get(s, math.nan) for g in groups] for s in setups if any(s in results[g] for g in groups)}
    # One chart, values relative to the origin (higher is better for every bar).
    rel = {s: [(results[g]["origin"] / v if "(s)" in g else v / results[g]["origin"]) if not math.isnan(v) else math.nan
               for g, v in zip(groups, vals)] for s, vals in series.items()}
    absolute = "; ".join(f"{g.split(' (')[0]}: origin {results[g]['origin']:.3g} {'s' if '(s)' in g else 'ops/s'}"
                         for g in groups)
    wl.bar_chart(chart, "Metadata operations: gateway relative to the origin directly (higher is better)",
                 groups, rel, "x origin (ops/s ratio, or time ratio for listings)",
                 note=f"{absolute}\n{args.clients} clients; {settings or 'default TTLs'}; {note}")
    if len(sweep) > 1:
        wl.bar_chart(sweep_chart, f"Mixed metadata load ({args.seconds:g} s per bar): operations/s by client threads K",
                     [f"K={k}" for k in sweep], {s: [sweep_rows[k][s] for k in sweep] for s in ("origin", "gateway")},
                     "operations/s (higher is better)", note=note)
    wl.tidy(tmp, chart, sweep_chart)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
