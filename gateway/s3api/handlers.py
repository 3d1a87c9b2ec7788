"""One async function per S3 operation. Each authorises, validates, then calls the engine.
Object reads are s3api.reads; what handlers share is s3api.context."""

from __future__ import annotations

import base64
import hashlib
import re
from urllib.parse import quote, unquote

from starlette.responses import Response

from gateway.errors import S3Error
from gateway.s3api import headers as hdrs
from gateway.s3api import xml
from gateway.s3api.context import Context, Handler
from gateway.s3api.cors import preflight
from gateway.s3api.postobject import post_object
from gateway.s3api.reads import get_object
from gateway.s3api.responses import xml_response

_STRICT_BUCKET_NAME = re.compile(r"^(?!xn--)(?!sthree-)(?!.*-s3alias$)(?!.*--ol-s3$)[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


# --- service and buckets -------------------------------------------------------------

async def list_buckets(ctx: Context) -> Response:
    ctx.check()
    response = await ctx.services.engine.forward("GET", None, None, resource="/")
    result = xml.parse_list_buckets(await response.read())
    user = ctx.req.user
    result.buckets = [b for b in result.buckets if ctx.services.policy.may_see_bucket(user, b.name)]
    return xml_response(xml.render_list_buckets(result), ctx.req.request_id)


async def head_bucket(ctx: Context) -> Response:
    ctx.check()
    return await ctx.relay(await ctx.forward_to_bucket("HEAD"))


async def create_bucket(ctx: Context) -> Response:
    ctx.check()
    bucket = ctx.req.bucket or ""
    if not _STRICT_BUCKET_NAME.match(bucket) or ".." in bucket or re.fullmatch(r"\d+\.\d+\.\d+\.\d+", bucket):
        raise S3Error("InvalidBucketName", resource=f"/{bucket}", extra={"BucketName": bucket})
    _, data = await ctx.services.bodies.small_body(ctx.req)
    xml.parse_create_bucket_configuration(data, limit=ctx.services.server.max_xml_size)
    headers = hdrs.for_origin_write(ctx.req.headers)
    return await ctx.relay(await ctx.forward_to_bucket("PUT", headers=headers, body=data))


async def delete_bucket(ctx: Context) -> Response:
    ctx.check()
    return await ctx.relay(await ctx.forward_to_bucket("DELETE"))


async def list_objects(ctx: Context) -> Response:
    """ListObjects v1 and v2: asked of the origin URL-encoded, answered with exactly S3's fields.

    A user whose grants cover only parts of the listed prefix sees those parts (see
    `_list_inside_grants`) instead of AccessDenied.
    """
    req = ctx.req
    bucket, prefix = req.bucket or "", req.query.get("prefix", "")
    inside = [] if ctx.services.policy.allows(req.user, "list", bucket, prefix) else \
        ctx.services.policy.grants_inside(req.user, bucket, prefix)
    if not inside:
        ctx.check()
    v2 = req.operation is not None and req.operation.name == "ListObjectsV2"
    max_keys = xml.validate_max_keys(req.query.get("max-keys"))
    encoding = req.query.get("encoding-type")
    if encoding is not None and encoding != "url":
        raise S3Error("InvalidArgument", "Invalid Encoding Method specified in Request",
                      extra={"ArgumentName": "encoding-type", "ArgumentValue": encoding})
    query = [(k, v) for k, v in ctx.origin_query(frozenset({"encoding-type", "max-keys"}))]
    query += [("encoding-type", "url"), ("max-keys", str(max_keys))]
    if inside:
        page = await _list_inside_grants(ctx, inside, query, max_keys)
    else:
        page = xml.parse_list_objects(await ctx.services.engine.list_objects(bucket, query))
    bucket_name, delimiter = req.bucket or "", req.query.get("delimiter")
    if v2:
        body = xml.render_list_objects_v2(
            page, bucket=bucket_name, prefix=prefix, delimiter=delimiter, max_keys=max_keys, encoding_type=encoding,
            continuation_token=req.query.get("continuation-token"), start_after=req.query.get("start-after"),
            fetch_owner=req.query.get("fetch-owner", "").lower() == "true",
        )
    else:
        body = xml.render_list_objects_v1(page, bucket=bucket_name, prefix=prefix, delimiter=delimiter,
                                          max_keys=max_keys, encoding_type=encoding, marker=req.query.get("marker"))
    return xml_response(body, req.request_id)


async def _list_inside_grants(ctx: Context, grants: list[str], query: list[tuple[str, str]],
                              max_keys: int) -> xml.ListPage:
    """The part of a listing of prefix P that a user may see whose grants lie inside P.

    With a delimiter that every grant's remainder after P contains, the answer is the
    common prefixes those grants roll up into (each shown only if an object lies under
    its grant), as S3 would show them. Otherwise, with exactly one grant G inside P, it
    is the origin's listing of G, which holds only keys starting with P, so it reads as
    a (narrower) listing of P. Other shapes are refused as before.
    """
    req = ctx.req
    bucket, prefix, delimiter = req.bucket or "", req.query.get("prefix", ""), req.query.get("delimiter", "")
    if delimiter and all(delimiter in grant[len(prefix):] for grant in grants):
        rolled: dict[str, list[str]] = {}
        for grant in grants:
            rest = grant[len(prefix):]
            rolled.setdefault(prefix + rest[: rest.index(delimiter) + len(delimiter)], []).append(grant)
        after = req.query.get("start-after") or req.query.get("marker") or _decode_own_token(req.query)
        shown = []
        for common_prefix, under in sorted(rolled.items()):
            if after is not None and common_prefix <= after:
                continue
            for grant in under:
                probe = [("list-type", "2"), ("prefix", grant), ("max-keys", "1"), ("encoding-type", "url")]
                if xml.parse_list_objects(await ctx.services.engine.list_objects(bucket, probe)).contents:
                    shown.append(common_prefix)
                    break
        truncated = len(shown) > max_keys
        shown = shown[:max_keys]
        token = _OWN_TOKEN + base64.urlsafe_b64encode(shown[-1].encode()).decode() if truncated and shown else None
        return xml.ListPage(common_prefixes=shown, is_truncated=truncated,
                            next_marker=shown[-1] if truncated and shown else None, next_continuation_token=token)
    if len(grants) != 1:
        ctx.check()  # raises AccessDenied
    narrowed = [(k, v) for k, v in query if k != "prefix"] + [("prefix", grants[0])]
    return xml.parse_list_objects(await ctx.services.engine.list_objects(bucket, narrowed))


_OWN_TOKEN = "gw1-"  # continuation tokens of listings the gateway put together itself


def _decode_own_token(query: dict[str, str]) -> str | None:
    token = query.get("continuation-token", "")
    if not token.startswith(_OWN_TOKEN):
        return None
    try:
        return base64.urlsafe_b64decode(token[len(_OWN_TOKEN):]).decode()
    except ValueError:
        raise S3Error("InvalidArgument", "The continuation token provided is incorrect",
                      extra={"ArgumentName": "continuation-token"}) from None


async def passthrough(ctx: Context) -> Response:
    """Operations the gateway does not interpret: authorised, then sent on as they are."""
    ctx.check()
    req = ctx.req
    body: bytes | None = None
    if req.method in ("PUT", "POST"):
        verified, body = await ctx.services.bodies.small_body(req)
        headers = hdrs.for_origin_write(req.headers)
        headers.update(verified.checksums)
        if body:
            headers["content-md5"] = base64.b64encode(bytes.fromhex(verified.md5_hex)).decode()
    else:
        headers = hdrs.for_origin_subresource_read(req.headers) if req.method in ("GET", "HEAD") else hdrs.for_origin_write(req.headers)
    return await ctx.relay(await ctx.forward(req.method, headers=headers, body=body))


# --- objects ---------------------------------------------------------------------------


async def put_object(ctx: Context) -> Response:
    """PutObject and UploadPart: the verified body is written through to the origin."""
    ctx.check()
    req = ctx.req
    hdrs.check_user_metadata(req.headers)
    body = await ctx.services.bodies.body(req)
    headers = hdrs.for_origin_write(req.headers)
    headers.update(body.checksums)
    headers["content-md5"] = base64.b64encode(bytes.fromhex(body.md5_hex)).decode()
    response = await ctx.services.engine.put_object(
        req.bucket or "", req.key or "", query=ctx.origin_query(), headers=headers, body=body.chunks,
        body_length=body.length, resource=req.resource, personal=bool(hdrs.personal_read_headers(req.headers)))
    return await ctx.relay(response)


async def copy_object(ctx: Context) -> Response:
    """CopyObject and UploadPartCopy: the caller must be allowed to read the source too."""
    ctx.check()
    req = ctx.req
    source_bucket, source_key = parse_copy_source(req.headers["x-amz-copy-source"])
    ctx.check("read", source_bucket, source_key)
    hdrs.check_user_metadata(req.headers)
    return await ctx.relay(await ctx.forward("PUT", headers=hdrs.for_origin_write(req.headers)))


async def delete_object(ctx: Context) -> Response:
    ctx.check()
    req = ctx.req
    return await ctx.relay(await ctx.forward("DELETE", headers=hdrs.for_origin_write(req.headers)))


async def delete_objects(ctx: Context) -> Response:
    """DeleteObjects: each key authorised on its own; refused keys are reported, not sent on."""
    req = ctx.req
    body, data = await ctx.services.bodies.small_body(req)
    if "content-md5" not in req.headers and not body.checksums:
        raise S3Error("InvalidRequest", "Missing required header for this request: Content-Md5.")
    request = xml.parse_delete_objects(data, limit=ctx.services.server.max_xml_size)
    allowed, denied = [], []
    for key, version_id in request.objects:
        if ctx.services.policy.allows(req.user, "write", req.bucket, key):
            allowed.append((key, version_id))
        else:
            denied.append(xml.DeleteErrorEntry(key=key, version_id=version_id, code="AccessDenied", message="Access Denied"))
    result = xml.DeleteResult(deleted=[], errors=[])
    if allowed:
        payload = xml.render_delete_request(xml.DeleteRequest(quiet=request.quiet, objects=allowed, conditions=request.conditions))
        response = await ctx.services.engine.forward("POST", req.bucket, None, query=[("delete", "")],
                                                headers=_rewritten_xml_headers(req.headers, payload), body=payload,
                                                resource=req.resource)
        result = xml.parse_delete_result(await response.read())
    result.errors.extend(denied)
    return xml_response(xml.render_delete_result(result.deleted, result.errors, request.quiet), req.request_id)


# --- multipart uploads -------------------------------------------------------------------

async def create_multipart_upload(ctx: Context) -> Response:
    ctx.check()
    req = ctx.req
    hdrs.check_user_metadata(req.headers)
    return await ctx.relay(await ctx.forward("POST", headers=hdrs.for_origin_write(req.headers), body=b""))


async def complete_multipart_upload(ctx: Context) -> Response:
    """The parts list is checked and rendered anew; the client's x-amz-checksum-* headers
    describe the object (its composite or full-object checksum) and go on for the origin to
    check. The origin answers every call, a retry of an upload it just completed too."""
    ctx.check()
    req = ctx.req
    _, data = await ctx.services.bodies.small_body(req, object_checksums=True)
    parts = xml.parse_complete_multipart(data, limit=ctx.services.server.max_xml_size)
    upload_id = req.query.get("uploadId", "")
    if not upload_id:
        raise S3Error("NoSuchUpload", resource=req.resource)
    payload = xml.render_complete_multipart_request(parts)
    headers = _rewritten_xml_headers(req.headers, payload)
    headers.update(hdrs.object_checksums(req.headers))
    response = await ctx.services.engine.complete_upload(req.bucket or "", req.key or "", upload_id, query=ctx.origin_query(),
                                                    headers=headers, body=payload, resource=req.resource)
    out = hdrs.from_origin(response.header_items)
    data = await response.read()
    # The origin names itself in <Location>; the client must see the gateway's URL.
    location = f"{req.headers.get('x-forwarded-proto', 'http')}://{req.headers.get('host', '')}/{req.bucket}/{_quote_key(req.key or '')}"
    data = re.sub(rb"<Location>[^<]*</Location>", b"<Location>" + xml.xml_escape(location).encode() + b"</Location>", data, count=1)
    out.pop("content-length", None)
    return xml_response(data, req.request_id, headers=out)


async def abort_multipart_upload(ctx: Context) -> Response:
    return await delete_object(ctx)


async def list_uploads(ctx: Context) -> Response:
    """ListParts and ListMultipartUploads: sent on, answered as the origin answered."""
    ctx.check()
    return await ctx.relay(await ctx.forward("GET"))


# --- helpers -----------------------------------------------------------------------------

def parse_copy_source(value: str) -> tuple[str, str]:
    """`/bucket/key?versionId=v` or `bucket/key` (URL-encoded) -> (bucket, key)."""
    path = value.split("?", 1)[0]
    path = unquote(path).lstrip("/")
    bucket, _, key = path.partition("/")
    if not bucket or not key:
        raise S3Error("InvalidArgument", "Copy Source must mention the source bucket and key: sourcebucket/sourcekey",
                      extra={"ArgumentName": "x-amz-copy-source", "ArgumentValue": value})
    return bucket, key


def _rewritten_xml_headers(client_headers: dict[str, str], payload: bytes) -> dict[str, str]:
    """Headers for an XML body the gateway re-rendered: the client's own digests and
    checksum algorithm describe its body, not ours, so ours carries its own Content-MD5."""
    headers = hdrs.for_origin_write(client_headers)
    headers.pop("x-amz-sdk-checksum-algorithm", None)
    headers.pop("content-encoding", None)
    headers["content-type"] = "application/xml"
    headers["content-md5"] = base64.b64encode(hashlib.md5(payload).digest()).decode()
    return headers


def _quote_key(key: str) -> str:
    return quote(key, safe="/~")


HANDLERS: dict[str, Handler] = {
    "ListBuckets": list_buckets,
    "HeadBucket": head_bucket,
    "CreateBucket": create_bucket,
    "DeleteBucket": delete_bucket,
    "GetBucketLocation": passthrough,
    "ListObjects": list_objects,
    "ListObjectsV2": list_objects,
    "ListObjectVersions": passthrough,
    "GetObject": get_object,
    "HeadObject": get_object,
    "PutObject": put_object,
    "PostObject": post_object,
    "PreflightCORS": preflight,
    "UploadPart": put_object,
    "CopyObject": copy_object,
    "UploadPartCopy": copy_object,
    "DeleteObject": delete_object,
    "DeleteObjects": delete_objects,
    "CreateMultipartUpload": create_multipart_upload,
    "CompleteMultipartUpload": complete_multipart_upload,
    "AbortMultipartUpload": abort_multipart_upload,
    "ListParts": list_uploads,
    "ListMultipartUploads": list_uploads,
}
