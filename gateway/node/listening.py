"""The node's listening socket: bound once, by the process that serves alone or by the
supervisor, whose workers inherit it."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

from gateway.config import ConfigError, ServerSettings

BACKLOG = 2048  # uvicorn's default


@contextlib.contextmanager
def listen(server: ServerSettings) -> Iterator[socket.socket]:
    """The node's TCP socket, bound as uvicorn's Config.bind_socket does (IPPROTO_TCP named:
    asyncio sets TCP_NODELAY only on sockets whose proto says TCP)."""
    family = socket.AF_INET6 if ":" in server.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((server.host, server.port))
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"server.host / server.port: cannot listen on {server.host}:{server.port}: {exc}") from None
    with sock:
        yield sock
