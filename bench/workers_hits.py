"""Warm 4 KiB hits of a node of one worker and of a node of two, in one run: what sharing one
cache costs a request, apart from what sharing the machine's cores costs.

Each round starts a node of each size in front of bench/shaped_origin.py (no delay), warms it
and measures GETs with wrk (--connections; by default requests each signed anew by botocore, as
the SDKs send them, --signing as in bench/cache_serving.py): req/s, the CPU per request of all the
node's processes (user and system), and their context switches per request. `--pin` puts
every process of the node on core 0 and wrk on core 1, so two workers share one core as one
worker has it alone: their CPU per request is then the work per request, not the machine's
contention (three busy processes on two cores preempt each other). Unpinned (the default) is
how bench/cache_serving.py runs. `--baseline COMMIT` measures that commit's code beside the
work tree's in the same rounds.

    .venv/bin/python bench/workers_hits.py --pin
    .venv/bin/python bench/workers_hits.py --baseline 5701a06 --rounds 2
    .venv/bin/python bench/workers_hits.py --tier disk     # no memory tier: hits from one disk folder

Needs: apt-get install -y wrk; taskset (util-linux) for --pin; git for --baseline.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import cache_serving as cs  # noqa: E402
from ab_hits import code_tree, cpu_us_per_request, user_system_ticks  # noqa: E402


def switches(pid: int) -> tuple[int, int]:
    """(voluntary, involuntary) context switches so far of the node's processes."""
    voluntary = involuntary = 0
    for process in cs.tree(pid):
        for line in Path(f"/proc/{process}/status").read_text().splitlines():
            if line.startswith("voluntary_ctxt_switches"):
                voluntary += int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches"):
                involuntary += int(line.split()[1])
    return voluntary, involuntary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pin", action="store_true", help="the node on core 0, wrk on core 1")
    parser.add_argument("--baseline", default="", help="also measure this commit's code (e.g. 5701a06)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--tier", choices=("memory", "disk"), default="memory", help="where the hits come from")
    parser.add_argument("--signing", default="sdk", choices=cs.SIGNINGS,
                        help="what wrk sends (bench/cache_serving.py): sdk = each request signed anew by botocore, "
                             "as the SDKs send a GetObject; presigned-new = each URL its own; same-bytes = one "
                             "presigned URL per key, sent again and again")
    parser.add_argument("--requests", type=int, default=30000, help="requests per wrk file (sdk, presigned-new)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="workers-hits-"))
    trees = {"work tree": code_tree(tmp / "work", None)}
    if args.baseline:
        trees = {args.baseline: code_tree(tmp / "baseline", args.baseline), **trees}
    if args.pin:  # every wrk this script runs goes to core 1
        run = subprocess.run

        def pinned(cmd, *more, **options):  # type: ignore[no-untyped-def]
            if cmd and cmd[0] == "wrk":
                cmd = ["taskset", "-c", "1", *cmd]
            return run(cmd, *more, **options)

        cs.subprocess.run = pinned  # type: ignore[assignment]
    root = tmp / "objects"
    (root / cs.BUCKET).mkdir(parents=True)
    keys = cs.link_objects(root, "warm", 4096, 256)
    print(f"4 KiB hits from the {args.tier} tier, {args.connections} connections, "
          f"{'node on core 0, wrk on core 1' if args.pin else 'unpinned'};"
          f" work tree at {cs.code_version()}")
    try:
        with cs.shaped_origin_process(root, tmp, "0", "0") as origin:
            for round_ in range(args.rounds):
                for name, code in trees.items():
                    for workers in (1, 2):
                        tier = {"GATEWAY_CACHE_MEMORY_QUOTA": "1GiB"}
                        if args.tier == "disk":
                            folder = tmp / f"disk-{round_}-{len(trees)}-{workers}-{name.replace(' ', '-')}"
                            tier = {"GATEWAY_CACHE_MEMORY_QUOTA": "0",
                                    "GATEWAY_CACHE_DISK": json.dumps([{"path": str(folder), "quota": "4GiB"}])}
                        gateway = cs.Gateway(f"{name}-{workers}w", origin, {
                            "GATEWAY_SERVER_WORKERS": str(workers), **tier}, tmp, code)
                        gateway.start()
                        try:
                            if args.pin:
                                for pid in cs.tree(gateway.pid):
                                    subprocess.run(["taskset", "-a", "-p", "-c", "0", str(pid)], check=True,
                                                   capture_output=True)
                            paths = cs.presigned_paths(gateway.endpoint, keys)
                            cs.run_wrk("warm-up", gateway.endpoint, paths, 4096, args.connections, 2, tmp)
                            requests = cs.wrk_requests(args.signing, gateway.endpoint, keys, args.requests)
                            cpu, context = user_system_ticks(gateway), switches(gateway.pid)
                            cell = cs.run_wrk(name, gateway.endpoint, paths, 4096, args.connections, args.seconds, tmp,
                                              raw=requests, signing=args.signing)
                            cpu_after, context_after = user_system_ticks(gateway), switches(gateway.pid)
                        finally:
                            gateway.stop()
                        ok = max(1, cell.ok)
                        user, system = cpu_us_per_request(cpu, cpu_after, ok)
                        print(f"  round {round_ + 1} {name:>9} {workers} worker{'s' if workers > 1 else ' '}"
                              f" {cell.rps:9,.0f} req/s   CPU per request: user {user:5.1f}"
                              f" us, system {system:5.1f} us   switches per request:"
                              f" voluntary {(context_after[0] - context[0]) / ok:.3f},"
                              f" involuntary {(context_after[1] - context[1]) / ok:.3f}   errors {cell.errors}",
                              flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
