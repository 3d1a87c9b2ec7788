"""Warm hits (or cold reads) of one gateway process, this work tree against an earlier commit, in one run.

Each round starts a fresh gateway of each code tree (alternating which goes first) in front of
bench/shaped_origin.py (no delay and no rate cap unless --shaped-latency/--shaped-rate), warms it, and measures GETs with wrk
(32 connections): req/s, the gateway's user and system CPU and its page faults per request. On this shared
2-core machine absolute figures drift by tens of percent between runs; the ratio of two trees
measured side by side, round after round, is what to quote.

    .venv/bin/python bench/ab_hits.py --baseline 34307e8 --size 4KiB
    .venv/bin/python bench/ab_hits.py --baseline 34307e8 --size 1MiB --tier disk --rounds 4
    .venv/bin/python bench/ab_hits.py --baseline 34307e8 --size 1MiB --tier cold --rounds 4
    .venv/bin/python bench/ab_hits.py --baseline 34307e8 --size 1MiB --tier cold --workers 2   # nodes of two workers

`--tier cold`: every request a first read of its key (distinct keys, hard links of one file at
the origin, never read before by that gateway; no warm-up), so each is an origin GET of the
object's one block (1 MiB: the gateway's default block size) received, stored and sent.

What wrk sends (--signing, as in bench/cache_serving.py): by default GetObject requests each signed
anew by botocore, as the SDKs send them (presigned-new: each presigned URL its own; same-bytes: one
presigned URL per key, sent again byte for byte).

`--fresh`: the same-bytes URLs, but every request carries an unsigned header of its own (`X-Bench-Request`), so no
request is the bytes of an earlier one: warm hits are answered by the hit path below ASGI, none
by gateway.s3api.replays (what a client that signs each request anew, as the SDKs do, gets).

Needs: apt-get install -y wrk; git (the baseline is taken with `git archive`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import cache_serving as cs  # noqa: E402


def code_tree(into: Path, revision: str | None) -> Path:
    """A copy of gateway/ at `revision` (None: the work tree as it is)."""
    into.mkdir(parents=True)
    if revision is None:
        shutil.copytree(ROOT / "gateway", into / "gateway", ignore=shutil.ignore_patterns("__pycache__"))
    else:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, "gateway"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def user_system_ticks(gateway: cs.Gateway) -> tuple[int, int]:
    """Clock ticks of user and system CPU of the gateway's processes so far."""
    user = system = 0
    for pid in cs.tree(gateway.pid):
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        user += int(fields[11])
        system += int(fields[12])
    return user, system


def minor_faults(pid: int) -> int:
    """Minor page faults of the gateway's processes so far (each is memory the kernel hands out)."""
    return sum(int(Path(f"/proc/{p}/stat").read_text().rpartition(")")[2].split()[7]) for p in cs.tree(pid))


def cpu_us_per_request(before: tuple[int, int], after: tuple[int, int], requests: int) -> tuple[float, float]:
    """(user, system) microseconds of CPU per request between two user_system_ticks."""
    per = 1e6 / os.sysconf("SC_CLK_TCK") / max(1, requests)
    return (after[0] - before[0]) * per, (after[1] - before[1]) * per


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True, help="the commit to compare with (e.g. 34307e8)")
    parser.add_argument("--size", default="4KiB", choices=("4KiB", "1MiB"))
    parser.add_argument("--tier", default="memory", choices=("memory", "disk", "cold"),
                        help="where the hits are served from (cold: first reads, from the origin)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers", type=int, default=1,
                        help="server.workers of both gateways (CPU and faults are those of all their processes)")
    parser.add_argument("--shaped-latency", default="0", help="the origin's delay before each first byte, e.g. 20ms")
    parser.add_argument("--shaped-rate", default="0", help="the origin's bytes/s per connection, e.g. 80MB (0: no cap)")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--signing", default="sdk", choices=cs.SIGNINGS,
                        help="what wrk sends (bench/cache_serving.py): sdk = each request signed anew by botocore, "
                             "as the SDKs send a GetObject; presigned-new = each URL its own; same-bytes = one "
                             "presigned URL per key, sent again and again")
    parser.add_argument("--requests", type=int, default=30000, help="requests per wrk file (sdk, presigned-new)")
    parser.add_argument("--fresh", action="store_true",
                        help="a header of its own on every request: hits take the hit path, none is a request sent again")
    args = parser.parse_args()
    size = cs.MiB if args.size == "1MiB" else 4096
    tmp = Path(tempfile.mkdtemp(prefix="ab-hits-"))
    trees = {"baseline": code_tree(tmp / "baseline", args.baseline), "work tree": code_tree(tmp / "work", None)}
    root = tmp / "objects"
    (root / cs.BUCKET).mkdir(parents=True)
    keys = cs.link_objects(root, "warm", size, 256 if size == 4096 else 64)
    if args.tier == "cold":  # enough for the fastest gateway measured here, plus a margin
        keys = cs.link_objects(root, "cold", size, int(args.seconds * (8000 if size == 4096 else 2500)))
    print(f"{args.size} hits from the {args.tier} tier; baseline {args.baseline} against the work tree at "
          f"{cs.code_version()}")
    rates: dict[str, list[float]] = {name: [] for name in trees}
    try:
        with cs.shaped_origin_process(root, tmp, args.shaped_latency, args.shaped_rate) as origin:
            for round_ in range(args.rounds):
                for name in (list(trees) if round_ % 2 == 0 else list(trees)[::-1]):
                    if args.tier == "disk":
                        tier = {"GATEWAY_CACHE_MEMORY_QUOTA": "0", "GATEWAY_CACHE_DISK": json.dumps(
                            [{"path": str(tmp / f"disk-{round_}-{name.replace(' ', '-')}"), "quota": "4GiB"}])}
                    else:
                        tier = {"GATEWAY_CACHE_MEMORY_QUOTA": "1GiB"}
                    gateway = cs.Gateway(name, origin, {"GATEWAY_SERVER_WORKERS": str(args.workers), **tier}, tmp,
                                         trees[name])
                    gateway.start()
                    try:
                        paths = cs.presigned_paths(gateway.endpoint, keys)
                        if args.tier != "cold":
                            cs.run_wrk("warm-up", gateway.endpoint, paths, size, 32, 2, tmp)
                        requests = None if args.fresh else cs.wrk_requests(
                            args.signing, gateway.endpoint, keys, len(keys) if args.tier == "cold" else args.requests)
                        before, faults = user_system_ticks(gateway), minor_faults(gateway.pid)
                        cell = cs.run_wrk(name, gateway.endpoint, paths, size, 32, args.seconds, tmp,
                                          distinct=args.tier == "cold", fresh=args.fresh, raw=requests,
                                          signing=args.signing)
                        after, faults = user_system_ticks(gateway), minor_faults(gateway.pid) - faults
                    finally:
                        gateway.stop()
                    user, system = cpu_us_per_request(before, after, cell.ok)
                    print(f"  round {round_ + 1} {name:9s} {cell.rps:9,.0f} req/s   user {user:6.0f} "
                          f"us/req   system {system:6.0f} us/req   faults {faults / max(1, cell.ok):6.1f}/req   "
                          f"errors {cell.errors}"
                          f"{'   ' + cell.note if cell.note else ''}", flush=True)
                    rates[name].append(cell.rps)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    medians = {name: statistics.median(values) for name, values in rates.items()}
    print(f"median req/s: baseline {medians['baseline']:,.0f}, work tree {medians['work tree']:,.0f} "
          f"({medians['work tree'] / medians['baseline']:.2f}x)")


if __name__ == "__main__":
    main()
