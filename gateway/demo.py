"""`gateway demo`: a moto S3 server on loopback as the origin, a sample bucket, the gateway in front."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx

from gateway.config import AuthSettings, Grant, OriginSettings, ServerSettings, Settings, User
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
        raise SystemExit("gateway demo needs moto: pip install 'moto[server]' (make demo installs it)") from None
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


def demo_settings(origin_endpoint: str, port: int) -> Settings:
    return Settings(
        origin=OriginSettings(endpoint=origin_endpoint, access_key="demo", secret_key="demo"),
        server=ServerSettings(host="127.0.0.1", port=port),
        auth=AuthSettings(users=(User(DEMO_ACCESS_KEY, DEMO_SECRET_KEY, grants=(Grant("*", "", "readwrite"),), admin=True),)),
    )


def run_demo(port: int) -> None:
    from gateway.run import run_server

    # uvicorn ends a SIGTERM'd run by raising the signal again; as an exception (not the
    # default handler's instant death) it lets the `with` below stop moto too.
    signal.signal(signal.SIGTERM, _exit)
    with _moto_origin() as endpoint:
        asyncio.run(seed(OriginSettings(endpoint=endpoint, access_key="demo", secret_key="demo")))
        settings = demo_settings(endpoint, port)
        print(f"origin (moto): {endpoint}   gateway: http://127.0.0.1:{port}\n")
        print("Try it:")
        print(f"  export AWS_ACCESS_KEY_ID={DEMO_ACCESS_KEY} AWS_SECRET_ACCESS_KEY={DEMO_SECRET_KEY} AWS_DEFAULT_REGION=us-east-1")
        print(f"  aws s3 ls --recursive s3://{DEMO_BUCKET} --endpoint-url http://127.0.0.1:{port}\n", flush=True)
        run_server(settings)


def _exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
