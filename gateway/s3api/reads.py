"""GetObject and HeadObject: the answer an object's metadata makes to a read (conditionals,
range, response overrides, headers), and the read itself. The hit path below ASGI
(s3api.hits) answers with the same functions."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.responses import Response

from gateway.engine import ObjectMeta, OpenObject
from gateway.errors import S3Error
from gateway.s3api import headers as hdrs
from gateway.s3api import ranges
from gateway.s3api.context import Context
from gateway.s3api.request import S3Request
from gateway.s3api.responses import body_response, empty_response, stream_response

_RESPONSE_OVERRIDES = {
    "response-content-type": "content-type",
    "response-content-language": "content-language",
    "response-expires": "expires",
    "response-cache-control": "cache-control",
    "response-content-disposition": "content-disposition",
    "response-content-encoding": "content-encoding",
}
# How a read was served (hit-mem | hit-disk | partial | miss): the one non-S3 header.
X_CACHE = "x-cache"


async def get_object(ctx: Context) -> Response:
    """GetObject and HeadObject: metadata first, conditionals and range decided here."""
    ctx.check()
    req = ctx.req
    overrides = response_overrides(req)
    if "partNumber" in req.query:
        # A part is its own byte range with its own answer headers; the origin knows them.
        response = await ctx.forward(req.method, headers=hdrs.for_origin_read(req.headers, conditionals=True))
        return await ctx.relay(response, headers=_override_headers(overrides))
    return await ctx.services.engine.get_object(
        req.bucket or "", req.key or "", lambda opened: _answer_get(ctx, opened, overrides),
        version_id=req.query.get("versionId"), headers=hdrs.personal_read_headers(req.headers),
        checksums=wants_whole_checksums(req),
        want=ranges.wanted(req.headers.get("range")) if req.method == "GET" else None)


async def _answer_get(ctx: Context, opened: OpenObject, overrides: dict[str, str]) -> Response:
    """The answer to a GET or HEAD of the object `opened` describes."""
    req = ctx.req
    answer = object_answer(req, opened.meta, overrides)
    if req.method == "HEAD":
        answer.headers[X_CACHE] = "hit-mem" if opened.from_memory else "miss"
        return empty_response(req.request_id, status=answer.status, headers=answer.headers)
    read = await opened.read(answer.start, answer.end)
    await req.held.enter_async_context(read)
    answer.headers[X_CACHE] = read.source
    if read.body is not None:
        return body_response(read.body, req.request_id, status=answer.status, headers=answer.headers)
    assert read.chunks is not None
    return stream_response(read.chunks, req.request_id, status=answer.status, headers=answer.headers)


@dataclass(slots=True)
class ObjectAnswer:
    """What a GET or HEAD of an object answers: its status and headers (x-cache aside),
    and the bytes [start, end] to send (inclusive; None for the whole object)."""

    status: int
    headers: dict[str, str]
    start: int | None = None
    end: int | None = None


def response_overrides(req: S3Request) -> dict[str, str]:
    """A GET's response-* parameters, checked: header name -> value."""
    overrides = {name: _checked_override(name, value) for name, value in req.query.items() if name in _RESPONSE_OVERRIDES}
    if overrides and req.user is None:
        raise S3Error("InvalidRequest", "Request specific response headers cannot be used for anonymous GET requests.")
    return overrides


def wants_whole_checksums(req: S3Request) -> bool:
    """Checksums describe the whole object, so only a read of all of it shows them."""
    return hdrs.wants_checksums(req.headers) and ("range" not in req.headers or "if-range" in req.headers)


def object_answer(req: S3Request, meta: ObjectMeta, overrides: dict[str, str]) -> ObjectAnswer:
    """The answer `meta` makes to a GET or HEAD: conditionals (raising 304 or 412), range
    (raising 416), headers. The same for every path a read may take."""
    try:
        ranges.evaluate_preconditions(req.headers, etag=meta.etag, last_modified=meta.last_modified)
    except S3Error as err:
        if err.status == 304:
            err.headers.update(_validators(meta))
        raise
    byte_range = None
    if "range" in req.headers and ranges.if_range_allows(req.headers.get("if-range"), etag=meta.etag, last_modified=meta.last_modified):
        byte_range = ranges.parse_range(req.headers["range"], meta.size)
    out = _object_headers(meta)
    out.update(_override_headers(overrides))
    if byte_range is not None or not hdrs.wants_checksums(req.headers):
        # Checksums are shown only on request, and describe the whole object: S3 sends
        # none with a part of it.
        for name in [n for n in out if n.startswith("x-amz-checksum-")]:
            del out[name]
    if byte_range is None:
        out["content-length"] = str(meta.size)
        return ObjectAnswer(200, out)
    out["content-range"] = byte_range.content_range(meta.size)
    out["content-length"] = str(byte_range.length)
    return ObjectAnswer(206, out, byte_range.start, byte_range.end)


def _object_headers(meta: ObjectMeta) -> dict[str, str]:
    out = {k: v for k, v in meta.headers.items() if k != "content-length"}
    out["accept-ranges"] = "bytes"
    return out


def _validators(meta: ObjectMeta) -> dict[str, str]:
    out = {"ETag": meta.etag}
    if "last-modified" in meta.headers:
        out["Last-Modified"] = meta.headers["last-modified"]
    return out


def _checked_override(name: str, value: str) -> str:
    """A response-* value as a header can carry it: ISO-8859-1 (S3's rule) without control
    characters (CR or LF would end the header; S3 never sends them)."""
    hdrs.check_no_control(name, value)
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        raise S3Error("InvalidArgument", "Header value cannot be represented using ISO-8859-1.",
                      extra={"ArgumentName": name, "ArgumentValue": value[:256]}) from None
    return value


def _override_headers(overrides: dict[str, str]) -> dict[str, str]:
    return {_RESPONSE_OVERRIDES[name]: value for name, value in overrides.items()}
