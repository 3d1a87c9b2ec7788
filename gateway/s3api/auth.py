"""Authentication of incoming requests (SigV4/SigV2, header/presigned, anonymous): pure, clock and secrets passed in."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from email.utils import parsedate_to_datetime
from typing import Literal
from urllib.parse import unquote_to_bytes

from gateway.errors import S3Error
from gateway.signing import (
    ALGORITHM,
    UNSIGNED_PAYLOAD,
    canonical_headers,
    canonical_query_string,
    canonical_request,
    derive_signing_key,
    signature_hex,
    string_to_sign,
    uri_encode,
)

STREAMING_SIGNED = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
STREAMING_SIGNED_TRAILER = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
STREAMING_UNSIGNED_TRAILER = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"

MAX_PRESIGN_EXPIRES = 604800  # one week, S3's limit for SigV4 presigned URLs
SERVICE = "s3"

PayloadMode = Literal["sha256", "unsigned", "streaming-signed", "streaming-signed-trailer", "streaming-unsigned-trailer"]

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

_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
_AMZ_DATE = re.compile(r"\d{8}T\d{6}Z")
_DATE8 = re.compile(r"\d{8}")

_V4_QUERY_PARAMS = ("X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires", "X-Amz-SignedHeaders", "X-Amz-Signature")
_V2_QUERY_PARAMS = ("AWSAccessKeyId", "Signature", "Expires")

_MSG_ONE_MECHANISM = (
    "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, Signature query string "
    "parameter or the Authorization header should be specified"
)
_MSG_NEED_DATE = "AWS authentication requires a valid Date or x-amz-date header"
_MSG_CREDENTIAL = 'the Credential is mal-formed; expecting "<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/aws4_request".'


@dataclass(frozen=True, slots=True)
class RequestView:
    """What authentication needs of a request, as received on the wire."""

    method: str
    raw_path: str  # percent-encoded, as received (ASGI raw_path decoded as latin-1)
    query_string: str  # raw, as received
    headers: tuple[tuple[str, str], ...]  # lowercase names, wire order, repeated names kept

    def header(self, name: str) -> str | None:
        """All values of `name` joined with "," (None if absent)."""
        values = [v for n, v in self.headers if n == name]
        return ",".join(values) if values else None


@dataclass(frozen=True, slots=True)
class ChunkSigner:
    """What is needed to verify aws-chunked chunk and trailer signatures."""

    signing_key: bytes = field(repr=False)
    amz_date: str
    scope: str
    seed_signature: str


@dataclass(frozen=True, slots=True)
class PayloadCheck:
    mode: PayloadMode
    expected_sha256: str | None = None  # for mode "sha256"
    chunk_signer: ChunkSigner | None = None  # for the streaming-signed modes


@dataclass(frozen=True, slots=True)
class Identity:
    access_key: str | None  # None = anonymous
    payload: PayloadCheck


SecretLookup = Callable[[str], "str | None"]


def authenticate(
    view: RequestView,
    secret_for: SecretLookup,
    *,
    now: datetime,
    max_skew: timedelta = timedelta(minutes=15),
    bucket_from_host: str | None = None,
) -> Identity:
    """Check the request's credentials; returns who signed it and how to verify its body.

    `bucket_from_host` is the bucket of a virtual-hosted-style request: SigV2
    signs "/bucket/key" even when the path on the wire is "/key".
    """
    now = _utc(now)
    query = _parse_query(view.query_string)
    names = {name for name, _ in query}
    auth_headers = [v for n, v in view.headers if n == "authorization"]
    v4_query = any(p in names for p in ("X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Signature"))
    v2_query = any(p in names for p in ("AWSAccessKeyId", "Signature"))

    if len(auth_headers) > 1 or sum((bool(auth_headers), v4_query, v2_query)) > 1:
        raise S3Error("InvalidArgument", _MSG_ONE_MECHANISM)
    if auth_headers:
        value = auth_headers[0].strip()
        scheme, _, rest = value.partition(" ")
        if scheme == ALGORITHM:
            return _sigv4_header(view, rest, query, secret_for, now, max_skew)
        if scheme == "AWS":
            return _sigv2_header(view, rest, secret_for, now, max_skew, bucket_from_host)
        raise S3Error(
            "InvalidArgument", "Unsupported Authorization Type",
            # Only the scheme is echoed: the rest of the header is credential material.
            extra={"ArgumentName": "Authorization", "ArgumentValue": scheme[:32]},
        )
    if v4_query:
        return _sigv4_query(view, query, secret_for, now, max_skew)
    if v2_query:
        return _sigv2_query(view, query, secret_for, now, bucket_from_host)
    return Identity(None, _payload_check(view))


# --- SigV4 -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Credential:
    access_key: str
    date: str
    region: str
    service: str

    @property
    def scope(self) -> str:
        return f"{self.date}/{self.region}/{self.service}/aws4_request"


def _parse_credential(value: str, fail: Callable[[str], S3Error]) -> _Credential:
    # rsplit: the four scope parts never contain "/", an access key in a private deployment might.
    parts = value.rsplit("/", 4)
    if len(parts) != 5 or not all(parts) or not _DATE8.fullmatch(parts[1]):
        raise fail(_MSG_CREDENTIAL)
    access_key, date, region, service, terminal = parts
    if service != SERVICE:
        raise fail(f'incorrect service "{service}". This endpoint belongs to "{SERVICE}".')
    if terminal != "aws4_request":
        raise fail(f'incorrect terminal "{terminal}". This endpoint uses "aws4_request".')
    return _Credential(access_key, date, region, service)


def _parse_signed_headers(value: str) -> list[str] | None:
    names = value.split(";")
    if not value or not all(names):
        return None
    return names


def _sigv4_header(
    view: RequestView,
    rest: str,
    query: list[tuple[str, str]],
    secret_for: SecretLookup,
    now: datetime,
    max_skew: timedelta,
) -> Identity:
    def malformed(detail: str) -> S3Error:
        return S3Error("AuthorizationHeaderMalformed", f"The authorization header is malformed; {detail}")

    fields: dict[str, str] = {}
    for part in rest.split(","):
        name, sep, val = part.strip().partition("=")
        if not sep or name not in ("Credential", "SignedHeaders", "Signature") or name in fields:
            raise malformed("the authorization header requires three components: Credential, SignedHeaders, and Signature.")
        fields[name] = val.strip()
    if len(fields) != 3:
        raise malformed("the authorization header requires three components: Credential, SignedHeaders, and Signature.")
    cred = _parse_credential(fields["Credential"], malformed)
    signed = _parse_signed_headers(fields["SignedHeaders"])
    if signed is None:
        raise malformed("the SignedHeaders component is empty or malformed.")
    if "host" not in signed:
        raise malformed("the SignedHeaders component must include host.")
    signature = fields["Signature"]
    if not signature:
        raise malformed("the Signature component is empty.")

    amz_date, request_time = _v4_request_time(view)
    if cred.date != amz_date[:8]:
        raise malformed(f'Invalid credential date "{cred.date}". This date is not the same as X-Amz-Date: "{amz_date[:8]}".')
    _check_skew(request_time, amz_date, now, max_skew)
    # Reading the body mode before the signature: without it the canonical request cannot be built.
    content_sha256 = view.header("x-amz-content-sha256")
    if content_sha256 is None:
        raise S3Error("InvalidRequest", "Missing required header for this request: x-amz-content-sha256")
    mode = _payload_mode(content_sha256)

    secret = _lookup(secret_for, cred.access_key)
    _check_all_amz_signed(view, signed)
    key = derive_signing_key(secret, cred.date, cred.region, cred.service)
    signature = _verify_v4(view, key, amz_date, cred, signed, query, [content_sha256], signature)
    return Identity(cred.access_key, _payload_from_mode(mode, content_sha256, key, amz_date, cred, signature))


def _sigv4_query(
    view: RequestView, query: list[tuple[str, str]], secret_for: SecretLookup, now: datetime, max_skew: timedelta
) -> Identity:
    def bad(detail: str) -> S3Error:
        return S3Error("AuthorizationQueryParametersError", detail)

    params: dict[str, str] = {}
    for name, value in query:
        if name in _V4_QUERY_PARAMS:
            if name in params:
                raise bad(f"{name} must be specified only once.")
            params[name] = value
    if len(params) != len(_V4_QUERY_PARAMS):
        raise bad(
            "Query-string authentication version 4 requires the X-Amz-Algorithm, X-Amz-Credential, "
            "X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and X-Amz-Expires parameters."
        )
    if params["X-Amz-Algorithm"] != ALGORITHM:
        raise bad(f'X-Amz-Algorithm only supports "{ALGORITHM}"')
    cred = _parse_credential(params["X-Amz-Credential"], lambda d: bad(f"Error parsing the X-Amz-Credential parameter; {d}"))
    amz_date = params["X-Amz-Date"]
    request_time = _parse_amz_date(amz_date)
    if request_time is None:
        raise bad("X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\"")
    if cred.date != amz_date[:8]:
        raise bad(
            f'Error parsing the X-Amz-Credential parameter; Invalid credential date "{cred.date}". '
            f'This date is not the same as X-Amz-Date: "{amz_date[:8]}".'
        )
    expires_text = params["X-Amz-Expires"]
    if not _is_digits(expires_text):
        if expires_text.startswith("-") and _is_digits(expires_text[1:]):
            raise bad("X-Amz-Expires must be non-negative")
        raise bad("X-Amz-Expires should be a number")
    # Length first: int() of thousands of digits raises rather than answering.
    expires = int(expires_text) if len(expires_text) <= 12 else MAX_PRESIGN_EXPIRES + 1
    if expires > MAX_PRESIGN_EXPIRES:
        raise bad(f"X-Amz-Expires must be less than a week (in seconds) that is; {MAX_PRESIGN_EXPIRES}")
    signed = _parse_signed_headers(params["X-Amz-SignedHeaders"])
    if signed is None or "host" not in signed:
        raise bad("X-Amz-SignedHeaders must include host.")
    if not params["X-Amz-Signature"]:
        raise bad("X-Amz-Signature must not be empty.")

    # The clock checks come before the key lookup: an expired URL says nothing about the key.
    if request_time - now > max_skew:
        raise S3Error("AccessDenied", "Request is not valid yet", extra={"X-Amz-Date": amz_date, "ServerTime": _iso(now)})
    expiry = request_time + timedelta(seconds=expires)
    if now > expiry:
        raise S3Error(
            "AccessDenied", "Request has expired",
            extra={"X-Amz-Expires": expires_text, "Expires": _iso(expiry), "ServerTime": _iso(now)},
        )

    secret = _lookup(secret_for, cred.access_key)
    _check_all_amz_signed(view, signed)
    key = derive_signing_key(secret, cred.date, cred.region, cred.service)
    pairs = [(n, v) for n, v in query if n != "X-Amz-Signature"]
    content_sha256 = view.header("x-amz-content-sha256")
    # Presigned URLs sign UNSIGNED-PAYLOAD; botocore puts an explicit x-amz-content-sha256 header there instead.
    payload_hashes = [UNSIGNED_PAYLOAD] if content_sha256 is None else [UNSIGNED_PAYLOAD, content_sha256]
    signature = _verify_v4(view, key, amz_date, cred, signed, pairs, payload_hashes, params["X-Amz-Signature"])
    if content_sha256 is None:
        return Identity(cred.access_key, PayloadCheck("unsigned"))
    mode = _payload_mode(content_sha256)
    return Identity(cred.access_key, _payload_from_mode(mode, content_sha256, key, amz_date, cred, signature))


def _verify_v4(
    view: RequestView,
    key: bytes,
    amz_date: str,
    cred: _Credential,
    signed: list[str],
    query_pairs: list[tuple[str, str]],
    payload_hashes: list[str],
    provided: str,
) -> str:
    """Check `provided` against every acceptable canonical form; returns it (lowercase) on a match."""
    header_block = canonical_headers(((n, _wire_text(v)) for n, v in view.headers), [s.lower() for s in signed])
    cquery = canonical_query_string(query_pairs)
    provided_b = provided.lower().encode("utf-8", "surrogateescape")
    for curi in _canonical_uris(view.raw_path):
        for payload_hash in payload_hashes:
            creq = canonical_request(
                method=view.method.upper(),
                canonical_uri=curi,
                canonical_query=cquery,
                canonical_header_block=header_block,
                signed_headers=";".join(signed),
                payload_hash=payload_hash,
            )
            expected = signature_hex(key, string_to_sign(amz_date, cred.scope, creq))
            if hmac.compare_digest(expected.encode("ascii"), provided_b):
                return expected
    raise S3Error("SignatureDoesNotMatch", extra={"AWSAccessKeyId": cred.access_key})


def _canonical_uris(raw_path: str) -> list[str]:
    """S3 compares against the path encoded once; some clients sign the wire path verbatim instead."""
    raw = raw_path or "/"
    encoded = uri_encode(_percent_decode(raw), keep_slash=True)
    return [encoded] if encoded == raw else [encoded, raw]


def _v4_request_time(view: RequestView) -> tuple[str, datetime]:
    """The SigV4 timestamp (basic ISO 8601) and its datetime: x-amz-date, else the Date header."""
    amz_date = view.header("x-amz-date")
    if amz_date is not None:
        parsed = _parse_amz_date(amz_date)
        if parsed is None:
            raise S3Error("AccessDenied", _MSG_NEED_DATE)
        return amz_date, parsed
    date = view.header("date")
    if date is not None:
        parsed = _parse_amz_date(date) or _parse_http_date(date)
        if parsed is not None:
            return parsed.strftime("%Y%m%dT%H%M%SZ"), parsed
    raise S3Error("AccessDenied", _MSG_NEED_DATE)


def _payload_mode(value: str) -> PayloadMode:
    if _HEX64.fullmatch(value):
        return "sha256"
    mode = {
        UNSIGNED_PAYLOAD: "unsigned",
        STREAMING_SIGNED: "streaming-signed",
        STREAMING_SIGNED_TRAILER: "streaming-signed-trailer",
        STREAMING_UNSIGNED_TRAILER: "streaming-unsigned-trailer",
    }.get(value)
    if mode is None:
        raise S3Error(
            "InvalidArgument",
            "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-UNSIGNED-PAYLOAD-TRAILER, "
            "STREAMING-AWS4-HMAC-SHA256-PAYLOAD, STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER or a valid sha256 value.",
            extra={"ArgumentName": "x-amz-content-sha256", "ArgumentValue": value[:80]},
        )
    return mode  # type: ignore[return-value]


def _payload_from_mode(
    mode: PayloadMode, content_sha256: str, key: bytes, amz_date: str, cred: _Credential, signature: str
) -> PayloadCheck:
    if mode == "sha256":
        return PayloadCheck("sha256", expected_sha256=content_sha256.lower())
    if mode in ("streaming-signed", "streaming-signed-trailer"):
        return PayloadCheck(mode, chunk_signer=ChunkSigner(key, amz_date, cred.scope, signature))
    return PayloadCheck(mode)


def _payload_check(view: RequestView) -> PayloadCheck:
    """The body check for requests whose signature does not cover a chunk signer (SigV2, anonymous).

    Without the header the body is unsigned; a hex value is still verified, an
    unsigned trailer is still decoded, but signed chunks cannot be checked here.
    """
    value = view.header("x-amz-content-sha256")
    if value is None:
        return PayloadCheck("unsigned")
    mode = _payload_mode(value)
    if mode in ("streaming-signed", "streaming-signed-trailer"):
        raise S3Error("InvalidRequest", f"x-amz-content-sha256 {value} requires a SigV4 Authorization header.")
    if mode == "sha256":
        return PayloadCheck("sha256", expected_sha256=value.lower())
    return PayloadCheck(mode)


# --- SigV2 -----------------------------------------------------------------------------------------


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
        raise S3Error("AccessDenied", _MSG_NEED_DATE)
    _check_skew(request_time, stamp or "", now, max_skew)
    payload = _payload_check(view)
    secret = _lookup(secret_for, access_key)
    # With x-amz-date, S3 signs an empty Date line; some clients still put the Date header there.
    date_lines = [date or ""] if amz_date is None else ["", date or ""]
    _verify_v2(view, secret, access_key, provided, date_lines, {}, bucket_from_host)
    return Identity(access_key, payload)


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
            extra={"Expires": _iso(datetime.fromtimestamp(min(expires, 253402300799), timezone.utc)), "ServerTime": _iso(now)},
        )
    payload = _payload_check(view)
    access_key = params["AWSAccessKeyId"]
    secret = _lookup(secret_for, access_key)
    # A "+" that reached us as a space was form-decoded somewhere on the way.
    provided = params["Signature"].replace(" ", "+")
    _verify_v2(view, secret, access_key, provided, [expires_text], amz_params, bucket_from_host)
    return Identity(access_key, payload)


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


# --- shared helpers --------------------------------------------------------------------------------


def _lookup(secret_for: SecretLookup, access_key: str) -> str:
    secret = secret_for(access_key)
    if secret is None:
        raise S3Error("InvalidAccessKeyId", extra={"AWSAccessKeyId": access_key})
    return secret


def _check_all_amz_signed(view: RequestView, signed: list[str]) -> None:
    """S3 refuses x-amz-* headers that the signature does not cover: they change what a request does."""
    signed_set = {s.lower() for s in signed}
    unsigned = sorted({n for n, _ in view.headers if n.startswith("x-amz-") and n not in signed_set})
    if unsigned:
        raise S3Error(
            "AccessDenied", "There were headers present in the request which were not signed",
            extra={"HeadersNotSigned": ", ".join(unsigned)},
        )


def _check_skew(request_time: datetime, raw: str, now: datetime, max_skew: timedelta) -> None:
    if abs(now - request_time) > max_skew:
        raise S3Error(
            "RequestTimeTooSkewed",
            extra={
                "RequestTime": raw[:64],
                "ServerTime": _iso(now),
                "MaxAllowedSkewMilliseconds": str(int(max_skew.total_seconds() * 1000)),
            },
        )


def _parse_amz_date(value: str) -> datetime | None:
    if not _AMZ_DATE.fullmatch(value):
        return None
    try:  # fixed positions: strptime is a measurable share of a small GET
        return datetime(int(value[0:4]), int(value[4:6]), int(value[6:8]), int(value[9:11]),
                        int(value[11:13]), int(value[13:15]), tzinfo=timezone.utc)
    except ValueError:
        return None


def _parse_http_date(value: str) -> datetime | None:
    try:
        parsed = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return _utc(parsed)


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


def _iso(value: datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def _wire_bytes(text: str) -> bytes:
    # The server decoded wire bytes as latin-1; a caller handing us real text gets UTF-8.
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape")


def _wire_text(text: str) -> str:
    """Wire bytes read as UTF-8 (what clients sign); bytes that are not UTF-8 survive as surrogates."""
    return _wire_bytes(text).decode("utf-8", "surrogateescape")


def _percent_decode(text: str) -> str:
    """%XX-decode (no "+" as space), keeping undecodable bytes as surrogates so they re-encode exactly."""
    if "%" not in text and text.isascii():
        return text
    return unquote_to_bytes(_wire_bytes(text)).decode("utf-8", "surrogateescape")


def _parse_query(query_string: str) -> list[tuple[str, str]]:
    """Decoded (name, value) pairs in wire order; empty segments ("a=1&&b") are skipped."""
    pairs = []
    for part in query_string.split("&"):
        if part:
            name, _, value = part.partition("=")
            pairs.append((_percent_decode(name), _percent_decode(value)))
    return pairs


def _is_digits(text: str) -> bool:
    return text.isascii() and text.isdigit()
