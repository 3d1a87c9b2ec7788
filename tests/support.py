"""Shared test helpers: the test users, a gateway running in a thread or as a process, boto3 clients."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.metadata
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import boto3
import pytest
import uvicorn
from botocore.config import Config

from gateway.app import create_app
from gateway.config import AuthSettings, Grant, OriginSettings, ServerSettings, Settings, User
from gateway.httpserver import Limits, protocol_factory, uvicorn_options
from gateway.node.workers import WorkerSet
from gateway.s3api.responses import error_page
from tests.servers import wait_serving
from tests.waiting import wait_for

ADMIN = ("AKIAADMIN0000000001", "admin-secret-0000000000000000000000000001")
READER = ("AKIAREADER000000001", "reader-secret-000000000000000000000000001")
TEAM = ("AKIATEAM00000000001", "team-secret-00000000000000000000000000001")
REGION = "us-east-1"



def base_settings(origin_endpoint: str) -> Settings:
    return Settings(
        origin=OriginSettings(endpoint=origin_endpoint, access_key="origin-key", secret_key="origin-secret",
                              read_timeout=10, connect_timeout=2, retries=1),
        server=ServerSettings(host="127.0.0.1", port=0, domain="s3.gateway.test"),
        auth=AuthSettings(
            users=(
                User(*ADMIN, grants=(), admin=True),
                User(*READER, grants=(Grant("shared", "", "read"),)),
                User(*TEAM, grants=(Grant("shared", "team/", "readwrite"),)),
            ),
            anonymous_read=("public",),
        ),
    )


# Limits no test meets unless it asks for `guarded` ones.
UNGUARDED = Limits(max_connections=100_000, head_timeout=3600.0, max_head_size=1 << 30, stall_timeout=3600.0)


class RunningGateway:
    """A gateway served by uvicorn in a thread of this process; `guarded`: with the limits of
    `gateway serve` (gateway.httpserver: server.max_connections, head and stall timeouts).
    `workers`: this gateway is that worker of a node of several, served on its own TCP port
    and also, as under `gateway serve`, on its unix socket (WorkerSet.socket_path)."""

    def __init__(self, settings: Settings, *, guarded: bool = False, workers: WorkerSet | None = None) -> None:
        # Bound here, on port 0 unless the settings name one (a worker started again on its port):
        # the port is known before uvicorn serves, and no other process can take it meanwhile.
        tcp = _tcp_socket(settings.server.port)
        port = tcp.getsockname()[1]
        self.settings = dataclasses.replace(settings, server=dataclasses.replace(settings.server, port=port))
        self.endpoint = f"http://127.0.0.1:{port}"
        app = create_app(self.settings, workers)
        # The hit path (server.hit_path) runs on every test gateway, as under `gateway serve`.
        options = (uvicorn_options(self.settings.server, error_page, app) if guarded
                   else {"http": protocol_factory(UNGUARDED, error_page, app), "timeout_graceful_shutdown": 5})
        config = uvicorn.Config(app, host="127.0.0.1", port=port, loop="asyncio",
                                lifespan="on", access_log=False, log_level="warning", **options)
        self.server = uvicorn.Server(config)
        self.sockets = [tcp] if workers is None or workers.alone else [tcp, _unix_socket(workers)]
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": self.sockets}, daemon=True)

    def __enter__(self) -> RunningGateway:
        self.thread.start()

        def started() -> bool:
            if not self.thread.is_alive():
                raise RuntimeError("the gateway's thread ended before it served")
            return self.server.started

        try:
            wait_for(started, "the gateway serves", within=15)
        except (AssertionError, RuntimeError) as exc:
            self.__exit__()
            raise RuntimeError(f"gateway did not start: {exc}") from None
        return self

    def purge_caches(self) -> None:
        """Forget what the gateway cached: the origin under it was reset between tests."""
        app = self.server.config.app
        if app.s3 is not None:
            app.s3.engine.purge()

    def evict_blocks(self, bucket: str) -> int:
        """Drop every block of `bucket` the gateway holds, and what it knows of its objects
        (purge_caches forgets the metadata only: blocks held serve the next reads)."""
        app = self.server.config.app
        assert app.s3 is not None
        loop = self.server.servers[0].get_loop()
        return asyncio.run_coroutine_threadsafe(app.s3.engine.purge_prefix(bucket, ""), loop).result(30)

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        if self.thread.is_alive():
            self.thread.join(timeout=10)
        for sock in self.sockets or []:  # uvicorn closes them after serving, not when it never started
            sock.close()


def _tcp_socket(port: int) -> socket.socket:
    """A TCP socket bound on 127.0.0.1:`port` (0: one the kernel picks), for uvicorn to listen on."""
    # IPPROTO_TCP named, as uvicorn's own bind does: asyncio sets TCP_NODELAY only on sockets
    # whose proto says TCP, and without it small answers wait ~40 ms for delayed ACKs.
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tcp.bind(("127.0.0.1", port))
    return tcp


def _unix_socket(workers: WorkerSet) -> socket.socket:
    """The worker's unix socket, which its siblings reach it on (as under `gateway serve`)."""
    path = workers.socket_path(workers.index)
    if os.path.exists(path):  # left by this worker's previous run
        os.unlink(path)
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(path)
    return unix


CLIENT_TIMEOUT = 60  # seconds for one client command; each takes a few seconds when the gateway answers right


def need_module(name: str, install: str) -> None:
    """Skip the test, saying how to install it, when a client library is missing."""
    if importlib.util.find_spec(name) is None:
        pytest.skip(f"{name} is not installed: {install}")


def need_binary(name: str, install: str) -> str:
    """The path of a client program; skip the test, saying how to install it, when it is missing."""
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed: {install}")
    return path


def run_client(args: list[str], *, env: dict[str, str], cwd: str | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run a client command with a timeout; fail with its output when it fails or hangs."""
    try:
        result = subprocess.run(args, check=False, env=env, cwd=cwd, capture_output=True, timeout=CLIENT_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{args[:3]} did not finish in {CLIENT_TIMEOUT}s: {exc.stderr!r}") from None
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {result.returncode}:\n"
                             f"{result.stdout.decode(errors='replace')[-3000:]}\n"
                             f"{result.stderr.decode(errors='replace')[-6000:]}")
    return result


def need_duckdb_httpfs() -> Path:
    """The httpfs extension binary shipped by the duckdb-extension-httpfs wheel for the installed DuckDB
    (DuckDB's own extension site is not reachable); skip the test, saying how to install it, without it."""
    need_module("duckdb", "pip install duckdb")
    need_module("duckdb_extension_httpfs",
                "pip install duckdb-extension-httpfs==<duckdb's version> (ships the httpfs extension binary; "
                "DuckDB's own extension site is not reachable)")
    version = importlib.metadata.version("duckdb")
    spec = importlib.util.find_spec("duckdb_extension_httpfs")
    ext = Path(next(iter(spec.submodule_search_locations or []))) / "extensions" / f"v{version}"  # type: ignore[union-attr]
    if not (ext / "httpfs.duckdb_extension").exists():
        pytest.skip(f"duckdb-extension-httpfs has no httpfs extension for duckdb {version}: "
                    f"pip install duckdb=={version} duckdb-extension-httpfs=={version}")
    return ext / "httpfs.duckdb_extension"


def client_env(**extra: str) -> dict[str, str]:
    """This environment without the machine's AWS_* settings (an AWS_CA_BUNDLE makes rclone refuse an
    http endpoint, a profile or region would change what the clients send), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_EC2_METADATA_DISABLED="true", AWS_CONFIG_FILE="/dev/null", AWS_SHARED_CREDENTIALS_FILE="/dev/null")
    env.update(extra)
    return env


def client(endpoint: str, key: tuple[str, str] = ADMIN, **config: object):  # type: ignore[no-untyped-def]
    return boto3.client(
        "s3", endpoint_url=endpoint, region_name=REGION, aws_access_key_id=key[0], aws_secret_access_key=key[1],
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}, **config),  # type: ignore[arg-type]
    )


def presigned_expiry(url: str) -> float:
    """When a presigned URL (SigV4, or SigV2's Expires) expires, in seconds since the epoch."""
    query = dict(parse_qsl(urlsplit(url).query))
    if "Expires" in query:
        return float(query["Expires"])
    signed = datetime.strptime(query["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
    return signed.timestamp() + int(query["X-Amz-Expires"])


def wait_expired(url: str) -> None:
    """Until the machine's clock, which the gateway reads, is past the URL's expiry."""
    expiry = presigned_expiry(url)
    wait_for(lambda: time.time() > expiry, "the URL's expiry passes", within=max(0.0, expiry - time.time()) + 5)


def concurrent_gets(endpoint: str, readers: int, **params: str) -> list[bytes]:
    """The bodies of `readers` GetObject calls with `params`, each from its own client and
    thread, released at the same moment."""
    clients = [client(endpoint) for _ in range(readers)]
    barrier = threading.Barrier(readers)
    results: list[bytes] = []

    def read(c) -> None:  # type: ignore[no-untyped-def]
        barrier.wait()
        results.append(c.get_object(**params)["Body"].read())

    threads = [threading.Thread(target=read, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


class GatewayProcess:
    """`gateway serve` as a child process configured by GATEWAY_* variables, for tests that
    signal, kill or restart it; `ready` is a function that succeeds once it serves.

    The child prints every ResourceWarning, and a stop (not a kill) that finds one in its
    output fails: a leaked socket or file in a served process is an error, as in the tests.
    `workers` is `gateway serve --workers`: a node of several serves once it says it listens.
    It binds port 0 and says which port it got; `port` names one instead, for a test that
    reaches it before it says so."""

    def __init__(self, origin_endpoint: str, *, scheme: str = "http", workers: int | None = None, port: int = 0,
                 **env: str) -> None:
        self.workers = workers
        self.scheme = scheme
        self.port = port  # (0: until it says the port it listens on, which it keeps when started again)
        self.env = dict(os.environ, GATEWAY_ORIGIN_ENDPOINT=origin_endpoint, GATEWAY_ORIGIN_ACCESS_KEY="origin-key",
                        GATEWAY_ORIGIN_SECRET_KEY="origin-secret", GATEWAY_SERVER_PORT=str(port),
                        GATEWAY_AUTH_USERS=json.dumps([{"access_key": ADMIN[0], "secret_key": ADMIN[1], "admin": True}]),
                        PYTHONWARNINGS="always::ResourceWarning", **env)
        self.proc: subprocess.Popen[str] | None = None
        self._output: deque[str] = deque(maxlen=20_000)  # its last lines (read all along: a full pipe would block it)
        self._reader: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        assert self.port, "the gateway has not said its port yet: start it first"
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def start(self, ready: Callable[[], object] | None = None, timeout: float = 30) -> GatewayProcess:
        command = [sys.executable, "-m", "gateway.cli", "serve"]
        self.proc = subprocess.Popen(command + ([] if self.workers is None else ["--workers", str(self.workers)]),
                                     env=self.env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self._output.clear()
        self._reader = threading.Thread(target=self._output.extend, args=(self.proc.stdout,), daemon=True)
        self._reader.start()
        def probe() -> object:
            self._said_listening()  # a node of several says so once every worker serves
            return ready() if ready is not None else socket.create_connection(("127.0.0.1", self.port), timeout=1).close()

        try:
            wait_serving(probe, self.proc, "gateway serve", timeout=timeout)
        except RuntimeError as err:
            output = self.stop()
            raise RuntimeError(f"{err}: {output[-3000:]}") from None
        return self

    def printed(self) -> list[str]:
        """The lines it printed so far (its last 20,000)."""
        return list(self._output)

    def _said_listening(self) -> None:
        """`gateway serve` printed its listening line, with the port it listens on (then kept for
        a start after a kill): alone, once it serves; a supervisor, once every worker serves (its
        socket accepts before that, and a probe may reach the one worker that is up): whatever
        `ready` checks is then asked of the whole node."""
        said = [line for line in self.printed() if line.startswith("gateway listening on")]
        if not said:
            raise ConnectionError("the node does not serve yet")
        self.port = int(said[0].split(" -> ")[0].rsplit(":", 1)[1])
        self.env["GATEWAY_SERVER_PORT"] = str(self.port)

    def stop(self) -> str:
        """Terminate it (if it still runs) and return what it printed."""
        if self.proc is None:
            return ""
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(timeout=30)
        self._gone()
        output = "".join(self._output)
        assert "ResourceWarning" not in output, f"the gateway leaked a resource: {output[-3000:]}"
        return output

    def kill(self) -> None:
        """SIGKILL it and wait for it to be gone (`start` runs it again, on the same port); a
        node's workers, left without their supervisor, stop by themselves: waited for too."""
        if self.proc is not None:
            workers = self.worker_pids()
            self.proc.kill()
            self.proc.wait(timeout=30)
            self._gone()
            wait_for(lambda: not any(self._running(pid) for pid in workers),
                     f"workers {sorted(workers)} stop after their supervisor", within=30)

    def worker_pids(self) -> set[int]:
        """The processes it started (a node's workers; none when it serves alone)."""
        found: set[int] = set()
        if self.proc is not None:
            for path in Path(f"/proc/{self.proc.pid}/task").glob("*/children"):
                try:
                    found.update(int(pid) for pid in path.read_text().split())
                except OSError:  # a thread that just ended
                    pass
        return found

    @staticmethod
    def _running(pid: int) -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    def _gone(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        if self._reader is not None:
            self._reader.join(timeout=10)
        self.proc.stdout.close()
        self.proc = None

    def __enter__(self) -> GatewayProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
