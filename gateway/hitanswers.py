"""What the HTTP server (gateway.httpserver) asks of whatever answers cache hits in its protocol,
below ASGI (gateway.app.GatewayApp with gateway.s3api.hits): the interface between the two."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

# How an answer was made, which its books say (s3api.accounting, cluster.peer_api): by the app,
# below it in the protocol (`Hits.hit`), or below it as a kept request sent again (`Hits.replay`).
ASGI, BELOW_ASGI, REPLAYED = 0, 1, 2

Later = Callable[[], Awaitable["tuple[Callable[[bool], list[bytes | memoryview]], Any] | None"]]
"""A hit that waits for its block first: awaited, it gives (what makes the whole answer for the
connection's keep-alive of that moment, what keeping the request to answer it again takes), or
None: the app answers the request."""
LaterReplay = Callable[[], Awaitable["tuple[list[bytes | memoryview], bool] | None"]]
"""A kept request that waits for its block first: awaited, (the whole answer, keep-alive), or
None: the request is parsed as any other."""


class Hits(Protocol):
    """What answers cache hits in the protocol (gateway.app.GatewayApp)."""

    def hit(self, scope: dict[str, Any], default_headers: list[tuple[bytes, bytes]],
            keep_alive: bool) -> tuple[list[bytes | memoryview], Any] | Later | None:
        """(ASGI HTTP scope of a request without a body, the server's default headers,
        keep-alive) -> (the whole HTTP answer as pieces to write, what keeping the request to
        answer it again takes, or None), a Later, or None: the app answers the request."""

    def keep(self, request: bytes, keeper: Any) -> None:
        """`request`, exactly as read, was answered by `hit`, which gave `keeper`."""

    def replay(self, request: bytes, default_headers: list[tuple[bytes, bytes]],
               ) -> tuple[list[bytes | memoryview], bool] | LaterReplay | None:
        """(the whole answer, keep-alive) to a request kept before, a LaterReplay, or None: it is
        parsed and goes to `hit` as any other."""
