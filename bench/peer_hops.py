"""Peer hops (issue 13, item 5): the fleet's CPU per GB served through a peer vs a local hit.

Two gateway nodes (A and B, each `gateway serve --config <toml>` with its workers) on one
private redis-server, moto as the origin; cluster.hot_replication and passive_cache off, so
a block stays at its owner only. Objects of one block each (1 MiB) are read once through A:
those B owns are then answered by A with a peer request to B (x-cache hit-peer), those A
owns from A's own memory tier (hit-mem). Then, in one run and alternating, wrk GETs
(presigned URLs) against A:

  local  the objects A owns: every answer a local hit
  peer   the objects B owns: every answer a peer hop (A asks B, B answers from its memory)

and the CPU (user + system, /proc/<pid>/stat) of every gateway process of both nodes
(supervisors and workers) per GB of object payload served, and the ratio peer / local
(issue 13's target: at most 1.5x). Each cell checks, from the nodes' own served-bytes
counters, that its bytes came from where it says (memory, or peer) and none from the
origin, and that A holds no more blocks at the end than at the start (no replica crept in).

    .venv/bin/python bench/peer_hops.py                   # ~1 minute
    .venv/bin/python bench/peer_hops.py --rounds 3 --seconds 8 --workers 1
    .venv/bin/python bench/peer_hops.py --code worktree   # the uncommitted gateway/
    .venv/bin/python bench/peer_hops.py --profile 6       # then py-spy of both nodes, 6 s of peer load

Needs: apt-get install -y redis-server wrk (py-spy for --profile: .venv/bin/pip install py-spy).
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cache_serving as cs
import fleet as fl

GB = 1e9
TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Cell:
    """One wrk run against node A: what it served and what it cost the fleet."""

    kind: str  # "local" or "peer"
    requests: int
    errors: int
    payload: int  # object bytes received
    seconds: float
    cpu: dict[str, float]  # CPU seconds per node during the run
    system: float  # of which in the kernel (both nodes)
    sources: dict[str, int]  # body bytes by source, from the nodes' counters
    other: float  # cores other processes took meanwhile

    @property
    def cpu_total(self) -> float:
        return sum(self.cpu.values())

    @property
    def cpu_per_gb(self) -> float:
        return self.cpu_total / (self.payload / GB) if self.payload else float("nan")

    @property
    def us_per_request(self) -> float:
        return 1e6 * self.cpu_total / self.requests if self.requests else float("nan")

    @property
    def gbps(self) -> float:
        return self.payload / GB / self.seconds if self.seconds else 0.0


def pooled(cells: Sequence[Cell], kind: str) -> tuple[float, float, dict[str, float]]:
    """(CPU s per GB, CPU us per request, CPU s per GB per node and in the kernel) of all cells of one
    kind together."""
    mine = [c for c in cells if c.kind == kind]
    payload = sum(c.payload for c in mine)
    requests = sum(c.requests for c in mine)
    per_node: dict[str, float] = collections.Counter()
    for c in mine:
        per_node.update(c.cpu)
    cpu = sum(per_node.values())
    if not payload or not requests:
        return float("nan"), float("nan"), {}
    per_node["in the kernel"] = sum(c.system for c in mine)
    return cpu / (payload / GB), 1e6 * cpu / requests, {k: v / (payload / GB) for k, v in per_node.items()}


def classify(node: fl.Node, keys: Sequence[str], size: int) -> dict[str, list[str]]:
    """The keys by the x-cache of a GET of each through `node` (one at a time)."""
    found: dict[str, list[str]] = collections.defaultdict(list)
    for key in keys:
        run = fl.zipf_load([node.endpoint], [key], [0], size, 1)
        answer = next(iter(run.answers), "-") if run.ok == 1 else "error"
        found[answer].append(key)
    return dict(found)


def node_cpu(node: fl.Node) -> tuple[float, float]:
    """(user, system) CPU seconds of the node's live processes (supervisor and workers) so far."""
    user = system = 0.0
    for pid in cs.tree(node.pid):
        try:
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        user, system = user + int(fields[11]) / TICK, system + int(fields[12]) / TICK
    return user, system


def measure(kind: str, nodes: Sequence[fl.Node], target: fl.Node, paths: Sequence[str], header: int,
            connections: int, seconds: float, workdir: Path) -> Cell:
    before = fl.counters(nodes)
    cpu0 = {n.name: node_cpu(n) for n in nodes}
    with cs.OtherLoad() as load:
        run = fl.wrk_node(target, paths, connections, seconds, workdir, header)
    cpu1 = {n.name: node_cpu(n) for n in nodes}
    cpu = {n: sum(cpu1[n]) - sum(cpu0[n]) for n in cpu1}
    system = sum(cpu1[n][1] - cpu0[n][1] for n in cpu1)
    delta = fl.counters(nodes) - before
    sources = {k: v for k, v in delta.served.items() if v}
    return Cell(kind, run.requests, run.errors, run.payload, run.seconds, cpu, system, sources, load.cores)


def profile(nodes: Sequence[fl.Node], target: fl.Node, paths: Sequence[str], header: int, connections: int,
            seconds: float, workdir: Path) -> None:
    """py-spy (raw, 100 Hz) of every worker of both nodes while wrk reads through a peer."""
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(pyspy).exists():
        print("   --profile: py-spy not installed (.venv/bin/pip install py-spy)")
        return
    spies = []
    for node in nodes:
        for pid in cs.tree(node.pid):
            raw = workdir / f"profile-{node.name}-{pid}.txt"
            spies.append((node.name, pid, raw, subprocess.Popen(
                [pyspy, "record", "-p", str(pid), "-d", str(int(seconds) + 1), "-r", "100", "-f", "raw",
                 "--nolineno", "-o", str(raw)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)))
    time.sleep(0.5)
    fl.wrk_node(target, paths, connections, seconds, workdir, header)
    for name, pid, raw, spy in spies:
        _, err = spy.communicate(timeout=60)
        print(f"\n--- py-spy of {name} pid {pid} ({raw}) ---")
        print(cs.summarise_profile(raw, top=25) if raw.exists() else f"failed: {err.decode(errors='replace')[-300:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=64, help="objects of one block (about half owned by each node)")
    parser.add_argument("--size", default="1MiB", help="object size (at most cache.block_size: one block)")
    parser.add_argument("--connections", type=int, default=8, help="wrk connections to node A")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each cell")
    parser.add_argument("--rounds", type=int, default=3, help="local, peer cells measured this many times, alternating")
    parser.add_argument("--workers", type=int, default=0, help="server.workers of each node (0: one per core)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="a setting of both nodes, as TOML (e.g. server.hit_path=false); repeatable")
    parser.add_argument("--code", default="HEAD", help="the gateway code the nodes run: a git revision, or 'worktree'")
    parser.add_argument("--profile", type=float, default=0.0, help="then py-spy both nodes for this many seconds of peer load")
    parser.add_argument("--keep", action="store_true", help="keep the temp folder (configs, logs, profiles)")
    args = parser.parse_args(argv)
    size = cs.parse_size(args.size, "--size")
    if shutil.which("wrk") is None:
        raise SystemExit("wrk not found: apt-get install -y wrk")
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    tmp = Path(tempfile.mkdtemp(prefix="gateway-peer-hops-"))
    version = fl.snapshot(args.code, tmp / "code")
    print(f"bench/peer_hops.py {' '.join(argv if argv is not None else sys.argv[1:])}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"machine: {cs.machine()}")
    print(f"gateway code: {version}")
    print(f"load average at start: {fl.load_average()}", flush=True)
    cells: list[Cell] = []
    with ExitStack() as stack:
        if not args.keep:
            stack.callback(shutil.rmtree, tmp, True)
        stack.callback(fl._kill_children)
        origin = stack.enter_context(cs.moto_server())
        redis_url = stack.enter_context(fl.redis_process(tmp))
        fleet = fl.Fleet(origin, redis_url, tmp, tmp / "code")
        stack.callback(fleet.stop)
        origin_s3 = cs.s3_client(origin, cs.ORIGIN_CREDENTIALS)
        origin_s3.create_bucket(Bucket=fl.BUCKET)
        keys = cs.create_objects(origin_s3, "peer-hops", size, args.objects)
        nodes = start(fleet, args.workers, settings(args.set))
        a, b = nodes
        first = fl.zipf_load([a.endpoint], keys, list(range(len(keys))), size, 8)  # B opens its objects for A
        if first.errors:
            raise SystemExit(f"the first reads through A failed: {first.errors} errors, {dict(first.answers)}")
        kinds = classify(a, keys, size)
        print(f"reads through node A after one cold pass: " + ", ".join(f"{k} {len(v)}" for k, v in kinds.items()))
        local, peer = kinds.get("hit-mem", []), kinds.get("hit-peer", [])
        if set(kinds) - {"hit-mem", "hit-peer"} or not local or not peer:
            raise SystemExit("want every object answered hit-mem or hit-peer through A, and some of each")
        held = fl.counters(nodes).blocks
        paths = {"local": cs.presigned_paths(a.endpoint, local), "peer": cs.presigned_paths(a.endpoint, peer)}
        headers = {k: cs.header_bytes(a.endpoint, p[0]) for k, p in paths.items()}
        print(f"{len(local)} objects local to A, {len(peer)} on B only; blocks held per node {held}; "
              f"{args.rounds} rounds of {args.seconds:g} s cells, wrk -t1 -c{args.connections} against A\n", flush=True)
        for round_ in range(args.rounds):
            for kind in ("local", "peer") if round_ % 2 == 0 else ("peer", "local"):
                cell = measure(kind, nodes, a, paths[kind], headers[kind], args.connections, args.seconds, tmp)
                cells.append(cell)
                print(f"  {kind:5} {cell.requests / cell.seconds:7,.0f} req/s {cell.gbps:5.2f} GB/s "
                      f"CPU {cell.cpu_per_gb:6.2f} s/GB ({cell.us_per_request:6.0f} us/req; "
                      + " ".join(f"{n} {s:.2f}s" for n, s in cell.cpu.items())
                      + f", {100 * cell.system / max(cell.cpu_total, 1e-9):.0f}% system"
                      + f") errors {cell.errors} bytes from {cell.sources} other load {cell.other:.2f}", flush=True)
        after = fl.counters(nodes).blocks
        again = classify(a, peer[:8], size)
        print(f"\nblocks held per node before {held}, after {after}; 8 peer objects read again: "
              + ", ".join(f"{k} {len(v)}" for k, v in again.items()))
        problems = check(cells, held, after, again)
        if args.profile:
            profile(nodes, a, paths["peer"], headers["peer"], args.connections, args.profile, tmp)
    report(cells, problems)
    print(f"load average at end: {fl.load_average()}")
    if args.keep:
        print(f"kept: {tmp}")
    return 1 if problems else 0


def settings(pairs: Sequence[str]) -> dict[tuple[str, str], object]:
    """--set SECTION.KEY=VALUE (VALUE in TOML: true, 3, "text") as {(section, key): value}."""
    import tomllib

    found: dict[tuple[str, str], object] = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        section, _, key = name.strip().partition(".")
        if not section or not key or not value:
            raise SystemExit(f"--set {pair!r}: want SECTION.KEY=VALUE")
        found[section, key] = tomllib.loads(f"v = {value}")["v"]
    return found


def start(fleet: fl.Fleet, workers: int, extra: dict[tuple[str, str], object]) -> list[fl.Node]:
    """Node A (node1) and B (node2); with `workers` or `extra` settings, restarted with them."""
    nodes = fleet.start(2, quota=1024**3, cluster={"hot_replication": False, "passive_cache": False})
    if workers:
        extra = {("server", "workers"): workers, **extra}
    if extra:
        for node in nodes:
            for (section, key), value in extra.items():
                node.sections.setdefault(section, {})[key] = value
            node.restart()
        deadline = time.monotonic() + 20
        while any(set(n.admin("stats").json()["members"]) != {"node1", "node2"} for n in nodes):
            if time.monotonic() > deadline:
                raise SystemExit("the restarted nodes did not see each other")
            time.sleep(0.2)
    return nodes


def check(cells: Sequence[Cell], held: list[int], after: list[int], again: dict[str, list[str]]) -> list[str]:
    """What makes the figures not mean what they say."""
    problems = []
    want = {"local": "memory", "peer": "peer"}
    for c in cells:
        total = sum(v for v in c.sources.values() if v > 0)
        if c.errors:
            problems.append(f"a {c.kind} cell had {c.errors} errors")
        if total and c.sources.get(want[c.kind], 0) < 0.99 * total:
            problems.append(f"a {c.kind} cell's bytes came from {c.sources}")
    if after[0] > held[0]:
        problems.append(f"node A holds more blocks than before ({held[0]} -> {after[0]}): replicas crept in")
    if set(again) != {"hit-peer"}:
        problems.append(f"peer objects read again answered {sorted(again)}")
    return problems


def report(cells: Sequence[Cell], problems: Sequence[str]) -> None:
    local, peer = pooled(cells, "local"), pooled(cells, "peer")
    print(f"\nfleet CPU (both nodes, every process) per GB of payload, all cells of a kind pooled:")
    for name, (per_gb, per_req, per_node) in (("local hit (hit-mem)", local), ("through a peer (hit-peer)", peer)):
        print(f"  {name:26} {per_gb:6.2f} CPU s/GB  {per_req:6.0f} CPU us/request  ("
              + ", ".join(f"{n} {v:.2f}" for n, v in per_node.items()) + " s/GB)")
    ratio = peer[0] / local[0] if local[0] else float("nan")
    print(f"  ratio peer / local: {ratio:.2f}x (target: at most 1.5x) "
          + ("MET" if ratio <= 1.5 else "NOT MET"))
    for p in problems:
        print(f"  PROBLEM: {p}")


if __name__ == "__main__":
    sys.exit(main())
