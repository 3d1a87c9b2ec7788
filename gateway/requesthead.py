"""One whole GET or HEAD request head, read as uvicorn's httptools protocol reads it, so that
the hit path can answer it without the parser's callbacks, a request cycle and two timers.

An SDK sends each request of a keep-alive connection in one write, and the server reads it in
one: `read_head` takes such a read when it holds exactly one request head of the usual shape
(HTTP/1.1, an origin-form target of URL characters, header lines `name: value` of visible ASCII,
no body, nothing that changes the connection) and gives the ASGI scope uvicorn would build for
it. Anything else, valid or not, is None: uvicorn parses it and answers as before (a 400 for
what is not HTTP). tests/test_requesthead.py holds the two to the same scope on requests made
by botocore and on mutations of them.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote

__all__ = ["read_head"]

# The request line: GET or HEAD, an origin-form target of RFC 3986 characters (no fragment, no
# byte httptools reads otherwise), HTTP/1.1 (1.0 closes by default: uvicorn decides that).
_REQUEST_LINE = re.compile(rb"(GET|HEAD) (/[A-Za-z0-9\-._~!$&'()*+,;=:@/%?]*) HTTP/1\.1")
# A header line: a token, a colon, the value (spaces and tabs around it are not part of it), of
# visible ASCII, spaces and tabs only.
_HEADER_LINE = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*((?:[\x21-\x7e](?:[\x21-\x7e \t]*[\x21-\x7e])?)?)[ \t]*")
# Headers that give the request a body or change the connection: uvicorn handles those.
_NOT_HERE = frozenset((b"content-length", b"transfer-encoding", b"expect", b"upgrade", b"connection",
                       b"http2-settings"))


def read_head(data: bytes, connection: dict[str, Any]) -> dict[str, Any] | None:
    """The ASGI HTTP scope of the one request head `data` holds, all of it, when it is of the
    usual shape (see the module docstring); else None. `connection`: the scope's fields that
    are the connection's (type, asgi, http_version, server, client, scheme, root_path, state),
    copied into it (asgi and state too, as uvicorn copies them for each request)."""
    end = data.find(b"\r\n\r\n")
    if end != len(data) - 4:
        return None  # no whole head, or more than one (pipelined, or a body)
    lines = data[:end].split(b"\r\n")
    request = _REQUEST_LINE.fullmatch(lines[0])
    if request is None:
        return None
    headers: list[tuple[bytes, bytes]] = []
    for line in lines[1:]:
        header = _HEADER_LINE.fullmatch(line)
        if header is None:
            return None  # obs-fold, a control byte, a bare LF, a byte above 0x7e: uvicorn's to read
        name = header[1].lower()
        if name in _NOT_HERE:
            return None
        headers.append((name, header[2]))
    target = request[2]
    raw_path, _, query = target.partition(b"?")
    path = raw_path.decode("ascii")
    if "%" in path:
        path = unquote(path)
    scope = dict(connection)
    root_path = scope["root_path"]
    scope.update(asgi=scope["asgi"].copy(), state=scope["state"].copy(), method=request[1].decode("ascii"),
                 path=root_path + path, raw_path=root_path.encode("ascii") + raw_path, query_string=query,
                 headers=headers)
    return scope
