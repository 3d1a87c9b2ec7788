"""Soak (issue 7): minutes of mixed load on a 2-node fleet with periodic faults; every body
checked, every acknowledged write looked for at the end.

Two `gateway serve` nodes on one `redis-server` (started here on a free loopback port,
never the machine's Redis), in front of moto behind bench/shaped_proxy.py. Worker threads
(--workers) send GET (whole or a range), HEAD, LIST and PUT, each to a node picked at
random (a load balancer without health checks: requests to a node that is down fail and
are counted apart). Every --fault-every seconds one fault, in turn, lasts --fault-for
seconds: Redis killed then restarted; a node SIGKILLed then restarted (the nodes in
turn); the origin slowed down (the proxy restarted with --slow first-byte latency).

Every body is self-checking: a PUT of version v of key k writes bytes that are a function
of (k, v), and its MD5 (the ETag) is noted before it is sent. A GET or HEAD answer is
matched by its ETag to the version it claims and compared with that version's bytes (or
size): "wrong bytes" counts the bytes of answers that differ, or whose ETag names no
version ever written. A worker writes only its own keys, so it also sees whether it reads
an older version than one it was acknowledged before it asked ("stale": metadata that was
not invalidated, e.g. while Redis was down; within metadata.ttl this is the documented
bound, not wrong bytes). LIST of the read-only seed prefix must be exact, and of a
worker's own prefix must hold every key acknowledged before it asked. At the end, every
acknowledged write is read at the origin and through a node: "lost" counts keys whose
last acknowledged version (or a later one) is not there.

    .venv/bin/python loadtests/soak.py                       # 10 minutes
    .venv/bin/python loadtests/soak.py --minutes 1 --fault-every 12 --fault-for 4

Prints a line every --every seconds and the report; exits 1 if a byte was wrong or an
acknowledged write lost. Results: docs/benchmarks-notes.md ("Soak").
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from botocore.exceptions import BotoCoreError, ClientError

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.redis_fixtures import RedisServer
from tests.servers import free_port, moto_server
from tests.support import GatewayProcess, client

BUCKET = "soak"
SEED_KEYS = 40
KiB = 1024
_DOWN = ("EndpointConnectionError", "ConnectionClosedError", "ResponseStreamingError", "ReadTimeoutError",
         "ConnectTimeoutError", "ProtocolError")


@functools.lru_cache(maxsize=512)
def body(key: str, version: int) -> bytes:
    """The bytes of version `version` of `key` (1 KiB to 512 KiB, up to 8 blocks of 64 KiB)."""
    rng = random.Random(f"{key}#{version}")
    return rng.randbytes(rng.randint(1, 512) * KiB)


def md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


class Ledger:
    """Every version ever sent (by ETag) and the last acknowledged one, per key."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.versions: dict[str, dict[str, int]] = {}  # key -> {md5: version}
        self.acked: dict[str, int] = {}  # key -> last acknowledged version

    def attempt(self, key: str, version: int) -> bytes:
        data = body(key, version)
        with self._lock:
            self.versions.setdefault(key, {})[md5(data)] = version
        return data

    def ack(self, key: str, version: int) -> None:
        with self._lock:
            self.acked[key] = max(version, self.acked.get(key, -1))

    def version_of(self, key: str, etag: str) -> int | None:
        with self._lock:
            return self.versions.get(key, {}).get(etag.strip('"'))


@dataclass
class Figures:
    lock: threading.Lock = field(default_factory=threading.Lock)
    requests: Counter[str] = field(default_factory=Counter)  # by operation
    errors: Counter[tuple[str, str]] = field(default_factory=Counter)  # (live|down node, kind)
    wrong_bytes: int = 0  # of GET bodies
    wrong: Counter[str] = field(default_factory=Counter)  # answers that were wrong, by operation
    short_listings: int = 0  # own-prefix listings without a key acknowledged before they were asked
    stale: int = 0
    stale_at: list[float] = field(default_factory=list)  # when (monotonic) each stale read began
    live_errors: list[tuple[float, int, str, str]] = field(default_factory=list)  # (monotonic, node, op, kind)

    def add(self, op: str, *, error: tuple[str, str] | None = None, wrong: int = 0, bad: bool = False,
            short: bool = False, stale: bool = False) -> None:
        with self.lock:
            self.requests[op] += 1
            if error is not None:
                self.errors[error] += 1
            self.wrong_bytes += wrong
            if wrong or bad:
                self.wrong[op] += 1
            self.short_listings += short
            self.stale += stale
            if stale:
                self.stale_at.append(time.monotonic())


class Proxy:
    """bench/shaped_proxy.py in front of moto, restartable with another first-byte latency."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.removeprefix("http://")
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, latency: str = "0") -> None:
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "shaped_proxy.py"), "--upstream",
                                      self.upstream, "--port", str(self.port), "--latency", latency],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import socket
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("shaped_proxy did not start") from None
                time.sleep(0.02)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None


class Soak:
    def __init__(self, nodes: list[GatewayProcess], redis_server: RedisServer, proxy: Proxy,
                 args: argparse.Namespace) -> None:
        self.nodes, self.redis, self.proxy, self.args = nodes, redis_server, proxy, args
        self.ledger = Ledger()
        self.figures = Figures()
        self.down: set[int] = set()  # nodes that are down now (by the fault thread)
        self.events: list[tuple[float, str]] = []
        self.stop = threading.Event()
        self.started = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self.started

    # --- the load ------------------------------------------------------------------------------

    def seed(self) -> None:
        direct = client(self.proxy.endpoint, ("origin-key", "origin-secret"))
        direct.create_bucket(Bucket=BUCKET)
        for i in range(SEED_KEYS):
            key = f"seed/{i:03d}"
            direct.put_object(Bucket=BUCKET, Key=key, Body=self.ledger.attempt(key, 0))
            self.ledger.ack(key, 0)

    def worker(self, index: int) -> None:
        rng = random.Random(index)
        clients = [client(n.endpoint, connect_timeout=2, read_timeout=30) for n in self.nodes]
        own = [f"w{index}/k{j:02d}" for j in range(self.args.keys)]
        next_version = dict.fromkeys(own, 0)
        acked_at: dict[str, tuple[int, float]] = {}  # own key -> (version, when it was acknowledged)
        while not self.stop.is_set():
            node = rng.randrange(len(self.nodes))
            s3 = clients[node]
            op = rng.choices(("GET", "HEAD", "LIST", "PUT"), (50, 15, 10, 25))[0]
            if op == "PUT":
                key = rng.choice(own)
            elif rng.random() < 0.5 and acked_at:
                key = rng.choice(sorted(acked_at))
            else:
                key = f"seed/{rng.randrange(SEED_KEYS):03d}"
            began = time.monotonic()
            try:
                if op == "PUT":
                    version = next_version[key] = next_version[key] + 1
                    s3.put_object(Bucket=BUCKET, Key=key, Body=self.ledger.attempt(key, version))
                    self.ledger.ack(key, version)
                    acked_at[key] = (version, time.monotonic())
                    self.figures.add(op)
                elif op == "LIST":
                    prefix = "seed/" if rng.random() < 0.5 else f"w{index}/"
                    expected = ({f"seed/{i:03d}" for i in range(SEED_KEYS)} if prefix == "seed/"
                                else {k for k, (_, at) in acked_at.items() if at < began})
                    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
                    listed = {item["Key"] for page in pages for item in page.get("Contents", ())}
                    if prefix == "seed/":
                        self.figures.add(op, bad=listed != expected)
                    else:
                        self.figures.add(op, short=not expected <= listed)
                else:
                    self._read(s3, op, key, rng, began, acked_at.get(key))
            except (BotoCoreError, ClientError, OSError) as exc:
                kind = exc.response["Error"]["Code"] if isinstance(exc, ClientError) else type(exc).__name__
                where = "down" if node in self.down or (kind in _DOWN and node in self._recently_down()) else "live"
                self.figures.add(op, error=(where, kind))
                if where == "live":
                    with self.figures.lock:
                        self.figures.live_errors.append((time.monotonic(), node, op, kind))
                self.stop.wait(0.05)

    def _recently_down(self) -> set[int]:
        """Nodes down now or within the last 2 s (a request sent just before a kill fails after it)."""
        recent = set(self.down)
        for at, event in reversed(self.events):
            if self.now() - at > 2:
                break
            if event.startswith("node ") and " killed" in event:
                recent.add(int(event.split()[1]))
        return recent

    def _read(self, s3, op: str, key: str, rng: random.Random, began: float,  # type: ignore[no-untyped-def]
              own: tuple[int, float] | None) -> None:
        if op == "HEAD":
            answer = s3.head_object(Bucket=BUCKET, Key=key)
            version = self.ledger.version_of(key, answer["ETag"])
            good = version is not None and answer["ContentLength"] == len(body(key, version))
            self.figures.add(op, bad=not good, stale=self._stale(version, own, began))
            return
        params = {"Bucket": BUCKET, "Key": key}
        first = last = None
        if rng.random() < 0.4:
            first = rng.randrange(KiB)  # (every version has at least 1 KiB)
            last = first + rng.randrange(256 * KiB)
            params["Range"] = f"bytes={first}-{last}"
        answer = s3.get_object(**params)
        data = answer["Body"].read()
        version = self.ledger.version_of(key, answer["ETag"])
        if version is None:
            self.figures.add(op, wrong=max(1, len(data)))
            return
        expected = body(key, version)
        if first is not None:
            expected = expected[first:last + 1]  # type: ignore[operator]
        self.figures.add(op, wrong=0 if data == expected else max(len(data), len(expected)),
                         stale=self._stale(version, own, began))

    @staticmethod
    def _stale(version: int | None, own: tuple[int, float] | None, began: float) -> bool:
        return version is not None and own is not None and own[1] < began and version < own[0]

    # --- the faults ----------------------------------------------------------------------------

    def faults(self) -> None:
        turn = 0
        while not self.stop.wait(self.args.fault_every if turn else self.args.fault_every / 2):
            kind = ("redis", "node", "origin")[turn % 3]
            if kind == "redis":
                self.events.append((self.now(), "redis killed"))
                self.redis.stop()
                if self.stop.wait(self.args.fault_for):
                    self.redis.start()
                    return
                self.redis.start()
                self.events.append((self.now(), "redis started"))
            elif kind == "node":
                index = (turn // 3) % len(self.nodes)
                self.down.add(index)
                self.events.append((self.now(), f"node {index} killed"))
                self.nodes[index].kill()
                self.stop.wait(self.args.fault_for)
                self.nodes[index].start()
                self.down.discard(index)
                self.events.append((self.now(), f"node {index} started"))
            else:
                self.proxy.stop()
                self.proxy.start(self.args.slow)
                self.events.append((self.now(), f"origin slow (+{self.args.slow} first byte)"))
                self.stop.wait(self.args.fault_for)
                self.proxy.stop()
                self.proxy.start()
                self.events.append((self.now(), "origin fast"))
            turn += 1

    # --- the end -------------------------------------------------------------------------------

    def lost_writes(self) -> tuple[int, int, int]:
        """(acknowledged keys, lost at the origin, lost or stale through node 0)."""
        direct = client(self.proxy.endpoint, ("origin-key", "origin-secret"))
        through = client(self.nodes[0].endpoint, read_timeout=30)
        lost = lost_through = 0
        for key, version in sorted(self.ledger.acked.items()):
            for s3, name in ((direct, "origin"), (through, "gateway")):
                try:
                    answer = s3.get_object(Bucket=BUCKET, Key=key)
                    data = answer["Body"].read()
                    found = self.ledger.version_of(key, answer["ETag"])
                    ok = found is not None and found >= version and data == body(key, found)
                except ClientError:
                    ok = False
                if not ok and name == "origin":
                    lost += 1
                elif not ok:
                    lost_through += 1
        return len(self.ledger.acked), lost, lost_through


def line(soak: Soak) -> str:
    f = soak.figures
    with f.lock:
        live = sum(n for (where, _), n in f.errors.items() if where == "live")
        down = sum(n for (where, _), n in f.errors.items() if where == "down")
        return (f"{soak.now():7.0f} s  requests {sum(f.requests.values()):7d}  errors live {live:5d} down {down:5d}  "
                f"wrong bytes {f.wrong_bytes}  stale {f.stale}  load {os.getloadavg()[0]:.1f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--keys", type=int, default=12, help="keys each worker writes")
    parser.add_argument("--fault-every", type=float, default=40, help="seconds between two faults")
    parser.add_argument("--fault-for", type=float, default=10, help="seconds a fault lasts")
    parser.add_argument("--slow", default="300ms", help="the origin's first-byte latency while it is slow")
    parser.add_argument("--every", type=float, default=30, help="seconds between two progress lines")
    args = parser.parse_args(argv)

    redis_server = RedisServer()
    redis_server.start()
    nodes: list[GatewayProcess] = []
    try:
        with moto_server() as origin:
            proxy = Proxy(origin)
            proxy.start()
            env = {"GATEWAY_REDIS_URL": redis_server.url, "GATEWAY_CLUSTER_SECRET": "soak-secret",
                   "GATEWAY_CLUSTER_HEARTBEAT_INTERVAL": "0.5", "GATEWAY_CLUSTER_MEMBER_TTL": "1.5",
                   "GATEWAY_CLUSTER_PEER_CONNECT_TIMEOUT": "0.5", "GATEWAY_CLUSTER_PEER_READ_TIMEOUT": "5",
                   "GATEWAY_CACHE_BLOCK_SIZE": "64KiB", "GATEWAY_ORIGIN_READ_TIMEOUT": "10"}
            nodes = [GatewayProcess(proxy.endpoint, **env) for _ in range(2)]
            for node in nodes:
                node.start()
            soak = Soak(nodes, redis_server, proxy, args)
            soak.seed()
            print(f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}: {args.minutes:g} min, {args.workers} workers, "
                  f"a fault every {args.fault_every:g} s for {args.fault_for:g} s; {os.cpu_count()} cores, "
                  f"load average {os.getloadavg()[0]:.2f}", flush=True)
            soak.started = time.monotonic()
            threads = [threading.Thread(target=soak.worker, args=(i,), daemon=True) for i in range(args.workers)]
            threads.append(threading.Thread(target=soak.faults, daemon=True))
            for thread in threads:
                thread.start()
            end = soak.started + args.minutes * 60
            while time.monotonic() < end:
                time.sleep(min(args.every, max(0.0, end - time.monotonic())))
                print(line(soak), flush=True)
            soak.stop.set()
            for thread in threads:
                thread.join(60)
            for index, node in enumerate(nodes):  # a fault cut short by the end leaves everything up
                if node.proc is None:
                    node.start()
                    soak.down.discard(index)
            acked, lost, lost_through = soak.lost_writes()
            proxy.stop()
    finally:
        for node in nodes:
            node.stop()
        redis_server.remove()

    f = soak.figures
    print("\nfaults:", "; ".join(f"{at:.0f} s {event}" for at, event in soak.events))
    print("requests by operation:", dict(f.requests))
    print("errors at a live node:", dict(Counter({k: n for (w, k), n in f.errors.items() if w == "live"})) or "none")
    for at, node, op, kind in f.live_errors[:20]:
        print(f"  {at - soak.started:.1f} s: node {node} {op} {kind}")
    print("errors at a node that was down:",
          dict(Counter({k: n for (w, k), n in f.errors.items() if w == "down"})) or "none")
    print(f"wrong bytes: {f.wrong_bytes} (wrong answers by operation: {dict(f.wrong) or 'none'})")
    print(f"stale reads (an older version than one acknowledged to the same worker before it asked): {f.stale}; "
          f"listings of a worker's own keys missing one acknowledged before: {f.short_listings}")
    if f.stale:
        outages, since = [], None
        for at, event in soak.events:
            if event == "redis killed":
                since = at
            elif event == "redis started" and since is not None:
                outages.append((since, at))
                since = None
        if since is not None:
            outages.append((since, float("inf")))
        times = [at - soak.started for at in f.stale_at]
        during = sum(any(a <= t <= b for a, b in outages) for t in times)
        print(f"  of them {during} while Redis was down, {len(times) - during} with Redis up "
              f"(at {', '.join(f'{t:.0f}' for t in times if not any(a <= t <= b for a, b in outages))[:300]} s)")
    print(f"acknowledged writes: {acked} keys; lost at the origin: {lost}; not read back through a node: "
          f"{lost_through}")
    return 1 if f.wrong_bytes or f.wrong or lost else 0


if __name__ == "__main__":
    raise SystemExit(main())
