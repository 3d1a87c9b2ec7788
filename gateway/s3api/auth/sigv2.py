"""SigV2 (HMAC-SHA1), in the Authorization header and in query-string authentication."""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import datetime, timedelta, timezone

from gateway.errors import S3Error
from gateway.s3api.auth.common import (
    MSG_NEED_DATE,
    _check_skew,
    _is_digits,
    _iso,
    _lookup,
    _parse_amz_date,
    _parse_http_date,
    _parse_query,
    _percent_decode,
    _wire_text,
)
from gateway.s3api.auth.model import Identity, RequestView, SecretLookup
from gateway.s3api.auth.payload import _payload_check
from gateway.signing import uri_encode

# S3's documented SigV2 sub-resources: the query parameters that are part of the canonicalized resource.
SIGV2_SUBRESOURCES = frozenset(
    (
        "acl", "cors", "delete", "lifecycle", "location", "logging", "notification", "partNumber", "policy",
        "requestPayment", "response-cache-control", "response-content-disposition", "response-content-encoding",
        "response-content-language", "response-content-type", "response-expires", "restore", "tagging",
        "torrent", "uploadId", "uploads", "versionId", "versioning", "versions", "website",
    )
)
# botocore's HmacV1Auth also signs these; S3 does not list them, so they are tried only as a fallback.
_SIGV2_EXTRA_SUBRESOURCES = frozenset(
    (
        "accelerate", "analytics", "defaultObjectAcl", "inventory", "metrics", "object-lock", "replication",
        "select", "select-type", "storageClass",
    )
)

# Parameters that SigV2 does not sign and that a SigV2 request may still carry: they page or
# shape a listing or name the SDK call; none chooses the operation or the object.
_SIGV2_UNSIGNED_ALLOWED = frozenset(
    (
        "prefix", "delimiter", "marker", "max-keys", "encoding-type", "list-type", "continuation-token",
        "start-after", "fetch-owner", "key-marker", "version-id-marker", "upload-id-marker", "max-uploads",
        "max-parts", "part-number-marker", "x-id",
    )
)

_V2_QUERY_PARAMS = ("AWSAccessKeyId", "Signature", "Expires")


_LAST_DATETIME = 253402300799  # 9999-12-31T23:59:59Z, the last second a datetime holds

def _sigv2_header(
    view: RequestView,
    rest: str,
    secret_for: SecretLookup,
    now: datetime,
    max_skew: timedelta,
    bucket_from_host: str | None,
) -> Identity:
    access_key, sep, provided = rest.strip().rpartition(":")
    if not sep or not access_key or not provided:
        raise S3Error("InvalidArgument", "AWS authorization header is invalid.  Expected AwsAccessKeyId:signature")
    amz_date = view.header("x-amz-date")
    date = view.header("date")
    stamp = amz_date if amz_date is not None else date
    request_time = (_parse_http_date(stamp) or _parse_amz_date(stamp)) if stamp is not None else None
    if request_time is None:
        raise S3Error("AccessDenied", MSG_NEED_DATE)
    _check_skew(request_time, stamp or "", now, max_skew)
    payload = _payload_check(view)
    secret = _lookup(secret_for, access_key)
    # With x-amz-date, S3 signs an empty Date line; some clients still put the Date header there.
    date_lines = [date or ""] if amz_date is None else ["", date or ""]
    _verify_v2(view, secret, access_key, provided, date_lines, {}, bucket_from_host)
    return Identity(access_key, payload, valid_from=request_time - max_skew, valid_until=request_time + max_skew)


def _sigv2_query(
    view: RequestView,
    query: list[tuple[str, str]],
    secret_for: SecretLookup,
    now: datetime,
    bucket_from_host: str | None,
) -> Identity:
    params: dict[str, str] = {}
    amz_params: dict[str, list[str]] = {}
    for name, value in query:
        if name in _V2_QUERY_PARAMS:
            if name in params:
                raise S3Error("AuthorizationQueryParametersError", f"{name} must be specified only once.")
            params[name] = value
        elif name.lower().startswith("x-amz-") or name.lower() in ("content-md5", "content-type"):
            # botocore's HmacV1QueryAuth hoists these headers into the query string after signing them.
            amz_params.setdefault(name.lower(), []).append(value)
    if len(params) != len(_V2_QUERY_PARAMS):
        raise S3Error("AccessDenied", "Query-string authentication requires the Signature, Expires and AWSAccessKeyId parameters")
    expires_text = params["Expires"]
    if not _is_digits(expires_text) or len(expires_text) > 12:
        raise S3Error("AuthorizationQueryParametersError", "Invalid date (should be seconds since epoch): " + expires_text[:40])
    expires = int(expires_text)
    if now.timestamp() > expires:
        raise S3Error(
            "AccessDenied", "Request has expired",
            extra={"Expires": _iso(datetime.fromtimestamp(min(expires, _LAST_DATETIME), timezone.utc)), "ServerTime": _iso(now)},
        )
    payload = _payload_check(view)
    access_key = params["AWSAccessKeyId"]
    secret = _lookup(secret_for, access_key)
    # A "+" that reached us as a space was form-decoded somewhere on the way.
    provided = params["Signature"].replace(" ", "+")
    _verify_v2(view, secret, access_key, provided, [expires_text], amz_params, bucket_from_host)
    # (now > this datetime exactly when now.timestamp() > expires: `now` has whole microseconds)
    until = datetime.fromtimestamp(expires, timezone.utc) if expires <= _LAST_DATETIME else None
    return Identity(access_key, payload, valid_until=until)


def _verify_v2(
    view: RequestView,
    secret: str,
    access_key: str,
    provided: str,
    date_lines: list[str],
    extra_headers: dict[str, list[str]],
    bucket_from_host: str | None,
) -> None:
    headers: dict[str, list[str]] = {}
    for name, value in view.headers:
        headers.setdefault(name, []).append(_wire_text(value))
    for name, values in extra_headers.items():
        headers.setdefault(name, values)
    content_md5 = ",".join(v.strip() for v in headers.get("content-md5", ()))
    content_type = ",".join(v.strip() for v in headers.get("content-type", ()))
    amz = "".join(
        f"{name}:{','.join(v.strip() for v in headers[name])}\n" for name in sorted(headers) if name.startswith("x-amz-")
    )
    provided_b = provided.strip().encode("utf-8", "surrogateescape")
    key = secret.encode("utf-8")
    for resource, signed in _v2_resources(view, bucket_from_host):
        for date_line in dict.fromkeys(date_lines):
            to_sign = f"{view.method.upper()}\n{content_md5}\n{content_type}\n{date_line}\n{amz}{resource}"
            digest = hmac.new(key, to_sign.encode("utf-8", "surrogateescape"), hashlib.sha1).digest()
            if hmac.compare_digest(base64.b64encode(digest), provided_b):
                _check_all_query_signed_v2(view, signed)
                return
    raise S3Error("SignatureDoesNotMatch", extra={"AWSAccessKeyId": access_key})


def _v2_resources(view: RequestView, bucket_from_host: str | None) -> list[tuple[str, frozenset[str]]]:
    """The canonicalized resources a SigV2 client may have signed, each with the query names it covers."""
    raw = view.raw_path or "/"
    paths = dict.fromkeys((raw, uri_encode(_percent_decode(raw), keep_slash=True)))
    if not bucket_from_host and raw.count("/") == 1 and raw != "/":
        # A path-style bucket request ("/bucket"): botocore signs "/bucket/", as S3 documents for buckets.
        paths.update(dict.fromkeys(p + "/" for p in list(paths)))
    prefix = f"/{bucket_from_host}" if bucket_from_host else ""
    raw_pairs = [p.partition("=") for p in view.query_string.split("&") if p]
    subresource_sets = [SIGV2_SUBRESOURCES]
    if any(name in _SIGV2_EXTRA_SUBRESOURCES for name, _, _ in raw_pairs):
        subresource_sets.append(SIGV2_SUBRESOURCES | _SIGV2_EXTRA_SUBRESOURCES)
    out: dict[str, frozenset[str]] = {}
    for allowed in subresource_sets:
        # Sub-resource values are signed decoded; names are plain ASCII and sorted by name only.
        subs = sorted(
            ((name, sep, _percent_decode(value)) for name, sep, value in raw_pairs if name in allowed),
            key=lambda t: t[0],
        )
        suffix = "?" + "&".join(f"{n}{s}{v}" for n, s, v in subs) if subs else ""
        for path in paths:
            out.setdefault(f"{prefix}{path}{suffix}", frozenset(n for n, _, _ in subs))
    return list(out.items())


def _check_all_query_signed_v2(view: RequestView, signed: frozenset[str]) -> None:
    """A SigV2 signature covers only its sub-resources: any other parameter that could choose
    the operation or the object (`?retention`, `?legal-hold`, an escaped `%76ersionId`, ...)
    would be sent on with the gateway's own credentials, so it must have been signed."""
    unsigned = sorted({
        name for name, _ in _parse_query(view.query_string)
        if name not in signed and name not in _V2_QUERY_PARAMS and name not in _SIGV2_UNSIGNED_ALLOWED
        and not name.lower().startswith("x-amz-") and name.lower() not in ("content-md5", "content-type")
    })
    if unsigned:
        raise S3Error(
            "AccessDenied", "There were query parameters present in the request which were not signed",
            extra={"ParametersNotSigned": ", ".join(unsigned)[:256]},
        )
