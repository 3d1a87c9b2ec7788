"""POST Object: an upload by an HTML form (browser uploads, presigned POSTs such as boto3's
generate_presigned_post), written through to the origin as a PutObject.

The form's fields are read first, then its policy is verified (auth.postpolicy) and the user
who signed it authorized to write the key, all before a byte of the file is received; the
file is then received whole and verified (s3api.body) and put as PutObject puts, with the
object headers the fields give. The answer is S3's: a 303 to success_action_redirect, or
success_action_status (200, 201 with a PostResponse document, or 204 by default).
"""

from __future__ import annotations

import base64
from datetime import datetime, timezone
from urllib.parse import quote, urlencode, urlsplit

from starlette.responses import Response

from gateway.errors import S3Error
from gateway.s3api import headers as hdrs
from gateway.s3api import xml
from gateway.s3api.auth import PayloadCheck
from gateway.s3api.auth.postpolicy import verify_post_policy
from gateway.s3api.body import receive_verified_body
from gateway.s3api.context import Context
from gateway.s3api.form import FilePart
from gateway.s3api.responses import empty_response, xml_response

# Object headers a form field sets (its name is the header's), besides x-amz-* fields.
_HEADER_FIELDS = frozenset({"cache-control", "content-disposition", "content-encoding", "content-language",
                            "content-type", "expires"})
# x-amz-* fields never sent on as headers: those that authenticate the form, and the checksum's
# algorithm (sent as x-amz-sdk-checksum-algorithm beside a checksum value that was verified).
_UNSENT_FIELDS = frozenset({"x-amz-algorithm", "x-amz-credential", "x-amz-date", "x-amz-signature",
                            "x-amz-security-token", "x-amz-checksum-algorithm", "x-amz-sdk-checksum-algorithm"})
_MAX_KEY_BYTES = 1024
_TOKEN = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz")


async def post_object(ctx: Context) -> Response:
    req, services = ctx.req, ctx.services
    bucket = req.bucket or ""
    form = services.bodies.form(req)
    fields, file = await form.fields()
    if file is None:
        raise S3Error("IncorrectNumberOfFilesInPostRequest")
    policy = verify_post_policy(fields, services.policy.secret_for, now=datetime.now(timezone.utc))
    policy.check_fields(fields, bucket)
    req.key = key = _key(fields, file)  # from here the object the request names (errors, the access log)
    req.user = services.policy.user(policy.access_key)
    services.policy.check(req.user, "write", bucket, key)
    headers, promised = _object_headers(fields, file)
    server = services.server
    largest = min(server.max_object_size, policy.size_range[1]) if policy.size_range else server.max_object_size
    body = await receive_verified_body(form.file_chunks(), promised, PayloadCheck("unsigned"), max_size=largest,
                                       spool_memory=server.spool_memory, spool_dir=server.spool_dir or None)
    async with body:
        await form.finish()
        policy.check_size(body.length)
        headers.update(body.checksums)
        for name in body.checksums:  # the algorithm beside its value, as SDKs send it (some origins need it)
            headers["x-amz-sdk-checksum-algorithm"] = name[len("x-amz-checksum-"):].upper()
        headers["content-md5"] = base64.b64encode(bytes.fromhex(body.md5_hex)).decode()
        answer = await services.engine.put_object(bucket, key, headers=headers, body=body.chunks,
                                                  body_length=body.length, resource=req.resource,
                                                  personal=bool(hdrs.personal_read_headers(headers)))
        await answer.aclose()
    return _answer(ctx, fields, bucket, key, answer.headers)


def _key(fields: dict[str, str], file: FilePart) -> str:
    """The object's key: the `key` field, ${filename} replaced by the file's name."""
    if "key" not in fields:
        raise S3Error("InvalidArgument", "A POST upload must carry the field key.", extra={"ArgumentName": "key"})
    key = fields["key"].replace("${filename}", file.filename or "")
    if not key or "\x00" in key:
        raise S3Error("InvalidArgument", "The key of a POST upload must be a name without NUL characters.",
                      extra={"ArgumentName": "key"})
    if len(key.encode("utf-8")) > _MAX_KEY_BYTES:
        raise S3Error("KeyTooLongError")
    return key


def _object_headers(fields: dict[str, str], file: FilePart) -> tuple[dict[str, str], dict[str, str]]:
    """The headers of the PutObject the form makes, and what the fields promise of the file
    (Content-MD5, a checksum), checked as it is received; both as a client's headers are."""
    wanted: dict[str, str] = {}
    for name, value in fields.items():
        if name.startswith("x-amz-copy-source"):  # would make the PUT a copy of an object not authorized here
            raise S3Error("InvalidArgument", "A POST upload cannot copy an object.", extra={"ArgumentName": name[:64]})
        if name in _HEADER_FIELDS or name == "content-md5" or (name.startswith("x-amz-") and name not in _UNSENT_FIELDS):
            wanted[name] = value
        elif name == "acl":
            wanted["x-amz-acl"] = value
        elif name == "tagging":
            wanted["x-amz-tagging"] = urlencode(xml.parse_tagging(value.encode("utf-8")))
    if "content-type" not in wanted and file.content_type:
        wanted["content-type"] = file.content_type
    for name, value in wanted.items():
        if not set(name) <= _TOKEN:
            raise S3Error("InvalidArgument", "A form field's name cannot be sent on as a header's.",
                          extra={"ArgumentName": name[:64]})
        hdrs.check_no_control(name, value)
    wire = {name: value.encode("utf-8").decode("latin-1") for name, value in wanted.items()}
    headers = hdrs.for_origin_write(wire)
    hdrs.check_user_metadata(headers)
    # The file's length is known only once it ended, as a chunked body's is.
    promised = {name: value for name, value in wire.items() if name in hdrs.CHECKSUM_VALUES or name == "content-md5"}
    promised["transfer-encoding"] = "chunked"
    return headers, promised


def _answer(ctx: Context, fields: dict[str, str], bucket: str, key: str, origin: dict[str, str]) -> Response:
    """S3's answer to a stored upload: a redirect, or the status the form asked for."""
    etag = origin.get("etag", "")
    scheme = "https" if ctx.services.server.tls_cert_file else "http"
    path = quote(key, safe="/") if ctx.req.host_bucket else f"{quote(bucket)}/{quote(key, safe='/')}"
    location = f"{scheme}://{ctx.req.headers.get('host', '')}/{path}"
    out = {"etag": etag, "location": location}
    for name in ("x-amz-version-id", "x-amz-server-side-encryption"):
        if name in origin:
            out[name] = origin[name]
    redirect = fields.get("success_action_redirect", fields.get("redirect", ""))
    # Not a URL (no scheme or host; a space, a control or a non-ASCII character, which a Location
    # header cannot carry as it is): the status decides, as S3 does with a redirect it cannot use.
    usable = redirect.isascii() and redirect.isprintable() and " " not in redirect
    if usable and urlsplit(redirect).scheme in ("http", "https") and urlsplit(redirect).netloc:
        query = urlencode({"bucket": bucket, "key": key, "etag": etag})
        out["location"] = f"{redirect}{'&' if '?' in redirect else '?'}{query}"
        return empty_response(ctx.req.request_id, status=303, headers=out)
    status = fields.get("success_action_status", "204")
    if status == "201":
        return xml_response(xml.render_post_response(location, bucket, key, etag), ctx.req.request_id,
                            status=201, headers=out)
    return empty_response(ctx.req.request_id, status=200 if status == "200" else 204, headers=out)
