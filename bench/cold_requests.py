"""What a cold request costs in the gateway beyond the origin's own time: the requests a
query engine sends on a cold small-file workload, replayed without the engine, directly to the
shaped origin and through a fresh gateway, interleaved.

For --prefixes date prefixes, each holding a small schema file and one small Parquet-like data
file (--size bytes), one prefix after another (as Trino's split source walks partitions), the
requests Trino 476 sent for each in bench/engines.py's small-files workload, each signed by
botocore as SDKs sign:

- HEAD of the schema file (the metastore's existence check) and a GET of all of it;
- LIST: ListObjectsV2 of the prefix (max-keys 1000, delimiter '/');
- GET suffix: the data file's footer (`bytes=-N`, --footer bytes), as the Parquet reader opens it;
- GET range: the data before the footer (`bytes=4-...`).

With --pattern native, what Trino 476's native S3 file system sends for each file of the same
workload instead (bench/engines.py's small-files queries: 120 HEADs, 241 GETs and 121 LISTs for 120
files, docs/img/data/engines-a079cf5.json): the LIST of the prefix, a HEAD of the data file, its
footer's GET suffix, then the GET range of its data. A cold HEAD through the gateway is one GET of
the object's tail (metadata.head_tail), which holds the footer and a small file's data too.

Each prefix's requests go directly to the origin, then through the gateway (the order swaps
every prefix), on --connections keep-alive connections taken in turn (a gateway of several
workers gets each connection on one of them, as it gets an engine's many connections; they are
made again until they alternate over the workers, so that runs are alike in which requests cross
between workers). Every
prefix is new to the gateway: each of its requests is cold. Printed per request kind: the time
directly and through the gateway (medians), the gateway's added time (gateway minus direct for
the same request of the same prefix: median and p90), and the CPU the gateway's processes used
per request (their threads' run time, /proc/<pid>/task/*/schedstat, from the request's start to
the next request's start); with the origin requests of each setup by kind, counted at the
shaped proxy (the gateway must not ask more than the client directly did). With --asks, the
requests the gateway's workers made of one another (the engine's `worker_asked_<what>` counts, from
the node's metrics) per request of each kind, read 50 ms after each request (its background
exchanges included), which makes the CPU figures of that run meaningless.

The origin is moto behind bench/shaped_proxy.py (+25 ms first byte, 80 MB/s per connection: as
bench/engines.py); the gateway is a `gateway serve` process started as bench/engines.py starts
it (server.workers default: one per core; metadata and listing TTLs 10m).

    .venv/bin/python bench/cold_requests.py [--prefixes 60] [--connections 4] [--workers 1] [--latency 25ms] [--asks]
        [--pattern native] [--head-tail 0]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import cache_serving as cs
import workloads as wl

KINDS = ("HEAD", "GET whole", "LIST", "GET suffix", "GET range")
PATTERNS = {"schema": KINDS, "native": ("LIST", "HEAD data", "GET suffix", "GET range")}
ORIGIN_KINDS = ("GET", "HEAD", "LIST", "other")


def parquet_like(size: int) -> bytes:
    """`size` bytes shaped like a Parquet file: magic, data, footer, footer length, magic."""
    body = os.urandom(size - 8)
    return b"PAR1" + body[:-4] + (size // 4).to_bytes(4, "little") + b"PAR1"


def fill(moto: str, prefixes: int, size: int) -> list[tuple[str, str]]:
    """The prefixes and their data files' keys; each prefix with its schema file, written to moto itself."""
    s3 = wl.client(moto, cs.ORIGIN_CREDENTIALS, attempts=5)
    s3.create_bucket(Bucket=wl.BUCKET)
    names = []
    for day in range(prefixes):
        prefix = f"small/orderdate=1992-{1 + day // 28:02d}-{1 + day % 28:02d}/"
        s3.put_object(Bucket=wl.BUCKET, Key=prefix + ".schema", Body=b'{"columns": ["orderkey", "totalprice"]}' * 20)
        data = prefix + f"part-{day:05d}.parquet"
        s3.put_object(Bucket=wl.BUCKET, Key=data, Body=parquet_like(size))
        names.append((prefix, data))
    return names


class TreeCpu:
    """Run time of every thread of a process and its descendants (ns, from schedstat)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def __call__(self) -> int:
        total = 0
        for pid in cs.tree(self.pid):
            try:
                tasks = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for task in tasks:
                try:
                    with open(f"/proc/{pid}/task/{task}/schedstat") as fh:
                        total += int(fh.read().split()[0])
                except OSError:
                    pass
        return total


ADMIN_TOKEN = "cold-requests"


def worker_asks(endpoint: str) -> dict[str, float]:
    """The requests the node's workers made of one another so far, by what they asked (all workers)."""
    text = httpx.get(f"{endpoint}/_gateway/metrics", headers={"authorization": f"Bearer {ADMIN_TOKEN}"},
                     timeout=10).text
    asks: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith('gateway_engine_events_total{event="worker_asked_'):
            name = line.split('"')[1].removeprefix("worker_asked_")
            asks[name] = asks.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return asks


def origin_counts(proxy: str) -> dict[str, int]:
    return httpx.get(proxy + "/_shaped_proxy/counters", timeout=10).json()["requests"]


class Replay:
    """The five requests of a prefix on one endpoint, over `connections` clients taken in turn."""

    def __init__(self, endpoint: str, credentials: tuple[str, str], connections: int, footer: int,
                 pattern: str = "schema") -> None:
        self.endpoint, self.credentials = endpoint, credentials
        self.clients = [wl.client(endpoint, credentials, pool=1) for _ in range(connections)]
        self.turn = 0
        self.footer = footer
        self.kinds = PATTERNS[pattern]

    def _next(self):  # type: ignore[no-untyped-def]
        self.turn += 1
        return self.clients[self.turn % len(self.clients)]

    def requests(self, prefix: str, data: str, size: int) -> list[tuple[str, Callable[[], object]]]:
        """The pattern's requests of one prefix, in order, each on the next connection."""
        b = wl.BUCKET
        calls: dict[str, Callable[[], object]] = {
            "HEAD": lambda: self._next().head_object(Bucket=b, Key=prefix + ".schema"),
            "HEAD data": lambda: self._next().head_object(Bucket=b, Key=data),
            "GET whole": lambda: self._next().get_object(Bucket=b, Key=prefix + ".schema")["Body"].read(),
            "LIST": lambda: self._next().list_objects_v2(Bucket=b, Prefix=prefix, Delimiter="/", MaxKeys=1000),
            "GET suffix": lambda: self._next().get_object(Bucket=b, Key=data, Range=f"bytes=-{self.footer}")
            ["Body"].read(),
            "GET range": lambda: self._next().get_object(Bucket=b, Key=data, Range=f"bytes=4-{size - self.footer - 1}")
            ["Body"].read(),
        }
        return [(kind, calls[kind]) for kind in self.kinds]


def spread(replay: Replay, gateway_pid: int, port: int, prefix: str) -> list[int]:
    """The gateway's connections made again until they alternate over its workers (the kernel
    gives each new connection to any of them: run to run, the requests of a prefix would
    otherwise stay on one worker or cross between them by chance); returns each connection's
    worker (its index among them)."""
    import psutil

    workers = sorted(pid for pid in cs.tree(gateway_pid) if pid != gateway_pid) or [gateway_pid]

    def ours() -> set[int]:
        return {c.laddr.port for c in psutil.Process().net_connections("tcp")
                if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED}

    def worker_of(client_port: int) -> int | None:
        for index, pid in enumerate(workers):
            if any(c.raddr and c.raddr.port == client_port for c in psutil.Process(pid).net_connections("tcp")):
                return index
        return None

    found = []
    for number in range(len(replay.clients)):
        for _ in range(40):
            before = ours()
            client = wl.client(replay.endpoint, replay.credentials, pool=1)
            client.list_objects_v2(Bucket=wl.BUCKET, Prefix=prefix, MaxKeys=1)
            new = ours() - before
            worker = worker_of(next(iter(new))) if len(new) == 1 else None
            if worker == number % len(workers):
                break
            client.close()
        replay.clients[number] = client
        found.append(worker)
    return found


def warm_clients(replay: Replay, prefix: tuple[str, str], size: int) -> None:
    """Each client's connection opened and botocore's first-call work done, on a prefix not measured."""
    for _ in replay.clients:
        for _kind, call in replay.requests(*prefix, size):
            call()


def profiler(pid: int, out: str, rate: int, native: bool) -> subprocess.Popen[bytes]:
    """py-spy recording the gateway's processes (`rate` samples a second) until it is sent SIGINT;
    `native`: with the frames of C extensions (the processes paused for each sample), else
    without pausing them."""
    spy = subprocess.Popen([shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy"), "record", "-p", str(pid),
                            "--subprocesses", *(["--native"] if native else ["--nonblocking"]), "-r", str(rate),
                            "-f", "raw", "-o", out], stdout=subprocess.DEVNULL)
    time.sleep(1.0)  # (it attaches to each process)
    return spy


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prefixes", type=int, default=60, help="date prefixes (each measured once per setup)")
    parser.add_argument("--size", type=int, default=3500, help="bytes of each data file")
    parser.add_argument("--footer", type=int, default=900, help="N of the suffix GET (bytes=-N)")
    parser.add_argument("--pattern", choices=sorted(PATTERNS), default="schema",
                        help="schema: the five requests above; native: Trino's native S3 file system's LIST, HEAD, "
                             "GET suffix, GET range of each data file")
    parser.add_argument("--connections", type=int, default=4, help="keep-alive connections per setup, taken in turn")
    parser.add_argument("--latency", default="25ms", help="origin: added before every answer's first byte")
    parser.add_argument("--rate", default="80MB", help="origin: bytes/s per connection each way")
    parser.add_argument("--head-tail", default="", metavar="SIZE",
                        help="metadata.head_tail of the gateway (a cold HEAD's GET of the object's tail; 0: an origin "
                             "HEAD); default: the gateway's")
    parser.add_argument("--workers", type=int, default=0, help="server.workers of the gateway (0: the default, "
                                                                 "one per core)")
    parser.add_argument("--profile", default="", metavar="PATH",
                        help="py-spy record (raw, --subprocesses, --nonblocking) of the gateway's processes while "
                             "they answer, written here")
    parser.add_argument("--profile-rate", type=int, default=250, help="py-spy's samples per second (--profile)")
    parser.add_argument("--profile-native", action="store_true", help="py-spy --native (pausing the processes)")
    parser.add_argument("--asks", action="store_true", help="count the workers' requests of one another per request "
                                                             "kind (the CPU figures are then meaningless)")
    args = parser.parse_args(argv)
    kinds = PATTERNS[args.pattern]
    tmp = Path(tempfile.mkdtemp(prefix="cold-requests-"))
    version = wl.header("bench/cold_requests.py: cold small-file requests, directly and through a fresh gateway",
                        args.latency, args.rate,
                        f"{args.prefixes} prefixes, data files of {args.size} B, footer {args.footer} B, "
                        f"pattern {args.pattern} ({', '.join(kinds)}), "
                        f"{args.connections} connections per setup; gateway: server.workers "
                        f"{args.workers or f'default ({os.cpu_count()} cores)'}, metadata.ttl = listing.ttl = 10m, "
                        f"metadata.head_tail {args.head_tail or 'default'}")
    load_start = wl.loadavg()
    code = wl.snapshot_code(tmp)
    times: dict[str, dict[str, list[float]]] = {"direct": {k: [] for k in kinds}, "gateway": {k: [] for k in kinds}}
    cpu: dict[str, list[float]] = {k: [] for k in kinds}
    counted = {"direct": dict.fromkeys(ORIGIN_KINDS, 0), "gateway": dict.fromkeys(ORIGIN_KINDS, 0)}
    asks: dict[str, dict[str, float]] = {k: {} for k in kinds}
    with wl.shaped_moto(tmp, args.latency, args.rate) as (moto, proxy):
        prefixes = fill(moto, args.prefixes + 1, args.size)
        gw = wl.gateway("gw", proxy, tmp, code, {"GATEWAY_METADATA_TTL": "10m", "GATEWAY_LISTING_TTL": "10m",
                                                 "GATEWAY_METADATA_NEGATIVE_TTL": "10m",
                                                 **({"GATEWAY_ADMIN_TOKEN": ADMIN_TOKEN} if args.asks else {}),
                                                 **({"GATEWAY_SERVER_WORKERS": str(args.workers)} if args.workers else {}),
                                                 **({"GATEWAY_METADATA_HEAD_TAIL": args.head_tail} if args.head_tail else {})})
        gw.start()
        try:
            direct = Replay(proxy, cs.ORIGIN_CREDENTIALS, args.connections, args.footer, args.pattern)
            through = Replay(gw.endpoint, cs.USER, args.connections, args.footer, args.pattern)
            warm_clients(direct, prefixes[-1], args.size)
            placed = spread(through, gw.pid, gw.port, prefixes[-1][0])
            warm_clients(through, prefixes[-1], args.size)
            tree_cpu = TreeCpu(gw.pid)
            idle = tree_cpu()
            time.sleep(2.0)
            idle = (tree_cpu() - idle) / 2e6  # ms per second, answering nothing
            spy = profiler(gw.pid, args.profile, args.profile_rate, args.profile_native) if args.profile else None
            cpu_start, wall_start = tree_cpu(), time.monotonic()
            with wl.Cpu() as load:
                for number, prefix in enumerate(prefixes[:-1]):
                    order = ("direct", "gateway") if number % 2 == 0 else ("gateway", "direct")
                    for setup in order:
                        replay = direct if setup == "direct" else through
                        before = origin_counts(proxy)
                        calls = replay.requests(*prefix, args.size)
                        last = tree_cpu() if setup == "gateway" else 0
                        for kind, call in calls:
                            asked = worker_asks(gw.endpoint) if args.asks and setup == "gateway" else None
                            t0 = time.perf_counter()
                            call()
                            times[setup][kind].append((time.perf_counter() - t0) * 1e3)
                            if asked is not None:
                                time.sleep(0.05)  # (its exchanges in the background too)
                                for name, count in worker_asks(gw.endpoint).items():
                                    asks[kind][name] = asks[kind].get(name, 0.0) + count - asked.get(name, 0.0)
                            if setup == "gateway":
                                now = tree_cpu()
                                cpu[kind].append((now - last) / 1e6)
                                last = now
                        if setup == "gateway":
                            time.sleep(0.05)  # what the gateway does after its answers lands on this prefix
                            cpu[kinds[-1]][-1] += (tree_cpu() - last) / 1e6
                        after = origin_counts(proxy)
                        for k in ORIGIN_KINDS:
                            counted[setup][k] += after[k] - before[k]
            gateway_cpu, wall = (tree_cpu() - cpu_start) / 1e9, time.monotonic() - wall_start
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(timeout=60)
        finally:
            gw.stop()
    rows = []
    for kind in kinds:
        d, g = times["direct"][kind], times["gateway"][kind]
        added = [b - a for a, b in zip(d, g)]
        rows.append((kind, len(g), statistics.median(d), statistics.median(g), statistics.median(added),
                     percentile(added, 0.9), statistics.median(cpu[kind]), statistics.fmean(cpu[kind])))
    print(wl.markdown(["request", "n", "direct ms (median)", "gateway ms (median)", "added ms (median)",
                       "added ms (p90)", "gateway CPU ms/request (median)", "(mean)"], rows))
    requests = sum(len(times["gateway"][k]) for k in kinds)
    if args.asks:
        print("\nthe workers' requests of one another per request (by what they asked; --asks: CPU figures meaningless)")
        for kind in kinds:
            n = len(times["gateway"][kind])
            print(f"  {kind}: {sum(asks[kind].values()) / n:.2f} (" + ", ".join(
                f"{name} {count / n:.2f}" for name, count in sorted(asks[kind].items()) if count) + ")")
    print(f"\ngateway CPU, all its processes: {gateway_cpu:.2f} s over {wall:.1f} s for {requests} requests "
          f"({gateway_cpu * 1e3 / requests:.2f} ms per request, the direct requests' time included in the wall)")
    print(f"gateway idle (before the run): {idle:.2f} ms CPU per second; the gateway's connections on its "
          f"workers: {placed} (made again until they alternate)")
    print("origin requests (at the shaped proxy): " + "; ".join(
        f"{setup} " + ", ".join(f"{k} {counted[setup][k]}" for k in ORIGIN_KINDS) for setup in counted))
    total = {s: sum(sum(times[s][k]) for k in kinds) for s in times}
    print(f"sum of request times: direct {total['direct'] / 1e3:.2f} s, gateway {total['gateway'] / 1e3:.2f} s "
          f"(direct/gateway {total['direct'] / total['gateway']:.2f}x)")
    print(f"other load during the run: {load.other:.2f} cores; {load_start} at the start, {wl.loadavg()} at the end; "
          f"code {version}")
    wl.tidy(tmp)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
