"""What read-after-write across nodes costs (issue 17): PUT latency through 1, 2 and 3 nodes,
and warm GET throughput and latency with Redis on.

Starts a moto S3 server, a `redis-server` (free loopback ports, never the machine's) and
`gateway serve` subprocesses as one fleet. For each fleet size, --puts sequential PutObject
calls of --size bytes (boto3) through the nodes in turn: each is acknowledged once every
other node confirmed its invalidation. A node alone without Redis and the origin directly
are measured as references. Then warm GETs: an object read once, then --readers concurrent
anonymous GETs (aiohttp) through node 0 for --seconds, and the same one at a time for the
hit latency; next to it, the time of one Redis round trip from Python (redis-py asyncio),
which is what a reader checking a generation in Redis would add to every hit.

    .venv/bin/python bench/write_latency.py                    # ~1 min
    .venv/bin/python bench/write_latency.py --src /tmp/before  # the gateway of another tree (before/after)

Results: docs/benchmarks-notes.md ("Read-after-write across nodes").
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import aiohttp
import redis
import redis.asyncio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.redis_fixtures import RedisServer  # noqa: E402
from tests.servers import moto_server  # noqa: E402
from tests.support import GatewayProcess, client  # noqa: E402

BUCKET = "write-latency"
SECRET = "write-latency-secret"


def node_env(redis_url: str | None, prefix: str, src: str | None) -> dict[str, str]:
    env = {"GATEWAY_AUTH_ANONYMOUS_READ": BUCKET, "GATEWAY_CACHE_MEMORY_QUOTA": "256MiB",
           "GATEWAY_METADATA_TTL": "10m", "GATEWAY_LISTING_TTL": "10m"}
    if redis_url:
        env.update(GATEWAY_REDIS_URL=redis_url, GATEWAY_REDIS_KEY_PREFIX=prefix, GATEWAY_CLUSTER_SECRET=SECRET,
                   GATEWAY_CLUSTER_HOT_REPLICATION="false", GATEWAY_CLUSTER_PASSIVE_CACHE="true")
    if src:
        env["PYTHONPATH"] = src
    return env


@contextmanager
def fleets(origin: str, redis_url: str, src: str | None) -> Iterator[dict[str, list[GatewayProcess]]]:
    """Every configuration at once (each fleet its own key prefix on the one Redis), so that
    their measurements can be interleaved and share the machine's load alike."""
    configs = {"1 node, no Redis": (None, 1), "1 node on Redis": ("f1:", 1), "2 nodes on Redis": ("f2:", 2),
               "3 nodes on Redis": ("f3:", 3)}
    started: dict[str, list[GatewayProcess]] = {}
    try:
        for name, (prefix, size) in configs.items():
            started[name] = [GatewayProcess(origin, **node_env(redis_url if prefix else None, prefix or "", src))
                             for _ in range(size)]
            for node in started[name]:
                node.start()
        probe = redis.Redis.from_url(redis_url)
        deadline = time.monotonic() + 30
        for name, (prefix, size) in configs.items():
            while prefix and probe.pubsub_numsub(f"{prefix}invalidate")[0][1] < size:
                if time.monotonic() > deadline:
                    raise SystemExit(f"{name}: the nodes did not subscribe")
                time.sleep(0.05)
        yield started
    finally:
        for nodes in started.values():
            for node in nodes:
                node.stop()


class Putter:
    """Sequential PutObject calls through the nodes in turn; `latencies` in seconds."""

    def __init__(self, endpoints: list[str], size: int, key: tuple[str, str] | None = None) -> None:
        self.clients = [client(e) if key is None else client(e, key) for e in endpoints]
        self.body = os.urandom(size)
        self.latencies: list[float] = []
        for c in self.clients:  # connections opened, first-request costs paid
            c.put_object(Bucket=BUCKET, Key="warm", Body=self.body)

    def run(self, count: int) -> None:
        for _ in range(count):
            i = len(self.latencies)
            started = time.perf_counter()
            self.clients[i % len(self.clients)].put_object(Bucket=BUCKET, Key=f"k{i % 50}", Body=self.body)
            self.latencies.append(time.perf_counter() - started)


def summary(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {"p50": ordered[len(ordered) // 2] * 1000, "p90": ordered[int(len(ordered) * 0.9)] * 1000,
            "p99": ordered[int(len(ordered) * 0.99)] * 1000, "mean": statistics.fmean(ordered) * 1000}


async def warm_gets(endpoint: str, readers: int, seconds: float) -> tuple[float, float]:
    """(requests per second with `readers` at once, mean ms of one GET at a time) of one warm object."""
    url = f"{endpoint}/{BUCKET}/hot"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=readers)) as session:
        for _ in range(20):
            async with session.get(url) as response:
                assert response.status == 200, response.status
                await response.read()
        one = []
        for _ in range(300):
            started = time.perf_counter()
            async with session.get(url) as response:
                await response.read()
            one.append(time.perf_counter() - started)
        done = 0
        end = time.monotonic() + seconds

        async def reader() -> None:
            nonlocal done
            while time.monotonic() < end:
                async with session.get(url) as response:
                    await response.read()
                done += 1

        started = time.monotonic()
        await asyncio.gather(*(reader() for _ in range(readers)))
        return done / (time.monotonic() - started), statistics.fmean(sorted(one)[:285]) * 1000


LISTENER = """
import asyncio, sys
from gateway.cluster.shared import Shared
from gateway.config import RedisSettings
shared = None
async def main():
    shared = Shared.connect(RedisSettings(url=sys.argv[1], key_prefix=sys.argv[2]), node_id=sys.argv[3])
    await shared.invalidation.listen(lambda bucket, key: None)
asyncio.run(main())
"""


async def confirmation_times(url: str, others: int, count: int = 500) -> tuple[float, float]:
    """(p50 ms of an invalidation sent, p50 ms of it sent and confirmed by `others` listening
    processes plus this one): what a write pays for its confirmations, without the origin."""
    from gateway.cluster.shared import Shared
    from gateway.config import RedisSettings

    prefix = f"c{others}:"
    procs = [subprocess.Popen([sys.executable, "-c", LISTENER, url, prefix, f"listener-{i}"], cwd=ROOT)
             for i in range(others)]
    shared = Shared.connect(RedisSettings(url=url, key_prefix=prefix), node_id="writer")
    listening = asyncio.create_task(shared.invalidation.listen(lambda bucket, key: None))
    probe = redis.asyncio.Redis.from_url(url)
    try:
        deadline = time.monotonic() + 30
        while ((await probe.pubsub_numsub(f"{prefix}invalidate"))[0][1] < others + 1
               or not shared.invalidation.listening()):
            if time.monotonic() > deadline:
                raise SystemExit("the listeners did not subscribe")
            await asyncio.sleep(0.05)
        sent, confirmed = [], []
        for i in range(count):
            started = time.perf_counter()
            confirmation = await shared.invalidation.invalidate("bkt", f"k{i % 50}")
            sent.append(time.perf_counter() - started)
            assert await confirmation.wait(), "not confirmed"
            confirmed.append(time.perf_counter() - started)
        return statistics.median(sent) * 1000, statistics.median(confirmed) * 1000
    finally:
        listening.cancel()
        await asyncio.gather(listening, return_exceptions=True)
        await shared.aclose()
        await probe.aclose()
        for proc in procs:
            proc.terminate()
            proc.wait(10)


async def redis_round_trip(url: str, count: int = 2000) -> float:
    """Mean ms of one GET from redis-py asyncio, one at a time."""
    r = redis.asyncio.Redis.from_url(url)
    await r.set("gw:bench:generation", "1")
    started = time.perf_counter()
    for _ in range(count):
        await r.get("gw:bench:generation")
    elapsed = time.perf_counter() - started
    await r.aclose()
    return elapsed / count * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--puts", type=int, default=400, help="PUTs per configuration")
    parser.add_argument("--rounds", type=int, default=4, help="the configurations take turns this many times")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--readers", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=3.0, help="of warm GETs per configuration and round")
    parser.add_argument("--src", help="run `gateway serve` from this source tree (before/after)")
    args = parser.parse_args()
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=args.src or ROOT, capture_output=True,
                            text=True).stdout.strip() if (Path(args.src or ROOT) / ".git").exists() else "(tree)"
    print(f"commit {commit}{' (--src ' + args.src + ')' if args.src else ''}, load {' '.join(load)}, "
          f"{os.cpu_count()} cores, {args.puts} PUTs of {args.size} B per configuration, {args.rounds} rounds")
    if args.src:  # `python -m gateway.cli` puts its working folder first on the path
        os.chdir(args.src)
    server = RedisServer()
    server.start()
    try:
        with moto_server() as origin, fleets(origin, server.url, args.src) as started:
            direct = client(origin, ("origin-key", "origin-secret"))
            direct.create_bucket(Bucket=BUCKET)
            direct.put_object(Bucket=BUCKET, Key="hot", Body=os.urandom(64 * 1024))
            putters = {"origin directly": Putter([origin], args.size, ("origin-key", "origin-secret"))}
            putters.update({name: Putter([n.endpoint for n in nodes], args.size) for name, nodes in started.items()})
            gets: dict[str, list[tuple[float, float]]] = {name: [] for name in started}
            for turn in range(args.rounds):
                order = list(putters) if turn % 2 == 0 else list(reversed(putters))
                for name in order:
                    putters[name].run(args.puts // args.rounds)
                for name in order[1:] if turn % 2 == 0 else order[:-1]:
                    gets[name].append(asyncio.run(warm_gets(started[name][0].endpoint, args.readers, args.seconds)))
            rtt = asyncio.run(redis_round_trip(server.url))
            confirmations = {} if args.src else {
                others + 1: asyncio.run(confirmation_times(server.url, others)) for others in (0, 1, 2)}
    finally:
        server.remove()
    rows = {name: summary(p.latencies) for name, p in putters.items()}
    base = rows["1 node on Redis"]["p50"]
    print("\nPUT latency (ms)                 p50     p90     p99    mean   p50 / 1 node on Redis")
    for name, row in rows.items():
        print(f"  {name:28s} {row['p50']:7.2f} {row['p90']:7.2f} {row['p99']:7.2f} {row['mean']:7.2f}   "
              f"{row['p50'] / base:.2f}x")
    print(f"\nwarm GET of 64 KiB through node 0: {args.readers} readers, median of {args.rounds} rounds of "
          f"{args.seconds:.0f} s (and one GET at a time):")
    for name, results in gets.items():
        rate = statistics.median(r for r, _ in results)
        one = statistics.median(o for _, o in results)
        print(f"  {name:28s} {rate:8.0f} req/s   {one:.3f} ms")
    if confirmations:
        print("\nan invalidation alone (Invalidations, no origin), p50 ms:   sent   sent and confirmed")
        for nodes, (sent, confirmed) in confirmations.items():
            print(f"  {nodes} node{'s' if nodes > 1 else ' '} listening                            {sent:6.3f}   "
                  f"{confirmed:6.3f}")
    one_at_2 = statistics.median(o for _, o in gets["2 nodes on Redis"])
    print(f"\none Redis round trip (redis-py asyncio, GET): {rtt:.3f} ms "
          f"= {rtt / one_at_2 * 100:.0f}% of a warm GET at 2 nodes")


if __name__ == "__main__":
    main()
