"""Fleet benchmark (issue 4): 1, 2 and 3 gateway nodes on one Redis act as one cache.

In one run on this machine, with every node a `gateway serve --config <toml>` subprocess,
one `redis-server` started by the script on a free loopback port (never the machine's
Redis) and one moto S3 server as the origin, it measures:

  1. throughput  aggregate warm GET throughput (req/s, MB/s, p50/p99) of a fleet of 1, 2
                 and 3 nodes, for 64 KiB and 1 MiB objects: every object read once
                 before measuring, then one wrk per node at the same time (the load spread
                 evenly over the nodes, as a round-robin load balancer would; no balancer
                 process in between), the total number of connections the same for every
                 fleet size. Hot replication and the passive cache are off here: with N
                 nodes, (N-1)/N of the reads reach a node that is not the block's owner
                 and are served with a peer request (x-cache hit-peer).
  2. hit ratio   a Zipf workload over more objects than one node's cache.memory_quota
                 holds, but fewer than the fleet's quotas together: the cluster-wide hit
                 ratio (1 - origin block GETs / GETs, from the gateways' own counters)
                 and origin requests per 1000 GETs, with 1 node and with 3 nodes.
  3. replication the same Zipf workload on 3 nodes with cluster.hot_replication off and
                 on (heat_interval 1 s): hit ratio, local-hit share (answers served from
                 the receiving node's own tiers, x-cache hit-mem/hit-disk), peer requests
                 per 1000 GETs (gateway_peer_requests_total), throughput and p50/p99.

Parts 2 and 3 share the 3-node run with replication off. Their load generator is an
asyncio + aiohttp client (bench/cache_serving.py's SigV4 Authorization header on every
request) whose workers send request i to node i mod N. Each Zipf run starts on a fresh
fleet (empty caches, Redis flushed), runs a warm-up of --zipf-warmup GETs, pauses
--settle seconds (the replication controller's turn) and then measures --zipf-requests
GETs of the same Zipf stream.

Everything shares this machine's cores (2 here): the load generators, every node, Redis
and moto. N nodes on one machine cannot add up to N machines' throughput; the ratios
show what spreading the work over processes and peer requests costs on shared cores.
During every cell the CPU taken by processes outside the benchmark is measured and shown.
All nodes of a run execute one copy of gateway/ taken at the start (--code: the
committed HEAD by default, or the work tree); its commit is printed.

    .venv/bin/python bench/fleet.py                 # ~6 minutes
    .venv/bin/python bench/fleet.py --quick         # ~1 minute, smaller everything

Needs: apt-get install -y redis-server wrk; .venv/bin/pip install aiohttp matplotlib.
Results and the machine they were taken on: docs/benchmarks-notes.md ("The fleet (issue 4)";
the latest figures in docs/benchmarks.md, "The fleet").
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path
from urllib.parse import urlsplit

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cache_serving as cs

ROOT = cs.ROOT
KiB, MiB = cs.KiB, cs.MiB
BUCKET = cs.BUCKET
SECRET = "fleet-bench-cluster-secret"
ADMIN_TOKEN = "fleet-bench-admin-token"
REPLICATION_SETTINGS = ("hot_replication", "heat_interval", "heat_half_life", "hot_threshold", "max_replicas",
                        "hot_objects")


# --- processes ---------------------------------------------------------------------------------------


@contextmanager
def redis_process(workdir: Path) -> Iterator[str]:
    """A private redis-server on a free loopback port (no persistence); yields its URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server not found: apt-get install -y redis-server")
    port = cs.free_port()
    log = workdir / "redis.log"
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(workdir), "--logfile", str(log)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        while redis_call(port, "PING") != "+PONG":
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("redis-server did not start")
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        cs._stop(proc)


def redis_call(port: int, *words: str) -> str:
    """One command over RESP, the first line of the answer ('' when Redis does not answer)."""
    import socket

    payload = f"*{len(words)}\r\n" + "".join(f"${len(w)}\r\n{w}\r\n" for w in words)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(payload.encode())
            return s.recv(4096).decode(errors="replace").split("\r\n", 1)[0]
    except OSError:
        return ""


def toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string for what we write (ASCII)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML for {value!r}")


def toml_text(sections: dict[str, dict[str, object]]) -> str:
    out = ["# Generated by bench/fleet.py"]
    for name, values in sections.items():
        out.append(f"\n[{name}]")
        out.extend(f"{key} = {toml_value(value)}" for key, value in values.items())
    return "\n".join(out) + "\n"


@dataclass
class Node(cs.Gateway):
    """One fleet node: `python -m gateway.cli serve --config <toml>` (no GATEWAY_* variables)."""

    sections: dict[str, dict[str, object]] = field(default_factory=dict)

    def start(self) -> None:
        config = self.workdir / f"{self.name}-{self.port}.toml"
        config.write_text(toml_text(self.sections))
        env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
        self.starts += 1
        log = self.workdir / f"{self.name}.log"
        with open(log, "ab") as fh:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gateway.cli", "serve", "--config", str(config), "--log-level", "WARNING"],
                cwd=self.code, env=env, stdout=fh, stderr=subprocess.STDOUT,
            )
        cs._wait_http(self.endpoint + "/", self.proc, f"gateway {self.name}", log)

    def admin(self, route: str) -> httpx.Response:
        response = httpx.get(f"{self.endpoint}/_gateway/{route}", timeout=10,
                             headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
        response.raise_for_status()
        return response


def node_sections(name: str, port: int, origin: str, redis_url: str, *, quota: int,
                  cluster: dict[str, object]) -> dict[str, dict[str, object]]:
    endpoint = f"http://127.0.0.1:{port}"
    return {
        "origin": {"endpoint": origin, "access_key": cs.ORIGIN_CREDENTIALS[0],
                   "secret_key": cs.ORIGIN_CREDENTIALS[1]},
        "server": {"host": "127.0.0.1", "port": port},
        "auth": {"users": [{"access_key": cs.USER[0], "secret_key": cs.USER[1],
                            "grants": [{"bucket": BUCKET, "access": "read"}]}]},
        # An hour of metadata TTL: no revalidating HEADs during a run, so that origin
        # requests are block fetches (and the opening GETs of first reads).
        "metadata": {"ttl": "1h"},
        "cache": {"memory_quota": quota},
        "redis": {"url": redis_url},
        "cluster": {"secret": SECRET, "node_id": name, "advertise_url": endpoint,
                    "heartbeat_interval": 0.5, "member_ttl": 2.0, **cluster},
        "admin": {"token": ADMIN_TOKEN},
    }


class Fleet:
    """N nodes on the run's Redis; `start` flushes Redis first (a fresh fleet, empty caches)."""

    def __init__(self, origin: str, redis_url: str, workdir: Path, code: Path) -> None:
        self.origin, self.redis_url, self.workdir, self.code = origin, redis_url, workdir, code
        self.nodes: list[Node] = []
        self.peak_rss = 0

    def start(self, n: int, *, quota: int, cluster: dict[str, object]) -> list[Node]:
        self.stop()
        redis_call(int(urlsplit(self.redis_url).port or 0), "FLUSHALL")
        for i in range(n):
            port = cs.free_port()
            name = f"node{i + 1}"
            node = Node(name, self.origin, {}, self.workdir, self.code, port=port,
                        sections=node_sections(name, port, self.origin, self.redis_url, quota=quota, cluster=cluster))
            self.nodes.append(node)
            node.start()
        deadline = time.monotonic() + 20
        want = {node.name for node in self.nodes}
        while True:  # every node sees exactly the fleet
            views = [set(node.admin("stats").json()["members"]) for node in self.nodes]
            if all(v == want for v in views):
                return self.nodes
            if time.monotonic() > deadline:
                raise SystemExit(f"the fleet did not settle: want {sorted(want)}, views {[sorted(v) for v in views]}")
            time.sleep(0.2)

    def stop(self) -> None:
        for node in self.nodes:
            self.peak_rss = max(self.peak_rss, node.record_peak())
            node.stop()
        self.nodes = []


# --- the gateways' own counters ---------------------------------------------------------------------------

_METRIC = re.compile(r'^gateway_origin_requests_total\{method="(\w+)"\} ([0-9.e+]+)$', re.MULTILINE)


@dataclass
class Counters:
    """What the nodes' admin API says, summed over the nodes (plus per-node figures)."""

    origin: collections.Counter[str]  # origin requests by method
    hits: int  # block reads a tier answered (a node's own reads and the blocks it served peers)
    misses: int  # block reads no tier could answer
    served: collections.Counter[str]  # GetObject body bytes by source (memory, disk, peer, origin)
    blocks: list[int]  # blocks held per node
    used: list[int]  # bytes held per node (all tiers)
    peer_requests: int | None  # block requests sent to peers (gateway_peer_requests_total; None: not in /metrics)
    replication: collections.Counter[str]  # blocks filled / dropped for the replication controller
    hot_objects: list[int]  # objects with extra owners, as each node last read them

    def __sub__(self, before: Counters) -> Counters:
        peer = None
        if self.peer_requests is not None and before.peer_requests is not None:
            peer = self.peer_requests - before.peer_requests
        origin = self.origin.copy()
        origin.subtract(before.origin)
        served = self.served.copy()
        served.subtract(before.served)
        replication = self.replication.copy()
        replication.subtract(before.replication)
        return Counters(origin, self.hits - before.hits, self.misses - before.misses, served, self.blocks, self.used,
                        peer, replication, self.hot_objects)


def counters(nodes: Sequence[Node]) -> Counters:
    origin: collections.Counter[str] = collections.Counter()
    served: collections.Counter[str] = collections.Counter()
    replication: collections.Counter[str] = collections.Counter()
    peer: int | None = 0
    hits = misses = 0
    blocks, used, hot = [], [], []
    for node in nodes:
        doc = node.admin("stats").json()
        hits += doc["hits"]
        misses += doc["misses"]
        served.update(doc["served_bytes"])
        blocks.append(sum(t["blocks"] for t in doc["tiers"]))
        used.append(sum(t["used_bytes"] for t in doc["tiers"]))
        hot.append((doc.get("replication") or {}).get("hot_objects", 0))
        text = node.admin("metrics").text
        found = re.search(r"^gateway_peer_requests_total ([0-9.e+]+)$", text, re.MULTILINE)
        peer = None if found is None or peer is None else peer + int(float(found.group(1)))
        for method, value in _METRIC.findall(text):
            origin[method] += int(float(value))
        for action, value in re.findall(r'^gateway_replication_actions_total\{action="(\w+)"\} ([0-9.e+]+)$', text,
                                        re.MULTILINE):
            replication[action] += int(float(value))
    return Counters(origin, hits, misses, served, blocks, used, peer, replication, hot)


# --- throughput: one wrk per node at once -------------------------------------------------------------------

QUANTILES_LUA = """
-- bench/fleet.py: as cache_serving's, and the latency distribution (per mille) to merge across wrk processes.
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK {"requests": %d, "bytes": %d, "duration_us": %d, "connect": %d, "read": %d, "write": %d, ' ..
    '"status": %d, "timeout": %d, "p50_us": %d, "p99_us": %d}\\n',
    summary.requests, summary.bytes, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99)))
  local q = {}
  for i = 1, 999 do q[i] = latency:percentile(i / 10) end
  io.write("QUANTILES " .. table.concat(q, " ") .. "\\n")
end
"""

_children: set[subprocess.Popen[str]] = set()
_children_lock = threading.Lock()


@dataclass
class WrkRun:
    node: str
    requests: int
    errors: int
    payload: int
    seconds: float
    quantiles_us: list[float]


def wrk_node(node: Node, paths: Sequence[str], connections: int, seconds: float, workdir: Path,
             header_size: int) -> WrkRun:
    """wrk -t1 -cN against one node for `seconds`, cycling through its presigned paths."""
    folder = workdir / f"wrk-{node.name}"
    folder.mkdir(exist_ok=True)
    script = folder / "cycle.lua"
    script.write_text(cs.WRK_LUA + QUANTILES_LUA)  # the later `done` replaces cache_serving's
    listing = folder / "paths.txt"
    listing.write_text("\n".join(paths) + "\n")
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", "--timeout", "10s", "-s", str(script),
           node.endpoint, "--", str(listing), "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with _children_lock:
        _children.add(proc)
    try:
        out, err = proc.communicate(timeout=seconds + 60)
    finally:
        with _children_lock:
            _children.discard(proc)
    result = next((ln for ln in out.splitlines() if ln.startswith("WRK ")), None)
    quantiles = next((ln for ln in out.splitlines() if ln.startswith("QUANTILES ")), None)
    if result is None or quantiles is None:
        raise SystemExit(f"wrk against {node.name} failed ({proc.returncode}):\n{out}\n{err}")
    r = json.loads(result[4:])
    errors = r["status"] + r["read"] + r["write"] + r["timeout"] + r["connect"]
    ok = r["requests"] - r["status"]
    return WrkRun(node.name, ok, errors, max(0, r["bytes"] - r["requests"] * header_size), r["duration_us"] / 1e6,
                  [float(v) for v in quantiles.split()[1:]])


def merged_percentile(runs: Sequence[WrkRun], q: float) -> float:
    """The q-th percentile (ms) of all requests of several wrk runs, from each one's per-mille quantiles."""
    points = sorted((value, run.requests / len(run.quantiles_us)) for run in runs if run.requests
                    for value in run.quantiles_us)
    total = sum(w for _, w in points)
    if not total:
        return float("nan")
    acc = 0.0
    for value, weight in points:
        acc += weight
        if acc >= q / 100 * total:
            return value / 1e3
    return points[-1][0] / 1e3


@dataclass
class ThroughputCell:
    nodes: int
    label: str
    size: int
    cell: cs.Cell
    per_node: list[float]  # req/s per node
    sources: dict[str, float]  # share of body bytes by source during the cell (the nodes' served_bytes)
    origin_requests: int


def measure_throughput(fleet_nodes: Sequence[Node], keys: Sequence[str], label: str, size: int, connections: int,
                       seconds: float, workdir: Path, busy: float, retries: int) -> ThroughputCell:
    per = max(1, round(connections / len(fleet_nodes)))
    paths = {node.name: cs.presigned_paths(node.endpoint, keys) for node in fleet_nodes}
    headers = {node.name: cs.header_bytes(node.endpoint, paths[node.name][0]) for node in fleet_nodes}
    best: ThroughputCell | None = None
    for attempt in range(1 + retries):
        before = counters(fleet_nodes)
        with cs.OtherLoad() as load:
            threads: list[tuple[threading.Thread, list[WrkRun]]] = []
            for node in fleet_nodes:
                slot: list[WrkRun] = []
                # Each node's wrk starts at a different place in the key list (not all on one key at once).
                offset = len(keys) * len(threads) // len(fleet_nodes)
                node_paths = paths[node.name][offset:] + paths[node.name][:offset]
                t = threading.Thread(target=lambda n=node, p=node_paths, s=slot: s.append(
                    wrk_node(n, p, per, seconds, workdir, headers[n.name])), daemon=True)
                threads.append((t, slot))
                t.start()
            for t, _ in threads:
                t.join()
        runs = [slot[0] for _, slot in threads if slot]
        if len(runs) != len(fleet_nodes):
            raise SystemExit("a wrk run failed (see above)")
        delta = counters(fleet_nodes) - before
        elapsed = max(r.seconds for r in runs)
        ok, errors, payload = sum(r.requests for r in runs), sum(r.errors for r in runs), sum(r.payload for r in runs)
        note = f"{len(runs)} x wrk -t1 -c{per}"
        if attempt:
            note += f"; measured {attempt + 1}x: other load"
        cell = cs.Cell(f"{len(fleet_nodes)} node(s)", "wrk", size, ok, errors, elapsed, merged_percentile(runs, 50),
                       merged_percentile(runs, 99), note, payload, load.cores)
        total_bytes = sum(v for v in delta.served.values() if v > 0) or 1
        result = ThroughputCell(len(fleet_nodes), label, size, cell, [r.requests / r.seconds for r in runs],
                                {k: v / total_bytes for k, v in delta.served.items() if v > 0},
                                sum(delta.origin.values()))
        if best is None or result.cell.other < best.cell.other:
            best = result
        if best.cell.other <= busy:
            break
        print(f"   ({len(fleet_nodes)} nodes {label}: other processes took {load.cores:.2f} cores; again)", flush=True)
        time.sleep(3)
    assert best is not None
    return best


# --- Zipf: the aiohttp client, request i to node i mod N ------------------------------------------------------


@dataclass
class ZipfRun:
    ok: int
    errors: int
    payload: int
    seconds: float
    latencies: list[float]
    answers: collections.Counter[str]  # x-cache values of the answers

    @property
    def rps(self) -> float:
        return self.ok / self.seconds if self.seconds else 0.0


async def _zipf_load(endpoints: Sequence[str], keys: Sequence[str], stream: Sequence[int], size: int,
                     workers: int) -> ZipfRun:
    import aiohttp

    signers = [cs.HeaderSigner(urlsplit(e).netloc, cs.USER) for e in endpoints]
    state = {"next": 0, "ok": 0, "errors": 0, "bytes": 0}
    answers: collections.Counter[str] = collections.Counter()
    latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=workers * 2, limit_per_host=workers)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=60)

    async def worker(session: aiohttp.ClientSession) -> None:
        while True:
            i = state["next"]
            if i >= len(stream):
                return
            state["next"] = i + 1
            n = i % len(endpoints)
            path = f"/{BUCKET}/{keys[stream[i]]}"
            t0 = time.perf_counter()
            try:
                async with session.get(endpoints[n] + path, headers=signers[n](path)) as resp:
                    body = await resp.read()
                    status = resp.status
                    answers[resp.headers.get("x-cache", "-")] += 1
            except (aiohttp.ClientError, TimeoutError):
                state["errors"] += 1
                continue
            if status == 200 and len(body) == size:
                state["ok"] += 1
                state["bytes"] += len(body)
                latencies.append(time.perf_counter() - t0)
            else:
                state["errors"] += 1

    started = time.perf_counter()
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False) as session:
        await asyncio.gather(*(worker(session) for _ in range(workers)))
    latencies.sort()
    return ZipfRun(state["ok"], state["errors"], state["bytes"], time.perf_counter() - started, latencies, answers)


def zipf_load(endpoints: Sequence[str], keys: Sequence[str], stream: Sequence[int], size: int,
              workers: int) -> ZipfRun:
    try:
        import uvloop
        return uvloop.run(_zipf_load(endpoints, keys, stream, size, workers))
    except ImportError:  # pragma: no cover
        return asyncio.run(_zipf_load(endpoints, keys, stream, size, workers))


def zipf_stream(n_objects: int, exponent: float, count: int, seed: int) -> list[int]:
    """`count` object indexes, P(rank k) ~ 1/(k+1)**exponent; ranks are shuffled over the keys."""
    from loadtests.content import Zipf

    rng = random.Random(seed)
    zipf = Zipf(n_objects, exponent)
    order = list(range(n_objects))
    rng.shuffle(order)  # the hottest object is not key 0
    return [order[zipf.sample(rng)] for _ in range(count)]


@dataclass
class ZipfResult:
    name: str
    nodes: int
    replication: bool
    run: ZipfRun
    delta: Counters
    after: Counters
    other: float
    warmup: ZipfRun
    cluster: dict[str, object]
    speed: ZipfRun = None  # type: ignore[assignment]  # the pass req/s and latency come from (run, or a repeat)
    speed_other: float = 0.0

    def __post_init__(self) -> None:
        if self.speed is None:
            self.speed, self.speed_other = self.run, self.other

    @property
    def p50(self) -> float:
        return 1e3 * cs._percentile(self.speed.latencies, 50)

    @property
    def p99(self) -> float:
        return 1e3 * cs._percentile(self.speed.latencies, 99)

    @property
    def gets(self) -> int:
        return self.run.ok + self.run.errors

    @property
    def origin_gets(self) -> int:
        return self.delta.origin.get("GET", 0)

    @property
    def origin_requests(self) -> int:
        return sum(v for v in self.delta.origin.values() if v > 0)

    @property
    def hit_ratio(self) -> float:
        # Every object is one block: a GET reads one block; a block fetched from the
        # origin is one origin GET (the opening GET of a first read carries the metadata).
        return 1 - self.origin_gets / self.gets if self.gets else float("nan")

    def share(self, *values: str) -> float:
        total = sum(self.run.answers.values())
        return sum(self.run.answers.get(v, 0) for v in values) / total if total else float("nan")

    @property
    def local_share(self) -> float:
        return self.share("hit-mem", "hit-disk")

    @property
    def served_to_peers_per_1000(self) -> float:
        """Block reads the nodes' tiers answered for other nodes, per 1000 GETs: tier hits summed
        over the nodes minus the answers served from the receiving node's own tiers (peer
        requests that found the block at the owner; replica fills count too)."""
        local = self.run.answers.get("hit-mem", 0) + self.run.answers.get("hit-disk", 0)
        return 1000 * max(0, self.delta.hits - local) / self.gets if self.gets else float("nan")

    @property
    def peer_per_1000(self) -> float:
        """Peer block requests per 1000 GETs: the nodes' gateway_peer_requests_total (every attempt,
        replica fills included) when /metrics has it, else the GETs answered hit-peer (each asked a
        peer, but reads of one block on one node at the same time share one request)."""
        peer = self.delta.peer_requests
        if peer is None:
            peer = self.run.answers.get("hit-peer", 0)
        return 1000 * peer / self.gets if self.gets else float("nan")


def zipf_case(fleet: Fleet, name: str, n: int, replication: bool, keys: Sequence[str], size: int, quota: int,
              warmup: Sequence[int], measured: Sequence[int], workers: int, settle: float,
              cluster: dict[str, object], busy: float) -> ZipfResult:
    settings = {**cluster, "hot_replication": replication} if "hot_replication" in cluster else dict(cluster)
    nodes = fleet.start(n, quota=quota, cluster=settings)
    endpoints = [node.endpoint for node in nodes]
    print(f"   {name}: warm-up {len(warmup):,} GETs ...", flush=True)
    warm = zipf_load(endpoints, keys, warmup, size, workers)
    if settle:
        time.sleep(settle)
    before = counters(nodes)
    with cs.OtherLoad() as load:
        run = zipf_load(endpoints, keys, measured, size, workers)
    after = counters(nodes)
    result = ZipfResult(name, n, replication, run, after - before, after, load.cores, warm, settings)
    if load.cores > busy:
        # Other processes took CPU meanwhile: the counts stand (they do not depend on it), the
        # speed is measured again with the same GETs on the same (now warmer) fleet.
        print(f"   ({name}: other processes took {load.cores:.2f} cores; measuring req/s and latency again)",
              flush=True)
        time.sleep(3)
        with cs.OtherLoad() as again:
            speed = zipf_load(endpoints, keys, measured, size, workers)
        if again.cores < load.cores:
            result.speed, result.speed_other = speed, again.cores
    print(f"   {name}: {result.speed.rps:,.0f} req/s, hit ratio {100 * result.hit_ratio:.1f}%, local {100 * result.local_share:.1f}%,"
          f" origin {1000 * result.origin_requests / max(1, result.gets):.1f}/1000 GETs,"
          f" peer {result.peer_per_1000:.0f}/1000, p50 {result.p50:.2f} ms, p99 {result.p99:.2f} ms,"
          f" other load {result.speed_other:.2f}" + (" (speed from a second pass)" if result.speed is not run else ""),
          flush=True)
    fleet.stop()
    return result


# --- code snapshot, chart, report ------------------------------------------------------------------------------


def snapshot(code: str, dest: Path) -> str:
    """gateway/ as of `code` ('worktree', or a git revision) into dest/gateway; returns a description."""
    if code == "worktree":
        shutil.copytree(ROOT / "gateway", dest / "gateway", ignore=shutil.ignore_patterns("__pycache__"))
        return cs.code_version() + " (work tree)"
    rev = subprocess.run(["git", "rev-parse", "--short", code], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.strip()
    archive = subprocess.run(["git", "archive", "--format=tar", rev, "gateway"], cwd=ROOT, capture_output=True,
                             check=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    subject = subprocess.run(["git", "log", "-1", "--format=%cs %s", rev], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.strip()
    return f"{rev} (committed: {subject[:90]})"


def knows_replication(code: Path) -> bool:
    # gateway/config.py until it became the package gateway/config/.
    module = code / "gateway" / "config.py"
    files = [module] if module.exists() else sorted((code / "gateway" / "config").glob("*.py"))
    text = "\n".join(f.read_text() for f in files)
    return all(re.search(rf"^\s+{name}: ", text, re.MULTILINE) for name in REPLICATION_SETTINGS)


def has_controller(code: Path) -> bool:
    return (code / "gateway" / "cluster" / "replication.py").exists()


def chart(path: Path, throughput: Sequence[ThroughputCell], zipf: Sequence[ZipfResult], subtitle: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4.4))
    ax = axes[0]
    labels = sorted({c.label for c in throughput}, key=lambda s: cs.parse_size(s))
    sizes = sorted({c.nodes for c in throughput})
    width = 0.8 / max(1, len(labels))
    for i, label in enumerate(labels):
        cells = {c.nodes: c for c in throughput if c.label == label}
        base = cells.get(1)
        values = [cells[n].cell.rps if n in cells else math.nan for n in sizes]
        xs = [x + (i - (len(labels) - 1) / 2) * width for x in range(len(sizes))]
        bars = ax.bar(xs, values, width, label=label)
        ax.bar_label(bars, labels=[f"{v:,.0f}" + (f"\n{v / base.cell.rps:.2f}x" if base and base.cell.rps else "")
                                   for v in values], fontsize=7, padding=1)
    ax.set_xticks(range(len(sizes)), [f"{n} node{'s' if n > 1 else ''}" for n in sizes])
    ax.set_ylim(0, ax.get_ylim()[1] * 1.15)
    ax.set_ylabel("aggregate GET req/s (warm)")
    ax.set_title("1. warm hits, wrk per node at once", fontsize=9)
    if throughput:
        ax.legend(fontsize=8)

    ax = axes[1]
    cases = [z for z in zipf if not z.replication]
    if cases:
        xs = range(len(cases))
        bars = ax.bar(xs, [100 * z.hit_ratio for z in cases], 0.5, color="tab:green")
        ax.bar_label(bars, labels=[f"{100 * z.hit_ratio:.1f}%\n{1000 * z.origin_requests / max(1, z.gets):.0f} origin"
                                   "/1000" for z in cases], fontsize=7)
        ax.set_xticks(list(xs), [z.name.split(",")[0] for z in cases], fontsize=8)
        ax.set_ylim(0, 115)
    ax.set_ylabel("cluster-wide hit ratio, %")
    ax.set_title("2. Zipf, working set > 1 node, < 3 nodes", fontsize=9)

    ax = axes[2]
    reps = [z for z in zipf if z.nodes == 3]
    if reps:
        # Bar heights in %, or scaled to fit; the labels carry the real figures.
        metrics = [("hit ratio, %", lambda z: 100 * z.hit_ratio, 1.0, "{:.1f}%"),
                   ("local hits, %", lambda z: 100 * z.local_share, 1.0, "{:.1f}%"),
                   ("peer requests\nper 1000 GETs (/10)", lambda z: z.peer_per_1000, 0.1, "{:.0f}"),
                   ("req/s (/20)", lambda z: z.speed.rps, 0.05, "{:,.0f}"),
                   ("p99 ms (x1)", lambda z: z.p99, 1.0, "{:.1f}")]
        width = 0.8 / len(reps)
        for i, z in enumerate(reps):
            xs = [x + (i - (len(reps) - 1) / 2) * width for x in range(len(metrics))]
            values = [f(z) for _, f, _, _ in metrics]
            bars = ax.bar(xs, [v * k for v, (_, _, k, _) in zip(values, metrics)], width, label=z.name)
            ax.bar_label(bars, labels=[fmt.format(v) for v, (_, _, _, fmt) in zip(values, metrics)], fontsize=6)
        ax.set_xticks(range(len(metrics)), [m for m, _, _, _ in metrics], fontsize=7)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.3)
        ax.legend(fontsize=8, loc="upper left")
    ax.set_title("3. Zipf on 3 nodes: hot replication off / on", fontsize=9)
    fig.text(0.01, 0.01, subtitle, fontsize=7, alpha=0.8)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"chart: {path}")


def markdown(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    out = ["| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths)) + " |",
           "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += ["| " + " | ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) + " |"
            for r in rows]
    return "\n".join(out)


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# --- main -----------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a ~1-minute look: shorter cells, a smaller Zipf set")
    parser.add_argument("--nodes", default="1,2,3", help="fleet sizes of part 1")
    parser.add_argument("--sizes", default="64KiB,1MiB", help="object sizes of part 1")
    parser.add_argument("--objects", default="64KiB=256,1MiB=64", help="part 1: objects per size (the hot set)")
    parser.add_argument("--connections", type=int, default=30, help="part 1: connections in all, split over the nodes")
    parser.add_argument("--seconds", type=float, default=5.0, help="part 1: length of each cell")
    parser.add_argument("--zipf-objects", type=int, default=2000)
    parser.add_argument("--zipf-size", default="64KiB")
    parser.add_argument("--zipf-exponent", type=float, default=0.9)
    parser.add_argument("--zipf-quota", default="56MiB", help="cache.memory_quota of each node in parts 2 and 3")
    parser.add_argument("--zipf-warmup", type=int, default=30000, help="GETs before measuring")
    parser.add_argument("--zipf-requests", type=int, default=30000, help="GETs measured")
    parser.add_argument("--zipf-workers", type=int, default=24, help="concurrent requests of the aiohttp client")
    parser.add_argument("--settle", type=float, default=3.0, help="pause between warm-up and measurement")
    parser.add_argument("--heat-interval", type=float, default=1.0, help="cluster.heat_interval with replication on")
    parser.add_argument("--heat-half-life", type=float, default=0.0, help="cluster.heat_half_life (0: the default)")
    parser.add_argument("--hot-threshold", type=float, default=0.0, help="cluster.hot_threshold (0: the default)")
    parser.add_argument("--seed", type=int, default=4)
    parser.add_argument("--parts", default="1,2,3", help="which parts to run")
    parser.add_argument("--code", default="HEAD", help="the gateway code the nodes run: a git revision, or 'worktree'")
    parser.add_argument("--busy", type=float, default=0.25, help="part 1: measure a cell again above this other load")
    parser.add_argument("--retries", type=int, default=1)
    parser.add_argument("--zipf-busy", type=float, default=0.35,
                        help="parts 2/3: measure req/s and latency again (same GETs) above this other load")
    parser.add_argument("--chart", default="", help="PNG path (default: fleet.png in the temp folder)")
    parser.add_argument("--keep", action="store_true", help="keep the temp folder (configs, logs)")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds = min(args.seconds, 2.0)
        args.zipf_objects, args.zipf_quota = 600, "16MiB"
        args.zipf_warmup, args.zipf_requests = 4000, 4000
        args.settle = min(args.settle, 2.0)
        args.retries = 0
    parts = {int(p) for p in args.parts.split(",") if p.strip()}
    if 1 in parts and shutil.which("wrk") is None:
        raise SystemExit("wrk not found: apt-get install -y wrk")
    fleet_sizes = [int(n) for n in args.nodes.split(",") if n.strip()]
    labels = [s.strip() for s in args.sizes.split(",") if s.strip()]
    objects = {k.strip(): int(v) for k, _, v in (p.partition("=") for p in args.objects.split(",") if p.strip())}
    zipf_size = cs.parse_size(args.zipf_size, "--zipf-size")
    zipf_quota = cs.parse_size(args.zipf_quota, "--zipf-quota")

    # Ctrl-C and SIGTERM unwind the ExitStack below: every process this script started is stopped.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))

    tmp = Path(tempfile.mkdtemp(prefix="gateway-fleet-"))
    code = tmp / "code"
    version = snapshot(args.code, code)
    chart_path = Path(args.chart) if args.chart else tmp / "fleet.png"
    replication_known = knows_replication(code)
    controller = has_controller(code)
    started = time.monotonic()
    print(f"bench/fleet.py {' '.join(argv if argv is not None else sys.argv[1:])}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"machine: {cs.machine()}, redis-server {redis_version()}")
    print(f"load average at start: {load_average()}")
    print(f"gateway code: {version}, copied to {code} for the whole run; replication controller "
          f"(gateway/cluster/replication.py) {'present' if controller else 'ABSENT: hot_replication does nothing'}")
    print(f"NOTE: this machine has {os.cpu_count()} cores, shared by the load generators, every gateway node, Redis"
          " and moto (and other users' tests). A fleet of N processes here competes for the same cores, so aggregate"
          " throughput cannot grow as with N machines; the ratios measure the cost of the fleet's peer hops on"
          " shared cores, not the scaling of separate machines.\n", flush=True)

    throughput: list[ThroughputCell] = []
    zipf: list[ZipfResult] = []
    rep_cluster: dict[str, object] = {}
    with ExitStack() as stack:
        if not args.keep:
            stack.callback(shutil.rmtree, tmp, True)
        stack.callback(_kill_children)
        origin = stack.enter_context(cs.moto_server())
        redis_url = stack.enter_context(redis_process(tmp))
        fleet = Fleet(origin, redis_url, tmp, code)
        stack.callback(fleet.stop)
        origin_s3 = cs.s3_client(origin, cs.ORIGIN_CREDENTIALS)
        origin_s3.create_bucket(Bucket=BUCKET)
        print(f"origin (moto) {origin}; redis {redis_url} (started by this script)\n", flush=True)

        if 1 in parts:
            print(f"== 1. warm GET throughput of 1..{max(fleet_sizes)} nodes: {args.connections} connections in all,"
                  f" split over one wrk per node; {args.seconds:g} s cells; cache.memory_quota 1 GiB;"
                  " cluster.hot_replication off, passive_cache off", flush=True)
            cluster = {"hot_replication": False} if replication_known else {}
            for label in labels:
                size = cs.parse_size(label, "--sizes")
                count = objects.get(label, 64)
                keys = cs.create_objects(origin_s3, f"tput/{label}", size, count)
                for n in fleet_sizes:
                    nodes = fleet.start(n, quota=1024**3, cluster=cluster)
                    # Warm: every object read once, request i through node i mod N (its owner fetches it).
                    warm = zipf_load([node.endpoint for node in nodes], keys, list(range(len(keys))), size,
                                     min(16, len(keys)))
                    check = zipf_load([node.endpoint for node in nodes], keys, list(range(len(keys))), size,
                                      min(16, len(keys)))
                    if warm.errors or check.errors or set(check.answers) - {"hit-mem", "hit-peer"}:
                        print(f"   WARNING: warm-up answered {dict(warm.answers)}, errors {warm.errors}; then"
                              f" {dict(check.answers)}, errors {check.errors}")
                    cell = measure_throughput(nodes, keys, label, size, args.connections, args.seconds, tmp,
                                              args.busy, args.retries)
                    throughput.append(cell)
                    c = cell.cell
                    print(f"   {label:>6} {n} node(s): {c.rps:9,.0f} req/s {c.mbps:8,.1f} MB/s  p50 {c.p50_ms:7.2f} ms"
                          f"  p99 {c.p99_ms:7.2f} ms  errors {c.errors}  other load {c.other:.2f}  per node "
                          + "/".join(f"{r:,.0f}" for r in cell.per_node)
                          + "  bytes from " + ", ".join(f"{k} {100 * v:.0f}%" for k, v in sorted(cell.sources.items()))
                          + f"  origin requests {cell.origin_requests}", flush=True)
                    fleet.stop()
                cs.delete_objects(origin_s3, keys)
            print()

        if parts & {2, 3}:
            keys = cs.create_objects(origin_s3, "zipf", zipf_size, args.zipf_objects)
            stream = zipf_stream(args.zipf_objects, args.zipf_exponent, args.zipf_warmup + args.zipf_requests,
                                 args.seed)
            warmup, measured = stream[:args.zipf_warmup], stream[args.zipf_warmup:]
            distinct = len(set(measured))
            working = args.zipf_objects * zipf_size
            rep_cluster = {"heat_interval": args.heat_interval}
            if args.heat_half_life:
                rep_cluster["heat_half_life"] = args.heat_half_life
            if args.hot_threshold:
                rep_cluster["hot_threshold"] = args.hot_threshold
            print(f"== 2./3. Zipf (exponent {args.zipf_exponent}) over {args.zipf_objects:,} objects of {args.zipf_size}"
                  f" ({working / MiB:.0f} MiB; {distinct:,} distinct objects in the measured GETs); cache.memory_quota"
                  f" {args.zipf_quota} per node, no disk tier (1 node holds {100 * zipf_quota / working:.0f}% of the"
                  f" objects, 3 nodes {300 * zipf_quota / working:.0f}%); {args.zipf_workers} concurrent GETs, request i"
                  f" to node i mod N; fresh fleet per run; warm-up {args.zipf_warmup:,} GETs, {args.settle:g} s pause,"
                  f" then {args.zipf_requests:,} GETs measured", flush=True)
            off = {"hot_replication": False} if replication_known else {}
            sample = node_sections("node1", 0, origin, redis_url, quota=zipf_quota,
                                   cluster={"hot_replication": True, **rep_cluster} if replication_known else {})
            sample["origin"]["secret_key"] = sample["cluster"]["secret"] = sample["admin"]["token"] = "***"
            sample["auth"] = {"users": "[the benchmark user, read access to the bucket]"}
            print("   a node's config (replication on; off: hot_replication = false; settings not shown: defaults):\n"
                  + "\n".join("     " + line for line in toml_text(sample).splitlines()[1:] if line), flush=True)
            if 2 in parts:
                zipf.append(zipf_case(fleet, "1 node", 1, False, keys, zipf_size, zipf_quota, warmup, measured,
                                      args.zipf_workers, args.settle, off, args.zipf_busy))
            zipf.append(zipf_case(fleet, "3 nodes, replication off", 3, False, keys, zipf_size, zipf_quota, warmup,
                                  measured, args.zipf_workers, args.settle, off, args.zipf_busy))
            if 3 in parts:
                if replication_known:
                    zipf.append(zipf_case(fleet, "3 nodes, replication on", 3, True, keys, zipf_size, zipf_quota,
                                          warmup, measured, args.zipf_workers, args.settle,
                                          {"hot_replication": True, **rep_cluster}, args.zipf_busy))
                else:
                    print("   replication on: skipped, this gateway code has no cluster.hot_replication setting")
            cs.delete_objects(origin_s3, keys)

    # --- the report ---
    print(f"\nResults ({time.monotonic() - started:.0f} s in all; load average now {load_average()}). MB = 10^6 bytes"
          " of object payload; latency is request sent to last byte received; 'other load' is the CPU (in cores) that"
          " processes outside this benchmark used meanwhile.\n")
    if throughput:
        print(f"### 1. Warm GET throughput, {args.connections} connections in all (one wrk -t1 per node, at once)\n")
        rows = []
        for c in throughput:
            base = next((b for b in throughput if b.label == c.label and b.nodes == 1), None)
            ratio = f"{c.cell.rps / base.cell.rps:.2f}x" if base and base.cell.rps else "-"
            rows.append((c.label, str(c.nodes), f"{c.cell.rps:,.0f}", ratio, f"{c.cell.mbps:,.1f}",
                         f"{c.cell.p50_ms:.2f}", f"{c.cell.p99_ms:.2f}", str(c.cell.errors),
                         f"{100 * (c.sources.get('memory', 0) + c.sources.get('disk', 0)):.0f}%",
                         f"{100 * c.sources.get('peer', 0):.0f}%", str(c.origin_requests), f"{c.cell.other:.2f}",
                         "/".join(f"{r:,.0f}" for r in c.per_node)))
        print(markdown(("size", "nodes", "req/s", "vs 1 node", "MB/s", "p50 ms", "p99 ms", "errors", "bytes local",
                        "bytes via peer", "origin reqs", "other load", "req/s per node"), rows))
        print()
        for label in labels:
            cells = {c.nodes: c for c in throughput if c.label == label}
            if 1 in cells and cells[1].cell.rps:
                print(f"  {label}: " + ", ".join(f"{n}-node/1-node {cells[n].cell.rps / cells[1].cell.rps:.2f}x req/s"
                                                 for n in sorted(cells) if n > 1))
        print(f"  ({os.cpu_count()} shared cores: N nodes here share the CPU one node had, and (N-1)/N of the reads"
              " also cost a peer request on the block's owner.)\n")
    if zipf:
        print(f"### 2./3. Zipf {args.zipf_exponent} over {args.zipf_objects:,} x {args.zipf_size}, memory quota"
              f" {args.zipf_quota}/node, {args.zipf_requests:,} GETs measured after {args.zipf_warmup:,}\n")
        rows = []
        for z in zipf:
            rows.append((z.name, f"{100 * z.hit_ratio:.1f}%", f"{1000 * z.origin_requests / max(1, z.gets):.1f}",
                         f"{100 * z.local_share:.1f}%", f"{100 * z.share('hit-peer'):.1f}%",
                         f"{100 * z.share('miss', 'partial'):.1f}%", f"{z.peer_per_1000:.0f}",
                         f"{z.served_to_peers_per_1000:.0f}", f"{z.speed.rps:,.0f}",
                         f"{z.speed.payload / z.speed.seconds / 1e6:,.1f}", f"{z.p50:.2f}", f"{z.p99:.2f}",
                         str(z.run.errors + (z.speed.errors if z.speed is not z.run else 0)),
                         "/".join(str(b) for b in z.after.blocks),
                         f"{z.other:.2f}" + (f" ({z.speed_other:.2f} 2nd pass)" if z.speed is not z.run else "")))
        print(markdown(("run", "hit ratio", "origin reqs/1000", "local hits", "hit-peer", "miss", "peer reqs/1000",
                        "tier reads for peers/1000", "req/s", "MB/s", "p50 ms", "p99 ms", "errors", "blocks held per node", "other load"), rows))
        print()
        print("  hit ratio = 1 - origin GETs / GETs (each object is one block), origin GETs from the nodes'"
              " gateway_origin_requests_total; local hits / hit-peer / miss: the answers' x-cache (hit-mem or hit-disk:"
              " from the receiving node's own tiers).")
        if any(z.delta.peer_requests is None for z in zipf):
            print("  peer reqs/1000: answers with x-cache hit-peer (gateway_peer_requests_total is not in this code's"
                  " /metrics; reads of one block on one node at once share one peer request, so this is an upper"
                  " bound of peer requests).")
        else:
            print("  peer reqs/1000: block requests the nodes sent to peers (gateway_peer_requests_total, every"
                  " attempt, replica fills included) per 1000 GETs.")
        print("  tier reads for peers/1000: the nodes' tier hits (/_gateway/stats) minus the local-hit answers:"
              " peer requests that the owner answered from its tiers.")
        for z in zipf:
            origin_detail = ", ".join(f"{k} {v}" for k, v in sorted(z.delta.origin.items()) if v)
            held = sum(z.after.blocks)
            print(f"  {z.name}: origin requests {origin_detail or 'none'}; tier hits {z.delta.hits:,}, misses"
                  f" {z.delta.misses:,} (summed over nodes, peer-served reads included); {held:,} blocks held for"
                  f" {args.zipf_objects:,} objects ({held / args.zipf_objects:.2f} copies per object);"
                  f" warm-up {z.warmup.rps:,.0f} req/s {dict(z.warmup.answers)}"
                  + (f"; replication: blocks {dict(z.delta.replication)} while measured, hot objects per node"
                     f" {'/'.join(map(str, z.after.hot_objects))}" if z.replication else "")
                  + f"; cluster settings {z.cluster}")
        ones = [z for z in zipf if z.nodes == 1]
        offs = [z for z in zipf if z.nodes == 3 and not z.replication]
        ons = [z for z in zipf if z.nodes == 3 and z.replication]
        if ones and offs:
            o, t = ones[0], offs[0]
            print(f"\n  2. hit ratio 1 node {100 * o.hit_ratio:.1f}% -> 3 nodes {100 * t.hit_ratio:.1f}%; origin requests"
                  f" per 1000 GETs {1000 * o.origin_requests / o.gets:.1f} -> {1000 * t.origin_requests / t.gets:.1f}")
        if offs and ons:
            a, b = offs[0], ons[0]
            print(f"  3. replication off -> on: hit ratio {100 * a.hit_ratio:.1f}% -> {100 * b.hit_ratio:.1f}%, local hits"
                  f" {100 * a.local_share:.1f}% -> {100 * b.local_share:.1f}%, peer requests/1000 {a.peer_per_1000:.0f} ->"
                  f" {b.peer_per_1000:.0f}, req/s {a.speed.rps:,.0f} -> {b.speed.rps:,.0f}, p50 {a.p50:.2f} -> {b.p50:.2f} ms,"
                  f" p99 {a.p99:.2f} -> {b.p99:.2f} ms"
                  + ("" if controller else "  [NO CONTROLLER in this code: 'on' cannot differ from 'off']"))
    print(f"\n  peak RSS of any node (VmHWM): {fleet.peak_rss / 1e6:.0f} MB")
    if throughput or zipf:
        subtitle = (f"bench/fleet.py, gateway {version.split(' ')[0]}, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} shared"
                    f" cores (load generators, nodes, Redis and moto on one machine); Zipf {args.zipf_exponent} over"
                    f" {args.zipf_objects} x {args.zipf_size}, {args.zipf_quota} per node")
        chart(chart_path, throughput, zipf, subtitle)
    if args.keep:
        print(f"kept: {tmp}")
    return 0


def _kill_children() -> None:
    with _children_lock:
        for proc in list(_children):
            if proc.poll() is None:
                proc.kill()


def redis_version() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        return "?"
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False).stdout
    match = re.search(r"v=(\S+)", out)
    return match.group(1) if match else "?"


if __name__ == "__main__":
    sys.exit(main())
