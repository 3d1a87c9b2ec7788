"""Instructions per cold request of a node of one worker, counted by valgrind (callgrind): what
a miss costs the gateway's own code, with nothing of what other load on the machine's cores
costs (bench/cold_requests.py's CPU per request moves by 5-10% between runs of the same code).

The requests are bench/cold_requests.py's, each of a date prefix the node has not seen, signed
by botocore: `list` (ListObjectsV2 of the prefix, delimiter '/', max-keys 1000: a page of two
keys), `head` (HEAD of the prefix's schema file) or `suffix` (GET bytes=-900 of its 3,500-byte
data file). The origin is moto (not shaped: valgrind makes the node ~50x slower than any
origin). The node (`gateway serve`, one worker, metadata and listing TTLs 1h) runs under
`valgrind --tool=callgrind --trace-children=yes`; a few prefixes are requested first (imports,
first calls, the client's connection), every process's counters are zeroed, `--requests` cold
requests are sent one at a time on one keep-alive connection, the counters are dumped, and
what the node does while idle for as long is taken off (as bench/hit_instructions.py does).
Valgrind counts the processes' own instructions, not the kernel's.

    .venv/bin/python bench/cold_instructions.py --kind list --baseline HEAD~1    # a tree against the work tree
    .venv/bin/python bench/cold_instructions.py --kind head --keep              # then callgrind_annotate a dump
    .venv/bin/python bench/cold_instructions.py --kind list --requests 1000 --sample /tmp/p   # py-spy, no valgrind

Needs: apt-get install -y valgrind. A few minutes per node.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import cache_serving as cs  # noqa: E402
import cold_requests as cr  # noqa: E402
import fleet as fl  # noqa: E402
import hit_instructions as hi  # noqa: E402
import workloads as wl  # noqa: E402

KINDS = ("list", "head", "suffix")


def start_node(code: Path, origin: str, folder: Path, valgrind: bool) -> tuple[subprocess.Popen[bytes], int]:
    """`gateway serve` of `code`, one worker, under callgrind if `valgrind`; (process, port) once it serves."""
    port = cs.free_port()
    env = dict(os.environ, PYTHONPATH=str(code), GATEWAY_ORIGIN_ENDPOINT=origin,
               GATEWAY_ORIGIN_ACCESS_KEY=cs.ORIGIN_CREDENTIALS[0], GATEWAY_ORIGIN_SECRET_KEY=cs.ORIGIN_CREDENTIALS[1],
               GATEWAY_SERVER_HOST="127.0.0.1", GATEWAY_SERVER_PORT=str(port), GATEWAY_SERVER_WORKERS="1",
               GATEWAY_SERVER_WORKER_START_TIMEOUT="600", GATEWAY_METADATA_TTL="1h", GATEWAY_LISTING_TTL="1h",
               GATEWAY_METADATA_NEGATIVE_TTL="1h", GATEWAY_SERVER_KEEPALIVE_TIMEOUT="1h",
               GATEWAY_AUTH_USERS=f'[{{"access_key": "{cs.USER[0]}", "secret_key": "{cs.USER[1]}", '
                                  f'"grants": [{{"bucket": "{cs.BUCKET}", "access": "read"}}]}}]')
    command = [sys.executable, "-m", "gateway.cli", "serve", "--log-level", "WARNING"]
    if valgrind:
        command[:0] = ["valgrind", "--tool=callgrind", "--trace-children=yes", "--dump-instr=no",
                       f"--callgrind-out-file={folder}/callgrind.%p"]
    with open(folder / "node.log", "ab") as log:
        proc = subprocess.Popen(command, cwd=code, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the node exited: {(folder / 'node.log').read_text()[-2000:]}")
        if b"gateway listening on" in (folder / "node.log").read_bytes():
            try:
                wl.client(f"http://127.0.0.1:{port}").list_buckets()
                return proc, port
            except Exception:  # noqa: BLE001 (not serving yet)
                pass
        time.sleep(1)
    raise SystemExit("the node did not serve within 10 minutes under valgrind")


def request(kind: str, client, prefix: tuple[str, str]) -> Callable[[], object]:  # type: ignore[no-untyped-def]
    name, data = prefix
    if kind == "list":
        return lambda: client.list_objects_v2(Bucket=wl.BUCKET, Prefix=name, Delimiter="/", MaxKeys=1000)
    if kind == "head":
        return lambda: client.head_object(Bucket=wl.BUCKET, Key=name + ".schema")
    return lambda: client.get_object(Bucket=wl.BUCKET, Key=data, Range="bytes=-900")["Body"].read()


def measure(code: Path, origin: str, kind: str, prefixes: list[tuple[str, str]], args: argparse.Namespace,
            folder: Path) -> float:
    """Instructions per cold request of `kind` of a node of `code` (all its processes)."""
    folder.mkdir()
    proc, port = start_node(code, origin, folder, valgrind=not args.sample)
    try:
        client = wl.client(f"http://127.0.0.1:{port}", pool=1)
        client.meta.config.read_timeout = 600
        warm, counted = prefixes[:args.warm], prefixes[args.warm:]
        for prefix in warm:
            request(kind, client, prefix)()
        if args.sample:
            return sample(proc.pid, kind, client, counted, folder, args)
        pids = cs.tree(proc.pid)
        hi.callgrind("-z", pids)
        before = set(folder.glob("callgrind.*"))
        started = time.monotonic()
        for prefix in counted:
            request(kind, client, prefix)()
        took = time.monotonic() - started
        hi.callgrind("-d", pids)
        time.sleep(2)
        counts = hi.dumped_instructions(folder, before)
        before_idle = set(folder.glob("callgrind.*"))
        hi.callgrind("-z", pids)
        time.sleep(took)
        hi.callgrind("-d", pids)
        time.sleep(2)
        idle = sum(hi.dumped_instructions(folder, before_idle).values())
        per_request = (sum(counts.values()) - idle) / len(counted)
        reading = sum(hi.on_read_instructions(folder / name) for name in counts) / len(counted)
        print(f"  {kind}: {per_request:,.0f} instructions per cold request (idle for as long: "
              f"{idle / len(counted):,.0f}); of which under stream reads (the requests' path): {reading:,.0f}",
              flush=True)
        return per_request
    finally:
        cs._stop(proc, timeout=120)


def sample(pid: int, kind: str, client, counted: list[tuple[str, str]], folder: Path,  # type: ignore[no-untyped-def]
           args: argparse.Namespace) -> float:
    """--sample: the node's CPU per cold request (its threads' run time), py-spy recording it."""
    out = Path(args.sample).with_suffix(f".{kind}.{folder.name}.txt")
    spy = cr.profiler(pid, str(out), args.sample_rate, native=False)
    tree_cpu = cr.TreeCpu(pid)
    started = tree_cpu()
    for prefix in counted:
        request(kind, client, prefix)()
    per_request = (tree_cpu() - started) / 1e6 / len(counted)
    spy.send_signal(signal.SIGINT)
    spy.wait(timeout=60)
    print(f"  {kind}: {per_request:.3f} ms CPU per cold request (py-spy recording); profile in {out}", flush=True)
    return per_request


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=KINDS, action="append", help="the cold request (repeatable; default: all)")
    parser.add_argument("--requests", type=int, default=100, help="cold requests counted per node")
    parser.add_argument("--warm", type=int, default=5, help="prefixes requested before the count")
    parser.add_argument("--baseline", help="a git revision to compare the work tree with")
    parser.add_argument("--keep", action="store_true", help="keep the callgrind dumps and print their folder")
    parser.add_argument("--sample", metavar="PATH", help="no valgrind: the CPU per request, and a py-spy profile (raw) "
                                                          "written next to PATH, one per kind and tree")
    parser.add_argument("--sample-rate", type=int, default=2000, help="py-spy's samples per second (--sample)")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None and not args.sample:
        raise SystemExit("needs valgrind: apt-get install -y valgrind")
    tmp = Path(tempfile.mkdtemp(prefix="cold-instructions-"))
    trees = {cs.code_version() + " (work tree)": ROOT}
    if args.baseline:
        described = fl.snapshot(args.baseline, tmp / "baseline")
        compiled = ROOT / "gateway" / "s3api" / "auth"
        for built in compiled.glob("_sigv4check*.so"):  # the work tree's build of the compiled check
            shutil.copy(built, tmp / "baseline" / "gateway" / "s3api" / "auth")
        trees = {described: tmp / "baseline", **trees}
    print(f"bench/cold_instructions.py {' '.join(argv if argv is not None else sys.argv[1:])}")
    print(f"{args.requests} cold requests of each kind, one at a time, one connection, after {args.warm}; "
          f"{wl.loadavg()}")
    try:
        with wl.moto_process(tmp) as moto:
            prefixes = cr.fill(moto, args.warm + args.requests, 3500)
            for number, (name, code) in enumerate(trees.items()):
                print(name)
                for kind in args.kind or KINDS:
                    measure(code, moto, kind, prefixes, args, tmp / f"node-{number}-{kind}")
    finally:
        if args.keep:
            print(f"  callgrind dumps kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
