"""The peer API's request signing (`x-gateway-peer`) and its query strings (gateway.cluster.peers:
the routes and the client; gateway.cluster.peer_api: the server side)."""

from __future__ import annotations

import hashlib
import hmac
import time
from urllib.parse import parse_qsl, quote, urlencode

__all__ = ["MAX_SKEW", "decode_query", "encode_query", "sign", "verify"]

MAX_SKEW = 300  # seconds a signature stays valid, for clocks that differ between nodes


def sign(secret: bytes, method: str, path: str, query: str, when: int | None = None) -> str:
    """The `x-gateway-peer` value for one request."""
    when = int(time.time()) if when is None else when
    return f"v1 {when} {_mac(secret, method, path, query, when)}"


def verify(secret: bytes, header: str | None, method: str, path: str, query: str, now: float | None = None) -> int:
    """200 when `header` signs this request; 401 when it is missing or malformed, 403 when
    the signature is wrong or stale. Compared in constant time."""
    if not header:
        return 401
    parts = header.split(" ")
    # isascii: "²".isdigit() is true but int() refuses it; 20 digits keep int() under its limit.
    if len(parts) != 3 or parts[0] != "v1" or not (parts[1].isascii() and parts[1].isdigit() and len(parts[1]) <= 20):
        return 401
    when = int(parts[1])
    now = time.time() if now is None else now
    expected = _mac(secret, method, path, query, when)
    good = hmac.compare_digest(parts[2].encode("ascii", "replace"), expected.encode())
    return 200 if good and abs(now - when) <= MAX_SKEW else 403


def _mac(secret: bytes, method: str, path: str, query: str, when: int) -> str:
    message = f"{method}\n{path}\n{query}\n{when}".encode("utf-8", "surrogatepass")
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def encode_query(params: list[tuple[str, str]]) -> str:
    """The query string exactly as sent and signed (RFC 3986 escapes of UTF-8; a key that
    is not valid UTF-8, decoded with surrogateescape, keeps its bytes: see `decode_query`)."""
    return urlencode(params, quote_via=quote, safe="", encoding="utf-8", errors="surrogateescape")


def decode_query(query: str) -> dict[str, str]:
    """The parameters of a query string made by `encode_query`."""
    return dict(parse_qsl(query, keep_blank_values=True, encoding="utf-8", errors="surrogateescape"))
