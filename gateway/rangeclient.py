"""An HTTP/1.1 client for GETs whose body is one cache block: the body lands in one buffer.

aiohttp hands a body over as the pieces the socket gave (64 KiB or less each), each one
through its parser, a stream reader and a wake-up of the reading task, and the reader then
joins them: for a cold 1 MiB read that was a fifth of the gateway's CPU. Here the connection
is an asyncio BufferedProtocol: once the answer's head is in and the reader says how much it
takes, the kernel's reads go straight into a buffer of the body's length, and the reading
task is woken once, when the body is whole.

One request at a time per connection, keep-alive connections pooled per host (a connection
goes back only when its answer was read to its end and the server did not say close). Bodies
framed by Content-Length (what S3 sends for a GET), chunked or ended by the connection's
close are all read. A read timeout is the longest time without a byte, as aiohttp's
sock_read. Failures are the builtin ConnectionError and TimeoutError; a request on a pooled
connection that the server had closed meanwhile is sent again once on a new one.

It knows nothing of S3 or signing: gateway.origin reads cache blocks with it, and
gateway.cluster.peers asks peers and a node's sibling workers (over a unix socket) for them.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from collections.abc import Callable

__all__ = ["Buffers", "ChunkedDecoder", "MalformedAnswer", "RangeClient", "RangeResponse", "parse_head"]

MAX_HEAD = 64 * 1024  # an answer's status line and headers, at most
_MAX_IDLE = 64  # pooled connections per host, at most
_NO_BODY = (204, 304)
_SMALLEST_KEPT = 64 * 1024  # smaller receive buffers are not kept for the next body


class MalformedAnswer(ConnectionError):
    """The server's answer is not HTTP/1.1 this client can read: the connection is dropped."""


def parse_head(head: bytes) -> tuple[int, list[tuple[str, str]], bool]:
    """(status, header items with lower-cased names and latin-1 values, HTTP/1.0) of an
    answer's head (without the blank line that ends it); MalformedAnswer if it is not one."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or len(parts[0]) != 8 \
            or len(parts[1]) != 3 or not parts[1].isdigit():
        raise MalformedAnswer(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    items: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip() or b" " in name or b"\t" in name:
            raise MalformedAnswer(f"not a header line: {line[:80]!r}")
        items.append((name.decode("latin-1").lower(), value.strip(b" \t").decode("latin-1")))
    return int(parts[1]), items, parts[0] == b"HTTP/1.0"


def body_framing(status: int, items: list[tuple[str, str]]) -> tuple[int | None, bool]:
    """(the body's length, chunked) of an answer: (0, False) when it has none, (None, False)
    when it ends with the connection; MalformedAnswer for lengths that disagree."""
    if status in _NO_BODY or 100 <= status < 200:
        return 0, False
    codings = [v.strip().lower() for name, value in items if name == "transfer-encoding" for v in value.split(",")]
    if codings:
        return (None, True) if codings[-1] == "chunked" else (None, False)
    lengths = {v.strip() for name, value in items if name == "content-length" for v in value.split(",")}
    if not lengths:
        return None, False
    if len(lengths) > 1 or not all(c in "0123456789" for c in next(iter(lengths))) or not next(iter(lengths)):
        raise MalformedAnswer(f"Content-Length {sorted(lengths)!r}")
    return int(next(iter(lengths))), False


class ChunkedDecoder:
    """A chunked body (RFC 9112 7.1) decoded as its bytes arrive. `feed` returns how many of
    the bytes given it were used (all, unless the body ended within them); `done` once the
    last chunk and the trailer section were read. Chunk extensions and trailers are skipped."""

    __slots__ = ("body", "done", "_state", "_left", "_line")

    def __init__(self) -> None:
        self.body = bytearray()
        self.done = False
        self._state = "size"  # size line | data | the CRLF after a chunk's data | trailer lines
        self._left = 0  # data bytes of the current chunk still to come
        self._line = bytearray()  # a line not yet ended

    def feed(self, data: bytes) -> int:
        used, size = 0, len(data)
        while used < size and not self.done:
            if self._state == "data":
                take = min(self._left, size - used)
                self.body += data[used:used + take]
                used += take
                self._left -= take
                if self._left == 0:
                    self._state = "crlf"
                continue
            end = data.find(b"\n", used)
            if end < 0:
                self._line += data[used:]
                if len(self._line) > MAX_HEAD:
                    raise MalformedAnswer("a chunk line or trailer section too long")
                return size
            self._line += data[used:end + 1]
            used = end + 1
            line = bytes(self._line)
            self._line.clear()
            if not line.endswith(b"\r\n"):
                raise MalformedAnswer("a chunk line not ended by CRLF")
            self._end_of_line(line[:-2])
        return used

    def _end_of_line(self, line: bytes) -> None:
        if self._state == "crlf":
            if line:
                raise MalformedAnswer("a chunk longer than its size")
            self._state = "size"
        elif self._state == "size":
            digits = line.split(b";", 1)[0].strip(b" \t")
            if not digits or len(digits) > 15 or any(c not in b"0123456789abcdefABCDEF" for c in digits):
                raise MalformedAnswer(f"chunk size {digits[:20]!r}")
            self._left = int(digits, 16)
            self._state = "data" if self._left else "trailer"
        elif not line:  # the blank line that ends the trailer section
            self.done = True


class Buffers:
    """Receive buffers used again and again (at most `most` kept): a body is received into one
    and copied out into the bytes its reader keeps, so no new buffer is zeroed per body, nor
    faulted in page by page when it is memory the process never touched before."""

    __slots__ = ("_free", "_most")

    def __init__(self, most: int = 16) -> None:
        self._free: list[bytearray] = []
        self._most = most

    def take(self, size: int) -> bytearray:
        """A buffer of at least `size` bytes."""
        free = self._free
        for i in range(len(free) - 1, -1, -1):
            if len(free[i]) >= size:
                return free.pop(i)
        return bytearray(size)

    def give(self, buffer: bytearray) -> None:
        if len(buffer) >= _SMALLEST_KEPT and len(self._free) < self._most:
            self._free.append(buffer)


class RangeResponse:
    """An answer whose head was read; its body is read with `read_at_most` (or dropped with
    `aclose`). `header_items`: names lower-cased, values as latin-1 text; `headers` the same
    as a dict, repeated names joined with commas."""

    __slots__ = ("status", "header_items", "headers", "_connection", "_client")

    def __init__(self, status: int, items: list[tuple[str, str]], connection: _Connection,
                 client: RangeClient) -> None:
        self.status = status
        self.header_items = items
        headers: dict[str, str] = {}
        for name, value in items:
            headers[name] = f"{headers[name]},{value}" if name in headers else value
        self.headers = headers
        self._connection: _Connection | None = connection
        self._client = client

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
        self.scheme = scheme
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.idle_seconds = idle_seconds
        self._unix_socket = unix_socket
        self._ssl = (ssl_context or ssl.create_default_context()) if scheme == "https" else None
        self._slots = asyncio.Semaphore(max_connections)  # made on first use's loop (3.10+)
        self._idle: dict[str, deque[tuple[_Connection, float]]] = {}
        self._buffers = Buffers()
        self.connections = 0  # opened so far

    async def get(self, host: str, target: str, headers: dict[str, str], *,
                  read_timeout: float | None = None) -> RangeResponse:
        """Send `GET target` to `host` with exactly `headers` (Host among them) and return once
        the answer's head is in. Its body must be read or closed (RangeResponse).
        `read_timeout`: this request's, instead of the client's."""
        request = _request_head(target, headers)
        await self._slots.acquire()
        try:
            while True:
                connection, reused = self._idle_connection(host), True
                if connection is None:
                    connection, reused = await self._connect(host), False
                connection.read_timeout = self.read_timeout if read_timeout is None else read_timeout
                try:
                    status, items = await connection.exchange(request)
                except ConnectionError as exc:
                    connection.drop()
                    if reused and connection.nothing_received:  # closed by the server while idle
                        continue
                    raise exc
                except BaseException:
                    connection.drop()
                    raise
                break
        except BaseException:
            self._slots.release()
            raise
        connection.slot = self._slots
        return RangeResponse(status, items, connection, self)

    def release(self, connection: _Connection) -> None:
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

    def _idle_connection(self, host: str) -> _Connection | None:
        idle = self._idle.get(host)
        now = time.monotonic()
        while idle:
            connection, since = idle.pop()  # the most recently used: least likely closed by the server
            if now - since <= self.idle_seconds and connection.reusable():
                return connection
            connection.drop()
        return None

    async def _connect(self, host: str) -> _Connection:
        name, port = _split_host(host, 443 if self._ssl is not None else 80)
        loop = asyncio.get_running_loop()

        def protocol() -> _Connection:
            return _Connection(host, self.read_timeout, self._buffers)

        connecting = (loop.create_unix_connection(protocol, self._unix_socket) if self._unix_socket else
                      loop.create_connection(protocol, name, port, ssl=self._ssl,
                                             server_hostname=name if self._ssl is not None else None))
        try:
            _, connection = await asyncio.wait_for(connecting, self.connect_timeout)
        except asyncio.TimeoutError as exc:
            raise TimeoutError(f"connecting to {host} took over {self.connect_timeout:g}s") from exc
        except OSError as exc:
            raise ConnectionError(f"connecting to {host}: {exc}") from exc
        self.connections += 1
        return connection


class _Connection(asyncio.BufferedProtocol):
    """One connection: sends a request, reads its answer's head into a scratch buffer, then
    its body into a buffer of the body's size (or, chunked or until close, into pieces)."""

    def __init__(self, host: str, read_timeout: float, buffers: Buffers) -> None:
        self.host = host
        self._buffers = buffers
        self.read_timeout = read_timeout
        self.slot: asyncio.Semaphore | None = None
        self.nothing_received = True  # since the current request was sent
        self._transport: asyncio.Transport | None = None
        self._closed = False
        self._error: BaseException | None = None
        self._keep_alive = True
        self._scratch = bytearray(MAX_HEAD)
        self._view = memoryview(self._scratch)
        self._filled = 0  # bytes of _scratch holding what arrived and is not used yet
        self._in_head = False
        self._head: tuple[int, list[tuple[str, str]]] | None = None
        self._length: int | None = None  # the body's, when framed by Content-Length
        self._chunks: ChunkedDecoder | None = None
        self._until_close: bytearray | None = None
        self._body: bytearray | None = None  # a Content-Length body's target buffer ...
        self._body_view: memoryview | None = None
        self._body_filled = 0  # ... and how much of it arrived
        self._body_cap = 0  # the most bytes kept (limit + 1 past a limit)
        self._complete = False  # the body (up to _body_cap) is in
        self._waiter: asyncio.Future[None] | None = None
        self._loop = asyncio.get_running_loop()
        self._last_data = 0.0  # loop time of the last byte, while a reader waits
        self._timer: asyncio.TimerHandle | None = None
        self._paused = False

    # --- the request ------------------------------------------------------------------------

    async def exchange(self, request: bytes) -> tuple[int, list[tuple[str, str]]]:
        """Send `request`; (status, header items) once the answer's head is in."""
        if self._closed or self._transport is None:
            raise ConnectionError("the connection is closed")
        self.nothing_received = True
        self._in_head, self._head = True, None
        self._length, self._chunks, self._until_close = None, None, None
        self._body, self._body_view, self._body_filled, self._body_cap, self._complete = None, None, 0, 0, False
        self._transport.write(request)
        await self._wait(lambda: self._head is not None)
        assert self._head is not None
        return self._head

    async def read_body(self, limit: int) -> bytes:
        """The body (see RangeResponse.read_at_most)."""
        if self._head is None:
            raise RuntimeError("no answer to read")
        if self._length is not None:
            self._body_cap = min(self._length, limit + 1)
            if self._body_cap > 0:
                self._body = self._buffers.take(self._body_cap)
                self._body_view = memoryview(self._body)[:self._body_cap]
                taken = min(self._filled, self._body_cap)
                self._body_view[:taken] = self._view[:taken]
                self._body_filled = taken
                self._consume(taken)
            self._check_complete()
            self._resume()
            try:
                await self._wait(lambda: self._complete)
                body = self._body_view.tobytes() if self._body_view is not None else b""
            finally:
                if self._body is not None:
                    view, self._body_view = self._body_view, None
                    assert view is not None
                    view.release()
                    self._buffers.give(self._body)
                    self._body = None
            if self._body_cap < self._length:
                self._keep_alive = False  # the rest was not read
            return body
        self._body_cap = limit + 1
        self._drain_scratch()
        self._resume()
        await self._wait(lambda: self._complete)
        pieces = self._chunks.body if self._chunks is not None else self._until_close
        assert pieces is not None
        if len(pieces) > limit:
            self._keep_alive = False
        return bytes(pieces[:limit + 1])

    def body_left(self) -> int | None:
        """Bytes of the current answer's body not read yet (None: unknown, until close or chunked)."""
        if self._head is None:
            return None
        if self._length is None:
            return None if not self._complete else 0
        return self._length - self._body_filled if self._body_cap else self._length - self._filled

    def reusable(self) -> bool:
        return self._keep_alive and not self._closed and self._error is None and self._filled == 0 \
            and self._head is not None and (self._complete or self.body_left() == 0)

    def give_slot(self) -> None:
        slot, self.slot = self.slot, None
        if slot is not None:
            slot.release()

    def drop(self) -> None:
        self.give_slot()
        self._closed = True
        self._cancel_timer()
        if self._transport is not None:
            self._transport.abort()

    async def _wait(self, ready: Callable[[], bool]) -> None:
        """Until `ready()`, a failure of the connection, or read_timeout without a byte."""
        while not ready():
            if self._error is not None:
                raise self._error
            if self._closed:
                raise ConnectionError("the connection is closed")
            loop = self._loop
            self._waiter = loop.create_future()
            self._last_data = loop.time()
            self._timer = loop.call_at(self._last_data + self.read_timeout, self._check_stall)
            try:
                await self._waiter
            finally:
                self._waiter = None
                self._cancel_timer()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _check_stall(self) -> None:
        self._timer = None
        loop = self._loop
        due = self._last_data + self.read_timeout
        if loop.time() >= due:
            self._fail(TimeoutError(f"no byte from {self.host} for {self.read_timeout:g}s"))
        else:
            self._timer = loop.call_at(due, self._check_stall)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fail(self, error: BaseException) -> None:
        if self._error is None:
            self._error = error
        self._closed = True
        if self._transport is not None:
            self._transport.abort()
        self._wake()

    # --- asyncio.BufferedProtocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._body_view is not None and self._body_filled < self._body_cap:
            return self._body_view[self._body_filled:]
        return self._view[self._filled:]

    def buffer_updated(self, nbytes: int) -> None:
        self.nothing_received = False
        self._last_data = self._loop.time()
        if self._body_view is not None and self._body_filled < self._body_cap:
            self._body_filled += nbytes
            if self._body_filled == self._body_cap:
                self._complete = True
                self._wake()
            return
        self._filled += nbytes
        try:
            if self._in_head:
                self._read_head()
            elif self._head is not None and self._body_cap:
                self._drain_scratch()
        except MalformedAnswer as exc:
            self._fail(exc)
            return
        if self._filled == len(self._scratch) and self._transport is not None:
            if self._in_head:
                self._fail(MalformedAnswer(f"an answer head over {MAX_HEAD} bytes"))
            else:  # the reader has not said yet how much it takes
                self._transport.pause_reading()
                self._paused = True

    def eof_received(self) -> bool | None:
        self._keep_alive = False
        if self._head is not None and self._length is None and self._chunks is None:
            self._complete = True  # a body that ends with the connection
        self._wake()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._keep_alive = False
        self._cancel_timer()
        if self._head is not None and self._length is None and self._chunks is None and exc is None:
            self._complete = True
        if not self._complete:
            self._error = self._error or ConnectionError(
                f"{self.host} closed the connection" + (f": {exc}" if exc else ""))
        self._wake()

    # --- parsing ------------------------------------------------------------------------------

    def _read_head(self) -> None:
        while self._in_head:
            end = self._scratch.find(b"\r\n\r\n", 0, self._filled)
            if end < 0:
                return
            status, items, http10 = parse_head(bytes(self._scratch[:end]))
            self._consume(end + 4)
            if 100 <= status < 200:
                continue  # an interim answer (100 Continue): the real one follows
            length, chunked = body_framing(status, items)
            if http10 or any(name == "connection" and "close" in value.lower() for name, value in items):
                self._keep_alive = False
            self._in_head = False
            self._head = (status, items)
            self._length = length
            if chunked:
                self._chunks = ChunkedDecoder()
            elif length is None:
                self._until_close = bytearray()
                self._keep_alive = False
            if length == 0:
                self._complete = True
            self._wake()

    def _drain_scratch(self) -> None:
        """Move what the scratch buffer holds into a chunked or until-close body."""
        if self._filled == 0:
            self._check_complete()
            return
        data = bytes(self._view[:self._filled])
        if self._chunks is not None:
            used = self._chunks.feed(data)
            self._consume(used)
            if self._chunks.done or len(self._chunks.body) >= self._body_cap:
                self._complete = True
                if not self._chunks.done:
                    self._keep_alive = False
        elif self._until_close is not None:
            self._until_close += data
            self._consume(len(data))
            if len(self._until_close) >= self._body_cap:
                self._complete = True
        if self._complete:
            self._wake()

    def _check_complete(self) -> None:
        if self._length is not None and self._body_filled >= self._body_cap:
            self._complete = True

    def _consume(self, count: int) -> None:
        """Drop the first `count` bytes of the scratch buffer."""
        if count:
            rest = self._filled - count
            self._view[:rest] = self._view[count:self._filled]
            self._filled = rest

    def _resume(self) -> None:
        if self._paused and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()


def _request_head(target: str, headers: dict[str, str]) -> bytes:
    lines = [f"GET {target} HTTP/1.1"]
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
