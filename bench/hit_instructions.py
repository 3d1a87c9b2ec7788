"""Instructions per warm 4 KiB hit of a node of one worker and of a node of two, counted by
valgrind (callgrind): what sharing one cache costs a request, with nothing of what sharing
the machine's cores costs. The requests are signed as `--signing` says (cache_serving's rows):
`sdk` (default; each GetObject as boto3 signs it, its own date and invocation id),
`presigned-new` (each a new presigned URL) or `same-bytes` (each presigned URL sent again, kept).

On this 2-core machine the CPU per request of a node of two workers moves from 1.0x to 1.75x
one worker's from run to run of the same code (bench/workers_hits.py, bench/cache_serving.py):
three busy processes preempting each other on two cores. Instructions do not move with that.
Each node runs under `valgrind --tool=callgrind --trace-children=yes` (the supervisor and its
workers too) in front of bench/shaped_origin.py; its objects are read once (the blocks come in;
same-bytes: each URL twice more, kept, as wrk's are), then every process's counters are zeroed
(callgrind_control -z), `--requests` GETs are sent one at a time over `--connections`
keep-alive connections (the kernel spreads them among the workers), and every process's
counters are dumped (callgrind_control -d): instructions per request, all processes summed, less
what the node does while idle for as long (its timers, its supervisor's loop). Valgrind counts
the processes' own instructions, not the kernel's: the system calls' work is not in them.
Each figure also says how many ran under uvloop's stream reads (the requests read and
answered): the rest, timers and datagrams (a node of several workers takes its hit notes every
50 ms, sends its feed every 250 ms, compares its mappings with their files every second),
follows the wall clock, which valgrind stretches ~50x, and comes out of the idle measure only
as far as it costs without requests.

    .venv/bin/python bench/hit_instructions.py
    .venv/bin/python bench/hit_instructions.py --requests 4000 --connections 16
    .venv/bin/python bench/hit_instructions.py --signing same-bytes
    .venv/bin/python bench/hit_instructions.py --keep   # then callgrind_annotate --inclusive=yes on a dump

Needs: apt-get install -y valgrind. About 3 minutes (Python is ~50x slower under valgrind).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import cache_serving as cs  # noqa: E402


def start_node(origin: str, workers: int, folder: Path) -> tuple[subprocess.Popen[bytes], int]:
    """`gateway serve` of `workers` workers under callgrind; (process, port) once it serves."""
    port = cs.free_port()
    env = dict(os.environ, GATEWAY_ORIGIN_ENDPOINT=origin, GATEWAY_ORIGIN_ACCESS_KEY=cs.ORIGIN_CREDENTIALS[0],
               GATEWAY_ORIGIN_SECRET_KEY=cs.ORIGIN_CREDENTIALS[1], GATEWAY_SERVER_HOST="127.0.0.1",
               GATEWAY_SERVER_PORT=str(port), GATEWAY_SERVER_WORKERS=str(workers),
               GATEWAY_CACHE_MEMORY_QUOTA="1GiB", GATEWAY_SERVER_WORKER_START_TIMEOUT="600",  # ~50x slower
               # Hits only: under valgrind the counted requests take minutes, and past metadata.ttl (1m)
               # every object would be revalidated (a HEAD, its shape learnt anew) as many times as the
               # load on the machine stretched the run (1 worker, the same code: 175,000 then 194,000).
               GATEWAY_METADATA_TTL="1h",
               # Each of the connections waits its turn (the others' requests, each ~50x slower): on a
               # loaded machine that outlasted server.keepalive_timeout, the node closed it.
               GATEWAY_SERVER_KEEPALIVE_TIMEOUT="1h",
               GATEWAY_AUTH_USERS=f'[{{"access_key": "{cs.USER[0]}", "secret_key": "{cs.USER[1]}", '
                                  f'"grants": [{{"bucket": "{cs.BUCKET}", "access": "read"}}]}}]')
    command = ["valgrind", "--tool=callgrind", "--trace-children=yes", "--dump-instr=no",
               f"--callgrind-out-file={folder}/callgrind.%p", sys.executable, "-m", "gateway.cli", "serve",
               "--log-level", "WARNING"]
    with open(folder / "node.log", "ab") as log:  # the node writes to its own copy of the descriptor
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the node exited: {(folder / 'node.log').read_text()[-2000:]}")
        if b"gateway listening on" in (folder / "node.log").read_bytes():  # said just before it serves
            try:
                socket.create_connection(("127.0.0.1", port), timeout=5).close()
                return proc, port
            except OSError:
                pass
        time.sleep(1)
    raise SystemExit("the node did not serve within 10 minutes under valgrind")


class Client:
    """Requests (their bytes), one at a time, round robin over keep-alive connections."""

    def __init__(self, port: int, connections: int) -> None:
        self.socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(connections)]
        self.port = port

    def get(self, sock: socket.socket, request: bytes) -> None:
        sock.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            data += self._received(sock, 65536)
        head, _, body = data.partition(b"\r\n\r\n")
        if not head.startswith((b"HTTP/1.1 200", b"HTTP/1.1 206")):  # (206: sdk-ranges)
            raise SystemExit(f"not a 200 or 206: {head[:200]!r}")
        length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
        while len(body) < length:
            body += self._received(sock, max(65536, length - len(body)))

    @staticmethod
    def _received(sock: socket.socket, most: int) -> bytes:
        data = sock.recv(most)
        if not data:  # (recv gives b"" for ever after: the bench would spin, not fail)
            raise SystemExit("the node closed a connection mid-answer or between two requests")
        return data

    def send(self, requests: list[bytes], count: int) -> None:
        for i in range(count):
            self.get(self.socks[i % len(self.socks)], requests[i % len(requests)])

    def close(self) -> None:
        for sock in self.socks:
            sock.close()


def callgrind(action: str, pids: list[int]) -> None:
    for pid in pids:
        subprocess.run(["callgrind_control", action, str(pid)], check=True, capture_output=True)


def dumped_instructions(folder: Path, before: set[Path]) -> dict[str, int]:
    """Ir of each dump written since `before`, by file name."""
    counts = {}
    for dump in sorted(set(folder.glob("callgrind.*")) - before):
        found = re.search(r"^(?:summary|totals): *(\d+)", dump.read_text(errors="replace"), re.M)
        if found:
            counts[dump.name] = int(found.group(1))
    return counts


ON_READ = "uvloop_4loop___uv_stream_on_read"  # uvloop's callback for bytes read from a stream: the requests' path


def on_read_instructions(dump: Path) -> int:
    """Ir of a dump under uvloop's stream reads (the requests read and answered, and any stream
    between the workers), as callgrind_annotate counts it inclusive: the rest is timers, call_soon
    callbacks and datagrams (hit notes taken, the node feed, mappings compared with their files),
    whose cost follows the wall clock more than the requests (and valgrind makes every request
    ~50x longer)."""
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", "--auto=no", str(dump)],
                         capture_output=True, text=True, check=True).stdout
    found = re.search(rf"^ *([\d,]+) .*:__pyx_f_6{ON_READ} ", out, re.M)  # (not its recursive 'N entries)
    return int(found.group(1).replace(",", "")) if found else 0


def measure(origin: str, workers: int, keys: list[str], args: argparse.Namespace, folder: Path) -> float:
    """Instructions per request of a node of `workers` (all its processes)."""
    folder.mkdir()
    proc, port = start_node(origin, workers, folder)
    try:
        endpoint = f"http://127.0.0.1:{port}"  # signed for the node's host:port
        warm = cs.same_bytes_requests(endpoint, keys)
        counted = cs.wrk_requests(args.signing, endpoint, keys, args.requests)
        client = Client(port, args.connections)
        try:
            client.send(warm, len(warm))  # the blocks come in
            if args.signing == "same-bytes":  # each URL again and again: kept where it lands
                client.send(counted, 2 * len(counted) * args.connections)
            pids = cs.tree(proc.pid)
            callgrind("-z", pids)
            before = set(folder.glob("callgrind.*"))
            started = time.monotonic()
            client.send(counted, args.requests)
            took = time.monotonic() - started
            callgrind("-d", pids)
            time.sleep(2)
            counts = dumped_instructions(folder, before)
            reading = sum(on_read_instructions(folder / name) for name in counts)
            # What the node does meanwhile whatever it serves (timers, its supervisor's loop), over as long.
            before_idle = set(folder.glob("callgrind.*"))
            callgrind("-z", pids)
            time.sleep(took)
            callgrind("-d", pids)
            time.sleep(2)
            idle = sum(dumped_instructions(folder, before_idle).values())
        finally:
            client.close()
        per_request = (sum(counts.values()) - idle) / args.requests
        print(f"  {workers} worker{'s' if workers > 1 else ' '}: {per_request:10,.0f} instructions per request"
              f" ({', '.join(f'{name}: {count / args.requests:,.0f}' for name, count in counts.items())};"
              f" idle for as long: {idle / args.requests:,.0f}); of which under stream reads (the requests'"
              f" path): {reading / args.requests:,.0f}", flush=True)
        return per_request
    finally:
        cs._stop(proc, timeout=120)  # valgrind takes its time to write the last dumps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="4KiB", help="object size")
    parser.add_argument("--objects", type=int, default=64)
    parser.add_argument("--requests", type=int, default=2000, help="requests counted per node")
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--signing", choices=cs.SIGNINGS, default="sdk", help="how each request is signed")
    parser.add_argument("--keep", action="store_true",
                        help="keep the callgrind dumps (node-1/, node-2/) and the node logs, and print their folder: "
                             "compare with callgrind_annotate --inclusive=yes")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("needs valgrind: apt-get install -y valgrind")
    size = cs.parse_size(args.size, "--size")
    tmp = Path(tempfile.mkdtemp(prefix="hit-instructions-"))
    root = tmp / "objects"
    (root / cs.BUCKET).mkdir(parents=True)
    keys = cs.link_objects(root, "warm", size, args.objects)
    print(f"{args.size} hits from the memory tier, {args.requests} GETs ({args.signing}) sent one at a time over "
          f"{args.connections} connections; gateway code {cs.code_version()}")
    try:
        with cs.shaped_origin_process(root, tmp, "0", "0") as origin:
            counted = {workers: measure(origin, workers, keys, args, tmp / f"node-{workers}") for workers in (1, 2)}
            print(f"  two workers / one: {counted[2] / counted[1]:.2f}x")
    finally:
        if args.keep:
            shutil.rmtree(root, ignore_errors=True)
            print(f"  callgrind dumps kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
