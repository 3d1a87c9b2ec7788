"""SigV4 in the Authorization header, and what presigned URLs share with it: credential scope, signed headers, the signature check."""

from __future__ import annotations

import hmac
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from gateway.errors import S3Error
from gateway.s3api.auth.common import (
    MSG_NEED_DATE,
    _check_skew,
    _lookup,
    _parse_amz_date,
    _parse_http_date,
    _percent_decode,
    _wire_text,
)
from gateway.s3api.auth.memo import VerifiedSignatures
from gateway.s3api.auth.model import Identity, RequestView, SecretLookup
from gateway.s3api.auth.payload import _payload_from_mode, _payload_mode
from gateway.signing import (
    canonical_headers,
    canonical_query_string,
    canonical_request,
    derive_signing_key,
    signature_hex,
    string_to_sign,
    uri_encode,
)

SERVICE = "s3"
_DATE8 = re.compile(r"\d{8}")
_MSG_CREDENTIAL = 'the Credential is mal-formed; expecting "<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/aws4_request".'


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
    verified: VerifiedSignatures | None = None,
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

    key, signature = _verified_v4(view, secret_for, cred, amz_date, signed, query, [content_sha256], signature,
                                  verified)
    return Identity(cred.access_key, _payload_from_mode(mode, content_sha256, key, amz_date, cred.scope, signature),
                    valid_from=request_time - max_skew, valid_until=request_time + max_skew)


def _verified_v4(
    view: RequestView,
    secret_for: SecretLookup,
    cred: _Credential,
    amz_date: str,
    signed: list[str],
    query_pairs: list[tuple[str, str]],
    payload_hashes: list[str],
    provided: str,
    verified: VerifiedSignatures | None = None,
) -> tuple[bytes, str]:
    """The key's secret looked up, every x-amz-* header signed, the signature matched:
    returns the signing key and the signature (lowercase), which seed aws-chunked bodies.
    `verified`: the checks that passed lately, by every input (see auth.memo)."""
    secret = _lookup(secret_for, cred.access_key)
    lowered = [s.lower() for s in signed]
    names = set(lowered)
    _check_all_amz_signed(view, names)
    signed_headers = tuple(h for h in view.headers if h[0] in names)
    memo_key = None
    if verified is not None:
        memo_key = (secret, view.method, view.raw_path, tuple(query_pairs), amz_date, cred.scope, tuple(signed),
                    tuple(payload_hashes), provided, signed_headers)
        found = verified.get(memo_key)
        if found is not None:
            return found
    key = derive_signing_key(secret, cred.date, cred.region, cred.service)
    result = key, _verify_v4(view, key, amz_date, cred, signed, lowered, signed_headers, query_pairs, payload_hashes,
                             provided)
    if verified is not None:
        verified.put(memo_key, result)
    return result


def _verify_v4(
    view: RequestView,
    key: bytes,
    amz_date: str,
    cred: _Credential,
    signed: list[str],
    lowered: list[str],
    signed_headers: tuple[tuple[str, str], ...],
    query_pairs: list[tuple[str, str]],
    payload_hashes: list[str],
    provided: str,
) -> str:
    """Check `provided` against every acceptable canonical form; returns it (lowercase) on a match.
    `lowered`: the signed names in lowercase, in their order; `signed_headers`: the headers of
    the request they name, in wire order."""
    header_block = canonical_headers(((n, _wire_text(v)) for n, v in signed_headers), lowered)
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
            raise S3Error("AccessDenied", MSG_NEED_DATE)
        return amz_date, parsed
    date = view.header("date")
    if date is not None:
        parsed = _parse_amz_date(date) or _parse_http_date(date)
        if parsed is not None:
            return parsed.strftime("%Y%m%dT%H%M%SZ"), parsed
    raise S3Error("AccessDenied", MSG_NEED_DATE)


def _check_all_amz_signed(view: RequestView, signed: set[str]) -> None:
    """S3 refuses x-amz-* headers that the signature does not cover (`signed`: lowercase names):
    they change what a request does."""
    unsigned = sorted({n for n, _ in view.headers if n.startswith("x-amz-") and n not in signed})
    if unsigned:
        raise S3Error(
            "AccessDenied", "There were headers present in the request which were not signed",
            extra={"HeadersNotSigned": ", ".join(unsigned)},
        )
