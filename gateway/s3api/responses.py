"""Every response the S3 endpoint sends: error documents, XML, streamed objects."""

from __future__ import annotations

import itertools
import secrets
from collections.abc import AsyncIterator, Mapping

import anyio
from starlette.responses import Response, StreamingResponse

from gateway.errors import S3_ERRORS, S3Error
from gateway.s3api import xml

XML_TYPE = "application/xml"


def new_request_id() -> str:
    """16 upper-case hex characters, the shape of S3's x-amz-request-id: distinct within the
    process for 2^64 requests, and between processes (every worker and node starts at a
    random point). A step of a counter, not a read of the system's random source: that
    read took 5-20 us a request on this machine, a tenth of a small cache hit."""
    return f"{next(_request_ids) & _ID_MASK:016X}"


_ID_MASK = (1 << 64) - 1
# An odd step visits every 64-bit value once before coming back; this one scatters them.
_request_ids = itertools.count(secrets.randbits(64), 0x9E3779B97F4A7C15)


async def load_streaming() -> None:
    """Load now, before the worker serves, what a streamed answer (StreamingResponse) loads the
    first time one is sent: anyio's backend for the running loop, imported by Starlette's task
    group of the answer. At the first cold read of each fresh worker that import took 20-30 ms
    of its event loop, while the first reads of a query (its footers) waited (bench/cold_scan.py
    --first: 42-53 ms of CPU for a fresh node's first object on each worker, 19-26 ms after)."""
    async with anyio.create_task_group():
        pass


def error_page(code: str, resource: str | None) -> tuple[str, bytes]:
    """(request id, S3's error document) for a known error `code`: what the transport below
    the app renders its own refusals with (gateway.transport_errors.ErrorPage)."""
    request_id = new_request_id()
    return request_id, xml.error_document(code, S3_ERRORS[code][1], resource=resource, request_id=request_id)


def error_response(err: S3Error, request_id: str, *, method: str) -> Response:
    """S3's XML error document (no body for HEAD), with the error's own headers."""
    headers = dict(err.headers)
    headers["x-amz-request-id"] = request_id
    if err.status == 304:
        return Response(status_code=304, headers=headers)
    if method == "HEAD":
        return Response(status_code=err.status, headers=headers)
    body = xml.error_document(err.code, err.message, resource=err.resource or "", request_id=request_id, extra=err.extra)
    return Response(body, status_code=err.status, headers=headers, media_type=XML_TYPE)


def xml_response(body: bytes, request_id: str, *, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    out = dict(headers or {})
    out["x-amz-request-id"] = request_id
    out.setdefault("content-type", XML_TYPE)
    return Response(body, status_code=status, headers=out)


def empty_response(request_id: str, *, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    """A response without a body; Content-Length is kept when given (HEAD)."""
    out = dict(headers or {})
    out["x-amz-request-id"] = request_id
    response = Response(status_code=status, headers=out)
    return response


def raw_headers(headers: Mapping[str, str], request_id: str, length: int) -> list[tuple[bytes, bytes]]:
    """The header lines `body_response` (`length` bytes of body) and `empty_response` (a HEAD:
    `length` 0, its Content-Length among `headers`) send for a 200 or 206, made without a
    Response: what the hit path writes (s3api.hits)."""
    out = dict(headers)
    out["x-amz-request-id"] = request_id
    lines = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in out.items()]
    if not any(name == b"content-length" for name, _ in lines):
        lines.append((b"content-length", str(length).encode("latin-1")))
    return lines


def body_response(body: bytes | memoryview, request_id: str, *, status: int, headers: Mapping[str, str]) -> Response:
    """A body already in hand: no task to run, nothing to cancel."""
    out = dict(headers)
    out["x-amz-request-id"] = request_id
    return Response(body, status_code=status, headers=out)


def stream_response(
    chunks: AsyncIterator[bytes | memoryview], request_id: str, *, status: int, headers: Mapping[str, str]
) -> Response:
    """Stream a body; a client that goes away cancels `chunks` (and so the origin request)."""
    out = dict(headers)
    out["x-amz-request-id"] = request_id
    return StreamingResponse(chunks, status_code=status, headers=out)
