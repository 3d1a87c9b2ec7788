"""A fleet node killed with SIGKILL under load (issue 7): what clients saw, and how long
until the survivors served at full speed again.

Three `gateway serve` nodes (subprocesses) on one `redis-server` (started here on a free
loopback port, never the machine's Redis) and a moto S3 server as the origin. Reader
threads, --readers per node, each with its own boto3 client pointed at one node (as a
load balancer would spread clients), GET random objects, whole or a random range, and
compare every body with the bytes put at the origin. After --kill-at seconds one node is
SIGKILLed; after --restart-at it is started again on the same port and rejoins. Every
node's peer-failure counter (gateway_peer_failures_total) is scraped each --window.

The report: requests and errors per window (survivors and the killed node apart), errors
by node and kind, wrong bytes (must be 0), and the recovery: the time from the kill to the
end of the last window in which a survivor still failed to reach a peer or answered
slower than 1.5x its p90 before the kill.

    .venv/bin/python bench/fleet_faults.py                      # ~40 s
    .venv/bin/python bench/fleet_faults.py --duration 120 --kill-at 30 --restart-at 75

tests/integration/test_fleet_faults.py runs the same scenario, shorter, with assertions.
Results: docs/benchmarks-notes.md ("A fleet node killed under load").
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import re
import statistics
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from botocore.exceptions import BotoCoreError, ClientError

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests import waiting
from tests.support import GatewayProcess, client

SECRET = "fleet-faults-secret"
TOKEN = "fleet-faults-token"
BUCKET = "fleet-faults"
SCRAPE_EVERY = 0.5  # seconds between two scrapes of every node
KiB = 1024


def node_env(redis_url: str, **extra: str) -> dict[str, str]:
    """GATEWAY_* settings of a fleet node: short heartbeats so that a dead node is noticed fast."""
    env = {
        "GATEWAY_REDIS_URL": redis_url, "GATEWAY_CLUSTER_SECRET": SECRET, "GATEWAY_ADMIN_TOKEN": TOKEN,
        "GATEWAY_CLUSTER_HEARTBEAT_INTERVAL": "0.5", "GATEWAY_CLUSTER_MEMBER_TTL": "1.5",
        "GATEWAY_CLUSTER_PEER_CONNECT_TIMEOUT": "0.5", "GATEWAY_CLUSTER_PEER_READ_TIMEOUT": "2",
        # Every read of a block another node owns goes to that node: the peer path is what is tested.
        "GATEWAY_CLUSTER_HOT_REPLICATION": "false",
        "GATEWAY_CACHE_BLOCK_SIZE": "64KiB", "GATEWAY_CACHE_READAHEAD_BLOCKS": "2",
    }
    env.update(extra)
    return env


def admin(node: GatewayProcess, path: str) -> httpx.Response:
    return httpx.get(f"{node.endpoint}/_gateway{path}", headers={"authorization": f"Bearer {TOKEN}"}, timeout=5)


def members(node: GatewayProcess) -> set[str]:
    return set(admin(node, "/stats").json()["members"])


def metric(node: GatewayProcess, name: str) -> float:
    match = re.search(rf"^{name} (\S+)$", admin(node, "/metrics").text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def wait_for(check, within: float, what: str) -> None:  # type: ignore[no-untyped-def]
    """tests.waiting.wait_for, a node that does not answer (yet) counting as "not yet"."""
    waiting.wait_for(check, what, within=within, ignoring=(httpx.HTTPError, KeyError, ValueError), interval=0.05)


def start_fleet(origin: str, redis_url: str, nodes: int = 3, **extra: str) -> list[GatewayProcess]:
    fleet = [GatewayProcess(origin, **node_env(redis_url, **extra)) for _ in range(nodes)]
    for node in fleet:
        node.start()
    wait_for(lambda: all(len(members(n)) == nodes for n in fleet), 30, f"{nodes} nodes see each other")
    return fleet


def put_objects(origin: str, count: int, seed: int = 7) -> dict[str, bytes]:
    """Objects of 64 KiB to 1 MiB (1 to 16 blocks), put straight at the origin."""
    rng = random.Random(seed)
    direct = client(origin, ("origin-key", "origin-secret"))
    try:
        direct.create_bucket(Bucket=BUCKET)
    except ClientError:
        pass
    objects = {f"obj-{i:03d}": rng.randbytes(rng.randint(64, 1024) * KiB) for i in range(count)}
    for key, body in objects.items():
        direct.put_object(Bucket=BUCKET, Key=key, Body=body)
    return objects


def warm(fleet: list[GatewayProcess], objects: dict[str, bytes]) -> None:
    """Every object read once (through the nodes in turn), so the load starts on a warm fleet."""
    clients = [client(node.endpoint) for node in fleet]
    for i, (key, body) in enumerate(sorted(objects.items())):
        assert clients[i % len(clients)].get_object(Bucket=BUCKET, Key=key)["Body"].read() == body


@dataclass(slots=True)
class Outcome:
    at: float  # seconds since the load started, at the answer
    node: int
    seconds: float
    error: str | None = None  # None: answered, with the right bytes unless `wrong`
    wrong: int = 0  # bytes that differ from what the origin holds
    reader: int = 0  # which of the node's readers asked

    @property
    def began(self) -> float:
        return self.at - self.seconds


@dataclass
class Load:
    """Reader threads, `readers` per node, until `stop()`; `outcomes` as they come."""

    endpoints: list[str]
    objects: dict[str, bytes]
    readers: int = 2
    outcomes: list[Outcome] = field(default_factory=list)
    started: float = 0.0

    def start(self) -> Load:
        self._stop = threading.Event()
        self.started = time.monotonic()
        self._threads = [threading.Thread(target=self._read, args=(node, seed), daemon=True)
                         for node in range(len(self.endpoints)) for seed in range(self.readers)]
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def now(self) -> float:
        return time.monotonic() - self.started

    def _read(self, node: int, seed: int) -> None:
        rng = random.Random(node * 1000 + seed)
        s3 = client(self.endpoints[node], connect_timeout=2, read_timeout=15)
        keys = sorted(self.objects)
        while not self._stop.is_set():
            key = rng.choice(keys)
            expected = self.objects[key]
            params = {"Bucket": BUCKET, "Key": key}
            if rng.random() < 0.5:  # a random range, as query engines read
                first = rng.randrange(len(expected))
                last = min(len(expected) - 1, first + rng.randint(1, 300 * KiB))
                params["Range"] = f"bytes={first}-{last}"
                expected = expected[first:last + 1]
            began = time.monotonic()
            try:
                body = s3.get_object(**params)["Body"].read()
            except (BotoCoreError, ClientError, OSError) as exc:
                kind = exc.response["Error"]["Code"] if isinstance(exc, ClientError) else type(exc).__name__
                self.outcomes.append(Outcome(self.now(), node, time.monotonic() - began, kind, reader=seed))
                self._stop.wait(0.1)  # a client backs off before it tries again
                continue
            wrong = 0 if body == expected else max(len(body), len(expected))
            self.outcomes.append(Outcome(self.now(), node, time.monotonic() - began, None, wrong, reader=seed))


@dataclass
class Scrape:
    """Each live node's gateway_peer_failures_total, every `every` seconds."""

    fleet: list[GatewayProcess]
    load: Load
    every: float = SCRAPE_EVERY
    samples: list[tuple[float, int, float]] = field(default_factory=list)  # (at, node, failures)

    def start(self) -> Scrape:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            for index, node in enumerate(self.fleet):
                if node.proc is None:
                    continue
                try:
                    self.samples.append((self.load.now(), index, metric(node, "gateway_peer_failures_total")))
                except httpx.HTTPError:
                    pass


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1] if len(values) >= 2 else (values[0] if values else 0.0)


def recovery(outcomes: list[Outcome], samples: list[tuple[float, int, float]], killed: int, kill_at: float,
             end: float, window: float) -> tuple[float, float]:
    """(seconds from the kill to full speed, survivors' p90 before the kill): full speed is the
    end of the last window after the kill in which a survivor's peer failures grew or the
    survivors' p90 latency was above 1.5x its value before the kill (its second half)."""
    survivors = [o for o in outcomes if o.node != killed and o.error is None]
    before = p90([o.seconds for o in survivors if kill_at / 2 <= o.at < kill_at])
    last_bad = kill_at
    t = kill_at
    while t < end:
        in_window = [o.seconds for o in survivors if t <= o.at < t + window]
        grew = False
        for node in {n for _, n, _ in samples if n != killed}:
            series = [f for at, n, f in samples if n == node and at <= t + window]
            earlier = [f for at, n, f in samples if n == node and at <= t]
            grew |= bool(series and earlier and series[-1] > earlier[-1])
        if grew or (in_window and p90(in_window) > 1.5 * before):
            last_bad = t + window
        t += window
    return last_bad - kill_at, before


def report(outcomes: list[Outcome], samples: list[tuple[float, int, float]], *, killed: int, kill_at: float,
           restart_at: float, end: float, window: float) -> dict[str, object]:
    """Prints the report; returns its figures."""
    print(f"node {killed} SIGKILLed at {kill_at:.1f} s, started again at {restart_at:.1f} s\n")
    print(f"{'window':>13}  {'survivors ok/s':>14} {'err':>4} {'p90 ms':>7}   {'killed node ok/s':>16} {'err':>4}")
    t = 0.0
    while t < end:
        cell = [o for o in outcomes if t <= o.at < t + window]
        surv = [o for o in cell if o.node != killed]
        dead = [o for o in cell if o.node == killed]
        ok = [o.seconds for o in surv if o.error is None]
        mark = "  <- kill" if t <= kill_at < t + window else "  <- restart" if t <= restart_at < t + window else ""
        print(f"{t:5.1f}-{t + window:5.1f} s  {len(ok) / window:14.1f} {len(surv) - len(ok):4d} "
              f"{p90(ok) * 1000:7.1f}   {sum(o.error is None for o in dead) / window:16.1f} "
              f"{sum(o.error is not None for o in dead):4d}{mark}")
        t += window
    errors = Counter((o.node, o.error) for o in outcomes if o.error is not None)
    print("\nerrors by node and kind:", dict(errors) or "none")
    wrong = sum(o.wrong for o in outcomes)
    survivors_failed = sum(1 for o in outcomes if o.node != killed and o.error is not None)
    after = recovery(outcomes, samples, killed, kill_at, restart_at, window)
    failures = {n: max((f for _, m, f in samples if m == n), default=0) for n in {n for _, n, _ in samples}}
    print(f"requests: {len(outcomes)} ({sum(o.error is None for o in outcomes)} answered), wrong bytes: {wrong}, "
          f"survivor requests failed: {survivors_failed}")
    print(f"peer failures per node (gateway_peer_failures_total): {failures}")
    last_failure = kill_at
    for node in {n for _, n, _ in samples if n != killed}:
        series = [(at, f) for at, n, f in samples if n == node]
        last_failure = max([last_failure] + [at for (_, f0), (at, f) in itertools.pairwise(series) if f > f0])
    print(f"survivors' peer failures last grew {last_failure - kill_at:.1f} s after the kill "
          f"(to within the scrape interval, {SCRAPE_EVERY:g} s)")
    print(f"full speed again {after[0]:.1f} s after the kill (survivors' p90 before it: {after[1] * 1000:.1f} ms; "
          f"to within a {window:g} s window)")
    return {"wrong": wrong, "survivors_failed": survivors_failed, "recovery": after[0], "errors": errors,
            "last_peer_failure": last_failure - kill_at}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=40, help="seconds of load in all")
    parser.add_argument("--kill-at", type=float, default=10)
    parser.add_argument("--restart-at", type=float, default=25)
    parser.add_argument("--readers", type=int, default=2, help="reader threads per node")
    parser.add_argument("--objects", type=int, default=24)
    parser.add_argument("--window", type=float, default=1.0, help="seconds per report line")
    args = parser.parse_args(argv)

    from tests.redis_fixtures import RedisServer
    from tests.servers import moto_server

    redis_server = RedisServer()
    redis_server.start()
    try:
        with moto_server() as origin:
            objects = put_objects(origin, args.objects)
            fleet = start_fleet(origin, redis_server.url)
            killed = 1
            try:
                warm(fleet, objects)
                load = Load([n.endpoint for n in fleet], objects, args.readers).start()
                scrape = Scrape(fleet, load).start()
                time.sleep(args.kill_at)
                kill_at = load.now()
                fleet[killed].kill()
                time.sleep(max(0.0, args.restart_at - load.now()))
                restart_at = load.now()
                fleet[killed].start()
                wait_for(lambda: all(len(members(n)) == len(fleet) for n in fleet), 30, "the node rejoined")
                print(f"node {killed} rejoined {load.now() - restart_at:.1f} s after its start")
                time.sleep(max(0.0, args.duration - load.now()))
                scrape.stop()
                load.stop()
                end = load.now()
            finally:
                for node in fleet:
                    node.stop()
            print(time.strftime("%Y-%m-%d %H:%M:%S %Z"), f"load average {os.getloadavg()[0]:.2f}, "
                  f"{os.cpu_count()} cores, {args.readers} readers per node, {args.objects} objects")
            figures = report(load.outcomes, scrape.samples, killed=killed, kill_at=kill_at,
                             restart_at=restart_at, end=end, window=args.window)
    finally:
        redis_server.remove()
    return 1 if figures["wrong"] or figures["survivors_failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
