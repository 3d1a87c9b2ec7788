"""SigV4 presigned URLs (query-string authentication): the X-Amz-* parameters, the validity window, the signature."""

from __future__ import annotations

from datetime import datetime, timedelta

from gateway.errors import S3Error
from gateway.s3api.auth.common import _is_digits, _iso, _parse_amz_date
from gateway.s3api.auth.memo import VerifiedSignatures
from gateway.s3api.auth.model import Identity, PayloadCheck, RequestView, SecretLookup
from gateway.s3api.auth.payload import _payload_from_mode, _payload_mode
from gateway.s3api.auth.sigv4 import _parse_credential, _parse_signed_headers, _verified_v4
from gateway.signing import ALGORITHM, UNSIGNED_PAYLOAD

MAX_PRESIGN_EXPIRES = 604800  # one week, S3's limit for SigV4 presigned URLs

_V4_QUERY_PARAMS = ("X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires", "X-Amz-SignedHeaders", "X-Amz-Signature")


def _bad(detail: str) -> S3Error:
    return S3Error("AuthorizationQueryParametersError", detail)


def _sigv4_query(
    view: RequestView, query: list[tuple[str, str]], secret_for: SecretLookup, now: datetime, max_skew: timedelta,
    verified: VerifiedSignatures | None = None,
) -> Identity:
    params = _presign_params(query)
    cred = _parse_credential(params["X-Amz-Credential"], lambda d: _bad(f"Error parsing the X-Amz-Credential parameter; {d}"))
    amz_date = params["X-Amz-Date"]
    request_time = _parse_amz_date(amz_date)
    if request_time is None:
        raise _bad("X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\"")
    if cred.date != amz_date[:8]:
        raise _bad(
            f'Error parsing the X-Amz-Credential parameter; Invalid credential date "{cred.date}". '
            f'This date is not the same as X-Amz-Date: "{amz_date[:8]}".'
        )
    expires = _presign_expires(params["X-Amz-Expires"])
    signed = _parse_signed_headers(params["X-Amz-SignedHeaders"])
    if signed is None or "host" not in signed:
        raise _bad("X-Amz-SignedHeaders must include host.")
    if not params["X-Amz-Signature"]:
        raise _bad("X-Amz-Signature must not be empty.")

    # The clock checks come before the key lookup: an expired URL says nothing about the key.
    _check_window(request_time, amz_date, expires, params["X-Amz-Expires"], now, max_skew)

    pairs = [(n, v) for n, v in query if n != "X-Amz-Signature"]
    content_sha256 = view.header("x-amz-content-sha256")
    # Presigned URLs sign UNSIGNED-PAYLOAD; botocore puts an explicit x-amz-content-sha256 header there instead.
    payload_hashes = [UNSIGNED_PAYLOAD] if content_sha256 is None else [UNSIGNED_PAYLOAD, content_sha256]
    key, signature = _verified_v4(view, secret_for, cred, amz_date, signed, pairs, payload_hashes,
                                  params["X-Amz-Signature"], verified)
    valid = {"valid_from": request_time - max_skew, "valid_until": request_time + timedelta(seconds=expires)}
    if content_sha256 is None:
        return Identity(cred.access_key, PayloadCheck("unsigned"), **valid)
    mode = _payload_mode(content_sha256)
    return Identity(cred.access_key, _payload_from_mode(mode, content_sha256, key, amz_date, cred.scope, signature),
                    **valid)


def _presign_params(query: list[tuple[str, str]]) -> dict[str, str]:
    """The six X-Amz-* parameters, each exactly once, with S3's algorithm."""
    params: dict[str, str] = {}
    for name, value in query:
        if name in _V4_QUERY_PARAMS:
            if name in params:
                raise _bad(f"{name} must be specified only once.")
            params[name] = value
    if len(params) != len(_V4_QUERY_PARAMS):
        raise _bad(
            "Query-string authentication version 4 requires the X-Amz-Algorithm, X-Amz-Credential, "
            "X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and X-Amz-Expires parameters."
        )
    if params["X-Amz-Algorithm"] != ALGORITHM:
        raise _bad(f'X-Amz-Algorithm only supports "{ALGORITHM}"')
    return params


def _presign_expires(expires_text: str) -> int:
    """X-Amz-Expires in seconds: digits only, at most a week."""
    if not _is_digits(expires_text):
        if expires_text.startswith("-") and _is_digits(expires_text[1:]):
            raise _bad("X-Amz-Expires must be non-negative")
        raise _bad("X-Amz-Expires should be a number")
    # Length first: int() of thousands of digits raises rather than answering.
    expires = int(expires_text) if len(expires_text) <= 12 else MAX_PRESIGN_EXPIRES + 1
    if expires > MAX_PRESIGN_EXPIRES:
        raise _bad(f"X-Amz-Expires must be less than a week (in seconds) that is; {MAX_PRESIGN_EXPIRES}")
    return expires


def _check_window(
    request_time: datetime, amz_date: str, expires: int, expires_text: str, now: datetime, max_skew: timedelta
) -> None:
    """A presigned URL is valid from its X-Amz-Date (less the allowed skew) for X-Amz-Expires seconds."""
    if request_time - now > max_skew:
        raise S3Error("AccessDenied", "Request is not valid yet", extra={"X-Amz-Date": amz_date, "ServerTime": _iso(now)})
    expiry = request_time + timedelta(seconds=expires)
    if now > expiry:
        raise S3Error(
            "AccessDenied", "Request has expired",
            extra={"X-Amz-Expires": expires_text, "Expires": _iso(expiry), "ServerTime": _iso(now)},
        )
