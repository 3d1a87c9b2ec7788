"""Servers for the tests and benchmarks: waiting for a child process to answer, free loopback
ports where a server cannot say which it bound, and moto's S3 server as the origin (the
product's `gateway demo` keeps its own)."""

from __future__ import annotations

import contextlib
import random
import re
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from tests.waiting import wait_for


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listened on a moment ago. Only for a server that
    cannot bind port 0 and say which port it got (redis-server: `--port 0` means no TCP at all),
    or for an address where nothing listens: another process may take the port meanwhile."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_for_later() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now, below the kernel's range of ephemeral
    ports: for a server started some seconds later, as a walk-through starts it. A port of
    `free_port` is in that range, where any connection opened meanwhile (to Redis, to moto) may
    take it as its own end, and the server then cannot bind it."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
            low = int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(200):
        port = random.randrange(10000, max(10001, low))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    return free_port()


def wait_serving(probe: Callable[[], object], proc: subprocess.Popen[Any], what: str, *, timeout: float = 30,
                 errors: tuple[type[BaseException], ...] = (OSError, httpx.HTTPError), interval: float = 0.1) -> None:
    """Call `probe` until it returns without raising one of `errors`; RuntimeError naming `what`
    when `proc` exits first or `timeout` seconds pass (the caller stops `proc`)."""
    def answered() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited ({proc.returncode}) before it answered")
        probe()
        return True

    try:
        wait_for(answered, f"{what} answers", within=timeout, ignoring=errors, interval=interval)
    except AssertionError as exc:
        raise RuntimeError(str(exc)) from None


def refuses(port: int) -> bool:
    """Whether a connection to 127.0.0.1:`port` is refused now: nothing listens there (a server
    that shuts down closed its listening socket)."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def stop_process(proc: subprocess.Popen[Any], timeout: float = 10) -> None:
    """Terminate `proc` and reap it; SIGKILL if it is still there after `timeout` seconds."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)


def http_get(url: str, timeout: float = 1) -> None:
    """One GET with a client that is closed afterwards (a probe for `wait_serving`)."""
    with httpx.Client(timeout=timeout) as c:
        c.get(url)


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """moto's S3 server as a subprocess on loopback, on the port it bound (it says which);
    yields its endpoint URL, stops it at the end."""
    with tempfile.NamedTemporaryFile() as log:  # what it printed: its port, or why it did not start
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", "0"],
                                stdout=subprocess.DEVNULL, stderr=log)
        try:
            try:
                endpoint = _said_running(log.name, proc)
                wait_serving(lambda: http_get(endpoint + "/moto-api/"), proc, f"moto_server at {endpoint}")
            except RuntimeError as err:
                stop_process(proc)
                raise RuntimeError(f"{err}:\n{Path(log.name).read_bytes()[-3000:].decode(errors='replace')}") from None
            yield endpoint
        finally:
            stop_process(proc)


def _said_running(log: str, proc: subprocess.Popen[Any], timeout: float = 30) -> str:
    """The address werkzeug (under moto) printed once it bound: `* Running on http://127.0.0.1:PORT`."""
    def printed() -> str | None:
        if proc.poll() is not None:
            raise RuntimeError(f"moto_server exited ({proc.returncode}) before it bound a port")
        found = re.search(rb"Running on (http://127\.0\.0\.1:\d+)", Path(log).read_bytes())
        return found[1].decode() if found else None

    try:
        return wait_for(printed, "moto_server says the port it bound", within=timeout, interval=0.05)
    except AssertionError as exc:
        raise RuntimeError(str(exc)) from None


class CountingProxy:
    """bench/shaped_proxy.py in front of an S3 server (`latency`: its delay before each answer, e.g.
    "100ms"; `rate`: each connection's bytes a second, e.g. "256KB"; neither by default): the requests
    it relayed since `mark`, by kind, those of `kinds` that changed (object GET, HEAD, LIST, other)."""

    def __init__(self, upstream: str, *, latency: str = "", rate: str = "",
                 kinds: tuple[str, ...] = ("GET", "HEAD", "LIST", "other")) -> None:
        port = free_port()  # (the proxy does not say which port it bound)
        self.endpoint, self.kinds = f"http://127.0.0.1:{port}", kinds
        shaping = (["--latency", latency] if latency else []) + (["--rate", rate] if rate else [])
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve().parent.parent / "bench" /
                                                          "shaped_proxy.py"), "--upstream", upstream.removeprefix("http://"),
                                      "--port", str(port), *shaping], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_serving(self._counts, self.proc, "shaped_proxy")
        self.mark()

    def _counts(self) -> dict[str, int]:
        with httpx.Client(timeout=5) as c:
            return c.get(self.endpoint + "/_shaped_proxy/counters").json()["requests"]  # type: ignore[no-any-return]

    def mark(self) -> None:
        self._at = self._counts()

    def since(self) -> dict[str, int]:
        now = self._counts()
        return {kind: now[kind] - self._at[kind] for kind in self.kinds if now[kind] != self._at[kind]}

    def close(self) -> None:
        stop_process(self.proc)
