"""What gateway.connlimits and gateway.httpserver rely on in uvicorn's httptools protocol, which
is not uvicorn's public API: a uvicorn release that changes any of it fails here, by name, before
it fails the integration tests by symptom.

The protocol (HitProtocol, on GuardedProtocol) overrides `_start_asgi_task(cycle, app)`, the
parser callbacks and `send_400_response`, and reads the protocol's and the request cycle's
attributes below. The last tests drive HitProtocol itself on a transport that keeps what is
written (no socket): a hit is answered with no request cycle started, a miss goes to the app.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import uvicorn
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from gateway.httpserver import Limits, protocol_factory
from gateway.transport_errors import ErrorPage
from tests.test_requesthead import _Transport, as_sent

# Protocol attributes set in __init__ or connection_made, and read or written by ours.
PROTOCOL_ATTRIBUTES = ("transport", "cycle", "loop", "flow", "timeout_keep_alive_task", "timeout_keep_alive", "app",
                       "server_state", "pipeline", "tasks", "client", "server", "scheme", "root_path",
                       "limit_concurrency", "connections", "asgi_version", "app_state", "url", "headers")
# Methods ours override or call, with the parameters it passes.
PROTOCOL_METHODS = {"_start_asgi_task": ["self", "cycle", "app"], "data_received": ["self", "data"],
                    "connection_made": ["self", "transport"], "connection_lost": ["self", "exc"],
                    "on_message_begin": ["self"], "on_headers_complete": ["self"], "on_message_complete": ["self"],
                    "on_response_complete": ["self"], "send_400_response": ["self", "msg"],
                    "timeout_keep_alive_handler": ["self"], "shutdown": ["self"], "pause_writing": ["self"],
                    "resume_writing": ["self"]}
CYCLE_ATTRIBUTES = ("scope", "default_headers", "keep_alive", "more_body", "on_response", "response_complete",
                    "response_started", "disconnected", "waiting_for_100_continue")
FLOW_ATTRIBUTES = ("pause_reading", "resume_reading", "read_paused", "write_paused")


def test_the_protocol_has_what_ours_uses() -> None:
    for name, parameters in PROTOCOL_METHODS.items():
        assert list(inspect.signature(getattr(HttpToolsProtocol, name)).parameters) == parameters, name
    source = inspect.getsource(HttpToolsProtocol)
    for name in PROTOCOL_ATTRIBUTES:
        assert f"self.{name} =" in source or f"self.{name}: " in source, name
    # uvicorn starts each request through _start_asgi_task, from on_headers_complete and from
    # on_response_complete (a pipelined one): both are where ours answers hits.
    assert "self._start_asgi_task(self.cycle, app)" in inspect.getsource(HttpToolsProtocol.on_headers_complete)
    assert "self._start_asgi_task(" in inspect.getsource(HttpToolsProtocol.on_response_complete)


def test_the_cycle_and_flow_have_what_ours_uses() -> None:
    cycle_source = inspect.getsource(RequestResponseCycle.__init__)
    for name in CYCLE_ATTRIBUTES:
        assert f"self.{name}" in cycle_source, name
    assert list(inspect.signature(RequestResponseCycle.__init__).parameters)[1:] == [
        "scope", "transport", "flow", "logger", "access_logger", "access_log", "default_headers", "message_event",
        "expect_100_continue", "keep_alive", "on_response"]
    flow_source = inspect.getsource(FlowControl)
    for name in FLOW_ATTRIBUTES:
        assert name in flow_source, name
    server_state = ServerState()
    assert server_state.total_requests == 0 and server_state.default_headers == []


class _Connection(_Transport):
    """_Transport with what GuardedProtocol asks of a transport besides."""

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def writelines(self, pieces: Any) -> None:
        for piece in pieces:
            self.write(piece)

    def abort(self) -> None:
        self.closed = True


class _Hits:
    """Answers GET /hit itself; declines everything else, leaving a note in its scope for the app
    (as s3api.hits leaves the request it parsed)."""

    def __init__(self) -> None:
        self.kept: list[bytes] = []
        self.offered: list[str] = []

    def hit(self, scope: dict[str, Any], default_headers: list[tuple[bytes, bytes]], keep_alive: bool) -> Any:
        self.offered.append(scope["path"])
        if scope["path"] != "/hit":
            scope["test.declined"] = scope["path"]
            return None
        return [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n", b"ok"], object()

    def keep(self, request: bytes, keeper: Any) -> None:
        self.kept.append(request)

    def replay(self, request: bytes, default_headers: list[tuple[bytes, bytes]]) -> Any:
        return None


def _protocol(app: Any, hits: _Hits, loop: asyncio.AbstractEventLoop) -> Any:
    config = uvicorn.Config(app, lifespan="off", log_level="critical")
    config.load()
    limits = Limits(max_connections=10, head_timeout=30.0, max_head_size=16384, stall_timeout=30.0)
    page: ErrorPage = lambda code, resource: ("0", b"<Error/>")  # noqa: E731
    protocol = protocol_factory(limits, page, hits)(config=config, server_state=ServerState(), app_state={},
                                                    _loop=loop)
    protocol.connection_made(_Connection())
    return protocol


def test_a_hit_is_answered_without_a_request_cycle_and_a_miss_goes_to_the_app() -> None:
    loop = asyncio.new_event_loop()
    called: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        called.append(scope["path"])
        assert scope["test.declined"] == scope["path"]  # what the hit path left, handed over
        await send({"type": "http.response.start", "status": 404, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})

    hits = _Hits()
    try:
        protocol = _protocol(app, hits, loop)
        protocol.data_received(as_sent("GET", "/hit", "", {}, "none"))
        assert protocol.transport.written.endswith(b"\r\n\r\nok") and protocol.cycle is None
        assert hits.kept and protocol.server_state.total_requests == 1
        protocol.data_received(as_sent("GET", "/miss", "", {}, "none"))
        loop.run_until_complete(asyncio.gather(*protocol.tasks))
        assert called == ["/miss"] and b"404" in protocol.transport.written
        assert hits.offered == ["/hit", "/miss"]  # the miss offered once: as read, not again once parsed
        protocol.data_received(as_sent("GET", "/split", "", {}, "none")[:10])  # a head in two reads: parsed
        protocol.data_received(as_sent("GET", "/split", "", {}, "none")[10:])
        loop.run_until_complete(asyncio.gather(*protocol.tasks))
        assert called == ["/miss", "/split"] and hits.offered == ["/hit", "/miss", "/split"]
        protocol.connection_lost(None)
    finally:
        loop.close()
