"""Shared pieces of the issue-6 workload benchmarks (small_files, metadata_ops, scans).

moto's S3 server behind bench/shaped_proxy.py is the origin (a remote-like store for
reads, writes and listings); gateways are bench/cache_serving.py's `Gateway` processes,
running a copy of gateway/ taken when the script starts, with a user allowed to read and
write the benchmark bucket.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Self

import boto3
import httpx
from botocore.config import Config

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cache_serving as cs

ROOT = cs.ROOT
BUCKET = cs.BUCKET


# moto's S3 server, run by this script (instead of tests.servers.moto_server) so that it can start with
# objects already in it and with moto's own settings in its environment.
_MOTO_LAUNCHER = """\
import json, sys, time
spec = json.load(open(sys.argv[2]))
if spec:
    from moto.s3.models import s3_backends
    backend = s3_backends["123456789012"]["aws"]
    t0 = time.monotonic()
    for bucket, keys in spec.items():
        backend.create_bucket(bucket, "us-east-1")
        for key in keys:
            backend.put_object(bucket, key, b"")
    print(f"preloaded {sum(map(len, spec.values()))} keys in {time.monotonic() - t0:.1f}s", flush=True)
from moto.server import main
main(["-H", "127.0.0.1", "-p", sys.argv[1]])
"""


@contextmanager
def moto_process(workdir: Path, preload: dict[str, Sequence[str]] | None = None,
                 env: dict[str, str] | None = None) -> Iterator[str]:
    """moto's S3 server as a subprocess on loopback; yields its endpoint.

    `preload`: {bucket: keys} created as 0-byte objects inside moto before it serves (100,000 keys
    in seconds, where PUTs over HTTP took 8 minutes). `env`: moto settings, e.g.
    MOTO_S3_DEFAULT_KEY_BUFFER_SIZE (objects larger than it are spooled to a temp file)."""
    port = cs.free_port()
    spec = workdir / "moto-preload.json"
    spec.write_text(json.dumps({b: list(keys) for b, keys in (preload or {}).items()}))
    log = workdir / "moto.log"
    with open(log, "ab") as fh:
        proc = subprocess.Popen([sys.executable, "-c", _MOTO_LAUNCHER, str(port), str(spec)],
                                stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120  # preloading takes a while
        while True:
            try:
                httpx.get(endpoint + "/moto-api/", timeout=1)
                break
            except httpx.HTTPError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("moto server did not start\n" + log.read_text(errors="replace")[-3000:]) from None
                time.sleep(0.2)
        yield endpoint
    finally:
        # Empty moto first: holding 100k keys it took more than 10 s to exit.
        if proc.poll() is None:
            with contextlib.suppress(httpx.HTTPError):
                httpx.post(endpoint + "/moto-api/reset", timeout=120)
        cs._stop(proc)


@contextmanager
def shaped_moto(workdir: Path, latency: str, rate: str, preload: dict[str, Sequence[str]] | None = None,
                moto_env: dict[str, str] | None = None) -> Iterator[tuple[str, str]]:
    """moto's S3 server and bench/shaped_proxy.py in front of it; yields (moto, shaped) endpoints."""
    with moto_process(workdir, preload, moto_env) as moto, shaped_proxy(workdir, moto, latency, rate) as shaped:
        yield moto, shaped


@contextmanager
def shaped_proxy(workdir: Path, upstream: str, latency: str, rate: str) -> Iterator[str]:
    """bench/shaped_proxy.py in front of `upstream` (an http:// endpoint); yields its endpoint."""
    port = cs.free_port()
    log = workdir / "shaped-proxy.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "shaped_proxy.py"),
                                 "--upstream", upstream.removeprefix("http://"), "--port", str(port),
                                 "--latency", latency, "--rate", rate], stdout=fh, stderr=subprocess.STDOUT)
    shaped = f"http://127.0.0.1:{port}"
    try:
        cs._wait_http(shaped + "/moto-api/", proc, "shaped proxy", log)
        yield shaped
    finally:
        cs._stop(proc)


def tidy(tmp: Path, *keep: Path) -> None:
    """Remove the run's temp folder, except the charts when they were written there."""
    for entry in tmp.iterdir():
        if entry not in keep:
            shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)
    if not any(tmp.iterdir()):
        tmp.rmdir()


def snapshot_code(tmp: Path) -> Path:
    """A copy of gateway/ for every gateway process of the run (the work tree changes meanwhile)."""
    code = tmp / "code"
    shutil.copytree(ROOT / "gateway", code / "gateway", ignore=shutil.ignore_patterns("__pycache__"))
    return code


def gateway(name: str, origin: str, tmp: Path, code: Path, env: dict[str, str] | None = None,
            buckets: Sequence[str] = (BUCKET,)) -> cs.Gateway:
    """A gateway process (not started) whose benchmark user may read and write the buckets."""
    users = json.dumps([{"access_key": cs.USER[0], "secret_key": cs.USER[1],
                         "grants": [{"bucket": b, "access": "readwrite"} for b in buckets]}])
    return cs.Gateway(name, origin, {"GATEWAY_AUTH_USERS": users, **(env or {})}, tmp, code)


def client(endpoint: str, credentials: tuple[str, str] = cs.USER, pool: int = 32,  # type: ignore[no-untyped-def]
           attempts: int = 1):
    """boto3 S3 client, SigV4, path style; no retries by default (an error must show, not be hidden)."""
    return boto3.client(
        "s3", endpoint_url=endpoint, region_name=cs.REGION,
        aws_access_key_id=credentials[0], aws_secret_access_key=credentials[1],
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}, retries={"max_attempts": attempts},
                      read_timeout=300, max_pool_connections=pool),
    )


def header(what: str, latency: str, rate: str, extra: str = "") -> str:
    """Prints what runs where; returns the gateway code version (taken now, with the code snapshot)."""
    version = cs.code_version()
    print(f"{what}")
    print(f"machine: {cs.machine()}")
    print(f"gateway code: {version}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; {loadavg()}")
    print(f"origin: moto {_moto_version()} S3 server behind bench/shaped_proxy.py: +{latency} before the first byte "
          f"of every answer, {rate}/s per connection each way (moto closes the connection after each answer)")
    if extra:
        print(extra)
    print(f"NOTE: client, gateway, proxy and moto share these {os.cpu_count()} cores over loopback;"
          " 'other load' is CPU (cores) taken meanwhile by processes outside this benchmark.\n", flush=True)
    return version


def loadavg() -> str:
    """The machine's load averages, as `uptime` prints them (other sessions' work included)."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} (1, 5, 15 min)"


def _moto_version() -> str:
    try:
        import moto
        return str(moto.__version__)
    except Exception:  # noqa: BLE001
        return "?"


def markdown(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    def fmt(v: object) -> str:
        if isinstance(v, float):
            return f"{v:,.2f}" if abs(v) < 100 else f"{v:,.0f}"
        return str(v)
    text = [[fmt(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in text)) if text else len(h) for i, h in enumerate(headers)]
    out = ["| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths)) + " |",
           "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += ["| " + " | ".join(c.rjust(w) for c, w in zip(r, widths)) + " |" for r in text]
    return "\n".join(out)


def bar_chart(path: Path, title: str, groups: Sequence[str], series: dict[str, Sequence[float]], ylabel: str,
              note: str = "", log: bool = False) -> None:
    """Grouped bars: one group per workload, one bar per setup; written as a PNG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(groups) + 2), 4.2))
    width = 0.8 / max(1, len(series))
    for i, (name, values) in enumerate(series.items()):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        bars = ax.bar(xs, values, width, label=name)  # NaN: no bar
        ax.bar_label(bars, labels=["" if math.isnan(v) else f"{v:.3g}" for v in values], fontsize=7, padding=1)
    ax.set_xticks(range(len(groups)), groups, fontsize=8)
    ax.set_ylabel(ylabel)
    if log:
        ax.set_yscale("log")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    if note:  # wrapped to the figure's width (~18 characters of 7 pt per inch at 110 dpi)
        width = int(fig.get_figwidth() * 18)
        note = "\n".join(textwrap.fill(line, width) for line in note.splitlines())
        fig.text(0.01, 0.01, note, fontsize=7, alpha=0.8)
    fig.tight_layout(rect=(0, 0.01 + 0.035 * (note.count("\n") + 1) if note else 0, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"chart: {path}")


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) a live process has used."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / cs._TICK


class Cpu:
    """CPU seconds used during a block by the gateway process (if any) and by this benchmark's own
    processes (client threads, gateway, proxy, moto), with the machine's other load (cs.OtherLoad)."""

    def __init__(self, gw: cs.Gateway | None = None) -> None:
        self.pid = gw.pid if gw is not None and gw.proc is not None else None

    def __enter__(self) -> Self:
        self.load = cs.OtherLoad().__enter__()
        self._gw = process_cpu(self.pid) if self.pid else 0.0
        self._own = cs._own_cpu()
        self.gateway = self.own = 0.0
        return self

    def __exit__(self, *exc: object) -> None:
        self.load.__exit__(*exc)
        self.gateway = (process_cpu(self.pid) - self._gw) if self.pid else 0.0
        self.own = cs._own_cpu() - self._own

    @property
    def other(self) -> float:
        return self.load.cores

    cores = other
