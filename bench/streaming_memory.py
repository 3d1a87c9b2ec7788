"""Streaming memory benchmark: the gateway's RSS during a large multipart upload and GET.

Starts moto's S3 server (the origin) and the gateway as a subprocess (`python -m
gateway.cli serve`, configured through GATEWAY_* variables), then through the gateway:

  (a) uploads an object of --size bytes as a multipart upload with boto3, from a
      file-like object that produces deterministic pseudo-random bytes on the fly;
  (b) GETs it back streaming (1 MiB reads) and checks its sha256;
  (c) GETs it straight from moto, for a throughput ratio.

While (a) and (b) run, a thread samples the gateway process's VmRSS from /proc every
--interval seconds and keeps the peak; the kernel's own high-water mark (VmHWM, reset
through /proc/PID/clear_refs before each operation) is reported next to it, so a spike
between two samples cannot go unseen. Only the gateway process is measured: moto keeps
objects in its own memory and temp files.

Exits 1 if an operation's peak RSS rises more than --limit-mb above idle, 2 if the
data read back differs from the data sent.

    .venv/bin/python bench/streaming_memory.py                # 1 GiB
    .venv/bin/python bench/streaming_memory.py --size 64MiB   # a quick run
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import boto3
import httpx
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gateway.config import parse_size  # noqa: E402
from tests.servers import free_port, moto_server  # noqa: E402

MiB = 1024 * 1024
BLOCK = 1 * MiB  # the generator's unit: block i depends only on (seed, i)
BUCKET = "bench"
KEY = "streaming/object.bin"
USER = ("AKIABENCH0000000001", "bench-secret-000000000000000000000000001")
ORIGIN_CREDENTIALS = ("origin-key", "origin-secret")
REGION = "us-east-1"


# --- data ----------------------------------------------------------------------------------------


class PseudoRandomFile:
    """A read-only, forward-only file of `size` deterministic pseudo-random bytes.

    The bytes at any offset depend only on (seed, offset), so the same content can be
    produced again to check it; nothing close to `size` is ever held in memory.
    """

    def __init__(self, size: int, seed: int = 0) -> None:
        self.size = size
        self.seed = seed
        self._pos = 0
        self._block_index = -1
        self._block = b""

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def tell(self) -> int:
        return self._pos

    def _block_at(self, index: int) -> bytes:
        if index != self._block_index:
            self._block = random.Random(self.seed * 1_000_003 + index).randbytes(BLOCK)
            self._block_index = index
        return self._block

    def read(self, n: int = -1) -> bytes:
        remaining = self.size - self._pos
        if n is None or n < 0 or n > remaining:
            n = remaining
        pieces = []
        while n > 0:
            index, offset = divmod(self._pos, BLOCK)
            take = min(n, BLOCK - offset)
            pieces.append(self._block_at(index)[offset : offset + take])
            self._pos += take
            n -= take
        return b"".join(pieces)

    def close(self) -> None:
        pass


def expected_sha256(size: int, seed: int) -> str:
    digest = hashlib.sha256()
    source = PseudoRandomFile(size, seed)
    while piece := source.read(8 * MiB):
        digest.update(piece)
    return digest.hexdigest()


# --- memory of the gateway process ------------------------------------------------------------------


def _status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/{pid}/status")


def rss_bytes(pid: int) -> int:
    return _status_kib(pid, "VmRSS") * 1024


def hwm_bytes(pid: int) -> int:
    return _status_kib(pid, "VmHWM") * 1024


def reset_hwm(pid: int) -> bool:
    """Reset the kernel's peak-RSS counter (VmHWM) to the current RSS; False if not allowed."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


class PeakSampler:
    """Samples a process's VmRSS every `interval` seconds in a thread; keeps the peak."""

    def __init__(self, pid: int, interval: float) -> None:
        self.pid = pid
        self.interval = interval
        self.peak = 0
        self.samples = 0
        self.hwm: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._hwm_reset = False

    def _run(self) -> None:
        while True:
            self.peak = max(self.peak, rss_bytes(self.pid))
            self.samples += 1
            if self._stop.wait(self.interval):
                break
        self.peak = max(self.peak, rss_bytes(self.pid))

    def __enter__(self) -> PeakSampler:
        self._hwm_reset = reset_hwm(self.pid)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if self._hwm_reset:
            self.hwm = hwm_bytes(self.pid)


# --- servers ----------------------------------------------------------------------------------------


@contextmanager
def gateway_process(origin_endpoint: str, log_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """`python -m gateway.cli serve` configured by GATEWAY_* variables; yields (process, endpoint)."""
    port = free_port()
    env = dict(os.environ)
    env.update({
        "GATEWAY_ORIGIN_ENDPOINT": origin_endpoint,
        "GATEWAY_ORIGIN_ACCESS_KEY": ORIGIN_CREDENTIALS[0],
        "GATEWAY_ORIGIN_SECRET_KEY": ORIGIN_CREDENTIALS[1],
        "GATEWAY_SERVER_HOST": "127.0.0.1",
        "GATEWAY_SERVER_PORT": str(port),
        "GATEWAY_AUTH_USERS": json.dumps([{"access_key": USER[0], "secret_key": USER[1], "admin": True}]),
        # No cache tiers: this measures streaming itself (a cached read may hold up to the
        # memory tier's quota on top, by design).
        "GATEWAY_CACHE_MEMORY_QUOTA": "0",
    })
    log = open(log_path, "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--log-level", "WARNING"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(endpoint + "/", timeout=1)  # any answer (403 here) means it is serving
                break
            except httpx.HTTPError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    raise SystemExit("gateway did not start:\n" + log_path.read_text(errors="replace")[-4000:])
                time.sleep(0.1)
        yield proc, endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def s3_client(endpoint: str, key: tuple[str, str]):  # type: ignore[no-untyped-def]
    # boto3's defaults, as real clients send them: CRC32 in aws-chunked trailers on
    # uploads, response checksum validation on downloads (plus our own sha256 check).
    return boto3.client(
        "s3", endpoint_url=endpoint, region_name=REGION, aws_access_key_id=key[0], aws_secret_access_key=key[1],
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1},
                      read_timeout=300, max_pool_connections=32),
    )


# --- the operations ---------------------------------------------------------------------------------


@dataclass
class Row:
    operation: str
    size: int
    seconds: float
    idle: int | None = None
    peak: int | None = None
    hwm: int | None = None
    samples: int = 0

    @property
    def rise(self) -> int | None:
        return None if self.idle is None or self.peak is None else self.peak - self.idle

    @property
    def hwm_rise(self) -> int | None:
        return None if self.idle is None or self.hwm is None else self.hwm - self.idle


def read_stream(body, piece: int = MiB) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    digest, total = hashlib.sha256(), 0
    while chunk := body.read(piece):
        digest.update(chunk)
        total += len(chunk)
    body.close()
    return total, digest.hexdigest()


def mb(n: int | None) -> str:
    return "-" if n is None else f"{n / 1e6:.1f}"


def print_table(rows: list[Row]) -> None:
    header = ("operation", "bytes", "seconds", "MB/s", "idle RSS MB", "peak RSS MB", "peak-idle MB",
              "VmHWM-idle MB", "samples")
    lines = [header]
    for r in rows:
        lines.append((r.operation, str(r.size), f"{r.seconds:.2f}", f"{r.size / r.seconds / 1e6:.1f}",
                      mb(r.idle), mb(r.peak), mb(r.rise), mb(r.hwm_rise), str(r.samples) if r.samples else "-"))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for n, line in enumerate(lines):
        print("| " + " | ".join(cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i])
                                for i, cell in enumerate(line)) + " |")
        if n == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="1GiB", help="object size, e.g. 1GiB, 256MiB (default 1GiB)")
    parser.add_argument("--part-size", default="8MiB", help="multipart part size (boto3's default, 8MiB)")
    parser.add_argument("--concurrency", type=int, default=10, help="parts in flight (boto3's default, 10)")
    parser.add_argument("--limit-mb", type=float, default=200.0, help="allowed peak RSS above idle, in MB (1e6 bytes)")
    parser.add_argument("--interval", type=float, default=0.05, help="RSS sampling interval, seconds")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-direct-put", dest="direct_put", action="store_false",
                        help="skip the multipart upload straight to moto (the PUT throughput reference)")
    args = parser.parse_args(argv)
    size = parse_size(args.size, "--size")
    part_size = parse_size(args.part_size, "--part-size")
    transfer = TransferConfig(multipart_threshold=part_size, multipart_chunksize=part_size,
                              max_concurrency=args.concurrency)

    with tempfile.TemporaryDirectory(prefix="gateway-bench-") as tmp, moto_server() as origin:
        with gateway_process(origin, Path(tmp) / "gateway.log") as (proc, endpoint):
            pid = proc.pid
            s3 = s3_client(endpoint, USER)
            direct = s3_client(origin, ORIGIN_CREDENTIALS)
            s3.create_bucket(Bucket=BUCKET)
            # Warm-up: one small PUT and GET, so lazy imports and first-use allocations
            # are part of "idle" rather than of the first measured operation.
            s3.put_object(Bucket=BUCKET, Key="warmup", Body=b"x" * 1024)
            s3.get_object(Bucket=BUCKET, Key="warmup")["Body"].read()
            time.sleep(1.0)
            rows: list[Row] = []

            idle = rss_bytes(pid)
            print(f"gateway pid {pid}, idle RSS {mb(idle)} MB; uploading {size} bytes "
                  f"in {part_size}-byte parts, {args.concurrency} at a time ...", flush=True)
            with PeakSampler(pid, args.interval) as sampler:
                started = time.perf_counter()
                s3.upload_fileobj(PseudoRandomFile(size, args.seed), BUCKET, KEY, Config=transfer)
                seconds = time.perf_counter() - started
            rows.append(Row("PUT multipart via gateway", size, seconds, idle, sampler.peak, sampler.hwm, sampler.samples))

            # The baseline stays the idle RSS from before the upload: what the allocator
            # kept from the upload counts against the GET too (the stricter reading).
            time.sleep(1.0)
            print(f"RSS after the upload, before the GET: {mb(rss_bytes(pid))} MB; "
                  f"GET through the gateway ...", flush=True)
            with PeakSampler(pid, args.interval) as sampler:
                started = time.perf_counter()
                got_size, got_sha = read_stream(s3.get_object(Bucket=BUCKET, Key=KEY)["Body"])
                seconds = time.perf_counter() - started
            rows.append(Row("GET via gateway", got_size, seconds, idle, sampler.peak, sampler.hwm, sampler.samples))

            print("GET straight from moto ...", flush=True)
            started = time.perf_counter()
            direct_size, direct_sha = read_stream(direct.get_object(Bucket=BUCKET, Key=KEY)["Body"])
            rows.append(Row("GET direct from moto", direct_size, time.perf_counter() - started))

            if args.direct_put:
                print("PUT multipart straight to moto ...", flush=True)
                started = time.perf_counter()
                direct.upload_fileobj(PseudoRandomFile(size, args.seed), BUCKET, KEY + ".direct", Config=transfer)
                rows.append(Row("PUT multipart direct to moto", size, time.perf_counter() - started))

    print("checking content ...", flush=True)
    want = expected_sha256(size, args.seed)
    print()
    print_table(rows)
    put, get, moto_get = rows[:3]
    print(f"\nGET throughput gateway/direct: {moto_get.seconds / get.seconds:.2f}")
    if len(rows) > 3:
        print(f"PUT throughput gateway/direct: {rows[3].seconds / put.seconds:.2f}")
    print(f"sha256 sent {want}\n       via gateway {got_sha} ({'ok' if got_sha == want else 'MISMATCH'})"
          f"\n       direct      {direct_sha} ({'ok' if direct_sha == want else 'MISMATCH'})")
    if got_sha != want or direct_sha != want or got_size != size:
        print("FAIL: the object read back differs from the one sent", file=sys.stderr)
        return 2
    limit = args.limit_mb * 1e6
    over = [r for r in (put, get) if (r.rise or 0) > limit or (r.hwm_rise or 0) > limit]
    if over:
        print(f"FAIL: peak RSS above idle exceeds {args.limit_mb:g} MB for: "
              + ", ".join(r.operation for r in over), file=sys.stderr)
        return 1
    print(f"OK: peak RSS above idle stayed under {args.limit_mb:g} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
