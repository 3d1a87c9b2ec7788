"""One S3 request as the endpoint reads it: the bucket, key and query decided once from the
wire (path-style or virtual-hosted), the headers, and what the request gathers as it is
answered (who signed it, its operation, its body)."""

from __future__ import annotations

import re
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from urllib.parse import unquote_to_bytes

from starlette.types import Receive, Scope

from gateway.config import User
from gateway.errors import S3Error
from gateway.s3api.auth import Identity, RequestView
from gateway.s3api.body import VerifiedBody
from gateway.s3api.routes import Operation

__all__ = ["IDENTIFIED", "S3Request", "parse_request"]

_MAX_KEY_BYTES = 1024
_MAX_HEADER_BYTES = 8192  # S3's limit on the request header section
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_PLAUSIBLE_BUCKET = re.compile(r"[A-Za-z0-9._-]{1,255}")
# The scope key under which the hit path (s3api.hits) leaves a request it parsed and
# authenticated and then declined, so that the app does not do that work again.
IDENTIFIED = "gateway.identified"


@dataclass(slots=True)
class S3Request:
    """One parsed request.

    `query` is the request's query decided once: each name with the first value the client
    gave it (S3 also takes the first of a repeated parameter). It is what is authorized, what
    keys every cache and what the origin receives; only signature checks read the raw query.
    """

    method: str
    bucket: str | None
    key: str | None
    query: dict[str, str]
    headers: dict[str, str]
    view: RequestView
    host_bucket: str | None
    request_id: str
    receive: Receive
    operation: Operation | None = None
    identity: Identity | None = None
    user: User | None = None
    _body: VerifiedBody | None = field(default=None, repr=False)
    # What the answer holds until it was sent (object reads: buffer shares, origin responses),
    # closed when the request ends, whatever happened.
    held: AsyncExitStack = field(default_factory=AsyncExitStack, repr=False)
    body_received: bool = False  # the last body message arrived (even if the body then failed a check)

    @property
    def resource(self) -> str:
        return "/" + "/".join(p for p in (self.bucket, self.key) if p)


def parse_request(scope: Scope, receive: Receive, request_id: str, domain: str) -> S3Request:
    """Split the wire request into bucket, key, query and headers (path-style or virtual-hosted)."""
    if sum(len(k) + len(v) for k, v in scope["headers"]) > _MAX_HEADER_BYTES:
        raise S3Error("RequestHeaderSectionTooLarge", extra={"MaxSizeAllowed": str(_MAX_HEADER_BYTES)})
    raw_headers = tuple((k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in scope["headers"])
    headers: dict[str, str] = {}
    for name, value in raw_headers:
        headers[name] = f"{headers[name]},{value}" if name in headers else value
    raw_path_bytes: bytes = scope.get("raw_path") or scope["path"].encode("utf-8")
    raw_path = raw_path_bytes.decode("latin-1")
    query_string = scope.get("query_string", b"").decode("latin-1")
    view = RequestView(method=scope["method"], raw_path=raw_path, query_string=query_string, headers=raw_headers)
    bucket_from_host = _bucket_from_host(headers.get("host", ""), domain)
    if _BAD_ESCAPE.search(raw_path):
        raise S3Error("InvalidURI", "Couldn't parse the specified URI.")
    try:
        path = _unquote(raw_path)
        query_pairs = [
            (_unquote(name), _unquote(value))
            for name, _, value in (part.partition("=") for part in query_string.split("&") if part)
        ]
    except UnicodeDecodeError:
        raise S3Error("InvalidURI", "Couldn't parse the specified URI.") from None
    if not path.startswith("/") or "\x00" in path:
        raise S3Error("InvalidURI", "Couldn't parse the specified URI.")
    if bucket_from_host is not None:
        bucket: str | None = bucket_from_host
        key: str | None = path[1:] or None
    else:
        bucket_part, _, key_part = path[1:].partition("/")
        bucket = bucket_part or None
        key = key_part or None
    if bucket is not None and not _plausible_bucket(bucket):
        raise S3Error("InvalidBucketName", resource=f"/{bucket}", extra={"BucketName": bucket})
    if key is not None and len(key.encode("utf-8")) > _MAX_KEY_BYTES:
        raise S3Error("KeyTooLongError", resource=f"/{bucket}")
    query: dict[str, str] = {}
    for name, value in query_pairs:
        query.setdefault(name, value)
    return S3Request(
        method=scope["method"], bucket=bucket, key=key, query=query,
        headers=headers, view=view, host_bucket=bucket_from_host, request_id=request_id, receive=receive,
    )


def _unquote(text: str) -> str:
    """%XX-decode as UTF-8 (raises UnicodeDecodeError for bytes that are not)."""
    if "%" not in text and text.isascii():
        return text
    return unquote_to_bytes(text).decode("utf-8")


def _bucket_from_host(host: str, domain: str) -> str | None:
    if not domain:
        return None
    name = host.rsplit(":", 1)[0].lower() if not host.startswith("[") else host
    suffix = "." + domain.lower()
    if name.endswith(suffix) and len(name) > len(suffix):
        return name[: -len(suffix)]
    return None


def _plausible_bucket(name: str) -> bool:
    # Existing buckets may predate today's naming rules (upper case, '_', 255 chars in
    # us-east-1); CreateBucket applies the strict rules, everything else only these.
    return _PLAUSIBLE_BUCKET.fullmatch(name) is not None
