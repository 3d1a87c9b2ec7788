"""The range client's pool of connections per host and the answers it gives (see the package)."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque

from gateway.rangeclient.connection import Arrived, Connection

_MAX_IDLE = 64  # pooled connections per host, at most
_LARGEST_UNFRAMED = 64 * 1024 * 1024  # a body without a Content-Length read in parts: read whole, at most this


class RangeResponse:
    """An answer whose head was read; its body is read with `read_at_most` (or dropped with
    `aclose`). `header_items`: names lower-cased, values as latin-1 text; `headers` the same
    as a dict, repeated names joined with commas."""

    __slots__ = ("status", "header_items", "headers", "_connection", "_client", "_rest")

    def __init__(self, status: int, items: list[tuple[str, str]], connection: Connection,
                 client: RangeClient) -> None:
        self.status = status
        self.header_items = items
        headers: dict[str, str] = {}
        for name, value in items:
            headers[name] = f"{headers[name]},{value}" if name in headers else value
        self.headers = headers
        self._connection: Connection | None = connection
        self._client = client
        self._rest: bytes | None = None  # a body not framed by Content-Length, read whole, that read_part hands out

    async def read_at_most(self, limit: int) -> bytes:
        """The body if it is at most `limit` bytes; otherwise more than `limit` of its first
        bytes, and the connection is dropped. ConnectionError if it was cut off, TimeoutError
        if it stalled."""
        connection = self._connection
        if connection is None:
            raise RuntimeError("the body was already read or dropped")
        self._connection = None
        try:
            body = await connection.read_body(limit)
        except BaseException:
            connection.drop()
            raise
        self._client.release(connection)
        return body

    async def read_part(self, count: int, arrived: Arrived | None = None) -> bytes:
        """The next `count` bytes of a body framed by Content-Length, in a buffer of their own
        (an answer of many blocks read block by block, memory bounded by a block); once its
        last byte was read the connection is pooled again. A body framed otherwise (chunked, or
        until close: not S3's way) is read whole first, up to 64 MiB, and handed out in parts.
        ConnectionError when the body ends before them; TimeoutError if it stalled: the
        connection is dropped then. `arrived`: given the part's bytes as they come, in stretches
        (views of the bytes returned), before it is complete (Connection.read_part)."""
        if self._rest is not None:
            return self._take(count)
        connection = self._connection
        if connection is None:
            raise RuntimeError("the body was already read or dropped")
        if connection.parts_left() is None:  # chunked, or until close (not S3's way): read whole, up to a bound
            rest = await self.read_at_most(_LARGEST_UNFRAMED)
            if len(rest) > _LARGEST_UNFRAMED:
                raise ConnectionError(f"a body over {_LARGEST_UNFRAMED} bytes without a Content-Length")
            self._rest = rest
            return self._take(count)
        try:
            part = await connection.read_part(count, arrived)
        except BaseException:
            self._connection = None
            connection.drop()
            raise
        if connection.parts_left() == 0:
            self._connection = None
            self._client.release(connection)
        return part

    def _take(self, count: int) -> bytes:
        rest = self._rest
        assert rest is not None
        if count > len(rest):
            raise ConnectionError(f"the body ends {len(rest)} bytes on, before {count} more")
        part, self._rest = rest[:count], rest[count:]
        return part

    def __del__(self) -> None:  # never read nor closed (its reader was cancelled): not pooled
        if self._connection is not None:
            self._connection.drop()

    async def aclose(self) -> None:
        """Done with the answer: the connection is pooled again if nothing of its body is left."""
        connection, self._connection = self._connection, None
        if connection is not None:
            if connection.body_left() == 0:
                self._client.release(connection)
            else:
                connection.drop()


class RangeClient:
    """Pooled HTTP/1.1 connections to one scheme's hosts (`host[:port]` per request), or to the
    server on `unix_socket` whatever the host. A pooled connection idle for `idle_seconds` is
    closed (keep it below the servers' keep-alive timeout)."""

    def __init__(self, scheme: str, *, connect_timeout: float, read_timeout: float, max_connections: int,
                 ssl_context: ssl.SSLContext | None = None, unix_socket: str = "",
                 idle_seconds: float = 15.0) -> None:
        if scheme not in ("http", "https"):
            raise ValueError(f"scheme {scheme!r}")
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.idle_seconds = idle_seconds
        self._unix_socket = unix_socket
        self._ssl = (ssl_context or ssl.create_default_context()) if scheme == "https" else None
        self._slots = asyncio.Semaphore(max_connections)  # made on first use's loop (3.10+)
        self._idle: dict[str, deque[tuple[Connection, float]]] = {}

    async def get(self, host: str, target: str, headers: dict[str, str], *,
                  read_timeout: float | None = None, method: str = "GET") -> RangeResponse:
        """Send `GET target` to `host` with exactly `headers` (Host among them) and return once
        the answer's head is in. Its body must be read or closed (RangeResponse).
        `read_timeout`: this request's, instead of the client's. `method` "HEAD": the answer
        has no body (read_at_most gives b"", and the connection is pooled again)."""
        if method not in ("GET", "HEAD"):
            raise ValueError(f"method {method!r}")
        request = _request_head(method, target, headers)
        await self._slots.acquire()
        try:
            while True:
                connection, reused = self._idle_connection(host), True
                if connection is None:
                    connection, reused = await self._connect(host), False
                connection.read_timeout = self.read_timeout if read_timeout is None else read_timeout
                try:
                    status, items = await connection.exchange(request, no_body=method == "HEAD")
                except ConnectionError:
                    connection.drop()
                    if reused and connection.nothing_received:  # closed by the server while idle
                        continue
                    raise
                except BaseException:
                    connection.drop()
                    raise
                break
        except BaseException:
            self._slots.release()
            raise
        connection.slot = self._slots
        return RangeResponse(status, items, connection, self)

    def release(self, connection: Connection) -> None:
        """A connection whose answer was read to its end: pooled again, or closed."""
        connection.give_slot()
        if not connection.reusable():
            connection.drop()
            return
        idle = self._idle.setdefault(connection.host, deque())
        now = time.monotonic()
        idle.append((connection, now))
        while idle and (len(idle) > _MAX_IDLE or now - idle[0][1] > self.idle_seconds):
            idle.popleft()[0].drop()

    async def aclose(self) -> None:
        for idle in self._idle.values():
            while idle:
                idle.popleft()[0].drop()
        self._idle.clear()

    def _idle_connection(self, host: str) -> Connection | None:
        idle = self._idle.get(host)
        now = time.monotonic()
        while idle:
            connection, since = idle.pop()  # the most recently used: least likely closed by the server
            if now - since <= self.idle_seconds and connection.reusable():
                return connection
            connection.drop()
        return None

    async def _connect(self, host: str) -> Connection:
        name, port = _split_host(host, 443 if self._ssl is not None else 80)
        loop = asyncio.get_running_loop()

        def protocol() -> Connection:
            return Connection(host, self.read_timeout)

        connecting = (loop.create_unix_connection(protocol, self._unix_socket) if self._unix_socket else
                      loop.create_connection(protocol, name, port, ssl=self._ssl,
                                             server_hostname=name if self._ssl is not None else None))
        try:  # asyncio.timeout, not wait_for, which on 3.11 can drop a cancellation (gateway/periodic.py)
            async with asyncio.timeout(self.connect_timeout):
                _, connection = await connecting
        except TimeoutError as exc:
            raise TimeoutError(f"connecting to {host} took over {self.connect_timeout:g}s") from exc
        except OSError as exc:
            raise ConnectionError(f"connecting to {host}: {exc}") from exc
        return connection


def _request_head(method: str, target: str, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {target} HTTP/1.1"]
    for name, value in headers.items():
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name or ":" in name:
            raise ValueError(f"header {name!r} cannot be sent")
        lines.append(f"{name}: {value}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _split_host(host: str, default_port: int) -> tuple[str, int]:
    if host.startswith("["):  # [v6]:port
        name, _, rest = host[1:].partition("]")
        return name, int(rest[1:]) if rest.startswith(":") else default_port
    name, colon, port = host.rpartition(":")
    if colon and port.isdigit():
        return name, int(port)
    return host, default_port
