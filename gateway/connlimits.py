"""uvicorn's httptools protocol with the limits a server facing many (and some hostile) clients
needs and uvicorn does not have (gateway.httpserver answers hits on top of it).

What uvicorn (0.3x-0.5x, httptools) does alone, found by tests/integration/test_hostile_clients.py:
a connection that sends nothing, or a request head one byte a second, is kept forever; a
request head has no size limit (64 MiB of headers were read into memory); a client that
stops reading its answer parks the request's task in `drain()` forever, with the read
buffer (cache.read_buffer) the answer's blocks hold, so 8 stalled readers of a 64 MiB
object made every other read of an uncached object wait for the budget (20 s for 4 MiB);
and SIGTERM then never finishes. uvicorn's `limit_concurrency` answers plain text and
counts requests in flight, not connections.

`GuardedProtocol` adds, per connection, with timers that cost nothing while all is well:

- a cap on open connections (`server.max_connections`): a connection past it gets
  503 SlowDown (S3's retryable throttling error) to its first request and is closed;
- a time limit for the request head (`server.head_timeout`), counted from the first byte
  of the request (the first request: from connecting), and a size limit
  (`server.max_head_size`) on the bytes it may take;
- a stall limit (`server.stall_timeout`): a request body that was announced but does not
  arrive, or an answer that is not read (the transport's write buffer stays above its
  high-water mark of 64 KiB, i.e. less than 48 KiB read), for that long aborts the
  connection. The request's task then sees the disconnect: a streamed answer is cancelled
  and the budget its blocks held is given back.

Idle keep-alive connections are uvicorn's `timeout_keep_alive` (`server.keepalive_timeout`),
and SIGTERM's drain is bounded by its `timeout_graceful_shutdown` (`server.shutdown_timeout`).
When the keep-alive timer fires, the connection is closed only if no data came for the whole
timeout, else the timer is armed for what is left of it (an answer made without uvicorn's
request cycle, gateway.httpserver, leaves it armed instead of making a new one).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.config import ServerSettings
from gateway.transport_errors import TransportErrors

__all__ = ["GuardedProtocol", "Limits"]

WRITE_HIGH_WATER = 64 * 1024  # the transport's write buffer: writing pauses above it ...
WRITE_LOW_WATER = 16 * 1024  # ... and resumes below this
logger = logging.getLogger("gateway.server")


@dataclass(frozen=True, slots=True)
class Limits:
    """The per-connection limits, from `server.*`."""

    max_connections: int
    head_timeout: float
    max_head_size: int
    stall_timeout: float

    @classmethod
    def of(cls, server: ServerSettings) -> Limits:
        return cls(server.max_connections, server.head_timeout, server.max_head_size, server.stall_timeout)



class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a connection cap, a head timeout and size limit,
    and a stall timeout (see the module docstring). Event loop only.

    Counters over every connection (class attributes, read by the admin API and tests):
    `open_connections` (open now), `refused` (past the cap), `head_timeouts`, `heads_too_large`, `stalls`.
    """

    open_connections = 0
    refused = 0
    head_timeouts = 0
    heads_too_large = 0
    stalls = 0

    def __init__(self, *args: Any, limits: Limits, errors: TransportErrors, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        self._errors = errors
        self._over_cap = False
        self._in_head = True  # between the end of a request (or connecting) and the end of the next head
        self._head_started = False  # a byte of that head arrived
        self._head_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._send_timer: asyncio.TimerHandle | None = None
        self._last_data = 0.0
        self._unparsable: str | None = None  # bytes after whole requests were not HTTP: 400 once they are answered

    # --- connection -------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        GuardedProtocol.open_connections += 1
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER, low=WRITE_LOW_WATER)
        self._over_cap = len(self.connections) > self.limits.max_connections
        if self._over_cap:
            GuardedProtocol.refused += 1
        self._head_timer = self.loop.call_later(self.limits.head_timeout, self._head_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self._head_timer, self._body_timer, self._send_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._body_timer = self._send_timer = None
        GuardedProtocol.open_connections -= 1
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._unparsable is not None:  # nothing after what could not be parsed is read
            return
        self._last_data = self.loop.time()
        self._read(data)

    def _read(self, data: bytes) -> None:
        self._parse(data)
        self._check_head_size()

    def _parse(self, data: bytes) -> None:
        if self._in_head:
            self._head_bytes += len(data)
        super().data_received(data)

    def _check_head_size(self) -> None:
        if self._in_head and self._head_bytes > self.limits.max_head_size and not self.transport.is_closing() \
                and self._unparsable is None:
            # The head is still incomplete: answer (unless an answer is being sent) and close.
            GuardedProtocol.heads_too_large += 1
            self._close_with("RequestHeaderSectionTooLarge")

    # --- the request head -------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_started = True
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.limits.head_timeout, self._head_timeout)

    def on_headers_complete(self) -> None:
        self._in_head = False
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        # The exact size now that it is whole (data_received counts only what is still incomplete).
        size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
        errors = self._errors
        refusal = errors.slow_down if self._over_cap else errors.head_too_large if size > self.limits.max_head_size else None
        if refusal is errors.head_too_large:
            GuardedProtocol.heads_too_large += 1
        if refusal is None:
            super().on_headers_complete()
        else:
            app, self.app = self.app, refusal
            try:
                super().on_headers_complete()
            finally:
                self.app = app
        if not self.transport.is_closing() and self.cycle is not None and self.cycle.more_body \
                and not self.cycle.response_complete:
            self._last_data = self.loop.time()
            self._body_timer = self.loop.call_later(self.limits.stall_timeout, self._body_check)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        self._in_head = True
        self._head_started = False
        self._head_bytes = 0

    # --- what is not HTTP ----------------------------------------------------------------

    def send_400_response(self, msg: str) -> None:
        """uvicorn answers bytes it cannot parse with 400 and closes, at once. Whole requests
        read before them are answered first (RFC 9112: in order; the 400 last, then the close),
        whether the hit path or the app answers them: while one is, the 400 waits for it."""
        self._unparsable = msg
        for timer in (self._head_timer, self._body_timer):  # the garbage began a "head"
            if timer is not None:
                timer.cancel()
        self._head_timer = self._body_timer = None
        cycle = self.cycle
        whole = cycle is not None and not cycle.more_body  # the last request read was whole
        if whole and (self.pipeline or not cycle.response_complete) and not self.transport.is_closing():
            self.flow.pause_reading()
            return
        super().send_400_response(msg)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # Pipelined requests start (and hits are answered) inside super(): the last one done sends the 400.
        if self._unparsable is not None and not self.pipeline and self.cycle.response_complete \
                and not self.transport.is_closing():
            super().send_400_response(self._unparsable)

    def _head_timeout(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self._head_started:  # a request began and did not finish its head in time
            GuardedProtocol.head_timeouts += 1
            self._close_with("RequestTimeout")
        elif self.cycle is None or self.cycle.response_complete:  # connected, sent nothing
            self.transport.close()

    def _close_with(self, code: str) -> None:
        """Answer S3 error `code` and close; abort instead while another answer is being sent."""
        if self.cycle is not None and not self.cycle.response_complete:
            self.transport.abort()
            return
        self.transport.write(self._errors.message(code))
        self.transport.close()

    # --- stalls -----------------------------------------------------------------------------

    def _body_check(self) -> None:
        """A request body is awaited: abort if the client sent none of it for stall_timeout.
        Time with reading paused (the app is not taking the body) or a 100 Continue not yet
        sent (the client is right to wait) does not count."""
        self._body_timer = None
        cycle = self.cycle
        if self.transport.is_closing() or cycle is None or not cycle.more_body or cycle.response_complete:
            return
        now = self.loop.time()
        if self.flow.read_paused or cycle.waiting_for_100_continue:
            self._last_data = now
        idle = now - self._last_data
        if idle >= self.limits.stall_timeout:
            self._stalled("sent no request body")
        else:
            self._body_timer = self.loop.call_later(self.limits.stall_timeout - idle, self._body_check)

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._send_timer is None:
            self._send_timer = self.loop.call_later(self.limits.stall_timeout, self._stalled, "did not read")

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None

    def timeout_keep_alive_handler(self) -> None:
        self.timeout_keep_alive_task = None
        idle = self.loop.time() - self._last_data
        if idle < self.timeout_keep_alive and not self.transport.is_closing():  # answered again since it was armed
            self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive - idle,
                                                                self.timeout_keep_alive_handler)
            return
        super().timeout_keep_alive_handler()
        # An answer not yet read keeps a closing transport open until it is: bound that too.
        if self.transport.get_write_buffer_size() and self._send_timer is None:
            self._send_timer = self.loop.call_later(self.limits.stall_timeout, self._stalled, "did not read")

    def shutdown(self) -> None:
        """SIGTERM: an idle TLS connection is aborted, not closed. Closing TLS waits for the
        client's close_notify, which an idle pooled client (a peer's, an SDK's) never reads
        to send: the drain would wait server.shutdown_timeout for nothing."""
        idle = self.cycle is None or self.cycle.response_complete
        if idle and self.transport.get_extra_info("sslcontext") is not None:
            self.transport.abort()
            return
        super().shutdown()

    def _stalled(self, what: str) -> None:
        self._send_timer = None
        GuardedProtocol.stalls += 1
        logger.info("client %s %s for %.0fs: connection aborted", self.client, what, self.limits.stall_timeout)
        # abort, not close: close would wait for the unread answer to be sent.
        self.transport.abort()
