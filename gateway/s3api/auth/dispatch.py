"""Which mechanism signed a request (SigV4 header or presigned, SigV2 header or query, none), and its check."""

from __future__ import annotations

from datetime import datetime, timedelta

from gateway.errors import S3Error
from gateway.s3api.auth.common import _parse_query, _utc
from gateway.s3api.auth.fastpath import fast_identity
from gateway.s3api.auth.memo import KNOWN_REQUEST_MAX, SDK_INVOCATION_ID, VerifiedSignatures, kept_size
from gateway.s3api.auth.model import Identity, RequestView, SecretLookup
from gateway.s3api.auth.payload import _payload_check
from gateway.s3api.auth.presigned import _sigv4_query
from gateway.s3api.auth.sigv2 import _sigv2_header, _sigv2_query
from gateway.s3api.auth.sigv4 import _sigv4_header
from gateway.signing import ALGORITHM

_MSG_ONE_MECHANISM = (
    "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, Signature query string "
    "parameter or the Authorization header should be specified"
)


def authenticate(
    view: RequestView,
    secret_for: SecretLookup,
    *,
    now: datetime,
    max_skew: timedelta = timedelta(minutes=15),
    bucket_from_host: str | None = None,
    verified: VerifiedSignatures | None = None,
) -> Identity:
    """Check the request's credentials; returns who signed it and how to verify its body.

    `bucket_from_host` is the bucket of a virtual-hosted-style request: SigV2
    signs "/bucket/key" even when the path on the wire is "/key". `verified`: checks that
    passed lately, which a request sent again byte for byte reuses (auth.memo): a GET or
    HEAD's whole (kept the second time it comes), the SigV4 signature of any other; not used
    for a request an SDK marked as its own (SDK_INVOCATION_ID).
    """
    now = _utc(now)
    if verified is not None:
        for name, _ in view.headers:
            if name == SDK_INVOCATION_ID:
                verified = None  # never sent again byte for byte: a memo of it would cost and never serve
                break
    if verified is None or (view.method != "GET" and view.method != "HEAD"):
        # The usual SDK GET or HEAD first, signed or presigned (auth.fastpath): answered as
        # _authenticate would answer it, or left to it.
        identity = fast_identity(view, secret_for, now, max_skew)
        return identity if identity is not None else _authenticate(view, secret_for, now, max_skew,
                                                                    bucket_from_host, verified)
    request = (view.method, view.raw_path, view.query_string, view.headers, bucket_from_host, max_skew)
    kept = verified.kept(request)
    if kept is not None:
        known = verified.valid(kept, secret_for, now)
        if known is not None:
            return known
    identity = fast_identity(view, secret_for, now, max_skew)
    if identity is None:
        identity = _authenticate(view, secret_for, now, max_skew, bucket_from_host, verified)
    # Kept whole from the second time its query comes (memo.again): a presigned URL used once is not.
    if identity.access_key is not None and verified.again(view.query_string) and _size(view) <= KNOWN_REQUEST_MAX:
        checked_with = secret_for(identity.access_key)
        if checked_with is not None:
            verified.know(request, identity, checked_with)
    return identity


def _size(view: RequestView) -> int:
    characters = len(view.raw_path) + len(view.query_string) + sum(len(n) + len(v) for n, v in view.headers)
    return kept_size(characters, len(view.headers))


def _authenticate(view: RequestView, secret_for: SecretLookup, now: datetime, max_skew: timedelta,
                  bucket_from_host: str | None, verified: VerifiedSignatures | None) -> Identity:
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
            return _sigv4_header(view, rest, query, secret_for, now, max_skew, verified)
        if scheme == "AWS":
            return _sigv2_header(view, rest, secret_for, now, max_skew, bucket_from_host)
        raise S3Error(
            "InvalidArgument", "Unsupported Authorization Type",
            # Only the scheme is echoed: the rest of the header is credential material.
            extra={"ArgumentName": "Authorization", "ArgumentValue": scheme[:32]},
        )
    if v4_query:
        return _sigv4_query(view, query, secret_for, now, max_skew, verified)
    if v2_query:
        return _sigv2_query(view, query, secret_for, now, bucket_from_host)
    return Identity(None, _payload_check(view))
