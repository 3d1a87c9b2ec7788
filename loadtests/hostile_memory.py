"""Memory under hostile traffic: does the gateway's RSS level off over N hostile requests?

Starts moto's S3 server (the origin) and one `gateway serve` process (one worker, on loopback)
with small in-process caches (--metadata-entries, --listing-entries), so that every bounded
cache fills within the first part of the run. Then --clients threads send --requests requests
of many hostile kinds, in turn (KINDS): bad signatures, unknown access keys, bad dates, garbage
paths, long and odd query strings, repeated parameters, non-ASCII bytes in paths and headers,
huge headers and heads past the limit, made-up buckets and keys (signed right: they reach the
origin), malformed ranges, truncated requests, bodies that do not come, unknown methods,
preflights from random origins, virtual hosts of made-up buckets, bytes that are not HTTP, and
presigned GETs each sent twice (which the hit path keeps: s3api.replays), some of them with 600
tiny headers (small in bytes, large once parsed and kept).
Each kind varies its bucket, key, query and header values with the request's number, so any
structure keyed by what a client sends sees a new key with nearly every request.

The gateway's VmRSS is read from /proc at the start and every --every requests. It "levelled
off" when the RSS grew less than --bound-mb over the second half of the run (from the sample
at N/2 to the last one). With --tracemalloc the gateway runs under tracemalloc and dumps a
snapshot at each sample; the largest growths between the middle and the last snapshot are
printed (slower: for finding what grows, not for the figures).

    .venv/bin/python loadtests/hostile_memory.py                       # 100,000 requests
    .venv/bin/python loadtests/hostile_memory.py --requests 2000 --every 500

Loopback only; bounded in count (--requests) and time (--max-seconds). Exits 1 if the RSS did
not level off, 2 if the gateway answered a 5xx (but 503 SlowDown, its rate limit), died, or the run
ran out of time.
Results: docs/benchmarks-notes.md ("Memory under hostile traffic").
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import httpx
from botocore.auth import HmacV1Auth, S3SigV4Auth, S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.servers import free_port, moto_server, wait_serving  # noqa: E402
from tests.support import client  # noqa: E402

USER = ("AKIAHOSTILE00000001", "hostile-secret-00000000000000000000000001")
ORIGIN_CREDENTIALS = ("origin-key", "origin-secret")
REGION = "us-east-1"
BUCKET = "hostile"
OBJECT = "real/object.bin"
OBJECT_BODY = bytes(range(256)) * 1024  # 256 KiB
DOMAIN = "s3.gateway.test"
MiB = 1024 * 1024
ADMIN_TOKEN = "hostile-memory-bench"
# The gateway's own figures printed at the end (admin API, GET metrics).
FIGURES = ("gateway_metadata_cache_entries", "gateway_hit_path_requests_total", "gateway_hit_path_replayed_total")

# In the gateway, under --tracemalloc: dumps a snapshot when SIGUSR1 comes (the main thread
# runs the handler between two steps of the event loop), then runs `gateway serve`.
_TRACED = """
import signal, sys, tracemalloc
tracemalloc.start(int(sys.argv.pop(1)))
out = sys.argv.pop(1)
def dump(signum, frame):
    tracemalloc.take_snapshot().dump(out + ".tmp")
    import os; os.replace(out + ".tmp", out)
signal.signal(signal.SIGUSR1, dump)
from gateway.cli import main
sys.argv[0] = "gateway"
main()
"""


# --- the requests -----------------------------------------------------------------------------------


class Maker:
    """Builds request `i` of a kind: (bytes to send, whether an answer is read back)."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.user = Credentials(*USER)
        self._pairs: dict[tuple[str, int], bytes] = {}  # requests made once, to be sent a second time
        self._lock = threading.Lock()

    def _head(self, method: str, target: str, headers: list[tuple[str, str]] | None = None,
              body: bytes = b"", host: str | None = None) -> bytes:
        lines = [f"{method} {target} HTTP/1.1", f"Host: {host or self.host}"]
        lines += [f"{name}: {value}" for name, value in headers or []]
        if body and not any(name.lower() in ("content-length", "transfer-encoding") for name, _ in headers or []):
            lines.append(f"Content-Length: {len(body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body

    def _signed(self, method: str, path: str, headers: dict[str, str] | None = None,
                credentials: Credentials | None = None, query: bool = False, expires: int = 300) -> AWSRequest:
        request = AWSRequest(method=method, url=f"http://{self.host}{path}", headers=headers or {})
        if query:
            S3SigV4QueryAuth(credentials or self.user, "s3", REGION, expires=expires).add_auth(request)
        else:
            request.headers["x-amz-content-sha256"] = "UNSIGNED-PAYLOAD"
            S3SigV4Auth(credentials or self.user, "s3", REGION).add_auth(request)
        return request

    def _raw(self, request: AWSRequest, body: bytes = b"") -> bytes:
        target = request.url.removeprefix(f"http://{self.host}")
        return self._head(request.method, target, [(k, v) for k, v in request.headers.items() if k.lower() != "host"],
                          body)

    # Each kind: (i, rng) -> (bytes, answered)

    def bad_signature(self, i: int, rng: random.Random) -> tuple[bytes, bool]:
        request = self._signed("GET", f"/{BUCKET}/k{i}")
        auth = request.headers["Authorization"]
        request.headers.replace_header("Authorization", auth[:-8] + f"{i:08x}"[-8:])
        return self._raw(request), True

    def unknown_key(self, i: int, rng: random.Random) -> tuple[bytes, bool]:
        who = Credentials(f"AKIA{rng.getrandbits(64):016X}", f"secret{i}")
        return self._raw(self._signed("GET", f"/b{i % 997}/key-{i}", credentials=who)), True

    def bad_date(self, i: int, rng: random.Random) -> tuple[bytes, bool]:
        date = rng.choice(["19990101T000000Z", "29990101T000000Z", f"2024{i}", "not a date", "", "20240231T250000Z"])
        auth = (f"AWS4-HMAC-SHA256 Credential={USER[0]}/{date[:8]}/{REGION}/s3/aws4_request, "
                f"SignedHeaders=host;x-amz-date, Signature={rng.getrandbits(256):064x}")
        headers = [("x-amz-date", date), ("x-amz-content-sha256", "UNSIGNED-PAYLOAD"), ("Authorization", auth)]
        return self._head("GET", f"/{BUCKET}/dated-{i}", headers), True

    def garbage_path(self, i: int, rng: random.Random) -> tuple[bytes, bool]:
        pieces = ["..", ".", "", "%zz", "%00", "%2F%2e%2e", "~", "a" * rng.randint(1, 900), f"k{i}", "%ff%fe", "//",
                  "_gateway", "?", ";", "%", "\\"]
        path = "/" + "/".join(rng.choice(pieces) for _ in range(rng.randint(1, 12)))
        return self._head(rng.choice(["GET", "HEAD", "DELETE"]), path), True

    def odd_query(self, i: int, rng: random.Random) -> tuple[bytes, bool]:
        names = ["acl", "uploads", "list-type", "prefix", "delimiter", "max-keys", "versionId", "uploadId",
                 "partNumber", "response-content-type", "X-Amz-Signature", "tagging", "", "=", f"p{i}", "%zz"]
        params = []
        for _ in range(rng.randint(1, 200)):
            name = rng.choice(names)
            value = rng.choice(["", "2", "-1", "99999999999999999999", f"v{i}", "x" * rng.randint(1, 300), "%ff"])
            params.append(name if rng.random() < 0.2 else f"{name}={value}")
        request = self._signed("GET", f"/{BUCKET}/q{i % 50}")
        target = f"/{BUCKET}/q{i % 50}?" + "&".join(params)
        headers = [(k, v) for k, v in request.headers.items() if k.lower() != "host"]
        return self._head("GET", target[:40_000], headers), True

    def non_ascii(self, i: int, rng: random.Random) -> tuple[bytes, bool]:
        raw = bytes(rng.randrange(0x80, 0x100) for _ in range(rng.randint(1, 40))).decode("latin-1")
        headers = [("x-amz-meta-name", raw), (f"x-h{raw[:3]}", "v"), ("Authorization", f"AWS4-HMAC-SHA256 {raw}")]
        return self._head("GET", f"/{BUCKET}/{raw}{i}", headers), True

    def huge_headers(self, i: int, rng: random.Random) -> tuple[bytes, bool]:
        # Under S3's 8 KiB (answered), or up to server.max_head_size (64 KiB: refused by the app).
        size = rng.choice([rng.randint(500, 6_000), rng.randint(9_000, 60_000)])
        headers = [(f"x-pad-{n}-{i}", "p" * 480) for n in range(size // 500)]
        request = self._signed("GET", f"/{BUCKET}/{OBJECT}")
        headers += [(k, v) for k, v in request.headers.items() if k.lower() != "host"]
        return self._head("GET", f"/{BUCKET}/{OBJECT}", headers), True

    def head_too_large(self, i: int, rng: random.Random) -> tuple[bytes, bool]:
        return self._head("GET", f"/{BUCKET}/k{i}", [("x-pad", "p" * rng.randint(70_000, 200_000))]), True

    def made_up(self, i: int, rng: random.Random) -> tuple[bytes, bool]:
        method = rng.choice(["GET", "HEAD"])
        if rng.random() < 0.5:
            path = f"/{BUCKET}/made-up/{i}-{rng.getrandbits(32):x}"
        else:
            path = f"/nobucket-{i}/key-{rng.getrandbits(32):x}"
        return self._raw(self._signed(method, path)), True

    def bad_range(self, i: int, rng: random.Random) -> tuple[bytes, bool]:
        value = rng.choice(["bytes=abc", "bytes=9-2", "bytes=0-0,5-9", "bytes=-0", f"bytes={10**20 + i}-",
                            "items=0-1", "bytes=", "bytes=--1", f"bytes={i}-{i}," * 50, "bytes=0-\x7f"])
        return self._raw(self._signed("GET", f"/{BUCKET}/{OBJECT}", headers={"Range": value})), True

    def truncated(self, i: int, rng: random.Random) -> tuple[bytes, bool]:
        whole = self._raw(self._signed("PUT", f"/{BUCKET}/cut-{i}"), b"x" * 1000)
        if rng.random() < 0.5:  # the head, cut
            return whole[:rng.randint(1, whole.index(b"\r\n\r\n"))], False
        return whole[:whole.index(b"\r\n\r\n") + 4 + rng.randint(0, 999)], False  # the body, cut

    def presigned(self, i: int, rng: random.Random) -> tuple[bytes, bool]:
        request = self._signed("GET", f"/{BUCKET}/pre-{i}", query=True, expires=rng.choice([1, 300, 604800]))
        url = request.url.removeprefix(f"http://{self.host}")
        how = rng.randrange(4)
        if how == 0:
            url = url[:-6] + f"{i:06x}"[-6:]  # the signature changed
        elif how == 1:
            url = url.replace("X-Amz-Date=", "X-Amz-Date=1999")
        elif how == 2:
            url = url.replace("X-Amz-Expires=", "X-Amz-Expires=99999")
        else:
            url = url.replace("X-Amz-Credential=", f"X-Amz-Credential=AKIA{i}")
        return self._head("GET", url), True

    def _twice(self, kind: str, i: int, make: Callable[[int], bytes]) -> bytes:
        """Request `i` of `kind`, made by make(pair) and sent twice: by this turn of the kind and
        the next (or the one before), so that its second arrival finds its first."""
        turn = i // len(KINDS) * KINDS.count(kind) + KINDS[:i % len(KINDS)].count(kind)
        with self._lock:
            made = self._pairs.pop((kind, turn // 2), None)
            if made is None:
                made = make(turn // 2)
                self._pairs[(kind, turn // 2)] = made
                while len(self._pairs) > 1000:  # the second of a pair not sent (the run ended)
                    del self._pairs[next(iter(self._pairs))]
        return made

    def _presigned_get(self, pair: int, headers: list[tuple[str, str]] | None = None) -> bytes:
        request = self._signed("GET", f"/{BUCKET}/{OBJECT}", query=True, expires=600 + pair % 100_000)
        return self._head("GET", request.url.removeprefix(f"http://{self.host}"), headers)

    def replayed(self, i: int, rng: random.Random) -> tuple[bytes, bool]:
        """A presigned GET of the real object (a hit), each URL its own and sent twice: the hit
        path keeps every one (s3api.replays) and must drop old ones."""
        return self._twice("replayed", i, self._presigned_get), True

    def many_headers(self, i: int, rng: random.Random) -> tuple[bytes, bool]:
        """A presigned GET of the real object with 600 tiny headers (under 4 KiB in all), one of
        them its own, sent twice: small in bytes, large once parsed and kept."""
        def make(pair: int) -> bytes:
            return self._presigned_get(pair, [("a", "b")] * 600 + [("v", str(pair))])
        return self._twice("many_headers", i, make), True

    def v2(self, i: int, rng: random.Random) -> tuple[bytes, bool]:
        request = AWSRequest(method="GET", url=f"http://{self.host}/{BUCKET}/v2-{i}")
        who = Credentials(rng.choice([USER[0], f"AKIAV2{i}"]), "wrong secret")
        HmacV1Auth(who).add_auth(request)
        return self._raw(request), True

    def methods(self, i: int, rng: random.Random) -> tuple[bytes, bool]:
        method = rng.choice(["FOO", "PATCH", "PROPFIND", "TRACE", "CONNECT", "OPTIONS", "OPTIONS"])
        headers = [("Origin", f"https://site-{i}.example"),
                   ("Access-Control-Request-Method", rng.choice(["GET", "PUT", "X"])),
                   ("Access-Control-Request-Headers", f"x-amz-meta-{i},authorization")]
        target = f"/{rng.choice([BUCKET, f'cors-{i}'])}/k{i}" if method != "CONNECT" else f"host{i}:443"
        return self._head(method, target, headers), True

    def virtual_host(self, i: int, rng: random.Random) -> tuple[bytes, bool]:
        bucket = rng.choice([f"vb{i}", f"{i}.dotted.name", "UPPER", "x" * 70, BUCKET])
        request = self._signed("GET", f"/vk{i}")
        headers = [(k, v) for k, v in request.headers.items() if k.lower() != "host"]
        return self._head("GET", f"/vk{i}", headers, host=f"{bucket}.{DOMAIN}"), True

    def not_http(self, i: int, rng: random.Random) -> tuple[bytes, bool]:
        junk = rng.choice([b"\x16\x03\x01\x00\xa5\x01\x00", b"\x00" * 10, b"junk\r\n\r\n", b" GET / HTTP/1.1\r\n\r\n",
                           bytes(rng.getrandbits(8) for _ in range(64)), b"GET / HTTP/9.9\r\n\r\n"])
        return junk, True

    def bad_bodies(self, i: int, rng: random.Random) -> tuple[bytes, bool]:
        how = rng.randrange(3)
        if how == 0:  # aws-chunked framing that is not
            request = self._signed("PUT", f"/{BUCKET}/chunked-{i}", headers={
                "Content-Encoding": "aws-chunked", "x-amz-decoded-content-length": "5"})
            request.headers.replace_header("x-amz-content-sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER")
            return self._raw(request, b"zz\r\nhello\r\n0\r\n\r\n"), True
        if how == 1:  # a POST form that is not one
            headers = [("Content-Type", f"multipart/form-data; boundary=b{i}")]
            return self._head("POST", f"/{BUCKET}", headers, b"--b%d\r\njunk\r\n" % i), True
        # transfer-encoding chunked with bad sizes
        body = b"fffffffffffffffff\r\n"
        return self._head("PUT", f"/{BUCKET}/te-{i}", [("Transfer-Encoding", "chunked")], body), True


KINDS = ["bad_signature", "unknown_key", "bad_date", "replayed", "garbage_path", "odd_query", "non_ascii",
         "huge_headers", "replayed", "head_too_large", "made_up", "bad_range", "truncated", "replayed", "presigned",
         "many_headers", "v2", "methods", "virtual_host", "not_http", "bad_bodies"]  # "replayed" thrice: the kept
# replays fill within the first half of a run


# --- the client -------------------------------------------------------------------------------------


class Connection:
    """A raw socket to the gateway, opened again whenever the gateway closed it."""

    def __init__(self, address: tuple[str, int], timeout: float) -> None:
        self.address = address
        self.timeout = timeout
        self.sock: socket.socket | None = None
        self.buffer = b""
        self.errors: Counter[str] = Counter()  # S3 error codes of 5xx answers

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.sock, self.buffer = None, b""

    def exchange(self, payload: bytes, answered: bool) -> int | None:
        """Send `payload`; the status of its answer (None: none read, the connection closed)."""
        if self.sock is None:
            self.sock = socket.create_connection(self.address, timeout=self.timeout)
        try:
            self.sock.sendall(payload)
            if not answered:
                self.close()
                return None
            status, close = self._answer(head=payload.startswith(b"HEAD "))
        except (OSError, EOFError):
            self.close()
            return None
        if close:
            self.close()
        return status

    def _fill(self) -> None:
        assert self.sock is not None
        data = self.sock.recv(65536)
        if not data:
            raise EOFError
        self.buffer += data

    def _line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            self._fill()
        line, _, self.buffer = self.buffer.partition(b"\r\n")
        return line

    def _take(self, n: int) -> bytes:
        while len(self.buffer) < n:
            self._fill()
        taken, self.buffer = self.buffer[:n], self.buffer[n:]
        return taken

    def _answer(self, head: bool) -> tuple[int, bool]:
        """Read one answer (`head`: to a HEAD, without a body); (status, whether the connection is
        to be closed)."""
        while True:
            status = int(self._line().split()[1])
            headers = {}
            while line := self._line():
                name, _, value = line.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip().lower()
            if status != 100:
                break
        close = headers.get("connection") == "close"
        body = b""
        if head or status in (204, 304):
            pass
        elif headers.get("transfer-encoding") == "chunked":
            while size := int(self._line().split(b";")[0], 16):
                self._take(size + 2)
            while self._line():  # trailers
                pass
        elif "content-length" in headers:
            body = self._take(int(headers["content-length"]))
        else:
            close = True  # the body runs to the close
        if status >= 500:  # what went wrong (S3's error code, else the body's start), for the report
            self.errors[body.split(b"<Code>", 1)[-1].split(b"</Code>", 1)[0][:40].decode("latin-1")] += 1
        return status, close


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of process `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"VmRSS not in /proc/{pid}/status")


class Run:
    """The shared count of requests sent, the RSS samples, and what came back per kind."""

    def __init__(self, total: int, every: int, sample: Callable[[int], None], deadline: float) -> None:
        self.total = total
        self.every = every
        self.sample = sample
        self.deadline = deadline
        self.lock = threading.Lock()
        self.sent = 0
        self.statuses: Counter[tuple[str, int | None]] = Counter()
        self.errors: Counter[str] = Counter()
        self.out_of_time = False

    def next(self) -> int | None:
        with self.lock:
            if self.sent >= self.total:
                return None
            if time.monotonic() > self.deadline:
                self.out_of_time = True
                return None
            self.sent += 1
            return self.sent

    def client(self, address: tuple[str, int], maker: Maker, seed: int) -> None:
        rng = random.Random(seed)
        connection = Connection(address, timeout=30)
        try:
            while (n := self.next()) is not None:
                kind = KINDS[n % len(KINDS)]
                payload, answered = getattr(maker, kind)(n, rng)
                status = connection.exchange(payload, answered)
                with self.lock:
                    self.statuses[(kind, status)] += 1
                if n % self.every == 0:
                    self.sample(n)
        finally:
            connection.close()
            with self.lock:
                self.errors.update(connection.errors)


# --- the gateway ------------------------------------------------------------------------------------


def start_gateway(origin: str, port: int, log: Path, args: argparse.Namespace,
                  snapshot: Path | None) -> subprocess.Popen[bytes]:
    env = dict(os.environ, GATEWAY_ORIGIN_ENDPOINT=origin, GATEWAY_ORIGIN_ACCESS_KEY=ORIGIN_CREDENTIALS[0],
               GATEWAY_ORIGIN_SECRET_KEY=ORIGIN_CREDENTIALS[1], GATEWAY_SERVER_HOST="127.0.0.1",
               GATEWAY_SERVER_PORT=str(port), GATEWAY_SERVER_WORKERS="1", GATEWAY_SERVER_DOMAIN=DOMAIN,
               GATEWAY_AUTH_USERS=json.dumps([{"access_key": USER[0], "secret_key": USER[1], "admin": True}]),
               GATEWAY_CACHE_MEMORY_QUOTA=str(64 * MiB),
               GATEWAY_METADATA_MAX_ENTRIES=str(args.metadata_entries),
               GATEWAY_LISTING_MAX_ENTRIES=str(args.listing_entries), GATEWAY_ADMIN_TOKEN=ADMIN_TOKEN)
    serve = ["serve", "--log-level", "ERROR"]
    if snapshot is None:
        command = [sys.executable, "-m", "gateway.cli", *serve]
    else:
        command = [sys.executable, "-c", _TRACED, str(args.frames), str(snapshot), *serve]
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        wait_serving(lambda: httpx.get(endpoint + "/", timeout=1), proc, f"gateway on port {port}")
    except RuntimeError as err:
        proc.kill()
        proc.wait()
        raise SystemExit(f"{err}:\n{log.read_text(errors='replace')[-3000:]}") from None
    return proc


def growth_report(before: Path, after: Path, top: int) -> None:
    old, new = tracemalloc.Snapshot.load(str(before)), tracemalloc.Snapshot.load(str(after))
    sizes = [sum(stat.size for stat in snapshot.statistics("filename")) / 1e6 for snapshot in (old, new)]
    print(f"\nlargest growths between {before.name} ({sizes[0]:.1f} MB traced) and {after.name} "
          f"({sizes[1]:.1f} MB traced):")
    for stat in new.compare_to(old, "traceback")[:top]:
        print(f"  {stat.size_diff / 1e3:+9.1f} kB {stat.count_diff:+7d} blocks  (now {stat.size / 1e3:.1f} kB)")
        for line in stat.traceback.format()[-8:]:
            print("      " + line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=100_000, help="hostile requests to send (default 100,000)")
    parser.add_argument("--every", type=int, default=10_000, help="read the RSS every this many requests")
    parser.add_argument("--clients", type=int, default=4, help="client threads, one connection each at a time")
    parser.add_argument("--bound-mb", type=float, default=2.0,
                        help="levelled off: RSS growth over the second half under this many MB (1e6 bytes)")
    parser.add_argument("--max-seconds", type=float, default=900, help="stop sending after this long")
    parser.add_argument("--metadata-entries", type=int, default=2000, help="metadata.max_entries of the gateway")
    parser.add_argument("--listing-entries", type=int, default=500, help="listing.max_entries of the gateway")
    parser.add_argument("--tracemalloc", action="store_true", help="diff tracemalloc snapshots (slow)")
    parser.add_argument("--frames", type=int, default=12, help="frames per tracemalloc traceback")
    parser.add_argument("--keep-snapshots", metavar="DIR", help="with --tracemalloc: leave the snapshots in DIR")
    args = parser.parse_args(argv)
    if args.requests < 2 * args.every:
        parser.error("--requests must be at least twice --every (a first and a second half)")

    with tempfile.TemporaryDirectory(prefix="hostile-memory-") as tmp, moto_server() as origin:
        client(origin, ORIGIN_CREDENTIALS).create_bucket(Bucket=BUCKET)
        port = free_port()
        snapshots = Path(args.keep_snapshots or tmp) / "snapshot" if args.tracemalloc else None
        log = Path(tmp) / "gateway.log"
        proc = start_gateway(origin, port, log, args, snapshots)
        try:
            maker = Maker(f"127.0.0.1:{port}")
            client(f"http://127.0.0.1:{port}", USER).put_object(Bucket=BUCKET, Key=OBJECT, Body=OBJECT_BODY)
            samples: list[tuple[int, int]] = []
            dumped: list[Path] = []

            def sample(n: int) -> None:
                samples.append((n, rss_bytes(proc.pid)))
                if snapshots is not None:
                    proc.send_signal(signal.SIGUSR1)  # the gateway dumps a snapshot
                    deadline = time.monotonic() + 60
                    while not snapshots.exists() and time.monotonic() < deadline:
                        time.sleep(0.05)
                    if snapshots.exists():
                        dumped.append(snapshots.rename(snapshots.with_name(f"snapshot-{n}")))
                print(f"{n:>8} requests  RSS {samples[-1][1] / 1e6:7.1f} MB", flush=True)

            # Warm-up: one request of each kind, so first-use allocations are not counted as growth.
            warm = Run(len(KINDS), 10**9, lambda n: None, time.monotonic() + 60)
            warm.client(("127.0.0.1", port), maker, 0)
            time.sleep(0.5)
            run = Run(args.requests, args.every, sample, time.monotonic() + args.max_seconds)
            sample(0)
            started, cpu = time.monotonic(), cpu_seconds(proc.pid)
            threads = [threading.Thread(target=run.client, args=(("127.0.0.1", port), maker, seed + 1))
                       for seed in range(args.clients)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            seconds = time.monotonic() - started
            alive = proc.poll() is None
            figures = ""
            if alive:
                metrics = httpx.get(f"http://127.0.0.1:{port}/_gateway/metrics", timeout=10,
                                    headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}).text
                figures = "\n".join(line for line in metrics.splitlines() if line.startswith(FIGURES))
            cpu = cpu_seconds(proc.pid) - cpu if alive else float("nan")
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if len(dumped) >= 3:
            growth_report(dumped[0], dumped[len(dumped) // 2], top=15)
            growth_report(dumped[len(dumped) // 2], dumped[-1], top=15)
        # What the gateway printed, but uvicorn's line for each request it could not parse.
        printed = "".join(line for line in log.read_text(errors="replace").splitlines(keepends=True)
                          if "Invalid HTTP request received" not in line)

    samples.sort()
    print(f"\n{run.sent} hostile requests in {seconds:.0f} s ({run.sent / seconds:.0f}/s), "
          f"{args.clients} clients, {len(set(KINDS))} kinds; gateway CPU {cpu:.0f} s, "
          f"this client's {time.process_time():.0f} s")
    by_kind: dict[str, Counter[int | None]] = {}
    for (kind, status), count in run.statuses.items():
        by_kind.setdefault(kind, Counter())[status] += count
    for kind in dict.fromkeys(KINDS):
        answers = ", ".join(f"{status or 'none'}: {count}" for status, count in sorted(
            by_kind.get(kind, Counter()).items(), key=lambda item: item[0] or 0))
        print(f"  {kind:<15} {answers}")
    if run.errors:
        print(f"  5xx answers by S3 error code: {dict(run.errors)}")
    print(figures)
    print("\nrequests    RSS MB   since last")
    for k, (n, rss) in enumerate(samples):
        delta = "" if k == 0 else f"{(rss - samples[k - 1][1]) / 1e6:+.1f}"
        print(f"{n:>8}  {rss / 1e6:8.1f}   {delta}")
    middle = min(samples, key=lambda s: abs(s[0] - samples[-1][0] / 2))
    growth = samples[-1][1] - middle[1]
    levelled = growth < args.bound_mb * 1e6
    print(f"\nsecond half ({middle[0]} -> {samples[-1][0]} requests): {growth / 1e6:+.1f} MB; "
          f"{'levelled off' if levelled else 'did NOT level off'} (bound {args.bound_mb:g} MB)")
    # SlowDown is by design: preflights of buckets the gateway does not know are rate-limited (engine.bucketdocs).
    errors = sum(run.errors.values()) - run.errors["SlowDown"]
    if errors or not alive or run.out_of_time:
        print(f"FAIL: {errors} answers 5xx ({dict(run.errors)}); gateway {'alive' if alive else 'died'}; "
              f"{'out of time' if run.out_of_time else 'all sent'}\n{printed[-3000:]}", file=sys.stderr)
        return 2
    return 0 if levelled else 1


if __name__ == "__main__":
    sys.exit(main())
