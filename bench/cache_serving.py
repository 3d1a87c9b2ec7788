"""Serving benchmark: GET throughput and latency through the gateway vs the origin vs nginx.

In one run on this machine, for 4 KiB, 1 MiB and 64 MiB objects, at a fixed concurrency
per size (32, 32, 4 connections), it measures GETs against these setups:

  origin          moto's S3 server, straight (the origin the next four are in front of)
  nginx           apt nginx with `proxy_cache` (on disk) in front of the same moto, warmed
  nginx-tmpfs     the same with its cache folder on tmpfs (/dev/shm), warmed
  gw-mem          the gateway, warm, served from its memory tier
  gw-disk         the gateway, warm, served from a disk tier (cache.memory_quota = 0)
  gw-cold         the gateway, every read a first read: distinct keys that were never read,
                  on a gateway process started fresh for the cell (empty cache)
  shaped-origin   bench/shaped_origin.py, straight: an S3-like GET/HEAD origin that, unlike
                  moto, keeps connections alive and reads only the bytes asked for
  gw-cold/shaped  like gw-cold, in front of the shaped origin (--no-shaped skips both)

with two load generators, both sending SigV4-signed requests:

  wrk         wrk (C) cycling through a file of whole requests made before the cell (a Lua
              script), one row per kind (--signing): by default `sdk`, GetObject requests as
              boto3 sends them, made by botocore itself (a client's get_object caught before
              sending): SigV4 in the Authorization header, each with its own x-amz-date (one
              second apart, within S3's 15-minute skew for the run) and amz-sdk-invocation-id
              (gateway.s3api.replays answers the second and later of one shape as kept, the
              signature checked anew); `sdk-ranges`, the same with each request its own Range,
              as engines read a warm file's row groups (the Range is cut out of a shape too: each
              answered for its own Range); `presigned-new`, presigned URLs each its own (its own X-Amz-Date and signature);
              `same-bytes`, one presigned URL per object sent again and again (what only a
              dashboard reusing one URL sends: gateway.s3api.replays answers it as kept).
  py          an asyncio + aiohttp client, N workers, that signs every request in the
              Authorization header (SigV4, as boto3 does) just before sending it.

For each cell it prints req/s, MB/s (payload bytes, 1 MB = 10^6 bytes), p50 and p99
latency (request sent to last byte received) and the CPU that processes outside the
benchmark took meanwhile (a cell is measured again when that exceeds --busy cores); then
the issue's targets as ratios measured in this run, and the gateways' peak RSS (VmHWM)
against memory quota + 200 MB. gw-mem-2w is the memory gateway as a node of 2 workers
(--workers; its CPU per request is compared with gw-mem's, the gateway CPU of every cell
is in the table; a warm gateway's note says which share of its GETs the hit path answered
below ASGI and as kept, from its metrics). With --profile it then runs py-spy on the warm memory
gateway under wrk load (4 KiB and 1 MiB) and on cold 1 MiB reads from the shaped origin,
and summarises where the time goes. All gateway processes of a run execute one copy of
gateway/ taken at the start (its commit is printed).

Everything (client, gateway, moto, nginx) shares this machine's cores: with 2 cores, the
load generator takes CPU from the server it measures.

    .venv/bin/python bench/cache_serving.py                 # ~6 minutes
    .venv/bin/python bench/cache_serving.py --profile       # plus py-spy profiles (~40 s more)
    .venv/bin/python bench/cache_serving.py --sizes 4KiB --seconds 3   # a quick look
    .venv/bin/python bench/cache_serving.py --hits --code HEAD --profile   # hits as SDKs send them (~3 min)

`--json PATH` also writes the results as a JSON results file (the headline ratios of a whole run, or
the rows of --hits), from which bench/charts.py draws the charts of docs/benchmarks.md.

`--hits` measures only warm hits, as docs/benchmarks.md "Hits against nginx" reports them:
the gateway (one worker, memory tier) against nginx proxy_cache on tmpfs (one worker, sendfile
off), both on CPU 0 and wrk on CPU 1 (taskset), 1,000 objects of 4 KiB and 100 of 1 MiB, one
row per --hits-rows entry (SDK-signed 4 KiB and 1 MiB, SDK-signed 4 KiB each its own Range,
each-new presigned 4 KiB, same-bytes 4 KiB), the same request file sent to both; with --profile, py-spy of SDK-signed 4 KiB hits.

Needs: apt-get install -y nginx wrk; .venv/bin/pip install aiohttp (py-spy for --profile).
Results and the machine they were taken on: docs/benchmarks.md (the latest) and
docs/benchmarks-notes.md (every run).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import hashlib
import hmac
import json
import math
import os
import platform
import re
import resource
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self
from urllib.parse import quote, urlsplit

import boto3
import httpx
from botocore.config import Config

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gateway.config import parse_size
from tests.servers import free_port, moto_server

KiB, MiB = 1024, 1024 * 1024
BUCKET = "bench"
ADMIN_TOKEN = "cache-serving"  # every gateway's admin API: its metrics say how hits were answered
REGION = "us-east-1"
USER = ("AKIABENCH0000000001", "bench-secret-000000000000000000000000001")
ORIGIN_CREDENTIALS = ("origin-key", "origin-secret")
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
RSS_ALLOWANCE = 200 * 10**6  # the "memory-tier quota + 200 MB"
PRESIGN_EXPIRES = 6 * 3600


# --- per-size plan ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SizePlan:
    label: str
    size: int
    connections: int
    warm_objects: int  # the hot set every warm setup cycles through


def plans(labels: Sequence[str], connections: dict[str, int]) -> list[SizePlan]:
    known = {
        "4KiB": SizePlan("4KiB", 4 * KiB, 32, 256),
        "1MiB": SizePlan("1MiB", MiB, 32, 64),
        "64MiB": SizePlan("64MiB", 64 * MiB, 4, 6),
    }
    out = []
    for label in labels:
        if label not in known:
            raise SystemExit(f"--sizes: one of {', '.join(known)}, not {label!r}")
        plan = known[label]
        if label in connections:
            plan = SizePlan(plan.label, plan.size, connections[label], plan.warm_objects)
        out.append(plan)
    return out


# --- processes -------------------------------------------------------------------------------------


def _status_kib(pid: int, name: str) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(name + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{name} not in /proc/{pid}/status")


def _wait_http(url: str, proc: subprocess.Popen[bytes], what: str, log: Path | None) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(url, timeout=1)  # any answer means it is serving
            return
        except httpx.HTTPError:
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
                raise SystemExit(f"{what} did not start\n{tail}") from None
            time.sleep(0.1)


def _wait_listening(log: Path, offset: int, proc: subprocess.Popen[bytes], what: str, timeout: float = 60) -> None:
    """Until the node logged (past `offset`) that every worker serves: with several workers the
    port answers once the first does, and a read measured while another still starts shares the
    cores with its start and finds it unable to answer ("worker N did not answer (worker-N:
    ConnectionError)", the block fetched and not kept)."""
    deadline = time.monotonic() + timeout
    while b"gateway listening on" not in log.read_bytes()[offset:]:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{what} did not say it serves\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.05)


def _stop(proc: subprocess.Popen[bytes], timeout: float = 10) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass
class Gateway:
    """One `python -m gateway.cli serve` process configured by GATEWAY_* variables."""

    name: str
    origin: str
    env: dict[str, str]
    workdir: Path
    code: Path = ROOT  # the folder holding the gateway package it runs (a snapshot, see main)
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    peak_rss: int = 0  # max VmHWM over every process this Gateway ran
    peak_tmpfs: int = 0  # max bytes of its run folder on tmpfs (the memory tier of several workers)
    # max, over the looks record_peak takes (at the end of each cell), of what the node holds with
    # each page counted once: its processes' RSS but the tmpfs pages they map (RssShmem), plus tmpfs
    peak_once: int = 0
    workers: int = 1  # server.workers it runs with
    starts: int = 0
    cpus: str = ""  # run it (every process and thread) under `taskset -c cpus`

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> None:
        env = dict(os.environ)
        env.update({
            "GATEWAY_ORIGIN_ENDPOINT": self.origin,
            "GATEWAY_ORIGIN_ACCESS_KEY": ORIGIN_CREDENTIALS[0],
            "GATEWAY_ORIGIN_SECRET_KEY": ORIGIN_CREDENTIALS[1],
            "GATEWAY_SERVER_HOST": "127.0.0.1",
            "GATEWAY_SERVER_PORT": str(self.port),
            "GATEWAY_AUTH_USERS": json.dumps([{"access_key": USER[0], "secret_key": USER[1],
                                               "grants": [{"bucket": BUCKET, "access": "read"}]}]),
        })
        env.update(self.env)
        self.workers = int(env.get("GATEWAY_SERVER_WORKERS", "1"))
        self.starts += 1
        log = self.workdir / f"{self.name.replace('/', '-')}.log"
        logged = log.stat().st_size if log.exists() else 0
        with open(log, "ab") as fh:
            self.proc = subprocess.Popen(
                [*(["taskset", "-c", self.cpus] if self.cpus else []),
                 sys.executable, "-m", "gateway.cli", "serve", "--log-level", "WARNING"],
                cwd=self.code, env=env, stdout=fh, stderr=subprocess.STDOUT,
            )
        _wait_http(self.endpoint + "/", self.proc, f"gateway {self.name}", log)
        _wait_listening(log, logged, self.proc, f"gateway {self.name}")

    def record_peak(self) -> int:
        """The peak RSS so far: of all its processes together (a node of several workers: the
        sum of each one's peak, which is at least the peak of the sum)."""
        if self.proc is not None and self.proc.poll() is None:
            peaks = unshared = 0
            for pid in tree(self.pid):
                try:
                    peaks += _status_kib(pid, "VmHWM") * 1024
                    unshared += (_status_kib(pid, "VmRSS") - _status_kib(pid, "RssShmem")) * 1024
                except (OSError, RuntimeError):
                    pass  # gone meanwhile
            tmpfs = self.tmpfs_bytes()
            self.peak_rss = max(self.peak_rss, peaks)
            self.peak_tmpfs = max(self.peak_tmpfs, tmpfs)
            self.peak_once = max(self.peak_once, unshared + tmpfs)
        return self.peak_rss

    def cpu(self) -> float:
        """CPU seconds its processes (all workers of the node) used so far."""
        return tree_cpu(self.pid)

    def hit_path(self) -> tuple[float, float, float]:
        """(GETs answered, of them below ASGI, of them answered as kept) so far, from the node's
        metrics (all its workers)."""
        text = httpx.get(f"{self.endpoint}/_gateway/metrics", headers={"authorization": f"Bearer {ADMIN_TOKEN}"},
                         timeout=10).text
        counts = {"gateway_requests_total": 0.0, "gateway_hit_path_requests_total": 0.0,
                  "gateway_hit_path_replayed_total": 0.0}
        for line in text.splitlines():
            name = line.split("{")[0].split(" ")[0]
            if name in counts and (name != "gateway_requests_total" or 'operation="GetObject"' in line):
                counts[name] += float(line.rsplit(" ", 1)[1])
        return counts["gateway_requests_total"], counts["gateway_hit_path_requests_total"], \
            counts["gateway_hit_path_replayed_total"]

    def tmpfs_bytes(self) -> int:
        """Bytes of the node's run folder on tmpfs (with several workers: the memory tier's block files)."""
        total = 0
        for root in Path("/dev/shm").glob(f"s3gw-{self.port}-*"):
            for folder, _, files in os.walk(root):
                for name in files:
                    try:
                        total += os.path.getsize(os.path.join(folder, name))
                    except OSError:
                        pass
        return total

    def stop(self) -> None:
        if self.proc is not None:
            self.record_peak()
            _stop(self.proc)
            self.proc = None

    def restart(self) -> None:
        """A fresh process on the same port: an empty cache (memory tier; disk folders are not used)."""
        self.stop()
        self.start()


NGINX_CONF = """\
# Generated by bench/cache_serving.py: nginx proxy_cache (on disk) in front of the origin.
{user}worker_processes {workers};
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    sendfile {sendfile};
    tcp_nopush on;
    keepalive_requests 1000000;
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy_temp;
    fastcgi_temp_path {dir}/fastcgi_temp;
    uwsgi_temp_path {dir}/uwsgi_temp;
    scgi_temp_path {dir}/scgi_temp;
    proxy_cache_path {cache} levels=1:2 keys_zone=bench:64m max_size=16g inactive=1h use_temp_path=off;
    upstream origin {{
        server {origin};
        keepalive 64;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host {origin};
            proxy_cache bench;
            proxy_cache_key $uri;
            proxy_cache_valid 200 1h;
            proxy_cache_lock on;
            proxy_cache_lock_timeout 60s;
            proxy_read_timeout 120s;
            add_header x-cache $upstream_cache_status;
        }}
    }}
}}
"""


@contextmanager
def nginx_process(origin: str, workdir: Path, workers: str, *, name: str = "nginx",
                  cache: Path | None = None, sendfile: bool = True,
                  cpus: str = "") -> Iterator[tuple[str, Path, int]]:
    """apt nginx as a subprocess with a generated nginx.conf; yields (endpoint, conf path, master pid).
    `cache`: the proxy_cache folder (default: in `workdir`, on disk; /dev/shm/... for tmpfs);
    `cpus`: run it (master and workers) under `taskset -c cpus`."""
    if shutil.which("nginx") is None:
        raise SystemExit("nginx not found: apt-get install -y nginx")
    root = workdir / name
    root.mkdir()
    port = free_port()
    conf = root / "nginx.conf"
    user = "user root;\n" if os.geteuid() == 0 else ""  # workers may write the cache in our temp folder
    conf.write_text(NGINX_CONF.format(user=user, workers=workers, dir=root, port=port,
                                      cache=cache or root / "cache", origin=urlsplit(origin).netloc,
                                      sendfile="on" if sendfile else "off"))
    proc = subprocess.Popen([*(["taskset", "-c", cpus] if cpus else []), "nginx", "-c", str(conf), "-p", str(root), "-e", str(root / "error.log")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        _wait_http(endpoint + "/", proc, "nginx", root / "error.log")
        yield endpoint, conf, proc.pid
    finally:
        proc.send_signal(15)  # TERM: fast shutdown of master and workers
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --- objects and URLs ------------------------------------------------------------------------------


def s3_client(endpoint: str, credentials: tuple[str, str]):  # type: ignore[no-untyped-def]
    return boto3.client(
        "s3", endpoint_url=endpoint, region_name=REGION,
        aws_access_key_id=credentials[0], aws_secret_access_key=credentials[1],
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"},
                      retries={"max_attempts": 2}, read_timeout=300, max_pool_connections=16),
    )


def create_objects(origin_s3, prefix: str, size: int, count: int) -> list[str]:  # type: ignore[no-untyped-def]
    """`count` objects of `size` random bytes at the origin: one PUT, then server-side copies."""
    keys = [f"{prefix}/{i:06d}" for i in range(count)]
    origin_s3.put_object(Bucket=BUCKET, Key=keys[0], Body=os.urandom(size))

    def copy(key: str) -> None:
        origin_s3.copy_object(Bucket=BUCKET, Key=key, CopySource={"Bucket": BUCKET, "Key": keys[0]})

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(copy, keys[1:]))
    return keys


def delete_objects(origin_s3, keys: Sequence[str]) -> None:  # type: ignore[no-untyped-def]
    for i in range(0, len(keys), 1000):
        origin_s3.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]],
                                                        "Quiet": True})


def link_objects(root: Path, prefix: str, size: int, count: int) -> list[str]:
    """`count` objects of `size` random bytes for the shaped origin: one file, then hard links."""
    folder = root / BUCKET / prefix
    folder.mkdir(parents=True, exist_ok=True)
    keys = [f"{prefix}/{i:06d}" for i in range(count)]
    first = root / BUCKET / keys[0]
    first.write_bytes(os.urandom(size))
    for key in keys[1:]:
        os.link(first, root / BUCKET / key)
    return keys


@contextmanager
def shaped_origin_process(root: Path, workdir: Path, latency: str, rate: str) -> Iterator[str]:
    """bench/shaped_origin.py as a subprocess; yields its endpoint."""
    port = free_port()
    log = workdir / "shaped-origin.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "shaped_origin.py"), "--root", str(root),
                                 "--port", str(port), "--latency", latency, "--rate", rate],
                                stdout=fh, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        _wait_http(endpoint + "/", proc, "shaped origin", log)
        yield endpoint
    finally:
        _stop(proc)


def presigned_paths(endpoint: str, keys: Sequence[str]) -> list[str]:
    """One SigV4 presigned GET per key, as path?query for wrk.

    The first URL comes from boto3 (generate_presigned_url, s3v4); the others are made
    the same way with its X-Amz-Date by `presign` (boto3 takes ~0.5 ms a URL, too slow
    for pools of thousands), and checked to be byte-identical to boto3's on the first key.
    """
    s3 = s3_client(endpoint, USER)
    url = s3.generate_presigned_url("get_object", Params={"Bucket": BUCKET, "Key": keys[0]}, ExpiresIn=PRESIGN_EXPIRES)
    parts = urlsplit(url)
    reference = f"{parts.path}?{parts.query}"
    amz_date = re.search(r"X-Amz-Date=(\d{8}T\d{6}Z)", parts.query).group(1)  # type: ignore[union-attr]
    signer = HeaderSigner(parts.netloc, USER)
    mine = signer.presign(f"/{BUCKET}/{keys[0]}", amz_date)
    if mine != reference:
        raise SystemExit(f"presign mismatch:\n boto3 {reference}\n ours  {mine}")
    return [reference] + [signer.presign(f"/{BUCKET}/{key}", amz_date) for key in keys[1:]]


class HeaderSigner:
    """SigV4 in the Authorization header for a GET without a body (what boto3 sends).

    Signs host, x-amz-content-sha256 (the empty body's hash) and x-amz-date; the
    signing key is derived once per day, as SDKs cache it.
    """

    def __init__(self, host: str, credentials: tuple[str, str]) -> None:
        self.host = host
        self.access_key, self.secret = credentials
        self._day = ""
        self._key = b""

    def _signing_key(self, day: str) -> bytes:
        if day != self._day:
            key = ("AWS4" + self.secret).encode()
            for part in (day, REGION, "s3", "aws4_request"):
                key = hmac.new(key, part.encode(), hashlib.sha256).digest()
            self._day, self._key = day, key
        return self._key

    def presign(self, path: str, amz_date: str) -> str:
        """path?query of a presigned GET (X-Amz-* in the query, UNSIGNED-PAYLOAD), as boto3 builds it."""
        day = amz_date[:8]
        scope = f"{day}/{REGION}/s3/aws4_request"
        query = (f"X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={self.access_key}%2F{scope.replace('/', '%2F')}"
                 f"&X-Amz-Date={amz_date}&X-Amz-Expires={PRESIGN_EXPIRES}&X-Amz-SignedHeaders=host")
        creq = f"GET\n{quote(path)}\n{query}\nhost:{self.host}\n\nhost\nUNSIGNED-PAYLOAD"  # query sorted
        sts = f"AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{hashlib.sha256(creq.encode()).hexdigest()}"
        signature = hmac.new(self._signing_key(day), sts.encode(), hashlib.sha256).hexdigest()
        wire = query.replace(f"&X-Amz-Expires={PRESIGN_EXPIRES}&X-Amz-SignedHeaders=host",
                             f"&X-Amz-SignedHeaders=host&X-Amz-Expires={PRESIGN_EXPIRES}")  # boto3's order
        return f"{quote(path)}?{wire}&X-Amz-Signature={signature}"

    def __call__(self, path: str) -> dict[str, str]:
        amz_date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        day = amz_date[:8]
        signed = "host;x-amz-content-sha256;x-amz-date"
        creq = (f"GET\n{path}\n\nhost:{self.host}\nx-amz-content-sha256:{EMPTY_SHA256}\n"
                f"x-amz-date:{amz_date}\n\n{signed}\n{EMPTY_SHA256}")
        scope = f"{day}/{REGION}/s3/aws4_request"
        sts = f"AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{hashlib.sha256(creq.encode()).hexdigest()}"
        signature = hmac.new(self._signing_key(day), sts.encode(), hashlib.sha256).hexdigest()
        return {
            "x-amz-date": amz_date,
            "x-amz-content-sha256": EMPTY_SHA256,
            "authorization": f"AWS4-HMAC-SHA256 Credential={self.access_key}/{scope}, "
                             f"SignedHeaders={signed}, Signature={signature}",
        }


# --- requests as the SDKs send them ----------------------------------------------------------------

# What wrk sends, one kind per row (--signing):
#   sdk            a GetObject as botocore signs it: SigV4 in the Authorization header, each
#                  request with its own x-amz-date and amz-sdk-invocation-id (so its own
#                  signature), and every header botocore sends; made by botocore itself
#   presigned-new  a presigned GET, each URL its own (its own X-Amz-Date, so its own signature)
#   same-bytes     one presigned URL per key, sent again byte for byte (what only a dashboard
#                  reusing one URL sends; gateway.s3api.replays answers it as kept)
#   sdk-ranges     as sdk, each request with its own Range (bytes=N-, N the times its key came
#                  before): no two requests of the file are the same but for their dates, and one
#                  shape per key (auth.shaped cuts the Range out: s3api.replays answers each Range
#                  of a kept shape)
SIGNINGS = ("sdk", "sdk-ranges", "presigned-new", "same-bytes")
DATE_WINDOW = 600  # seconds a request file's dates spread over: well inside S3's 15-minute skew


@contextmanager
def botocore_clock(start: float) -> Iterator[Callable[[float], None]]:
    """botocore's signing clock set by the caller: yields `set_time(epoch seconds)`. botocore's
    signers (its own, and awscrt's that it picks when awscrt is installed, as here) read the
    time through `get_current_datetime`, patched in their modules only: the signing is theirs."""
    import datetime as dt
    import importlib

    now = [dt.datetime.fromtimestamp(start, dt.timezone.utc).replace(tzinfo=None)]

    def current(remove_tzinfo: bool = True) -> dt.datetime:
        return now[0] if remove_tzinfo else now[0].replace(tzinfo=dt.timezone.utc)

    def set_time(epoch: float) -> None:
        now[0] = dt.datetime.fromtimestamp(epoch, dt.timezone.utc).replace(tzinfo=None)

    modules = []
    for name in ("botocore.auth", "botocore.signers", "botocore.crt.auth"):
        try:
            modules.append(importlib.import_module(name))
        except ImportError:  # botocore.crt.auth without awscrt
            pass
    saved = [module.get_current_datetime for module in modules]
    for module in modules:
        module.get_current_datetime = current
    try:
        yield set_time
    finally:
        for module, original in zip(modules, saved):
            module.get_current_datetime = original


def _dates(count: int, start: float) -> Iterator[float]:
    """One date per request: from a minute before `start`, moving one second at a time, as many
    requests per second as it takes to spread `count` over at most DATE_WINDOW seconds."""
    per_second = max(1, math.ceil(count / DATE_WINDOW))
    for i in range(count):
        yield start - 60 + i // per_second


def wire_bytes(method: str, url: str, headers: Sequence[tuple[str, str | bytes]]) -> bytes:
    """The request as botocore puts it on the wire (urllib3 over http.client): the request line,
    Accept-Encoding: identity (added by http.client), then its headers in their order."""
    parts = urlsplit(url)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    lines = [f"{method} {target} HTTP/1.1", "Accept-Encoding: identity"]
    for name, value in headers:
        lines.append(f"{name}: {value.decode() if isinstance(value, bytes) else value}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def sdk_requests(endpoint: str, keys: Sequence[str], count: int, *, start: float | None = None,
                 ranges: bool = False) -> list[bytes]:
    """`count` GetObject requests (keys in turn) as boto3 sends them to `endpoint`: made by a
    boto3 client's own get_object (handlers, signer, user agent, invocation id), caught before
    sending (botocore's before-send event answers them with an empty 200), each signed at its
    own date (_dates); `ranges`: each with its own Range (bytes=N-, N the times its key came before)."""
    from botocore.awsrequest import AWSResponse

    s3 = s3_client(endpoint, USER)
    caught: list[bytes] = []

    class _Empty:
        def stream(self, **_: object) -> Iterator[bytes]:
            return iter([b""])

    def catch(request, **_: object) -> AWSResponse:  # type: ignore[no-untyped-def]
        caught.append(wire_bytes(request.method, request.url, list(request.headers.items())))
        return AWSResponse(request.url, 200, {"content-length": "0", "etag": '"bench"'}, _Empty())

    s3.meta.events.register("before-send.s3.GetObject", catch)
    start = time.time() if start is None else start
    with botocore_clock(start) as set_time:
        for i, date in enumerate(_dates(count, start)):
            set_time(date)
            ranged = {"Range": f"bytes={i // len(keys)}-"} if ranges else {}
            s3.get_object(Bucket=BUCKET, Key=keys[i % len(keys)], **ranged)
    return caught


def presigned_new_requests(endpoint: str, keys: Sequence[str], count: int, *,
                           start: float | None = None) -> list[bytes]:
    """`count` presigned GETs (keys in turn) from boto3's generate_presigned_url, each at its own
    date (_dates), so no two are the same URL while no more than len(keys) share a second; sent
    as wrk sends a URL (request line and Host)."""
    s3 = s3_client(endpoint, USER)
    host = urlsplit(endpoint).netloc
    start = time.time() if start is None else start
    out = []
    with botocore_clock(start) as set_time:
        for i, date in enumerate(_dates(count, start)):
            set_time(date)
            url = s3.generate_presigned_url("get_object", Params={"Bucket": BUCKET, "Key": keys[i % len(keys)]},
                                            ExpiresIn=PRESIGN_EXPIRES)
            parts = urlsplit(url)
            out.append(f"GET {parts.path}?{parts.query} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    if len(set(out)) != len(out):
        raise SystemExit("presigned-new: two requests of the file are the same bytes")
    return out


def same_bytes_requests(endpoint: str, keys: Sequence[str]) -> list[bytes]:
    """One presigned GET per key (presigned_paths), as wrk sends a URL: cycled, each is sent
    again byte for byte."""
    host = urlsplit(endpoint).netloc
    return [f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode() for path in presigned_paths(endpoint, keys)]


def wrk_requests(signing: str, endpoint: str, keys: Sequence[str], count: int) -> list[bytes]:
    """The requests wrk cycles through for one row: `count` of them (same-bytes: one per key;
    a cold row, whose keys are each read once, passes count=len(keys))."""
    if signing == "sdk":
        return sdk_requests(endpoint, keys, count)
    if signing == "sdk-ranges":
        return sdk_requests(endpoint, keys, count, ranges=True)
    if signing == "presigned-new":
        return presigned_new_requests(endpoint, keys, count)
    if signing == "same-bytes":
        return same_bytes_requests(endpoint, keys)
    raise SystemExit(f"--signing: one of {', '.join(SIGNINGS)}, not {signing!r}")


# --- other load on the machine -------------------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK")


def _processes() -> tuple[dict[int, list[int]], dict[int, float]]:
    """(children of each pid, CPU seconds of each live process so far)."""
    parents: dict[int, list[int]] = collections.defaultdict(list)
    times: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(fields[1])].append(int(entry))
        times[int(entry)] = (int(fields[11]) + int(fields[12])) / _TICK
    return parents, times


def _tree(parents: dict[int, list[int]], pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo.extend(parents.get(found[-1], []))
    return found


def tree(pid: int) -> list[int]:
    """`pid` and its live descendants (a node's supervisor and its workers)."""
    return _tree(_processes()[0], pid)


def tree_cpu(pid: int) -> float:
    """CPU seconds used so far by `pid` and its live descendants."""
    parents, times = _processes()
    return sum(times.get(one, 0.0) for one in _tree(parents, pid))


def _own_cpu() -> float:
    """CPU seconds used so far by this process, its finished children and its live descendants."""
    parents, times = _processes()
    total = sum(times.get(one, 0.0) for one in _tree(parents, os.getpid())[1:])
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def _machine_busy() -> float:
    """CPU seconds the machine spent busy (user, nice, system, irq, softirq), all cores."""
    with open("/proc/stat") as fh:
        fields = fh.readline().split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in fields[:7])
    return (user + nice + system + irq + softirq) / _TICK


class OtherLoad:
    """How much CPU the rest of the machine (other users' tests, ...) took during a cell."""

    def __enter__(self) -> Self:
        self.cores = 0.0
        self._t, self._busy, self._own = time.monotonic(), _machine_busy(), _own_cpu()
        return self

    def __exit__(self, *exc: object) -> None:
        elapsed = time.monotonic() - self._t
        other = (_machine_busy() - self._busy) - (_own_cpu() - self._own)
        self.cores = max(0.0, other / elapsed) if elapsed > 0 else 0.0


# --- measurements ----------------------------------------------------------------------------------


@dataclass
class Cell:
    setup: str
    client: str
    size: int
    ok: int  # complete 200 responses of the right length
    errors: int
    seconds: float
    p50_ms: float
    p99_ms: float
    note: str = ""
    payload: int | None = None  # body bytes received, partial answers included (None: ok * size)
    other: float = 0.0  # CPU used meanwhile by processes not of this benchmark, in cores
    server_cpu: float | None = None  # CPU seconds the gateway's processes used during the cell

    @property
    def cpu_us_per_request(self) -> float | None:
        if self.server_cpu is None or not self.ok:
            return None
        return self.server_cpu / self.ok * 1e6

    @property
    def rps(self) -> float:
        return self.ok / self.seconds if self.seconds else 0.0

    @property
    def mbps(self) -> float:
        payload = self.ok * self.size if self.payload is None else self.payload
        return payload / self.seconds / 1e6 if self.seconds else 0.0


WRK_LUA = """\
-- bench/cache_serving.py: GET each path of a file in turn (args: file, thread count, and "fresh"
-- for a header of its own on every request: no two requests are the same bytes).
local paths, n, i, step, fresh = {}, 0, 0, 1, false
local counter, threads = 0, {}

function setup(thread)
  counter = counter + 1
  thread:set("id", counter)
  table.insert(threads, thread)
end

function init(args)
  for line in io.lines(args[1]) do n = n + 1; paths[n] = line end
  step = tonumber(args[2])
  fresh = args[3] == "fresh"
  i = id - 1
end

function request()
  local path = paths[(i % n) + 1]
  i = i + step
  if fresh then return wrk.format("GET", path, {["X-Bench-Request"] = tostring(i)}) end
  return wrk.format("GET", path)
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK {"requests": %d, "bytes": %d, "duration_us": %d, "connect": %d, "read": %d, "write": %d, ' ..
    '"status": %d, "timeout": %d, "p50_us": %d, "p99_us": %d}\\n',
    summary.requests, summary.bytes, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
"""


WRK_RAW_LUA = """\
-- bench/cache_serving.py: send each request of a file in turn, as it is (args: file, thread count).
-- The file holds whole GET requests (no body), each ending with an empty line.
local requests, n, i, step = {}, 0, 0, 1
local counter = 0

function setup(thread)
  counter = counter + 1
  thread:set("id", counter)
end

function init(args)
  local fh = assert(io.open(args[1], "rb"))
  local data = fh:read("*a")
  fh:close()
  local pos = 1
  while true do
    local stop = string.find(data, "\\r\\n\\r\\n", pos, true)
    if not stop then break end
    n = n + 1
    requests[n] = string.sub(data, pos, stop + 3)
    pos = stop + 4
  end
  step = tonumber(args[2])
  i = id - 1
end

function request()
  local one = requests[(i % n) + 1]
  i = i + step
  return one
end
""" + WRK_LUA[WRK_LUA.index("function done"):]

def header_bytes(endpoint: str, path: str) -> int:
    """The size of one answer's status line and headers, to take out of wrk's byte count."""
    with httpx.Client(timeout=300) as client, client.stream("GET", endpoint + path) as resp:
        size = len(f"HTTP/1.1 {resp.status_code} {resp.reason_phrase}\r\n") + 2
        size += sum(len(k) + len(v) + 4 for k, v in resp.headers.raw)
        for _ in resp.iter_raw(MiB):
            pass
    return size


def run_wrk(setup: str, endpoint: str, paths: Sequence[str], size: int, connections: int, seconds: float,
            workdir: Path, *, distinct: bool = False, header_size: int = 0, fresh: bool = False,
            raw: Sequence[bytes] | None = None, signing: str = "", cpus: str = "") -> Cell:
    """wrk -t1 -cN for `seconds`, cycling through `paths` (each used once when `distinct`;
    with `fresh`, every request carries an unsigned header of its own, so none is sent again
    byte for byte: gateway.s3api.replays answers none). With `raw`, it cycles through these
    whole requests instead (wrk_requests of kind `signing`, the cell's client "wrk:<signing>";
    `paths` is not used), and the note says when it sent the file more than once. `cpus`: run
    wrk under `taskset -c cpus`.

    req/s counts complete answers; MB/s counts every body byte received, also of answers
    still in flight when the time is up (wrk counts bytes as they arrive): with 64 MiB
    objects and a few connections, complete answers alone would undercount.
    """
    script = workdir / ("raw.lua" if raw is not None else "cycle.lua")
    if not script.exists():
        script.write_text(WRK_RAW_LUA if raw is not None else WRK_LUA)
    listing = workdir / ("requests.txt" if raw is not None else "paths.txt")
    if raw is not None:
        listing.write_bytes(b"".join(raw))
    else:
        listing.write_text("\n".join(paths) + "\n")
    pool = len(raw) if raw is not None else len(paths)
    timeout = max(10, int(size / MiB))
    cmd = [*(["taskset", "-c", cpus] if cpus else []),
           "wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", "--timeout", f"{timeout}s",
           "-s", str(script), endpoint, "--", str(listing), "1", *(["fresh"] if fresh and raw is None else [])]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + timeout + 60, check=False)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("WRK ")), None)
    if line is None:
        raise SystemExit(f"wrk failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    r = json.loads(line[4:])
    errors = r["status"] + r["read"] + r["write"] + r["timeout"] + r["connect"]
    ok = r["requests"] - r["status"]
    notes = []
    if distinct and r["requests"] + connections > pool:
        notes.append(f"pool of {pool} keys reused: some reads were warm")
    elif raw is not None and r["requests"] + connections > pool:
        notes.append(f"file of {pool:,} requests sent {(r['requests'] + connections) / pool:.1f}x")
    if ok == 0:
        notes.append(f"no answer completed in {seconds:g}s")
    payload = max(0, r["bytes"] - r["requests"] * header_size)
    p50, p99 = (r["p50_us"] / 1e3, r["p99_us"] / 1e3) if ok else (float("nan"), float("nan"))
    client = "wrk" if raw is None else f"wrk:{signing}"
    return Cell(setup, client, size, ok, errors, r["duration_us"] / 1e6, p50, p99, "; ".join(notes), payload)


async def _py_load(endpoint: str, keys: Sequence[str], size: int, connections: int, seconds: float,
                   signer: HeaderSigner, once: bool,
                   sources: collections.Counter[str]) -> tuple[int, int, int, float, list[float]]:
    import aiohttp

    latencies: list[float] = []
    state = {"next": 0, "ok": 0, "errors": 0, "bytes": 0}
    big = size > MiB
    connector = aiohttp.TCPConnector(limit=connections, force_close=False, enable_cleanup_closed=False)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=max(30, size / MiB))
    started = time.perf_counter()
    stop_at = started + seconds

    async def worker(session: aiohttp.ClientSession) -> None:
        while time.perf_counter() < stop_at:
            i = state["next"]
            if once and i >= len(keys):
                return
            state["next"] = i + 1
            path = f"/{BUCKET}/{keys[i % len(keys)]}"
            t0 = time.perf_counter()
            try:
                async with session.get(endpoint + path, headers=signer(path)) as resp:
                    if big:
                        got = 0
                        async for chunk in resp.content.iter_any():
                            got += len(chunk)
                    else:
                        got = len(await resp.read())
                    status = resp.status
                    sources[resp.headers.get("x-cache", "-")] += 1
            except (aiohttp.ClientError, TimeoutError):
                state["errors"] += 1
                continue
            if status == 200:
                state["bytes"] += got
            if status == 200 and got == size:
                state["ok"] += 1
                latencies.append(time.perf_counter() - t0)
            else:
                state["errors"] += 1

    async with aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False) as session:
        await asyncio.gather(*(worker(session) for _ in range(connections)))
    return state["ok"], state["errors"], state["bytes"], time.perf_counter() - started, latencies


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, math.ceil(q / 100 * len(sorted_values)) - 1))
    return sorted_values[index]


def run_py(setup: str, endpoint: str, keys: Sequence[str], size: int, connections: int, seconds: float,
           *, once: bool = False, expect: str | None = None) -> Cell:
    """The aiohttp client, Authorization-header SigV4 on every request, for `seconds`
    (or until each key was read once when `once`)."""
    try:
        import uvloop
        runner = uvloop.run
    except ImportError:  # pragma: no cover
        runner = asyncio.run
    signer = HeaderSigner(urlsplit(endpoint).netloc, USER)
    sources: collections.Counter[str] = collections.Counter()
    ok, errors, payload, elapsed, lat = runner(_py_load(endpoint, keys, size, connections, seconds, signer, once, sources))
    lat.sort()
    note = ""
    if expect is not None and set(sources) - {expect}:
        note = "x-cache " + ", ".join(f"{k}={v}" for k, v in sorted(sources.items()))
    if once and ok + errors >= len(keys):
        note = (note + "; " if note else "") + f"ran out of cold keys ({len(keys)}) before {seconds:g}s"
    return Cell(setup, "py", size, ok, errors, elapsed, _percentile(lat, 50) * 1e3, _percentile(lat, 99) * 1e3, note,
                payload)


def warm(endpoint: str, keys: Sequence[str], size: int, connections: int) -> collections.Counter[str]:
    """Read every key once (fills a cache) and report how the last reads were served."""
    run_py("warm-up", endpoint, keys, size, min(connections, 8), 600, once=True)
    sources: collections.Counter[str] = collections.Counter()
    signer = HeaderSigner(urlsplit(endpoint).netloc, USER)
    with httpx.Client(timeout=120) as client:
        for key in keys[: min(len(keys), 8)]:
            path = f"/{BUCKET}/{key}"
            with client.stream("GET", endpoint + path, headers=signer(path)) as resp:
                for _ in resp.iter_raw(MiB):
                    pass
                sources[resp.headers.get("x-cache", "-")] += 1
    return sources


# --- py-spy ----------------------------------------------------------------------------------------


# Areas, matched against py-spy's "function (package/module.py)" frames. Standard-library
# frames (asyncio, hmac, urllib, _strptime, ...) are no area of their own: their time goes to
# the innermost frame of an area that called them ("self" below means exactly that).
CATEGORIES = [
    ("auth/SigV4 (s3api/auth/, signing.py)", re.compile(r"\((?:gateway/s3api/auth/\w+|gateway/signing)\.py\)")),
    ("gateway s3api (parse, handlers, responses)", re.compile(r"\((?:gateway/s3api/|gateway/app\.py)")),
    ("engine (engine/, objects.py)", re.compile(r"\(gateway/(?:engine/\w+|objects)\.py\)")),
    ("store (store/)", re.compile(r"\(gateway/store/")),
    ("origin client (origin.py, aiohttp, yarl, multidict)",
     re.compile(r"\((?:aiohttp|yarl|multidict)/|\(gateway/origin\.py\)")),
    ("starlette responses", re.compile(r"\(starlette/")),
    ("anyio (task groups, cancel scopes, sockets)", re.compile(r"\(anyio/")),
    ("uvicorn (httptools protocol, ASGI send)", re.compile(r"\(uvicorn/")),
    ("logging", re.compile(r"\(logging/")),
    ("event loop (uvloop C code: I/O, scheduling)", re.compile(r"^Runner\.run \(asyncio/runners\.py\)$")),
]


def _category(frames: Sequence[str]) -> str:
    """The area of the innermost frame that belongs to one."""
    for frame in reversed(frames):
        for name, pattern in CATEGORIES:
            if pattern.search(frame):
                return name
    return "other"


def _short(frame: str) -> str:
    # "func (path/to/site-packages/pkg/mod.py)" -> "func (pkg/mod.py)"
    return re.sub(r"\(.*?(?:site-packages/|/work/main/|lib/python3\.\d+/)", "(", frame)


def summarise_profile(raw: Path, top: int = 12) -> str:
    """Self and inclusive time per frame and per area, from py-spy's raw (collapsed) output."""
    self_t: collections.Counter[str] = collections.Counter()
    incl_t: collections.Counter[str] = collections.Counter()
    cat_self: collections.Counter[str] = collections.Counter()
    cat_incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [f for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        total += count
        leaf = _short(frames[-1])
        self_t[leaf] += count
        cat_self[_category(frames)] += count
        for f in {_short(f) for f in frames}:
            incl_t[f] += count
        for c in {_category([f]) for f in frames}:
            cat_incl[c] += count
    if not total:
        return "(no samples)"
    lines = [f"{total} samples"]
    lines.append("  by area            self%   inclusive%")
    for name, _ in [*CATEGORIES, ("other", None)]:
        if cat_incl[name] or cat_self[name]:
            lines.append(f"    {name:<42} {100 * cat_self[name] / total:5.1f}   {100 * cat_incl[name] / total:5.1f}")
    lines.append("  top self time:")
    for frame, n in self_t.most_common(top):
        lines.append(f"    {100 * n / total:5.1f}%  {frame}")
    lines.append("  top inclusive time (excluding the event-loop/ASGI entry frames above 90%):")
    shown = 0
    for frame, n in incl_t.most_common():
        if n / total > 0.9:
            continue
        lines.append(f"    {100 * n / total:5.1f}%  {frame}")
        shown += 1
        if shown == top:
            break
    return "\n".join(lines)


def profile_gateway(gw: Gateway, label: str, paths: Sequence[str], size: int, connections: int, seconds: float,
                    workdir: Path, out_dir: Path, *, distinct: bool = False, raw: Sequence[bytes] | None = None,
                    signing: str = "", cpus: str = "", top: int = 12) -> tuple[Cell | None, str]:
    """py-spy record (raw, 100 Hz) of the gateway process (of a node of several: its first
    worker) while wrk loads it for `seconds` (with `raw`: those requests, see run_wrk)."""
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(pyspy).exists():
        return None, "py-spy not installed (.venv/bin/pip install py-spy)"
    out = out_dir / f"{gw.name.replace('/', '-')}-{label}.txt"
    target = min(tree(gw.pid)[1:], default=gw.pid)  # the supervisor of a node serves nothing itself
    spy = subprocess.Popen([pyspy, "record", "-p", str(target), "-d", str(int(seconds) + 1), "-r", "100",
                            "-f", "raw", "--nolineno", "-o", str(out)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(0.5)
    cell = run_wrk(f"{gw.name} (py-spy)", gw.endpoint, paths, size, connections, seconds, workdir, distinct=distinct,
                   raw=raw, signing=signing, cpus=cpus)
    _, err = spy.communicate(timeout=60)
    if spy.returncode != 0 or not out.exists():
        return cell, f"py-spy failed: {err.decode(errors='replace')[-500:]}"
    return cell, summarise_profile(out, top)


# --- report ----------------------------------------------------------------------------------------


def table(cells: Sequence[Cell]) -> str:
    header = ("setup", "client", "req/s", "MB/s", "p50 ms", "p99 ms", "errors", "other load", "gw CPU us/req", "note")
    rows = [header] + [
        (c.setup, c.client, f"{c.rps:,.0f}", f"{c.mbps:,.1f}", f"{c.p50_ms:.2f}", f"{c.p99_ms:.2f}",
         str(c.errors), f"{c.other:.2f}", "" if c.cpu_us_per_request is None else f"{c.cpu_us_per_request:,.0f}",
         c.note)
        for c in cells
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    out = []
    for n, r in enumerate(rows):
        out.append("| " + " | ".join(cell.ljust(widths[i]) if i in (0, 1, 9) else cell.rjust(widths[i])
                                     for i, cell in enumerate(r)) + " |")
        if n == 0:
            out.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(out)


def verdict(ratio: float, target: float) -> str:
    if ratio >= target:
        return f"{ratio:.2f}x (target >= {target:g}x: met)"
    return f"{ratio:.2f}x (target >= {target:g}x: MISSED by {100 * (1 - ratio / target):.0f}%)"


def machine() -> str:
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = _status_kib_meminfo()
    nginx_v = subprocess.run(["nginx", "-v"], capture_output=True, text=True, check=False).stderr.strip().split("/")[-1]
    wrk_v = subprocess.run(["wrk", "-v"], capture_output=True, text=True, check=False).stdout.split()[1] if shutil.which("wrk") else "?"
    return (f"{os.cpu_count()} vCPU ({model}), {mem / 1024:.0f} MiB RAM, Linux {platform.release()}, "
            f"Python {platform.python_version()}, nginx {nginx_v}, wrk {wrk_v}")


def code_version() -> str:
    """The commit the gateway runs from, and whether gateway/ has uncommitted changes."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "gateway"], cwd=ROOT, capture_output=True, text=True,
                               check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git work tree)"
    return head + (" with uncommitted changes in gateway/" if dirty else "")


def gateway_copy(into: Path, revision: str) -> str:
    """gateway/ copied into `into` (the work tree's, or with `revision` that commit's, by git
    archive); returns what it is, for the report."""
    into.mkdir(parents=True)
    if not revision:
        shutil.copytree(ROOT / "gateway", into / "gateway", ignore=shutil.ignore_patterns("__pycache__"))
        return code_version()
    full = subprocess.run(["git", "-C", str(ROOT), "rev-parse", revision], check=True, capture_output=True,
                          text=True).stdout.strip()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", full, "gateway"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return f"{full} (git archive{compile_sigv4_check(into)})"


def compile_sigv4_check(code: Path) -> str:
    """Builds a git-archived gateway's compiled SigV4 check (gcc -O2, the same for every `--code`
    run; the work tree's is pip's build), so that an A/B of two commits, each run with `--code`,
    compares the same kind of check; what it did, for the report."""
    source = code / "gateway" / "s3api" / "auth" / "_sigv4check.c"
    if not source.exists():
        return ""
    built = source.with_name("_sigv4check" + sysconfig.get_config_var("EXT_SUFFIX"))
    command = ["gcc", "-shared", "-fPIC", "-O2", "-I", sysconfig.get_paths()["include"], str(source),
               "-lcrypto", "-o", str(built)]
    result = subprocess.run(command, capture_output=True, text=True)
    return ", compiled check built" if result.returncode == 0 else ", compiled check NOT built: pure Python"


def _status_kib_meminfo() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1])
    return 0


# --- hits as SDKs send them (--hits) ---------------------------------------------------------------

HIT_ROWS = "4KiB:sdk,4KiB:sdk-ranges,1MiB:sdk,4KiB:presigned-new,4KiB:same-bytes"
HIT_OBJECTS = "4KiB=1000,1MiB=100"
HITS_TTL = "1h"  # the gateway's metadata.ttl in --hits (see hits_as_sent)


def best_cell(measure: Callable[[], Cell], busy: float, retries: int, what: str) -> Cell:
    """`measure()` again (up to `retries` times) while other processes took more than `busy`
    cores during it; the cell with the least other load."""
    cell: Cell | None = None
    for attempt in range(1 + retries):
        with OtherLoad() as load:
            run = measure()
        run.other = load.cores
        if attempt:
            run.note = "; ".join(filter(None, [run.note, f"measured {attempt + 1}x: other load"]))
        if cell is None or run.other < cell.other:
            cell = run
        if cell.other <= busy:
            break
        print(f"   ({what}: other processes took {run.other:.2f} cores; again)", flush=True)
        time.sleep(3)
    assert cell is not None
    return cell


HIT_ROW_NAMES = {"sdk": "SDK-signed", "sdk-ranges": "SDK-signed, each its own Range", "presigned-new": "each-new presigned",
                 "same-bytes": "same bytes again"}
# gateway / nginx req/s that docs/benchmarks.md holds each row of --hits to (none for same-bytes: a reference)
HIT_TARGETS = {"sdk 4KiB": 0.5, "sdk 1MiB": 1.0, "presigned-new 4KiB": 0.4}


def _spaced(label: str) -> str:
    return label.replace("KiB", " KiB").replace("MiB", " MiB")


def hit_rows(results: Sequence[tuple[str, Cell, Cell]]) -> list[dict[str, object]]:
    """The rows of --hits (name, gateway cell, nginx cell) as a results file holds them."""
    rows: list[dict[str, object]] = []
    for name, g, n in results:
        signing, _, label = name.partition(" ")
        row: dict[str, object] = {
            "row": f"{HIT_ROW_NAMES.get(signing, signing)} {_spaced(label)}"
                   + (" (reference)" if signing == "same-bytes" else ""),
            "signing": signing, "size": label}
        for setup, cell in (("gateway", g), ("nginx", n)):
            cpu = cell.cpu_us_per_request
            row.update({f"{setup}_rps": round(cell.rps, 1), f"{setup}_mbps": round(cell.mbps, 1),
                        f"{setup}_cpu_us": None if cpu is None else round(cpu, 1),
                        f"{setup}_p50_ms": round(cell.p50_ms, 3), f"{setup}_p99_ms": round(cell.p99_ms, 3),
                        f"{setup}_errors": cell.errors, f"{setup}_other_load": round(cell.other, 2)})
        row["note"] = "; ".join(filter(None, [g.note, n.note and "nginx: " + n.note]))
        if name in HIT_TARGETS:
            row["target"] = HIT_TARGETS[name]
        rows.append(row)
    return rows


def serving_rows(results: dict[str, list[Cell]], client: str, workers: int,
                 nginx_workers: str) -> list[dict[str, object]]:
    """The headline ratios of a whole run, each with its target, as docs/benchmarks.md reports them:
    rows whose two cells this run measured (with `client`'s cells)."""
    def pick(label: str, setup: str) -> Cell | None:
        return next((c for c in results.get(label, []) if c.setup == setup and c.client == client), None)

    def figure(cell: Cell, what: str) -> float | None:
        return {"rps": cell.rps, "mbps": cell.mbps, "cpu": cell.cpu_us_per_request}[what]

    many = f"gw-mem-{workers}w"
    specs = [  # row, size, setup, against, figure, target, target is a ceiling
        ("warm 4 KiB req/s, 1 worker vs nginx-tmpfs with 1 worker", "4KiB", "gw-mem", "nginx-tmpfs-1w", "rps", 0.5,
         False),
        (f"warm 4 KiB req/s, {workers} workers vs nginx-tmpfs ({nginx_workers} workers)", "4KiB", many,
         "nginx-tmpfs", "rps", 0.8, False),
        (f"CPU per 4 KiB hit, {workers} workers / 1 worker", "4KiB", many, "gw-mem", "cpu", 1.15, True),
        (f"warm 1 MiB MB/s, 1 worker vs nginx (disk cache, {nginx_workers} workers)", "1MiB", "gw-mem", "nginx",
         "mbps", 1.0, False),
        (f"warm 64 MiB MB/s, 1 worker vs nginx (disk cache, {nginx_workers} workers)", "64MiB", "gw-mem", "nginx",
         "mbps", 1.0, False),
        ("disk tier 1 MiB MB/s vs memory tier", "1MiB", "gw-disk", "gw-mem", "mbps", 0.8, False),
        ("cold 1 MiB MB/s, 1 worker vs the shaped origin directly", "1MiB", "gw-cold/shaped", "shaped-origin", "mbps",
         0.7, False),
    ]
    rows: list[dict[str, object]] = []
    for name, label, setup, against, what, goal, lower in specs:
        a, b = pick(label, setup), pick(label, against)
        over, under = (figure(a, what), figure(b, what)) if a and b else (None, None)
        if over is None or not under:
            continue
        row: dict[str, object] = {"row": name, "ratio": round(over / under, 4), "target": goal,
                                  "over": round(over, 1), "under": round(under, 1)}
        if lower:
            row["lower"] = True
        rows.append(row)
    return rows


def cell_records(results: dict[str, list[Cell]]) -> list[dict[str, object]]:
    """Every cell of a whole run, for the results file."""
    return [{"size": label, "setup": c.setup, "client": c.client, "rps": round(c.rps, 1), "mbps": round(c.mbps, 1),
             "p50_ms": round(c.p50_ms, 3), "p99_ms": round(c.p99_ms, 3), "errors": c.errors,
             "other_load": round(c.other, 2),
             "cpu_us_per_request": None if c.cpu_us_per_request is None else round(c.cpu_us_per_request, 1),
             "note": c.note} for label, cells in results.items() for c in cells]


def save_results(path: str, bench: str, args: argparse.Namespace, version: str, load: str,
                 rows: list[dict[str, object]], **extra: object) -> None:
    """`--json`: the run as a results file (bench/charts.py)."""
    from bench.charts import results_document, write_results

    document = results_document(bench, rows, command=args.command, commit=version, machine=machine(), load=load)
    write_results(path, {**document, **extra})


def hits_as_sent(args: argparse.Namespace, tmp: Path, code: Path, version: str) -> int:
    """Warm hits from the gateway's memory tier (one worker, on one core) against nginx
    proxy_cache on tmpfs (one worker, sendfile off, on the same core), wrk on the other core,
    one row per size and kind of request (--hits-rows): the same request file to both."""
    server_cpu, client_cpu = args.server_cpu, args.client_cpu
    if (server_cpu or client_cpu) and shutil.which("taskset") is None:
        raise SystemExit("taskset not found (util-linux)")
    rows = []
    for part in filter(None, args.hits_rows.split(",")):
        label, _, signing = part.strip().partition(":")
        if signing not in SIGNINGS:
            raise SystemExit(f"--hits-rows: <size>:<{'|'.join(SIGNINGS)}>, not {part!r}")
        rows.append((plans([label], {})[0], signing))
    objects = {k.strip(): int(v) for k, _, v in (x.partition("=") for x in args.hits_objects.split(",") if x)}
    quota = parse_size(args.memory_quota, "--memory-quota")
    load_before = os.getloadavg()
    print(f"hits as SDKs send them: gateway (1 worker) and nginx (1 worker, proxy_cache on tmpfs, sendfile off) "
          f"{'on CPU ' + server_cpu if server_cpu else 'unpinned'}, wrk {'on CPU ' + client_cpu if client_cpu else ''}"
          f"; {args.seconds:g}s per cell; gateway metadata.ttl {HITS_TTL}; load average before "
          f"{load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}", flush=True)
    results: list[tuple[str, Cell, Cell]] = []
    profile: tuple[Cell | None, str] | None = None
    with ExitStack() as stack:
        origin = stack.enter_context(moto_server())
        shm = Path(tempfile.mkdtemp(prefix="gateway-serving-nginx-", dir="/dev/shm"))
        stack.callback(shutil.rmtree, shm, True)
        nginx, _, nginx_pid = stack.enter_context(nginx_process(origin, tmp, "1", name="nginx-tmpfs",
                                                                cache=shm / "cache", sendfile=False,
                                                                cpus=server_cpu))
        # metadata.ttl past the whole run: the objects' metadata, fetched within seconds of each other,
        # would otherwise expire together in the middle of a later row (a hit does not renew it), and
        # that row measure a burst of revalidations where a steady load revalidates each object once a
        # TTL. (At 3bf5e20, in the one run of four whose rows took longest to make, 40 s: presigned-new
        # had 3% of its requests on the ASGI path, 79% by shape, 2,269 req/s; the others 95-96%.)
        gw = Gateway("gw-mem", origin, {"GATEWAY_SERVER_WORKERS": "1", "GATEWAY_ADMIN_TOKEN": ADMIN_TOKEN,
                                        "GATEWAY_CACHE_MEMORY_QUOTA": str(quota), "GATEWAY_METADATA_TTL": HITS_TTL},
                     tmp, code, cpus=server_cpu)
        gw.start()
        stack.callback(gw.stop)
        origin_s3 = s3_client(origin, ORIGIN_CREDENTIALS)
        origin_s3.create_bucket(Bucket=BUCKET)
        keys: dict[str, list[str]] = {}
        headers: dict[tuple[str, str], int] = {}
        for plan, _ in rows:
            if plan.label not in keys:
                count = objects.get(plan.label, plan.warm_objects)
                print(f"   creating {count} objects of {plan.label} ...", flush=True)
                keys[plan.label] = create_objects(origin_s3, f"warm/{plan.label}", plan.size, count)
                for setup, endpoint, expect in (("nginx", nginx, "HIT"), ("gateway", gw.endpoint, "hit-mem")):
                    served = warm(endpoint, keys[plan.label], plan.size, plan.connections)
                    if set(served) != {expect}:
                        print(f"   WARNING: {setup} after warm-up answered x-cache {dict(served)}, expected {expect}")
                    headers[(setup, plan.label)] = header_bytes(
                        endpoint, presigned_paths(gw.endpoint, keys[plan.label][-1:])[0])

        def run(setup: str, endpoint: str, plan: SizePlan, signing: str, requests: Sequence[bytes]) -> Cell:
            return run_wrk(setup, endpoint, [], plan.size, plan.connections, args.seconds, tmp, raw=requests,
                           signing=signing, header_size=headers[(setup, plan.label)], cpus=client_cpu)

        for plan, signing in rows:
            name = f"{signing} {plan.label}"
            t0 = time.monotonic()
            requests = wrk_requests(signing, gw.endpoint, keys[plan.label], args.requests)
            made = time.monotonic() - t0
            warm(gw.endpoint, keys[plan.label], plan.size, plan.connections)  # every object in the memory tier

            def gateway_cell(plan: SizePlan = plan, signing: str = signing,
                             requests: Sequence[bytes] = requests) -> Cell:
                cpu, before = gw.cpu(), gw.hit_path()
                cell = run("gateway", gw.endpoint, plan, signing, requests)
                gets, below, kept = (b - a for a, b in zip(before, gw.hit_path()))
                cell.server_cpu = gw.cpu() - cpu
                cell.note = "; ".join(filter(None, [cell.note, f"below ASGI {below / max(gets, 1):.0%}, "
                                                               f"kept {kept / max(gets, 1):.0%}"
                                                               + (" (by shape)" if signing.startswith("sdk") else "")]))
                return cell

            def nginx_cell(plan: SizePlan = plan, signing: str = signing,
                           requests: Sequence[bytes] = requests) -> Cell:
                cpu = tree_cpu(nginx_pid)
                cell = run("nginx", nginx, plan, signing, requests)
                cell.server_cpu = tree_cpu(nginx_pid) - cpu
                return cell

            g = best_cell(gateway_cell, args.busy, args.retries, f"gateway {name}")
            n = best_cell(nginx_cell, args.busy, args.retries, f"nginx {name}")
            results.append((name, g, n))
            print(f"   {name:<20} gateway {g.rps:8,.0f} req/s {g.mbps:8,.1f} MB/s (other {g.other:.2f})   "
                  f"nginx {n.rps:8,.0f} req/s {n.mbps:8,.1f} MB/s (other {n.other:.2f})   "
                  f"ratio {g.rps / n.rps if n.rps else float('nan'):.2f}   [{len(requests):,} requests made in "
                  f"{made:.0f}s] {g.note}", flush=True)

        if args.profile:
            plan = plans(["4KiB"], {})[0]
            if plan.label not in keys:
                raise SystemExit("--profile with --hits needs a 4KiB row")
            out_dir = Path(args.profile_dir) if args.profile_dir else tmp
            out_dir.mkdir(parents=True, exist_ok=True)
            requests = wrk_requests("sdk", gw.endpoint, keys[plan.label], args.requests)
            warm(gw.endpoint, keys[plan.label], plan.size, plan.connections)
            profile = profile_gateway(gw, "4KiB-sdk", [], plan.size, plan.connections, args.profile_seconds, tmp,
                                      out_dir, raw=requests, signing="sdk", cpus=client_cpu, top=15)
    load_after = os.getloadavg()

    print(f"\n### Hits as SDKs send them (gateway {version}; load average before "
          f"{load_before[0]:.2f}/{load_before[1]:.2f}/{load_before[2]:.2f}, after "
          f"{load_after[0]:.2f}/{load_after[1]:.2f}/{load_after[2]:.2f})\n")
    header = ("row", "gateway req/s", "MB/s", "nginx req/s", "MB/s", "gw/nginx", "gw p50/p99 ms", "gw CPU us/req",
              "nginx CPU us/req", "other load gw/nginx", "errors gw/nginx", "note")
    lines = [header]
    for name, g, n in results:
        lines.append((name, f"{g.rps:,.0f}", f"{g.mbps:,.1f}", f"{n.rps:,.0f}", f"{n.mbps:,.1f}",
                      f"{g.rps / n.rps:.2f}x" if n.rps else "-", f"{g.p50_ms:.2f}/{g.p99_ms:.2f}",
                      f"{g.cpu_us_per_request or 0:,.0f}", f"{n.cpu_us_per_request or 0:,.0f}",
                      f"{g.other:.2f}/{n.other:.2f}", f"{g.errors}/{n.errors}",
                      "; ".join(filter(None, [g.note, n.note and "nginx: " + n.note]))))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for i, line in enumerate(lines):
        print("| " + " | ".join(c.ljust(widths[j]) if j in (0, 11) else c.rjust(widths[j])
                                for j, c in enumerate(line)) + " |")
        if i == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    if profile is not None:
        cell, summary = profile
        extra = f" — {cell.rps:,.0f} req/s while sampled" if cell else ""
        print(f"\n[py-spy of the gateway, SDK-signed 4 KiB hits, {args.profile_seconds:g}s]{extra}\n{summary}")
    if args.json:
        save_results(args.json, "cache_serving.hits", args, version,
                     f"load average before {load_before[0]:.2f}/{load_before[1]:.2f}/{load_before[2]:.2f}, after "
                     f"{load_after[0]:.2f}/{load_after[1]:.2f}/{load_after[2]:.2f}", hit_rows(results))
    return 0


# --- main ------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="4KiB,1MiB,64MiB", help="comma-separated: 4KiB,1MiB,64MiB")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each measured cell")
    parser.add_argument("--connections", default="", help="override, e.g. 4KiB=16,64MiB=2 (default 32, 32, 4)")
    parser.add_argument("--memory-quota", default="1GiB", help="gw-mem and gw-cold memory tier (cache.memory_quota)")
    parser.add_argument("--disk-quota", default="4GiB", help="gw-disk's one disk tier")
    parser.add_argument("--block-size", default="", help="cache.block_size of every gateway (default: the gateway's)")
    parser.add_argument("--readahead", default="", help="cache.readahead_blocks of every gateway (default: the gateway's)")
    parser.add_argument("--nginx-workers", default="auto", help="nginx worker_processes (auto = one per core)")
    parser.add_argument("--workers", type=int, default=2,
                        help="also gw-mem-<N>w: the memory gateway with server.workers=N (0 or 1: not measured)")
    parser.add_argument("--clients", default="wrk,py", help="load generators: wrk, py or both")
    parser.add_argument("--signing", default="sdk",
                        help="what wrk sends, one row each: sdk (default: each request signed anew by botocore, "
                             "as the SDKs send a GetObject), presigned-new (each URL its own), same-bytes (one "
                             "presigned URL per key, sent again and again)")
    parser.add_argument("--requests", type=int, default=30000,
                        help="requests per wrk file of a warm row (sdk, presigned-new), made before the row and "
                             "cycled if wrk sends more (its note says so)")
    parser.add_argument("--hits", action="store_true",
                        help="only the hits of requests as SDKs send them: gateway vs nginx proxy_cache on tmpfs, "
                             "pinned (--hits-rows, --server-cpu, --client-cpu); --profile: py-spy of SDK 4KiB hits")
    parser.add_argument("--hits-rows", default=HIT_ROWS, help=f"--hits: <size>:<signing> rows (default {HIT_ROWS})")
    parser.add_argument("--hits-objects", default=HIT_OBJECTS, help=f"--hits: warm objects per size ({HIT_OBJECTS})")
    parser.add_argument("--server-cpu", default="0", help="--hits: the CPU of gateway and nginx (taskset; '' unpinned)")
    parser.add_argument("--client-cpu", default="1", help="--hits: wrk's CPU (taskset; '' unpinned)")
    parser.add_argument("--code", default="",
                        help="run the gateway of this commit (git archive), not the work tree's gateway/")
    parser.add_argument("--busy", type=float, default=0.25,
                        help="measure a cell again when other processes took more than this many cores meanwhile")
    parser.add_argument("--retries", type=int, default=1, help="how many times a busy cell is measured again")
    parser.add_argument("--no-shaped", dest="shaped", action="store_false",
                        help="skip the shaped origin (bench/shaped_origin.py) rows")
    parser.add_argument("--shaped-latency", default="0", help="shaped origin: delay before each first byte, e.g. 20ms")
    parser.add_argument("--shaped-rate", default="0", help="shaped origin: per-connection bytes/s, e.g. 80MB (0: no cap)")
    parser.add_argument("--profile", action="store_true", help="then py-spy the warm memory gateway (4KiB, 1MiB)")
    parser.add_argument("--profile-seconds", type=float, default=10.0)
    parser.add_argument("--profile-dir", default="", help="keep py-spy's raw output here (default: a temp folder)")
    parser.add_argument("--keep", action="store_true", help="keep the temp folder (logs, nginx.conf)")
    parser.add_argument("--json", default="", metavar="PATH",
                        help="also write the results here as a JSON results file (bench/charts.py draws it)")
    args = parser.parse_args(argv)
    args.command = shlex.join([".venv/bin/python", "bench/cache_serving.py",
                               *(sys.argv[1:] if argv is None else argv)])

    if shutil.which("wrk") is None and "wrk" in args.clients:
        raise SystemExit("wrk not found: apt-get install -y wrk")
    overrides = {}
    for part in filter(None, args.connections.split(",")):
        label, _, n = part.partition("=")
        overrides[label.strip()] = int(n)
    sizes = plans([s.strip() for s in args.sizes.split(",") if s.strip()], overrides)
    signings = [v.strip() for v in args.signing.split(",") if v.strip()]
    if not signings or set(signings) - set(SIGNINGS):
        raise SystemExit(f"--signing: some of {', '.join(SIGNINGS)}, not {args.signing!r}")
    # wrk: one client per kind of request it sends (wrk:sdk, ...), each its own row
    clients = [f"wrk:{v}" if c.strip() == "wrk" else c.strip() for c in args.clients.split(",") if c.strip()
               for v in (signings if c.strip() == "wrk" else [""])]
    quota = parse_size(args.memory_quota, "--memory-quota")
    seconds = args.seconds

    tmp = Path(tempfile.mkdtemp(prefix="gateway-serving-"))
    # Every gateway process of the run (cold ones are restarted per cell) runs one copy of
    # the gateway package, taken now: the work tree may change while the benchmark runs.
    code = tmp / "code"
    version = gateway_copy(code, args.code)
    print(f"machine: {machine()}")
    print(f"gateway code: {version} (copied to {code} for the whole run)")
    if args.hits:
        try:
            return hits_as_sent(args, tmp, code, version)
        finally:
            if not args.keep:
                shutil.rmtree(tmp, ignore_errors=True)
    print(f"NOTE: load generator, gateway, moto and nginx all share these {os.cpu_count()} cores over loopback;"
          " every figure is bounded by that (a faster server leaves less CPU to the client and vice versa).")
    print(f"cells: {seconds:g}s each; connections " + ", ".join(f"{p.label}={p.connections}" for p in sizes)
          + f"; gateway memory tier {args.memory_quota}; nginx worker_processes {args.nginx_workers}"
          + f"; gateway block size {args.block_size or 'default'}, readahead {args.readahead or 'default'}")
    print("wrk rows (wrk:<kind>): sdk = GetObject requests made by botocore, each signed anew (Authorization"
          " header, own x-amz-date and amz-sdk-invocation-id); presigned-new = presigned URLs, each its own;"
          " same-bytes = one presigned URL per key, sent again byte for byte."
          " py rows: aiohttp client, SigV4 Authorization header computed per request.\n", flush=True)

    started, load_before = time.monotonic(), os.getloadavg()
    results: dict[str, list[Cell]] = {}
    profiles: list[tuple[str, Cell | None, str]] = []
    with ExitStack() as stack:
        if not args.keep:
            stack.callback(shutil.rmtree, tmp, True)
        origin = stack.enter_context(moto_server())
        nginx, nginx_conf, nginx_pid = stack.enter_context(nginx_process(origin, tmp, args.nginx_workers))
        # The same nginx with its cache on tmpfs (memory), like the gateway's memory tier.
        shm = Path(tempfile.mkdtemp(prefix="gateway-serving-nginx-", dir="/dev/shm"))
        stack.callback(shutil.rmtree, shm, True)
        nginx_tmpfs, _, nginx_tmpfs_pid = stack.enter_context(
            nginx_process(origin, tmp, args.nginx_workers, name="nginx-tmpfs", cache=shm / "cache"))
        # With --workers: the same with one worker, for what a second worker costs nginx per request.
        nginx_one = None
        if args.workers > 1:
            nginx_one = stack.enter_context(nginx_process(origin, tmp, "1", name="nginx-tmpfs-1w",
                                                          cache=shm / "cache-1w"))
        origin_s3 = s3_client(origin, ORIGIN_CREDENTIALS)
        origin_s3.create_bucket(Bucket=BUCKET)
        shaped = shaped_root = None
        if args.shaped:
            shaped_root = tmp / "shaped-origin"
            (shaped_root / BUCKET).mkdir(parents=True)
            shaped = stack.enter_context(shaped_origin_process(shaped_root, tmp, args.shaped_latency, args.shaped_rate))

        disk_dir = tmp / "disk-tier"
        # one process, unless the setup says otherwise (gw-mem-<N>w); the admin API for hit_path()
        common = {"GATEWAY_SERVER_WORKERS": "1", "GATEWAY_ADMIN_TOKEN": ADMIN_TOKEN}
        if args.block_size:
            common["GATEWAY_CACHE_BLOCK_SIZE"] = str(parse_size(args.block_size, "--block-size"))
        if args.readahead:
            common["GATEWAY_CACHE_READAHEAD_BLOCKS"] = args.readahead
        gw_mem = Gateway("gw-mem", origin, {**common, "GATEWAY_CACHE_MEMORY_QUOTA": str(quota)}, tmp, code)
        gw_disk = Gateway("gw-disk", origin, {
            **common,
            "GATEWAY_CACHE_MEMORY_QUOTA": "0",
            "GATEWAY_CACHE_DISK": json.dumps([{"path": str(disk_dir), "quota": args.disk_quota}]),
        }, tmp, code)
        gw_cold = Gateway("gw-cold", origin, {**common, "GATEWAY_CACHE_MEMORY_QUOTA": str(quota)}, tmp, code)
        gateways = [gw_mem, gw_disk, gw_cold]
        gw_workers = None
        if args.workers > 1:
            gw_workers = Gateway(f"gw-mem-{args.workers}w", origin, {
                **common, "GATEWAY_CACHE_MEMORY_QUOTA": str(quota), "GATEWAY_SERVER_WORKERS": str(args.workers)},
                tmp, code)
            gateways.append(gw_workers)
        gw_cold_shaped = None
        if shaped is not None:
            gw_cold_shaped = Gateway("gw-cold/shaped", shaped, {**common, "GATEWAY_CACHE_MEMORY_QUOTA": str(quota)},
                                     tmp, code)
            gateways.append(gw_cold_shaped)
        gw_cold_workers = None
        if shaped is not None and args.workers > 1:
            gw_cold_workers = Gateway(f"gw-cold-{args.workers}w/shaped", shaped, {
                **common, "GATEWAY_CACHE_MEMORY_QUOTA": str(quota), "GATEWAY_SERVER_WORKERS": str(args.workers)},
                tmp, code)
            gateways.append(gw_cold_workers)
        for gw in gateways:
            gw.start()
            stack.callback(gw.stop)
        print(f"origin (moto) {origin}; nginx {nginx} (conf {nginx_conf}); "
              + "; ".join(f"{gw.name} {gw.endpoint}" for gw in gateways)
              + f"; gw-disk folder {disk_dir}" + (f"; shaped origin {shaped}" if shaped else "") + "\n", flush=True)

        for plan in sizes:
            t0 = time.monotonic()
            conns = plan.connections
            cells: list[Cell] = []
            results[plan.label] = cells
            print(f"== {plan.label}: creating {plan.warm_objects} objects ...", flush=True)
            warm_keys = create_objects(origin_s3, f"warm/{plan.label}", plan.size, plan.warm_objects)
            cold_seconds = seconds * (2 if plan.size >= 64 * MiB else 1)

            def measure(setup: str, endpoint: str, keys: Sequence[str], expect: str | None, *,
                        cold: Gateway | None = None, server: Callable[[], float] | None = None,
                        cell_seconds: float = seconds, plan: SizePlan = plan, conns: int = conns,
                        cells: list[Cell] = cells, gateway: Gateway | None = None) -> None:
                """One wrk and one py cell; `cold`: restart that gateway before each (empty cache);
                `server`: the CPU seconds used so far by the server measured (a cold gateway's: counted);
                `gateway`: a warm gateway, whose share of GETs answered below ASGI and as kept is noted."""
                server = server or (cold.cpu if cold is not None else None)
                # For a cold setup this reads the last key once; the restart below forgets it.
                header = header_bytes(endpoint, presigned_paths(endpoint, keys[-1:])[0])
                for client in clients:
                    cell: Cell | None = None
                    for attempt in range(1 + args.retries):
                        if cold is not None:
                            cold.restart()
                        cpu = server() if server is not None else 0.0
                        paths_before = gateway.hit_path() if gateway is not None else None
                        with OtherLoad() as load:
                            if client.startswith("wrk:"):
                                signing = client.partition(":")[2]
                                requests = wrk_requests(signing, endpoint, keys,
                                                        len(keys) if cold is not None else args.requests)
                                run = run_wrk(setup, endpoint, [], plan.size, conns, cell_seconds, tmp,
                                              distinct=cold is not None, header_size=header, raw=requests,
                                              signing=signing)
                            else:
                                run = run_py(setup, endpoint, keys, plan.size, conns, cell_seconds,
                                             once=cold is not None, expect=expect)
                        run.other = load.cores
                        if gateway is not None and paths_before is not None:
                            gets, below, kept = (b - a for a, b in zip(paths_before, gateway.hit_path()))
                            run.note = "; ".join(filter(None, [run.note, f"below ASGI {below / max(gets, 1):.0%},"
                                                                         f" kept {kept / max(gets, 1):.0%}"]))
                        if server is not None:
                            run.server_cpu = server() - cpu
                        if attempt:
                            run.note = "; ".join(filter(None, [run.note, f"measured {attempt + 1}x: other load"]))
                        if cell is None or run.other < cell.other:
                            cell = run
                        if cell.other <= args.busy:
                            break
                        print(f"   ({setup} {client}: other processes took {cell.other:.2f} cores; again)", flush=True)
                        time.sleep(3)
                    assert cell is not None
                    cells.append(cell)
                    print(f"   {setup:<15} {client:<3}  {cell.rps:9,.0f} req/s {cell.mbps:9,.1f} MB/s"
                          f"  p50 {cell.p50_ms:8.2f} ms  p99 {cell.p99_ms:8.2f} ms  other {cell.other:4.2f}"
                          f"  {cell.note}", flush=True)
                    if cold is not None:
                        cold.record_peak()

            def cold_count(origin_setup: str, plan: SizePlan = plan, conns: int = conns, cells: list[Cell] = cells,
                           cold_seconds: float = cold_seconds) -> int:
                # A cold read cannot be faster than the origin answering it, nor than a warm
                # hit (it does all a hit does, and more): size the pool of never-read keys
                # from the smaller of the two rates measured just before.
                rate = min(max(c.rps for c in cells if c.setup == origin_setup),
                           max(c.rps for c in cells if c.setup == "gw-mem"))
                count = int(rate * cold_seconds * 1.3) + 2 * conns + 8
                return min(count, max(4 * conns, int(4 * 10**9 // plan.size)))  # at most ~4 GB of objects

            measure("origin", origin, warm_keys, None)
            warm_setups: list[tuple[str, str, str, Callable[[], float], Gateway | None]] = [
                ("nginx", nginx, "HIT", lambda: tree_cpu(nginx_pid), None),
                ("nginx-tmpfs", nginx_tmpfs, "HIT", lambda: tree_cpu(nginx_tmpfs_pid), None),
                ("gw-mem", gw_mem.endpoint, "hit-mem", gw_mem.cpu, gw_mem),
                ("gw-disk", gw_disk.endpoint, "hit-disk", gw_disk.cpu, gw_disk)]
            if nginx_one is not None:
                warm_setups.append(("nginx-tmpfs-1w", nginx_one[0], "HIT", lambda: tree_cpu(nginx_one[2]), None))
            if gw_workers is not None:
                warm_setups.append((gw_workers.name, gw_workers.endpoint, "hit-mem", gw_workers.cpu, gw_workers))
            for setup, endpoint, expect, server, gateway in warm_setups:
                served = warm(endpoint, warm_keys, plan.size, conns)
                if set(served) != {expect}:
                    print(f"   WARNING: {setup} after warm-up answered x-cache {dict(served)}, expected {expect}")
                measure(setup, endpoint, warm_keys, expect, server=server, gateway=gateway)

            # Cold: distinct keys never read through the gateway, each client on a freshly
            # started process (empty cache).
            count = cold_count("origin")
            print(f"   creating {count} cold objects at moto ...", flush=True)
            cold_keys = create_objects(origin_s3, f"cold/{plan.label}", plan.size, count)
            measure("gw-cold", gw_cold.endpoint, cold_keys, "miss", cold=gw_cold, cell_seconds=cold_seconds)
            delete_objects(origin_s3, cold_keys)

            if shaped is not None and shaped_root is not None and gw_cold_shaped is not None:
                shaped_keys = link_objects(shaped_root, f"warm/{plan.label}", plan.size, plan.warm_objects)
                measure("shaped-origin", shaped, shaped_keys, None)
                count = cold_count("shaped-origin")
                cold_keys = link_objects(shaped_root, f"cold/{plan.label}", plan.size, count)
                measure("gw-cold/shaped", gw_cold_shaped.endpoint, cold_keys, "miss", cold=gw_cold_shaped,
                        cell_seconds=cold_seconds)
                if gw_cold_workers is not None:  # the same keys: the restart before each cell forgets them
                    measure(gw_cold_workers.name, gw_cold_workers.endpoint, cold_keys, "miss", cold=gw_cold_workers,
                            cell_seconds=cold_seconds)
                shutil.rmtree(shaped_root / BUCKET / "cold", ignore_errors=True)
            for gw in gateways:
                gw.record_peak()

            if args.profile and plan.label in ("4KiB", "1MiB"):
                out_dir = Path(args.profile_dir) if args.profile_dir else tmp
                out_dir.mkdir(parents=True, exist_ok=True)
                warm(gw_mem.endpoint, warm_keys, plan.size, conns)  # metadata fresh again (its TTL is 60 s)
                sig = signings[0]  # what wrk sends while py-spy looks
                cell, summary = profile_gateway(gw_mem, plan.label, [], plan.size, conns, args.profile_seconds, tmp,
                                                out_dir, signing=sig,
                                                raw=wrk_requests(sig, gw_mem.endpoint, warm_keys, args.requests))
                profiles.append((f"gw-mem, warm from memory, {plan.label}", cell, summary))
                if gw_workers is not None:
                    warm(gw_workers.endpoint, warm_keys, plan.size, conns)
                    cell, summary = profile_gateway(gw_workers, plan.label, [], plan.size, conns,
                                                    args.profile_seconds, tmp, out_dir, signing=sig,
                                                    raw=wrk_requests(sig, gw_workers.endpoint, warm_keys,
                                                                     args.requests))
                    profiles.append((f"{gw_workers.name} (one of its workers), warm from memory, {plan.label}", cell,
                                     summary))
                if plan.label == "1MiB" and shaped_root is not None and gw_cold_shaped is not None:
                    count = cold_count("shaped-origin") + int(args.profile_seconds * 100)
                    cold_keys = link_objects(shaped_root, f"cold/{plan.label}", plan.size, count)
                    gw_cold_shaped.restart()
                    cell, summary = profile_gateway(
                        gw_cold_shaped, plan.label, [], plan.size, conns, args.profile_seconds, tmp, out_dir,
                        distinct=True, signing=sig, raw=wrk_requests(sig, gw_cold_shaped.endpoint, cold_keys,
                                                                     len(cold_keys)))
                    profiles.append((f"gw-cold/shaped, cold reads from the shaped origin, {plan.label}", cell, summary))
                    shutil.rmtree(shaped_root / BUCKET / "cold", ignore_errors=True)
                for gw in gateways:
                    gw.record_peak()
            delete_objects(origin_s3, warm_keys)
            print(f"   ({time.monotonic() - t0:.0f}s; peak RSS so far: "
                  + ", ".join(f"{gw.name} {gw.peak_rss / 1e6:.0f} MB" for gw in gateways) + ")\n", flush=True)

        for gw in gateways:
            gw.record_peak()

    # --- the report ---
    print(f"\nResults ({time.monotonic() - started:.0f}s in all). MB = 10^6 bytes of object payload; latency is"
          " request sent to last byte received; 'other load' is the CPU (in cores) that processes outside this"
          " benchmark used during the cell.\n")
    for plan in sizes:
        print(f"### {plan.label} GETs, {plan.connections} connections\n")
        print(table(results[plan.label]))
        print()

    def pick(label: str, setup: str, client: str) -> Cell | None:
        return next((c for c in results.get(label, []) if c.setup == setup and c.client == client), None)

    print("Targets (issue 3), as ratios in this run:")
    for client in clients:
        print(f"  [{client}]")
        if (g := pick("4KiB", "gw-mem", client)) and (n := pick("4KiB", "nginx", client)) and n.rps:
            print(f"    warm-mem 4 KiB req/s vs nginx:  {g.rps:,.0f} / {n.rps:,.0f} = {verdict(g.rps / n.rps, 0.5)}")
        for label in ("1MiB", "64MiB"):
            if (g := pick(label, "gw-mem", client)) and (n := pick(label, "nginx", client)) and n.mbps:
                print(f"    warm-mem {label} MB/s vs nginx:  {g.mbps:,.1f} / {n.mbps:,.1f} = "
                      f"{verdict(g.mbps / n.mbps, 1.0)}")
        for cold_setup, origin_setup, what in (("gw-cold", "origin", "moto"), ("gw-cold/shaped", "shaped-origin",
                                                                                 "shaped origin")):
            for label in ("4KiB", "1MiB", "64MiB"):
                if (g := pick(label, cold_setup, client)) and (o := pick(label, origin_setup, client)) and o.mbps:
                    print(f"    cold {label} MB/s vs {what} direct:  {g.mbps:,.1f} / {o.mbps:,.1f} = "
                          f"{verdict(g.mbps / o.mbps, 0.9)}")
    if gw_workers is not None:
        n = args.workers
        wrk = f"wrk:{signings[0]}"
        print(f"  [{n} workers, {wrk}]")
        g, one, x = pick("4KiB", gw_workers.name, wrk), pick("4KiB", "gw-mem", wrk), pick("4KiB", "nginx-tmpfs", wrk)
        if g and x and x.rps:
            print(f"    {gw_workers.name} 4 KiB req/s vs nginx-tmpfs ({args.nginx_workers} workers):  "
                  f"{g.rps:,.0f} / {x.rps:,.0f} = {verdict(g.rps / x.rps, 0.8)}")
        if g and one and g.cpu_us_per_request and one.cpu_us_per_request:
            ratio = g.cpu_us_per_request / one.cpu_us_per_request
            print(f"    CPU per 4 KiB request, {n} workers vs 1:  {g.cpu_us_per_request:,.0f} / "
                  f"{one.cpu_us_per_request:,.0f} us = {ratio:.2f}x (target <= 1.15x: "
                  f"{'met' if ratio <= 1.15 else 'MISSED'})")
        nx1 = pick("4KiB", "nginx-tmpfs-1w", wrk)
        if x and nx1 and x.cpu_us_per_request and nx1.cpu_us_per_request:
            print(f"    the same for nginx-tmpfs, {args.nginx_workers} workers vs 1 (what sharing the cores with wrk "
                  f"costs):  {x.cpu_us_per_request:,.1f} / {nx1.cpu_us_per_request:,.1f} us = "
                  f"{x.cpu_us_per_request / nx1.cpu_us_per_request:.2f}x; req/s {x.rps / nx1.rps:.2f}x")
    print("  peak RSS (VmHWM over the whole run; a node's workers summed) vs memory-tier quota + 200 MB "
          "(with workers: + 150 MB per worker, and the memory tier's files on tmpfs counted). The pages of those files "
          "a worker keeps mapped (store.mapped) are in its RSS and on tmpfs: for a node of several workers the target "
          "is judged on each page counted once (its processes' RSS but RssShmem, plus tmpfs), looked at the end of "
          "each cell, when the node holds the most; the VmHWM sum, which counts them twice, is shown beside it:")
    for gw in gateways:
        q = 0 if gw is gw_disk else quota
        workers = gw.workers
        limit = q + (RSS_ALLOWANCE if workers == 1 else 150 * 10**6 * workers)
        used = gw.peak_rss + gw.peak_tmpfs if workers == 1 else gw.peak_once
        state = "met" if used <= limit else f"MISSED by {(used - limit) / 1e6:.0f} MB"
        print(f"    {gw.name:<14} {gw.peak_rss / 1e6:7.1f} MB"
              + (f" + {gw.peak_tmpfs / 1e6:.1f} MB on tmpfs" if gw.peak_tmpfs else "")
              + (f" (each page once: {gw.peak_once / 1e6:.1f} MB)" if workers > 1 else "")
              + f" vs {limit / 1e6:7.1f} MB: {state}"
              + (f"  [{gw.starts} processes, max of each]" if gw.starts > 1 else ""))
    print(f"\nNOTE: {os.cpu_count()} cores shared by wrk/aiohttp, the gateway, moto and nginx; ratios compare setups"
          " under the same handicap, absolute figures are not what a dedicated server would do.")
    if profiles:
        print("\nProfiles of the gateway process under wrk (py-spy record -r 100 -f raw --nolineno). A sample is"
              " one look at the gateway's main thread while it was busy (at most 100 a second); 'self' is the area"
              " of the innermost gateway or library frame (standard-library frames count for their caller),"
              " 'inclusive' whether the area is anywhere on the stack:")
        for label, cell, summary in profiles:
            extra = f" — {cell.rps:,.0f} req/s, {cell.mbps:,.1f} MB/s while sampled" if cell else ""
            print(f"\n[{label}]{extra}\n{summary}")
    if args.keep:
        print(f"\nkept: {tmp}")
    if args.json:
        wrk = next((c for c in clients if c.startswith("wrk:")), clients[0])
        load_after = os.getloadavg()
        cores = [c.other for cells in results.values() for c in cells]
        save_results(args.json, "cache_serving", args, version,
                     f"load average before {load_before[0]:.2f}/{load_before[1]:.2f}/{load_before[2]:.2f}, after "
                     f"{load_after[0]:.2f}/{load_after[1]:.2f}/{load_after[2]:.2f}; other load "
                     f"{min(cores, default=0):.2f}-{max(cores, default=0):.2f} cores in the cells",
                     serving_rows(results, wrk, args.workers, args.nginx_workers), client=wrk,
                     cells=cell_records(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
