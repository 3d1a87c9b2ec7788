"""A listing of a folder read out of a listing of a folder above it.

Engines list a table's folder whole (Trino's file metastore, Spark's recursive listing, DuckDB's
globs), then each partition's folder under it: the partitions' listings hold nothing the table's
did not. When the page kept for prefix P held the whole of P (not truncated, no delimiter, the
same other parameters), the page of a prefix under P is its entries whose keys start with that
prefix, in the same order: what the origin would answer, without asking it (Alluxio answers a
listed directory's subdirectories from its metadata in the same way).

The origin's page is filtered as the bytes it is, so that the page kept and answered is the
origin's own form (its fields, its escapes): its <Contents> elements are cut out whole, their
keys read (XML text, URL-decoded as the listing parse does: encoding-type=url only), and the
top-level Prefix and KeyCount written anew. A page in any other form (a namespace prefix,
attributes, CommonPrefixes, a truncated page) is not narrowed: the origin is asked, as before.
"""

from __future__ import annotations

import html
from urllib.parse import quote, unquote_to_bytes
from xml.sax.saxutils import escape

_OPEN, _CLOSE = b"<Contents>", b"</Contents>"
_KEY, _KEY_END = b"<Key>", b"</Key>"
# Parameters a page may have besides its prefix to be narrowed: a first page of every key under the
# prefix (no delimiter, continuation-token, start-after or marker), keys URL-encoded.
_NARROWABLE = frozenset({"list-type", "encoding-type", "max-keys", "fetch-owner"})


def narrowable(params: tuple[tuple[str, str], ...]) -> bool:
    """Whether pages of these parameters (every one but the prefix) are read out of a page above."""
    return all(name in _NARROWABLE for name, _ in params) and ("encoding-type", "url") in params


def parents(prefix: str) -> list[str]:
    """The folders above `prefix` whose pages could hold its page, nearest first: every proper
    prefix of it that ends a folder ("/"), and the whole bucket ("")."""
    found = [prefix[: end + 1] for end in range(len(prefix) - 2, -1, -1) if prefix[end] == "/"]
    return [*found, ""] if prefix else []


def narrowed(body: bytes, prefix: str) -> bytes | None:
    """The page of `prefix` read out of `body`, the whole page of a folder above it (see the module);
    None when `body` is not a page this can read that way."""
    if (b"<IsTruncated>false</IsTruncated>" not in body or b"CommonPrefixes" in body or b":Contents" in body
            or b"<Contents " in body or b"<ListBucketResult" not in body):
        return None
    first = body.find(_OPEN)
    kept: list[bytes] = []
    end = first
    while first >= 0:
        end = body.find(_CLOSE, first)
        if end < 0:
            return None
        end += len(_CLOSE)
        item = body[first:end]
        key = _key(item)
        if key is None:
            return None
        if key.startswith(prefix):
            kept.append(item)
        first = body.find(_OPEN, end)
    head, tail = (body, b"") if end < 0 else (body[: body.find(_OPEN)], body[end:])
    v2 = b"<KeyCount>" in body
    head, tail = (_with_prefix(part, prefix, v2) for part in (head, tail))
    if head.count(b"<Prefix") + tail.count(b"<Prefix") != 1:
        return None
    if v2:
        head, tail = (_with_key_count(part, len(kept)) for part in (head, tail))
    return b"".join((head, *kept, tail))


def _key(item: bytes) -> str | None:
    """The key of one <Contents>, as the listing parse reads it (URL-decoded)."""
    start = item.find(_KEY)
    stop = item.find(_KEY_END, start)
    if start < 0 or stop < 0:
        return None
    text = item[start + len(_KEY): stop].decode("utf-8", "replace")
    if "&" in text:
        text = html.unescape(text)  # XML's entities and character references (the origin's XML is well-formed)
    text = text.replace("+", " ")
    return unquote_to_bytes(text).decode("utf-8", "replace") if "%" in text else text


def _with_prefix(part: bytes, prefix: str, v2: bool) -> bytes:
    """`part` with its top-level Prefix element (if it has it) saying `prefix`: URL-encoded in a v2
    page (the listing parse decodes it there), as it is in a v1 page (it does not)."""
    text = quote(prefix, safe="/") if v2 else escape(prefix)
    for empty in (b"<Prefix/>", b"<Prefix></Prefix>"):
        if empty in part:
            return part.replace(empty, b"<Prefix>" + text.encode() + b"</Prefix>", 1)
    start = part.find(b"<Prefix>")
    if start < 0:
        return part
    stop = part.find(b"</Prefix>", start)
    return part[:start] + b"<Prefix>" + text.encode() + part[stop:] if stop >= 0 else part


def _with_key_count(part: bytes, count: int) -> bytes:
    start = part.find(b"<KeyCount>")
    if start < 0:
        return part
    stop = part.find(b"</KeyCount>", start)
    return part[:start] + b"<KeyCount>" + str(count).encode() + part[stop:]
