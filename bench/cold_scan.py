"""A TPC-H query's cold reads without the engine: the wall time and CPU of reading columnar
files' footers and column chunks, directly from the shaped origin and through a fresh gateway
(a node of --workers), in one run.

What an engine's scan (Trino's Hive connector in bench/engines.py) asks of each file of a table:
a footer read by a suffix range (`bytes=-N`, N of --footer), then the column chunks of
the query's columns in each row group: ranged GETs of 1-8 MiB at offsets that are no block
bounds, several files at once (--parallel) and each file's chunks at once (connections: up to
--parallel x --chunks). Optionally a HEAD of each file first (--head). Files are --files of
5-30 MiB (seeded sizes) on bench/shaped_origin.py, unshaped, behind bench/shaped_proxy.py
(+--latency to the first byte, --rate per connection, as bench/engines.py's origin), which
counts the requests and bytes of each setup. Each round reads its own hard links of the files
(new keys: every gateway read is cold), once directly and once through each gateway, the order
turned every round; the gateways are started once, before the first round.

Printed per round and in all: the wall time of each setup, gateway/direct (below 1: the gateway
is faster), the gateway's CPU (all its processes, from /proc schedstat), the origin requests
and bytes of each setup; in all, the medians of each GET kind's first and last byte, and the
requests the gateway's workers made of one another. On a shared machine read the CPU and the
ratios of one run (two nodes of the same code moved +-10% apart in wall time at load 5-8).

    .venv/bin/python bench/cold_scan.py [--rounds 6] [--files 8] [--parallel 4] [--chunks 3] [--workers 2]
        [--baseline REV]   # a gateway of that revision too, in the same rounds
        [--first 8]        # first: 8 objects read one at a time on each fresh gateway, CPU per object
        [--profile PATH [--native]]   # py-spy record (raw) of the gateway's processes over the rounds
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import random
import signal
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import cache_serving as cs
import cold_ranges
import cold_requests as cr
import fleet as fl
import workloads as wl

MiB = 1 << 20
ROOT = cs.ROOT


def make_files(root: Path, count: int, rng: random.Random) -> list[tuple[str, int]]:
    """`count` files of 5-30 MiB of random bytes under the bucket's `base/`; (name, size) each."""
    folder = root / cs.BUCKET / "base"
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for number in range(count):
        size = rng.randrange(5 * MiB, 30 * MiB)
        (folder / f"part-{number:03d}.parquet").write_bytes(os.urandom(size))
        files.append((f"part-{number:03d}.parquet", size))
    return files


def link_round(root: Path, files: list[tuple[str, int]], number: int) -> list[tuple[str, int]]:
    """Hard links of the files under `round-N/`: keys no gateway has seen."""
    folder = root / cs.BUCKET / f"round-{number}"
    folder.mkdir(parents=True, exist_ok=True)
    for name, _ in files:
        os.link(root / cs.BUCKET / "base" / name, folder / name)
    return [(f"round-{number}/{name}", size) for name, size in files]


def plan(size: int, footer: int, chunks: int, rng: random.Random) -> list[str]:
    """The ranges of one file's column chunks: `chunks` ranges of 1-8 MiB, apart, in the file's
    body (before its footer), each at an offset that is no block bound."""
    body = size - footer
    share = body // chunks
    ranges = []
    for part in range(chunks):
        length = min(rng.randrange(1 * MiB, 8 * MiB), share - 4096)
        start = part * share + rng.randrange(1, share - length)
        ranges.append(f"bytes={start}-{start + length - 1}")
    return ranges


TIMES: dict[str, list[tuple[float, float]]] = {}  # "footer"/"chunk" -> (ms to the first byte, ms to the last), this pass


def read_all(s3, key: str, range_: str) -> int:  # type: ignore[no-untyped-def]
    first, last, got = cold_ranges.timed_read(s3, key, range_)
    TIMES.setdefault("footer" if range_.startswith("bytes=-") else "chunk", []).append((first, last))
    return got


def scan_file(s3, pool: ThreadPoolExecutor, key: str, size: int, plans: list[str], footer: int,  # type: ignore[no-untyped-def]
              head: bool) -> None:
    if head:
        s3.head_object(Bucket=cs.BUCKET, Key=key)
    assert read_all(s3, key, f"bytes=-{footer}") == footer
    for got, range_ in zip(pool.map(lambda r: read_all(s3, key, r), plans), plans):
        low, high = map(int, range_.removeprefix("bytes=").split("-"))
        assert got == high - low + 1, (key, range_, got)


def scan(s3, files: list[tuple[str, int]], plans: dict[str, list[str]], args: argparse.Namespace) -> float:  # type: ignore[no-untyped-def]
    """Seconds to read every file's footer and chunks, --parallel files at once."""
    started = time.perf_counter()
    with ThreadPoolExecutor(args.parallel) as outer, ThreadPoolExecutor(args.parallel * args.chunks) as inner:
        list(outer.map(lambda f: scan_file(s3, inner, f[0], f[1], plans[f[0].split("/")[-1]], args.footer, args.head), files))
    return time.perf_counter() - started


def counts(proxy: str) -> tuple[int, int]:
    got = httpx.get(proxy + "/_shaped_proxy/counters", timeout=10).json()
    return sum(got["requests"].values()), sum(got["bytes"].values())


def report(rows: list[dict[str, tuple[float, int, int, float]]], timed: dict[tuple[str, str], list[tuple[float, float]]],
           asked: dict[str, dict[str, float]]) -> None:
    """All rounds: each gateway's time against direct's, its CPU, the origin's requests and bytes,
    the workers' asks of one another, the GETs' first and last bytes."""
    direct = sum(r["direct"][0] for r in rows)
    for setup in [s for s in rows[0] if s != "direct"]:
        through = sum(r[setup][0] for r in rows)
        ratios = [r[setup][0] / r["direct"][0] for r in rows]
        print(f"\n{setup}: all rounds {through:.2f} s against direct {direct:.2f} s: {setup}/direct "
              f"{through / direct:.3f} (median of rounds {statistics.median(ratios):.3f}, "
              f"{min(ratios):.2f}-{max(ratios):.2f}); speed direct/{setup} {direct / through:.3f}x")
        print(f"  CPU {sum(r[setup][3] for r in rows):.2f} s; origin requests direct {sum(r['direct'][1] for r in rows)}, "
              f"{setup} {sum(r[setup][1] for r in rows)}; origin MiB direct {sum(r['direct'][2] for r in rows) / MiB:.1f}, "
              f"{setup} {sum(r[setup][2] for r in rows) / MiB:.1f}")
        print("  the workers' asks of one another: " +
              (", ".join(f"{k} {v:.0f}" for k, v in sorted(asked[setup].items()) if v) or "none"))
        for kind in ("footer", "chunk"):
            d, g = timed.get(("direct", kind), []), timed.get((setup, kind), [])
            if d and g:
                print(f"  {kind} GETs ({len(g)}): first byte ms, median direct / {setup} "
                      f"{statistics.median(t[0] for t in d):.1f} / {statistics.median(t[0] for t in g):.1f}; last byte "
                      f"{statistics.median(t[1] for t in d):.1f} / {statistics.median(t[1] for t in g):.1f}; p90 last "
                      f"byte {cr.percentile([t[1] for t in d], 0.9):.1f} / {cr.percentile([t[1] for t in g], 0.9):.1f}")


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--files", type=int, default=8, help="files per round (5-30 MiB each)")
    parser.add_argument("--parallel", type=int, default=4, help="files read at once")
    parser.add_argument("--chunks", type=int, default=3, help="column chunks read per file (1-8 MiB each)")
    parser.add_argument("--footer", type=int, default=65536, help="bytes of the footer's suffix range")
    parser.add_argument("--head", action="store_true", help="a HEAD of each file before its footer")
    parser.add_argument("--latency", default="25ms", help="origin: added before every answer's first byte")
    parser.add_argument("--rate", default="80MB", help="origin: bytes/s per connection each way")
    parser.add_argument("--workers", type=int, default=2, help="server.workers of the gateway")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="more GATEWAY_* settings")
    parser.add_argument("--baseline", default="", metavar="REV",
                        help="a second gateway, of this git revision, in the same rounds (setup 'baseline')")
    parser.add_argument("--first", type=int, default=0, metavar="N",
                        help="before the rounds: N objects read one at a time on each fresh gateway, CPU per object")
    parser.add_argument("--profile", default="", metavar="PATH", help="py-spy record (raw) of the gateway's passes")
    parser.add_argument("--native", action="store_true", help="the profile with C frames (pauses the processes)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="cold-scan-"))
    version = wl.header("bench/cold_scan.py: a TPC-H-like scan's cold reads, directly and through a fresh gateway",
                        args.latency, args.rate,
                        f"{args.rounds} rounds of {args.files} files (5-30 MiB), {args.parallel} at once, footer "
                        f"bytes=-{args.footer}, {args.chunks} chunks of 1-8 MiB each{', HEAD first' if args.head else ''}; "
                        f"gateway: server.workers {args.workers} {' '.join(args.env)}; the origin: bench/shaped_origin.py "
                        "(not moto) behind the shaped proxy")
    codes = {"gateway": wl.snapshot_code(tmp)}
    if args.baseline:
        print(f"baseline: {fl.snapshot(args.baseline, tmp / 'baseline')}")
        for built in (ROOT / "gateway" / "s3api" / "auth").glob("_sigv4check*.so"):
            shutil.copy(built, tmp / "baseline" / "gateway" / "s3api" / "auth")
        codes["baseline"] = tmp / "baseline"
    load_start = wl.loadavg()
    root = tmp / "objects"
    files = make_files(root, args.files, rng)
    plans = {name: plan(size, args.footer, args.chunks, rng) for name, size in files}
    rows: list[dict[str, tuple[float, int, int, float]]] = []
    timed: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with cs.shaped_origin_process(root, tmp, "0ms", "0") as origin, \
            wl.shaped_proxy(tmp, origin, args.latency, args.rate) as proxy:
        gateways = {setup: wl.gateway(setup, proxy, tmp, code, {"GATEWAY_SERVER_WORKERS": str(args.workers),
                                                                "GATEWAY_ADMIN_TOKEN": cr.ADMIN_TOKEN,
                                                                **dict(e.split("=", 1) for e in args.env)})
                    for setup, code in codes.items()}
        try:
            for gw in gateways.values():
                gw.start()
            if args.first:
                first_reads(args, root, files, gateways)
            asked = rounds(args, root, files, plans, proxy, gateways, rows, timed)
        finally:
            for gw in gateways.values():
                gw.stop()
    report(rows, timed, asked)
    print(f"other load during the run: {LOAD[0]:.2f} cores; {load_start} at the start, {wl.loadavg()} at the end; "
          f"code {version}")
    wl.tidy(tmp)
    return 0


def profiler(pid: int, out: str, native: bool) -> subprocess.Popen[bytes]:
    """py-spy recording the gateway's processes (250 samples a second, idle threads left out: it
    pauses them for each sample) until it is sent SIGINT."""
    spy = subprocess.Popen([shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy"), "record", "-p",
                            str(pid), "--subprocesses", *(["--native"] if native else []), "-r", "250", "-f", "raw",
                            "-o", out], stdout=subprocess.DEVNULL)
    time.sleep(1.0)  # (it attaches to each process)
    return spy


LOAD = [0.0]  # other load during the rounds, in cores


def first_reads(args: argparse.Namespace, root: Path, files: list[tuple[str, int]], gateways: dict[str, cs.Gateway]) -> None:
    """--first: on each fresh gateway, `--first` objects read one at a time (its footer, then 4 MiB),
    each on a new connection (either worker takes it); the CPU of the gateway's processes per
    object: a fresh worker's first answers against those after."""
    keys = [link_round(root, files[:1], 500 + number)[0][0] for number in range(args.first)]
    for setup, gw in gateways.items():
        cpu = cr.TreeCpu(gw.pid)
        spent = []
        for key in keys:
            s3 = wl.client(gw.endpoint, pool=1)
            before = cpu()
            read_all(s3, key, f"bytes=-{args.footer}")
            read_all(s3, key, "bytes=100000-4294303")
            time.sleep(0.05)  # (what the gateway does after its answers)
            spent.append((cpu() - before) / 1e6)
        print(f"{setup}: first reads, ms of CPU per object in order: " + " ".join(f"{ms:.1f}" for ms in spent), flush=True)


def rounds(args: argparse.Namespace, root: Path, files: list[tuple[str, int]], plans: dict[str, list[str]], proxy: str,
           gateways: dict[str, cs.Gateway], rows: list[dict[str, tuple[float, int, int, float]]],
           timed: dict[tuple[str, str], list[tuple[float, float]]]) -> dict[str, dict[str, float]]:
    """The rounds, each setup once a round (the order turned every round); the asks of each gateway's workers."""
    pool = 2 * args.parallel * args.chunks
    clients = {"direct": wl.client(proxy, cs.ORIGIN_CREDENTIALS, pool=pool),
               **{setup: wl.client(gw.endpoint, pool=pool) for setup, gw in gateways.items()}}
    cpus = {setup: cr.TreeCpu(gw.pid) for setup, gw in gateways.items()}
    warm = link_round(root, files[:1], 999)
    for s3 in clients.values():  # connections and botocore's first-call work, on a key not measured
        read_all(s3, warm[0][0], "bytes=0-99")
    spy = profiler(gateways["gateway"].pid, args.profile, args.native) if args.profile else None
    asked = {setup: cr.worker_asks(gw.endpoint) for setup, gw in gateways.items()}
    order = list(clients)
    with wl.Cpu() as load:
        for number in range(args.rounds):
            keys = link_round(root, files, number)
            row = {}
            for setup in order[number % len(order):] + order[:number % len(order)]:
                before, cpu = counts(proxy), cpus[setup]() if setup in cpus else 0
                TIMES.clear()
                seconds = scan(clients[setup], keys, plans, args)
                for kind, times in TIMES.items():
                    timed.setdefault((setup, kind), []).extend(times)
                time.sleep(0.1)  # the gateway's work after its answers
                after = counts(proxy)
                row[setup] = (seconds, after[0] - before[0], after[1] - before[1],
                              (cpus[setup]() - cpu) / 1e9 if setup in cpus else 0.0)
            rows.append(row)
            print(f"round {number}: " + ", ".join(
                f"{setup} {row[setup][0]:.2f} s ({row[setup][0] / row['direct'][0]:.2f}x, CPU {row[setup][3]:.2f} s, "
                f"origin {row[setup][1]} requests {row[setup][2] / MiB:.1f} MiB)" for setup in order), flush=True)
    LOAD[0] = load.other
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=60)
    return {setup: {k: v - asked[setup].get(k, 0.0) for k, v in cr.worker_asks(gw.endpoint).items()}
            for setup, gw in gateways.items()}


if __name__ == "__main__":
    raise SystemExit(main())
