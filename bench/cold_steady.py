"""Cold 1 MiB reads while the memory tier fills, and once it is full, against the origin directly,
in one run.

One gateway (memory tier `--quota-mib`; `--workers`: a node of several) in front of
bench/shaped_origin.py; every request is a first read of its key (distinct keys, hard links of
one file at the origin). Pass 1 starts on the empty cache: each block the cache keeps is memory
the process never had (with several workers, tmpfs pages). Pass 2 goes on with new keys on the
same gateway: once the cache is full every block kept evicts one, whose memory is given to the
next. Printed per pass: req/s, the gateway's user and system CPU per request (all its
processes), its page faults per request and the memory it holds, its garbage collections
(gateway_gc_pause_seconds: time per request, and runs over 10 ms); and the origin's req/s to the
same wrk, for the ratio. bench/cache_serving.py's cold cells restart the
gateway for each cell, so they measure pass 1.

    .venv/bin/python bench/cold_steady.py --shaped-latency 20ms --shaped-rate 80MB
    .venv/bin/python bench/cold_steady.py --workers 2      # a node of two: blocks on tmpfs, half of them opened by the other worker

Needs: apt-get install -y wrk.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import cache_serving as cs  # noqa: E402
import httpx  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402
from ab_hits import cpu_us_per_request, minor_faults, user_system_ticks  # noqa: E402


def held_mib(gateway: cs.Gateway) -> int:
    """What the node holds: its processes' resident memory but shared pages (libraries, tmpfs
    pages mapped), plus its run folder on tmpfs (with several workers, the memory tier's files)."""
    pages = 0
    for pid in cs.tree(gateway.pid):
        resident, shared = Path(f"/proc/{pid}/statm").read_text().split()[1:3]
        pages += int(resident) - int(shared)
    return (pages * 4096 + gateway.tmpfs_bytes()) >> 20


TOKEN = "cold-steady"


def gc_pauses(gateway: cs.Gateway) -> tuple[float, int, int]:
    """The node's garbage collections so far (gateway_gc_pause_seconds): seconds, how many, and
    how many took over 10 ms; zeros from a gateway without that metric (an older commit)."""
    text = httpx.get(f"{gateway.endpoint}/_gateway/metrics", headers={"authorization": f"Bearer {TOKEN}"}).text
    seconds, count, long = 0.0, 0, 0
    for family in text_string_to_metric_families(text):
        if family.name == "gateway_gc_pause_seconds":
            for sample in family.samples:
                if sample.name.endswith("_sum"):
                    seconds += sample.value
                elif sample.name.endswith("_count"):
                    count += int(sample.value)
                    long += int(sample.value)
                elif sample.name.endswith("_bucket") and sample.labels["le"] == "0.01":
                    long -= int(sample.value)
    return seconds, count, long


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quota-mib", type=int, default=1024, help="cache.memory_quota, in MiB")
    parser.add_argument("--seconds", type=float, default=2.0, help="length of each pass (pass 1 must not fill the quota)")
    parser.add_argument("--keys", type=int, default=4000, help="distinct keys per wrk run (more than it reads)")
    parser.add_argument("--shaped-latency", default="20ms", help="the origin's delay before each first byte")
    parser.add_argument("--shaped-rate", default="80MB", help="the origin's bytes/s per connection (0: no cap)")
    parser.add_argument("--workers", type=int, default=1, help="server.workers of the gateway")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="cold-steady-"))
    root = tmp / "objects"
    (root / cs.BUCKET).mkdir(parents=True)
    keys = cs.link_objects(root, "cold", cs.MiB, args.keys * (3 + args.quota_mib // 256))
    print(f"cold 1 MiB reads, 32 connections, {args.workers} worker(s), memory tier {args.quota_mib} MiB; origin delay {args.shaped_latency}, "
          f"rate {args.shaped_rate}; gateway at {cs.code_version()}")
    try:
        with cs.shaped_origin_process(root, tmp, args.shaped_latency, args.shaped_rate) as origin:
            direct = cs.run_wrk("origin", origin, cs.presigned_paths(origin, keys[:args.keys]), cs.MiB, 32,
                                args.seconds, tmp, distinct=True)
            print(f"  origin directly      {direct.rps:6,.0f} req/s   errors {direct.errors}", flush=True)
            gateway = cs.Gateway("gateway", origin, {"GATEWAY_SERVER_WORKERS": str(args.workers),
                                                     "GATEWAY_CACHE_MEMORY_QUOTA": f"{args.quota_mib}MiB",
                                                     "GATEWAY_ADMIN_TOKEN": TOKEN}, tmp, ROOT)
            gateway.start()
            start_held = held_mib(gateway)
            unread = iter(keys[args.keys:])
            try:
                for number in (1, 2):
                    while number == 2 and held_mib(gateway) < start_held + args.quota_mib:
                        # the rest of the quota filled, unmeasured, with more first reads
                        filling = [next(unread) for _ in range(args.keys)]
                        cs.run_wrk("filling", gateway.endpoint, cs.presigned_paths(gateway.endpoint, filling), cs.MiB,
                                   32, 2, tmp, distinct=True)
                    part = [next(unread) for _ in range(args.keys)]
                    paths = cs.presigned_paths(gateway.endpoint, part)
                    faults, cpu, pauses = minor_faults(gateway.pid), user_system_ticks(gateway), gc_pauses(gateway)
                    cell = cs.run_wrk(f"pass {number}", gateway.endpoint, paths, cs.MiB, 32, args.seconds, tmp,
                                      distinct=True)
                    faults, cpu_after = minor_faults(gateway.pid) - faults, user_system_ticks(gateway)
                    user, system = cpu_us_per_request(cpu, cpu_after, cell.ok)
                    gc_seconds, collections, long = (a - b for a, b in zip(gc_pauses(gateway), pauses))
                    print(f"  pass {number} ({'filling' if number == 1 else 'full'})   {cell.rps:6,.0f} req/s"
                          f" ({cell.rps / direct.rps:.2f}x the origin)   CPU per request: user {user:5.0f} us,"
                          f" system {system:5.0f} us   page faults per request {faults / max(1, cell.ok):5.1f}   held {held_mib(gateway)} MiB"
                          f"   errors {cell.errors}{'   ' + cell.note if cell.note else ''}", flush=True)
                    print(f"           garbage collections: {gc_seconds * 1e6 / max(1, cell.ok):4.0f} us per request,"
                          f" {collections} runs, {long} of them over 10 ms", flush=True)
            finally:
                gateway.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
