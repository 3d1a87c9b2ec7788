"""One pooled connection of the range client: an asyncio BufferedProtocol that sends a request,
reads its answer's head into a scratch buffer and its body straight into the bytes object it
is returned as (fresh_bytes), or a chunked or until-close body into pieces; with the read timeout."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from gateway.rangeclient.fresh import SMALLEST, fresh_bytes
from gateway.rangeclient.wire import MAX_HEAD, ChunkedDecoder, MalformedAnswer, body_framing, parse_head

Arrived = Callable[[memoryview], None]
FIRST_ARRIVAL = 64 * 1024  # bytes of a part told to read_part's `arrived` first, then ...
ARRIVAL = 256 * 1024  # ... at a time (each costs its reader a wake-up and a write)


class Connection(asyncio.BufferedProtocol):
    """One connection: sends a request, reads its answer's head into a scratch buffer, then
    its body into a buffer of the body's size (or, chunked or until close, into pieces)."""

    def __init__(self, host: str, read_timeout: float) -> None:
        self.host = host
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
        self._no_body = False  # the current request is a HEAD: its answer has no body, whatever it says
        self._head: tuple[int, list[tuple[str, str]]] | None = None
        self._length: int | None = None  # the body's, when framed by Content-Length
        self._chunks: ChunkedDecoder | None = None
        self._until_close: bytearray | None = None
        self._body: bytes | bytearray | None = None  # a Content-Length body, received into ...
        self._body_view: memoryview | None = None
        self._body_filled = 0  # ... and how much of it arrived
        self._body_cap = 0  # the most bytes kept (limit + 1 past a limit)
        self._body_done = 0  # bytes of a Content-Length body returned by earlier read_part calls
        self._wake_at = 0  # while read_part tells what arrived: the bytes of the part that wake it
        self._complete = False  # the body (up to _body_cap) is in
        self._waiter: asyncio.Future[None] | None = None
        self._loop = asyncio.get_running_loop()
        self._last_data = 0.0  # loop time of the last byte, while a reader waits
        self._timer: asyncio.TimerHandle | None = None
        self._paused = False

    # --- the request ------------------------------------------------------------------------

    async def exchange(self, request: bytes, *, no_body: bool = False) -> tuple[int, list[tuple[str, str]]]:
        """Send `request`; (status, header items) once the answer's head is in. `no_body`: the
        request is a HEAD, whose answer ends with its head (its Content-Length is the object's)."""
        if self._closed or self._transport is None:
            raise ConnectionError("the connection is closed")
        self.nothing_received = True
        self._in_head, self._head, self._no_body = True, None, no_body
        self._length, self._chunks, self._until_close = None, None, None
        self._body, self._body_view, self._body_filled, self._body_cap, self._complete = None, None, 0, 0, False
        self._body_done = 0
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
                self._start_body(self._body_cap)
            self._check_complete()
            body = await self._received_body()
            if body is None:
                body = b""
            elif isinstance(body, bytearray):
                body = bytes(body)
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

    async def read_part(self, count: int, arrived: Arrived | None = None) -> bytes:
        """The next `count` bytes of a body framed by Content-Length (see RangeResponse.read_part)."""
        left = self.parts_left()
        if left is None:
            raise ConnectionError(f"an answer of {self.host} not framed by Content-Length is not read in parts")
        if count > left:
            raise ConnectionError(f"the body {self.host} sends ends {left} bytes on, before {count} more")
        self._body_cap = count
        if count > 0:
            self._start_body(count)
        self._complete = self._body_filled >= count
        if arrived is not None and not self._complete:
            await self._tell_arrivals(arrived)
        part = await self._received_body()
        self._body_done += count
        self._body_cap = self._body_filled = 0  # what comes next waits in the scratch buffer
        self._complete = self._body_done == self._length
        if part is None:
            return b""
        return bytes(part) if isinstance(part, bytearray) else part

    def _start_body(self, size: int) -> None:
        """A buffer of `size` bytes for the body, with what the scratch buffer already holds of it."""
        self._body, self._body_view = self._new_body(size)
        taken = min(self._filled, size)
        self._body_view[:taken] = self._view[:taken]
        self._body_filled = taken
        self._consume(taken)

    async def _tell_arrivals(self, arrived: Arrived) -> None:
        """Until the part is complete, `arrived` is given each stretch of it as it comes, the
        first once FIRST_ARRIVAL bytes are in, the next ones ARRIVAL bytes at a time: read-only
        views of the bytes the part ends as, which nothing writes again."""
        assert self._body is not None
        whole = memoryview(self._body).toreadonly()
        given, step = 0, FIRST_ARRIVAL
        self._resume()
        while not self._complete:
            self._wake_at = given + step
            try:
                await self._wait(lambda: self._complete or self._body_filled >= self._wake_at)
            finally:
                self._wake_at = 0
            if not self._complete:
                filled = self._body_filled
                arrived(whole[given:filled])
                given, step = filled, ARRIVAL

    async def _received_body(self) -> bytes | bytearray | None:
        """The body buffer once it is complete (reading resumed until then), let go of here."""
        self._resume()
        try:
            await self._wait(lambda: self._complete)
            return self._body
        finally:
            if self._body_view is not None:
                self._body_view.release()
            self._body, self._body_view = None, None

    @staticmethod
    def _new_body(size: int) -> tuple[bytes | bytearray, memoryview]:
        """What a body of `size` bytes is received into, and a writable view of it."""
        if size < SMALLEST:
            buffer = bytearray(size)
            return buffer, memoryview(buffer)
        return fresh_bytes(size)

    def body_left(self) -> int | None:
        """Bytes of the current answer's body not read yet (None: unknown, until close or chunked)."""
        if self._head is None:
            return None
        if self._length is None:
            return None if not self._complete else 0
        return self._length - self._body_done - (self._body_filled if self._body_cap else self._filled)

    def parts_left(self) -> int | None:
        """Bytes of a Content-Length body that read_part has not returned yet (None: the answer
        has no head yet, or is framed otherwise)."""
        if self._head is None or self._length is None:
            return None
        return self._length - self._body_done

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
            elif self._wake_at and self._body_filled >= self._wake_at:
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
            length, chunked = (0, False) if self._no_body else body_framing(status, items)
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
        """Reading resumed, unless what arrived fills the scratch buffer (a part complete, the
        answer's rest in the scratch buffer until the reader says how much it takes next)."""
        if self._paused and self._transport is not None and self._filled < len(self._scratch):
            self._paused = False
            self._transport.resume_reading()
