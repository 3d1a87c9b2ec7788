"""Running a node's process: the gateway's app on uvicorn, with the transport's limits and TLS.

`run_server` is a node of one process. `python -m gateway.run` is one worker of a node of
several, started by gateway.supervisor (which says how it talks to it)."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import functools
import logging
import os
import pickle
import resource
import signal
import socket
import ssl
import sys
import threading
from collections.abc import Callable
from types import FrameType

import uvicorn

from gateway import gcpauses, log
from gateway.app import create_app
from gateway.config import ConfigError, Settings
from gateway.httpserver import uvicorn_options
from gateway.node.listening import listen
from gateway.node.workers import WorkerSet
from gateway.s3api.auth.fastpath import IMPLEMENTATION as SIGV4_CHECK
from gateway.s3api.responses import error_page
from gateway.tls import reload_on_sighup

_MARGIN_FILES = 1024  # open files besides clients': origin and peer pools, Redis, disk blocks (256 kept per tier)


def run_server(settings: Settings, listening: Callable[[int], None] = lambda port: None) -> None:
    """Serve until stopped (SIGINT/SIGTERM drain within server.shutdown_timeout; SIGHUP reloads
    TLS files); `listening(port)` once it serves. Bound before the app is made: with server.port
    0, the app knows the port the system gave (the node's identity in a fleet is its address).
    Raises ConfigError when the port cannot be bound or the TLS files do not load."""
    with listen(settings.server) as sock:
        port = sock.getsockname()[1]
        settings = dataclasses.replace(settings, server=dataclasses.replace(settings.server, port=port))
        _Server(_config(settings, None), listening).run(sockets=[sock])


class _Ticking(uvicorn.Server):
    """uvicorn, whose main loop looks at its state once a second, not ten times (its date header
    changes once a second; an idle worker wakes less: issue 33), and at once when asked to stop."""

    _stop: asyncio.Event | None = None
    _loop: asyncio.AbstractEventLoop | None = None

    async def main_loop(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 10) % 864000  # (uvicorn's ticks are tenths of a second: each of these is ten)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), 1.0)
            should_exit = await self.on_tick(counter)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        self.wake()

    def wake(self) -> None:
        """Have the main loop look at `should_exit` now (any thread, a signal handler too)."""
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):  # (the loop is closed: it stopped already)
                self._loop.call_soon_threadsafe(self._stop.set)


class _Server(_Ticking):
    """uvicorn, saying the port it listens on once it serves."""

    def __init__(self, config: uvicorn.Config, listening: Callable[[int], None]) -> None:
        super().__init__(config)
        self.listening = listening

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            self.listening(self.servers[0].sockets[0].getsockname()[1])


def _config(settings: Settings, workers: WorkerSet | None) -> uvicorn.Config:
    server = settings.server
    tls = {"ssl_certfile": server.tls_cert_file, "ssl_keyfile": server.tls_key_file} if server.tls_cert_file else {}
    raise_open_files_limit(server.max_connections)
    keep_large_allocations()
    if workers is None or workers.index == 0:
        log.s3api.info("SigV4 check: %s", SIGV4_CHECK)  # once a node: which one the hit path runs
    app = create_app(settings, workers)
    gcpauses.collect_less_often()  # what exists now lives as long as the process
    config = uvicorn.Config(
        app, host=server.host, port=server.port,
        loop="uvloop", lifespan="on", access_log=False, log_level="warning",
        server_header=False, date_header=True, **uvicorn_options(server, error_page, app), **tls,  # type: ignore[arg-type]
    )
    if tls:
        try:
            config.load()  # builds the SSL context, which the server then uses as it is
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"server.tls_cert_file / tls_key_file do not load: {exc}") from None
        assert config.ssl is not None
        reload_on_sighup(config.ssl, server.tls_cert_file, server.tls_key_file)
    return config


def raise_open_files_limit(max_connections: int) -> None:
    """Raise this process's soft limit of open files (up to the hard one) to fit
    `max_connections` clients plus the gateway's own files; warn when it cannot."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = max_connections + _MARGIN_FILES
    if soft != resource.RLIM_INFINITY and soft < wanted:
        new = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            soft = new
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and soft < wanted:
        logging.getLogger("gateway.server").warning(
            "open-files limit %d is below server.max_connections + %d; raise it (ulimit -n, LimitNOFILE=) or lower "
            "server.max_connections", soft, _MARGIN_FILES)


# glibc's malloc gives an allocation of 128 KiB or more (its threshold rises with use, to 32 MiB
# at most) fresh pages from mmap, and gives the top of its heap back to the system above twice
# that threshold. Every block the gateway receives, reads from a file or copies is such an
# allocation, and its fresh pages fault in one by one: ~0.9 ms of CPU per MiB here, against
# 0.15 ms for the copy itself. So blocks come from the heap, which keeps up to 64 MiB freed at its
# top for the next ones (RSS stays within that of the peak; the read buffer bounds the peak).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (malloc.h)
_MMAP_THRESHOLD = 32 * 1024 * 1024
_TRIM_THRESHOLD = 64 * 1024 * 1024


def keep_large_allocations() -> None:
    """Have glibc's malloc reuse freed large allocations instead of mapping fresh pages for each
    (nothing to do on another C library)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
    mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)


class _WorkerServer(_Ticking):
    """uvicorn on the node's TCP socket (with TLS when configured) and on this worker's own
    unix socket, in plain HTTP: only the node's workers reach it, in the node's 0700 run
    folder. Reports "ready" to the supervisor once both serve."""

    def __init__(self, config: uvicorn.Config, unix: socket.socket, report: int) -> None:
        super().__init__(config)
        self.unix = unix
        self.report = report

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        protocol = functools.partial(self.config.http_protocol_class, config=self.config,  # type: ignore[call-arg]
                                     server_state=self.server_state, app_state=self.lifespan.state)
        loop = asyncio.get_running_loop()
        self.servers.append(await loop.create_server(protocol, sock=self.unix, backlog=self.config.backlog))
        os.write(self.report, b"ready\n")

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await super().shutdown(sockets=sockets)
        self.unix.close()


def run_worker(tcp_fd: int, report: int) -> None:
    """One worker: the settings and log level come pickled on stdin, which then stays open
    while the supervisor lives; a configuration error is reported ("error <reason>") before
    exiting 1, as the node cannot start."""
    settings, log_level = pickle.load(sys.stdin.buffer)
    log.configure(log_level)
    workers = WorkerSet.from_env()
    try:
        config = _config(settings, workers)
    except ConfigError as exc:
        os.write(report, f"error {exc}\n".encode())
        sys.exit(1)
    if not settings.server.tls_cert_file:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the node's reload signal: nothing to reload
    path = workers.socket_path(workers.index)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # left by the worker this one replaces
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(path)  # listens once the app started: a sibling calling before is refused at once, not kept waiting
    server = _WorkerServer(config, unix, report)
    threading.Thread(target=_stop_with_supervisor, args=(server,), name="supervisor-watch", daemon=True).start()
    server.run(sockets=[socket.socket(fileno=tcp_fd)])


def _stop_with_supervisor(server: _WorkerServer) -> None:
    """A worker outliving its supervisor (killed) would keep the port: it stops as on SIGTERM."""
    sys.stdin.buffer.read()
    log.s3api.warning("the node's supervisor is gone: stopping")
    server.should_exit = True
    server.wake()


if __name__ == "__main__":
    run_worker(int(sys.argv[1]), int(sys.argv[2]))
