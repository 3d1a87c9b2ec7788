"""`gateway demo`: a moto S3 server on loopback as the origin, a sample bucket, the gateway in front
with its admin API on (the dashboard and `gateway stats` show the cache)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import httpx

from gateway.config import AdminSettings, AuthSettings, Grant, OriginSettings, ServerSettings, Settings, User
from gateway.errors import S3Error
from gateway.origin import Origin

DEMO_BUCKET = "demo"
DEMO_ACCESS_KEY = "demo-access-key"
DEMO_SECRET_KEY = "demo-secret-key"
SAMPLES = {
    "hello.txt": b"Hello from the S3 caching gateway!\n",
    "data/2026-11-01/events.csv": b"ts,user,event\n2026-11-01T00:00:00Z,ada,login\n",
    "data/2026-11-02/events.csv": b"ts,user,event\n2026-11-02T00:00:00Z,linus,logout\n",
    "blobs/1MiB.bin": bytes(range(256)) * 4096,
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _moto_origin(port: int | None = None) -> Iterator[str]:
    """The demo's origin: moto's S3 server as a subprocess on loopback; yields its endpoint URL.
    (The tests and benchmarks have their own, in tests/servers.py: this one is the demo's alone.)"""
    try:
        import moto.server  # noqa: F401
    except ImportError:
        raise SystemExit("gateway demo needs moto: pip install -e '.[demo]' (make demo installs it)") from None
    port = port or _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(endpoint + "/moto-api/", timeout=1)
                break
            except httpx.HTTPError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("moto server did not start") from None
                time.sleep(0.1)
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def seed(origin_settings: OriginSettings) -> None:
    """Create the demo bucket and a few objects, through the gateway's own origin client."""
    origin = Origin(origin_settings)
    try:
        response = await origin.send("PUT", DEMO_BUCKET)
        await response.read()
        for key, data in SAMPLES.items():
            await (await origin.call("PUT", DEMO_BUCKET, key, body=data,
                                     headers={"content-type": "application/octet-stream"})).read()
    except S3Error as err:
        raise SystemExit(f"could not seed the demo origin: {err}") from None
    finally:
        await origin.aclose()


def demo_settings(origin_endpoint: str, port: int, admin_token: str = "") -> Settings:
    return Settings(
        origin=OriginSettings(endpoint=origin_endpoint, access_key="demo", secret_key="demo"),
        server=ServerSettings(host="127.0.0.1", port=port),
        auth=AuthSettings(users=(User(DEMO_ACCESS_KEY, DEMO_SECRET_KEY, grants=(Grant("*", "", "readwrite"),), admin=True),)),
        admin=AdminSettings(token=admin_token),
    )


def run_demo(port: int) -> None:
    """Serve the demo until stopped. The admin API is on, with $GATEWAY_ADMIN_TOKEN or a token made
    here; what to try is printed once the gateway answers."""
    from gateway.run import run_server

    # uvicorn ends a SIGTERM'd run by raising the signal again; as an exception (not the
    # default handler's instant death) it lets the `with` below stop moto too.
    signal.signal(signal.SIGTERM, _exit)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # the readiness probes are not the demo's traffic
    _refuse_a_taken_port(port)
    token = os.environ.get("GATEWAY_ADMIN_TOKEN") or secrets.token_urlsafe(18)
    with _moto_origin() as endpoint:
        asyncio.run(seed(OriginSettings(endpoint=endpoint, access_key="demo", secret_key="demo")))
        settings = demo_settings(endpoint, port, token)
        threading.Thread(target=_announce, args=(endpoint, port, token), name="demo-announce", daemon=True).start()
        run_server(settings)


def _refuse_a_taken_port(port: int) -> None:
    """Exit with one line when something listens on the port already (an earlier demo, say): the
    lines to try would otherwise name a server that is not this one."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            raise SystemExit(f"port {port} is taken (another demo?): gateway demo --port N serves on another") from None


def _announce(origin: str, port: int, token: str) -> None:
    """Print what to try once the gateway answers on its port (the admin API's healthz)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/_gateway/healthz", timeout=1).status_code == 200:
                print(instructions(origin, port, token), flush=True)
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)


def instructions(origin: str, port: int, token: str) -> str:
    """The demo's lines to try, with the programs of this install named by their paths."""
    gateway = f"http://127.0.0.1:{port}"
    aws, command = _program("aws"), _program("gateway")
    lines = [f"origin (moto): {origin}   gateway: {gateway}   bucket: s3://{DEMO_BUCKET}", "", "Try it, in another shell:",
             f"  export AWS_ACCESS_KEY_ID={DEMO_ACCESS_KEY} AWS_SECRET_ACCESS_KEY={DEMO_SECRET_KEY} "
             "AWS_DEFAULT_REGION=us-east-1"]
    if aws is None:
        lines.append("  (the AWS CLI is not installed here: pip install awscli, or pip install -e '.[demo]')")
    lines += [f"  {aws or 'aws'} s3 ls --recursive s3://{DEMO_BUCKET} --endpoint-url {gateway}",
              f"  {aws or 'aws'} s3 cp s3://{DEMO_BUCKET}/hello.txt - --endpoint-url {gateway}"
              "   # twice: the second read is a cache hit",
              "", "See the cache (hit ratio, bytes by tier, hot objects):",
              f"  dashboard: {gateway}/_gateway/dashboard#token={token}",
              f"  {command or 'gateway'} stats --url {gateway} --token {token}",
              "", 'Below, one JSON line per request; "cache" says where its bytes came from (miss, hit-mem). '
              "Ctrl-C stops the demo.", ""]
    return "\n".join(lines)


def _program(name: str) -> str | None:
    """The absolute path of this install's `name` (next to its Python, as in .venv/bin), else
    `name` itself when it is on PATH, else None."""
    beside = os.path.join(os.path.abspath(os.path.dirname(sys.executable)), name)
    if os.access(beside, os.X_OK):
        return beside
    return name if shutil.which(name) else None


def _exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
