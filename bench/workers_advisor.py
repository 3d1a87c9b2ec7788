"""Issue 39 at its own scale: a node of 1, 2 and 4 workers against `gateway advise --workers N`.

600 objects of 64-256 KiB in 256 KiB blocks (one block each), 6,000 Zipf(0.9) GETs each sent
to a worker drawn at random, a budget of a third of the objects' bytes (~32 MiB, all memory by
default), LRU and S3-FIFO; the workers run as gateways in this process over moto, sharing one run
folder, as tests/advisor/test_workers_against_advisor.py runs them (at 400 objects and 2,500
GETs). For each case: the node's block hit ratio (1 - origin GETs / GETs), its x-cache answers,
and `gateway advise` on its access log with --workers N (the node's split) and --workers 1 (one
store).

    .venv/bin/python bench/workers_advisor.py                      # 1, 2, 4 workers x lru, s3fifo
    .venv/bin/python bench/workers_advisor.py --workers 2 --disk   # a quarter memory over a disk tier

Prints a markdown table (docs/advisor.md, "Against a node of several workers"), the commit and
the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.advisor.test_workers_against_advisor import run_node  # noqa: E402
from tests.servers import moto_server  # noqa: E402


def commit() -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                           text=True)
    return head.stdout.strip() + (" (with changes)" if dirty.stdout.strip() else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2,4", help="node sizes to run, comma-separated")
    parser.add_argument("--policies", default="lru,s3fifo")
    parser.add_argument("--objects", type=int, default=600)
    parser.add_argument("--gets", type=int, default=6000)
    parser.add_argument("--disk", action="store_true", help="a quarter of the budget in memory over a disk tier")
    args = parser.parse_args()
    print(f"commit {commit()}; load average {os.getloadavg()[0]:.1f} before; {args.objects} objects, "
          f"{args.gets} GETs, {'memory + disk' if args.disk else 'memory'}")
    print("| Workers | Policy | live | advise --workers N | one store | live - advise | x-cache hits | origin GETs | s |")
    print("|---|---|---|---|---|---|---|---|---|")
    with moto_server() as endpoint, tempfile.TemporaryDirectory() as folder:
        for count in (int(n) for n in args.workers.split(",")):
            for policy in args.policies.split(","):
                httpx.post(endpoint + "/moto-api/reset", timeout=10).raise_for_status()
                began = time.perf_counter()
                (Path(folder) / f"{policy}-{count}").mkdir()
                run = run_node(endpoint, Path(folder) / f"{policy}-{count}", policy=policy, count=count,
                               disk=args.disk, objects=args.objects, gets=args.gets)
                print(f"| {count} | {policy} | {run.live:.4f} | {run.advised:.4f} | {run.one_store:.4f} | "
                      f"{run.live - run.advised:+.4f} | {run.answered:.4f} | {run.fetched} | "
                      f"{time.perf_counter() - began:.0f} |", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f} after")


if __name__ == "__main__":
    main()
