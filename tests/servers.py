"""Servers for the tests and benchmarks: free loopback ports, waiting for a child process to
answer, and moto's S3 server as the origin (the product's `gateway demo` keeps its own)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listened on a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_serving(probe: Callable[[], object], proc: subprocess.Popen[Any], what: str, *, timeout: float = 30,
                 errors: tuple[type[BaseException], ...] = (OSError, httpx.HTTPError), interval: float = 0.1) -> None:
    """Call `probe` until it returns without raising one of `errors`; RuntimeError naming `what`
    when `proc` exits first or `timeout` seconds pass (the caller stops `proc`)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            probe()
            return
        except errors:
            if proc.poll() is not None:
                raise RuntimeError(f"{what} exited ({proc.returncode}) before it answered") from None
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not answer within {timeout:.0f} s") from None
            time.sleep(interval)


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
def moto_server(port: int | None = None) -> Iterator[str]:
    """moto's S3 server as a subprocess on loopback; yields its endpoint URL, stops it at the end."""
    port = port or free_port()
    endpoint = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile() as log:  # what it printed, shown when it does not start
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=subprocess.DEVNULL, stderr=log)
        try:
            try:
                wait_serving(lambda: http_get(endpoint + "/moto-api/"), proc, f"moto_server on port {port}")
            except RuntimeError as err:
                stop_process(proc)
                log.seek(0)
                raise RuntimeError(f"{err}:\n{log.read()[-3000:].decode(errors='replace')}") from None
            yield endpoint
        finally:
            stop_process(proc)
