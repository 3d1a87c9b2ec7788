"""The HTTP/1.1 server the S3 endpoint runs on: uvicorn's httptools protocol with the limits of
gateway.connlimits, answering cache hits without an ASGI cycle.

`HitProtocol` can be given `Hits`, which answers a request whose head just arrived in full, or
declines (None). A request it answers (a cache hit, gateway.s3api.hits) runs no ASGI cycle
and no task; any other request goes to the app as before. It may also answer `Later`: a GET
whose one block another node holds runs a task that waits for the block, then sends the answer
as a hit's (or, when the block could not be had, starts the app on the request). When a read
from the socket held one whole request and nothing else, and `Hits` answered it (at once or
later), `Hits` keeps it; the same bytes arriving again on an idle connection are offered to
`Hits.replay` before they are parsed at all (gateway.s3api.replays). A kept request whose block
another node holds is answered by a task too, with reading paused and no timer armed until it
was (or, when the block could not be had, the request is parsed as any other). Neither is used
while the client is not reading its answers (the transport's buffer above its high-water mark):
the app's answers then wait for it.

A read at rest that holds one request head of the usual shape (gateway.requesthead: an SDK's
GET or HEAD, sent in one write) is offered to `Hits` before uvicorn parses it: a hit is then
answered with no parser callback, request cycle or timer (and kept, as above); anything else is
parsed by uvicorn as before. A request answered without uvicorn's cycle leaves the keep-alive
timer armed instead of making a new one (see gateway.connlimits). One that `Hits` declined there
(a miss) is not offered again once uvicorn parsed it: the app gets what `Hits` left in the scope
it declined (gateway.s3api.hits hands over the request parsed and authenticated), so a miss is
parsed and its signature checked once.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable
from typing import Any

from gateway.config import ServerSettings
from gateway.connlimits import GuardedProtocol, Limits
from gateway.hitanswers import Hits, Later, LaterReplay
from gateway.requesthead import read_head
from gateway.transport_errors import ErrorPage, TransportErrors

__all__ = ["GuardedProtocol", "HitProtocol", "Hits", "Later", "LaterReplay", "Limits", "protocol_factory",
           "uvicorn_options"]

logger = logging.getLogger("gateway.server")
_LATER = object()  # in place of what keeping a request takes, until its later answer gives it


def uvicorn_options(server: ServerSettings, error_page: ErrorPage, hits: Hits | None = None) -> dict[str, Any]:
    """The uvicorn.Config arguments that carry `server.*` limits (with `protocol_factory`)."""
    return {
        "http": protocol_factory(Limits.of(server), error_page, hits),
        "timeout_keep_alive": server.keepalive_timeout,
        "timeout_graceful_shutdown": server.shutdown_timeout,
    }


def protocol_factory(limits: Limits, error_page: ErrorPage, hits: Hits | None = None) -> Any:
    """What uvicorn.Config takes as `http`: builds a HitProtocol with `limits` (and `hits`)."""
    return functools.partial(HitProtocol, limits=limits, errors=TransportErrors(error_page), hits=hits)


class HitProtocol(GuardedProtocol):
    """GuardedProtocol answering hits through `Hits` (see the module docstring). Event loop only."""

    def __init__(self, *args: Any, hits: Hits | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._hits = hits
        self._app = self.app  # the app proper (self.app is swapped for a refusal while one is made)
        self._alone: bytes | None = None  # a read that began at rest, while it is parsed
        self._messages = 0  # requests begun in it
        self._kept: Any = None  # what Hits gave for answering its request again
        self._later_request: bytes | None = None  # the one request of a read, while its later answer is made
        self._replaying = False  # a kept request's later answer is awaited (reading paused)
        self._close_after = False  # SIGTERM came meanwhile: close once it was answered
        self._connection: dict[str, Any] | None = None  # its requests' ASGI scope fields (_hit_read_here)
        self._declined: tuple[bytes, dict[str, Any]] | None = None  # a read Hits declined, and the scope it had

    def data_received(self, data: bytes) -> None:
        if self._unparsable is not None:  # nothing after what could not be parsed is read
            return
        self._last_data = self.loop.time()
        alone = self._in_head and not self._head_started and self._hits is not None and self._at_rest()
        if alone:
            answered = self._hits.replay(data, self.server_state.default_headers)  # type: ignore[union-attr]
            if answered is None:
                answered = self._hit_read_here(data)
            if callable(answered):
                self._replay_later(data, answered)
                return
            if answered is not None:
                self._send_replayed(*answered)
                return
        self._read(data, alone)

    def _hit_read_here(self, data: bytes) -> tuple[list[bytes | memoryview], bool] | LaterReplay | None:
        """A read at rest that holds one request head of the usual shape (gateway.requesthead),
        answered by `Hits` as a hit (and kept, as `_read` keeps what it answers), with no parser
        callback, request cycle or timer; None when it is not a hit: uvicorn parses it then."""
        hits = self._hits
        assert hits is not None
        if self.limit_concurrency is not None or len(data) > self.limits.max_head_size:
            return None
        if self._connection is None:
            self._connection = {"type": "http", "asgi": {"version": self.asgi_version, "spec_version": "2.3"},
                                "http_version": "1.1", "server": self.server, "client": self.client,
                                "scheme": self.scheme, "root_path": self.root_path, "state": self.app_state}
        scope = read_head(data, self._connection)
        if scope is None:
            return None
        try:
            hit = hits.hit(scope, self.server_state.default_headers, True)
        except Exception:  # the app then answers, and reports what it finds
            logger.exception("the hit path failed; the app answers the request")
            return None
        if hit is None:
            self._declined = data, scope  # (not offered again once uvicorn parsed it: _start_asgi_task)
            return None
        if callable(hit):  # a block to wait for first (as _replay_later waits for a kept request's)
            return functools.partial(self._later_read_here, data, hit)
        answer, keeper = hit
        hits.keep(data, keeper)
        return answer, True

    async def _later_read_here(self, data: bytes, later: Later) -> tuple[list[bytes | memoryview], bool] | None:
        made = await later()
        if made is None:
            return None
        make, keeper = made
        answer = make(True)  # (made first: keeping the request takes what making its answer found)
        self._hits.keep(data, keeper)  # type: ignore[union-attr]
        return answer, True

    def _read(self, data: bytes, alone: bool = False) -> None:
        """Parse `data` (`alone`: it began at rest, and may hold one whole request to keep)."""
        if alone:
            self._alone, self._messages, self._kept = data, 0, None
        try:
            self._parse(data)
            # The one request read ended with the read (and nothing unparsable followed it).
            if self._alone is not None and self._kept is not None and self._messages == 1 \
                    and self._in_head and not self._head_started and self._unparsable is None:
                if self._kept is _LATER:
                    self._later_request = data
                else:
                    self._hits.keep(data, self._kept)  # type: ignore[union-attr]
        finally:
            self._alone = self._kept = self._declined = None
        self._check_head_size()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._messages += 1

    def _start_asgi_task(self, cycle: Any, app: Any) -> None:
        """uvicorn starts each request here, once the one before it was answered: a hit is
        answered at once (`Hits`), as uvicorn would have sent the app's answer."""
        hit = None
        declined, self._declined = self._declined, None
        if declined is not None and self._alone is declined[0] and self._messages == 1:
            # Declined as read (_hit_read_here), from a scope alike: what Hits left in it goes to the app.
            cycle.scope.update((name, value) for name, value in declined[1].items() if name not in cycle.scope)
        elif self._hits is not None and app is self._app and not self.flow.write_paused:
            try:
                hit = self._hits.hit(cycle.scope, cycle.default_headers, cycle.keep_alive)
            except Exception:  # the app then answers, and reports what it finds
                logger.exception("the hit path failed; the app answers the request")
        if hit is None:
            super()._start_asgi_task(cycle, app)
            return
        if callable(hit):  # a block to wait for first: answered as a hit once it came, else by the app
            if self._alone is not None:
                self._kept = _LATER
            self._run(self._answer_later(cycle, app, hit))
            return
        answer, replay = hit
        if self._alone is not None:
            self._kept = replay
        self._send_hit(cycle, answer)

    def _send_hit(self, cycle: Any, answer: list[bytes | memoryview]) -> None:
        cycle.response_started = cycle.response_complete = True
        self.transport.writelines(answer)
        if not cycle.keep_alive:
            self.transport.close()
        cycle.on_response()

    def _run(self, answering: Awaitable[None]) -> None:
        task: asyncio.Task[None] = self.loop.create_task(answering)  # type: ignore[arg-type]
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)  # a graceful shutdown waits for it, as for the app's tasks

    async def _answer_later(self, cycle: Any, app: Any, later: Later) -> None:
        try:
            made = await later()
        except Exception:
            logger.exception("the hit path failed; the app answers the request")
            made = None
        request, self._later_request = self._later_request, None
        if cycle.disconnected or self.transport.is_closing():  # the client left while the block came
            return
        if made is None:
            super()._start_asgi_task(cycle, app)
            return
        make, keeper = made
        self._send_hit(cycle, make(cycle.keep_alive))
        if request is not None:
            self._hits.keep(request, keeper)  # type: ignore[union-attr]

    def _replay_later(self, request: bytes, later: LaterReplay) -> None:
        """A kept request whose block comes from another node: nothing more is read meanwhile,
        and no timer closes the connection under it."""
        self.flow.pause_reading()
        self._replaying = True
        for timer in (self._head_timer, self.timeout_keep_alive_task):
            if timer is not None:
                timer.cancel()
        self._head_timer = self.timeout_keep_alive_task = None
        self._run(self._answer_replay_later(request, later))

    async def _answer_replay_later(self, request: bytes, later: LaterReplay) -> None:
        try:
            answered = await later()
        except Exception:
            logger.exception("the hit path failed; the request is parsed as any other")
            answered = None
        self._replaying = False
        if self.transport.is_closing():  # the client left while the block came
            return
        if answered is not None:
            self._send_replayed(*answered)
        else:  # as if it had not been kept
            self.flow.resume_reading()
            self._read(request, True)
            if self._close_after and self.cycle is not None:
                self.cycle.keep_alive = False
        answered_all = self.cycle is None or self.cycle.response_complete
        if self._close_after and answered_all and not self.transport.is_closing():
            self.transport.close()

    def _at_rest(self) -> bool:
        """No request is being read or answered, and the client reads what it is sent."""
        cycle = self.cycle
        return (cycle is None or cycle.response_complete) and not self.pipeline and not self._over_cap \
            and not self.flow.write_paused and not self.transport.is_closing()

    def _send_replayed(self, answer: list[bytes | memoryview], keep_alive: bool) -> None:
        """A kept request's answer, sent as `_start_asgi_task` sends a hit's."""
        if self._head_timer is not None:  # the first request of the connection
            self._head_timer.cancel()
            self._head_timer = None
        self.transport.writelines(answer)
        if not keep_alive:
            self.transport.close()
        # on_response_complete, for an answer sent while nothing was pipelined (_at_rest).
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.flow.resume_reading()
        if self.timeout_keep_alive_task is None:
            self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive,
                                                                self.timeout_keep_alive_handler)

    def shutdown(self) -> None:
        if self._replaying:  # a request is being answered: closed once it was
            self._close_after = True
            return
        super().shutdown()
