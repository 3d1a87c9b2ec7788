"""The read and write paths: object metadata, object bytes, listings, write-through.

Today every read goes to the origin; this is the seam where the block cache, the
metadata cache and the cluster plug in, so `s3api` never talks to the origin itself.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime

from gateway.errors import S3Error
from gateway.origin import BodyFactory, Origin, OriginResponse

__all__ = ["Engine", "ObjectMeta", "OriginResponse", "meta_from_headers"]


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    """What a HEAD of the object told us: size, validators and the headers S3 sends with it."""

    size: int
    etag: str
    last_modified: datetime
    headers: dict[str, str]  # lowercase names, origin hop headers removed

    @property
    def version_id(self) -> str | None:
        return self.headers.get("x-amz-version-id")


class Engine:
    """Reads and writes on behalf of authorised S3 requests."""

    def __init__(self, origin: Origin) -> None:
        self.origin = origin

    async def aclose(self) -> None:
        await self.origin.aclose()

    async def head_object(
        self,
        bucket: str,
        key: str,
        *,
        query: Iterable[tuple[str, str]] = (),
        headers: dict[str, str] | None = None,
        explain_errors: bool = False,
    ) -> ObjectMeta:
        """Metadata of one object (version) from the origin; raises S3Error (NoSuchKey, ...).

        A HEAD error has no body, so NoSuchKey and NoSuchBucket look alike; with
        `explain_errors` (a GET needs the right code) the origin is asked again with a GET.
        """
        query = list(query)
        response = await self.origin.send("HEAD", bucket, key, query=query, headers=headers)
        if response.status >= 300:
            if explain_errors and response.status >= 400:
                await response.aclose()
                probe = dict(headers or {}, range="bytes=0-0")
                response = await self.origin.send("GET", bucket, key, query=query, headers=probe)
                if response.status < 300:  # it appeared meanwhile: describe it as it is now
                    await response.aclose()
                    return await self.head_object(bucket, key, query=query, headers=headers)
            raise await self.origin.error_from(response, resource=f"/{bucket}/{key}")
        await response.aclose()
        return meta_from_headers(response.headers.multi_items())

    async def read_object(
        self,
        bucket: str,
        key: str,
        meta: ObjectMeta,
        *,
        start: int | None = None,
        end: int | None = None,
        query: Iterable[tuple[str, str]] = (),
        headers: dict[str, str] | None = None,
    ) -> AsyncIterator[bytes]:
        """The bytes [start, end] (inclusive) of exactly the version `meta` describes."""
        request_headers = dict(headers or {})
        # If-Match pins the version we described to the client: an object replaced
        # between HEAD and GET must not be served under the old ETag.
        request_headers["if-match"] = meta.etag
        if start is not None and end is not None:
            request_headers["range"] = f"bytes={start}-{end}"
        response = await self.origin.send("GET", bucket, key, query=query, headers=request_headers)
        if response.status == 412:
            await response.aclose()
            raise S3Error("ServiceUnavailable", "The object changed while it was being read; retry the request.")
        if response.status >= 300:
            raise await self.origin.error_from(response, resource=f"/{bucket}/{key}")
        return response.iter_bytes()

    async def error_from(self, response: OriginResponse, *, resource: str) -> S3Error:
        """The S3Error an origin error response stands for (the response is consumed)."""
        return await self.origin.error_from(response, resource=resource)

    async def forward(
        self,
        method: str,
        bucket: str | None,
        key: str | None,
        *,
        query: Iterable[tuple[str, str]] = (),
        headers: dict[str, str] | None = None,
        body: bytes | BodyFactory | None = None,
        body_length: int | None = None,
    ) -> OriginResponse:
        """Any request sent on to the origin as it is: writes (write-through) and pass-through ops.

        The answer may be an error status; the caller decides how to present it.
        """
        return await self.origin.send(
            method, bucket, key, query=query, headers=headers, body=body, body_length=body_length
        )


def meta_from_headers(items: Iterable[tuple[str, str]]) -> ObjectMeta:
    headers: dict[str, str] = {}
    for name, value in items:
        name = name.lower()
        if name in _NOT_OBJECT_HEADERS:
            continue
        headers[name] = value
    try:
        size = int(headers.get("content-length", "0"))
    except ValueError:
        raise S3Error("InternalError", "The origin sent an invalid Content-Length.") from None
    last_modified = _parse_date(headers.get("last-modified"))
    _qualify_composite_checksums(headers)
    return ObjectMeta(size=size, etag=headers.get("etag", ""), last_modified=last_modified, headers=headers)


_NOT_OBJECT_HEADERS = frozenset({
    "connection", "keep-alive", "transfer-encoding", "date", "server", "x-amz-request-id",
    "x-amz-id-2", "content-range", "accept-ranges",
})


def _qualify_composite_checksums(headers: dict[str, str]) -> None:
    """Mark a multipart object's checksum-of-checksums as such (`value-N`, COMPOSITE).

    S3 writes a composite checksum as `value-N`; some origins (moto) answer HEAD with
    the bare value and no type, and SDKs would then check it against the whole body
    and reject a correct download.
    """
    parts = re.fullmatch(r'"?[0-9a-fA-F]+-(\d+)"?', headers.get("etag", ""))
    if parts is None or headers.get("x-amz-checksum-type", "").upper() == "FULL_OBJECT":
        return
    qualified = False
    for name in [n for n in headers if n.startswith("x-amz-checksum-") and n not in _CHECKSUM_SETTINGS]:
        if "-" not in headers[name]:
            headers[name] = f"{headers[name]}-{parts.group(1)}"
            qualified = True
    if qualified:
        headers.setdefault("x-amz-checksum-type", "COMPOSITE")


_CHECKSUM_SETTINGS = frozenset({"x-amz-checksum-type", "x-amz-checksum-mode", "x-amz-checksum-algorithm"})


def _parse_date(value: str | None) -> datetime:
    if value:
        try:
            parsed = parsedate_to_datetime(value)
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)
        except (TypeError, ValueError):
            pass
    return datetime.fromtimestamp(0, timezone.utc)
