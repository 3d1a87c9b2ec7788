"""SigV4 primitives shared by request verification (s3api.auth) and the origin client: pure, no gateway imports."""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from urllib.parse import quote

ALGORITHM = "AWS4-HMAC-SHA256"
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
AMZ_DATE_FORMAT = "%Y%m%dT%H%M%SZ"


def uri_encode(value: str, *, keep_slash: bool) -> str:
    """Percent-encode `value` the SigV4 way: unreserved A-Z a-z 0-9 - _ . ~ kept, the rest %XX.

    Lone surrogates are encoded with `surrogateescape`, so a path that was
    percent-decoded with `errors="surrogateescape"` (bytes that are not UTF-8)
    encodes back to its original bytes instead of raising.
    """
    if (_UNRESERVED_OR_SLASH if keep_slash else _UNRESERVED).fullmatch(value):
        return value  # the common case, without quote()'s work
    data = value.encode("utf-8", "surrogateescape")
    # quote() always keeps letters, digits and "_.-~"; '/' only when asked.
    return quote(data, safe="/" if keep_slash else "")


_UNRESERVED = re.compile(r"[A-Za-z0-9_.~-]*")
_UNRESERVED_OR_SLASH = re.compile(r"[A-Za-z0-9_.~/-]*")


def canonical_query_string(pairs: Iterable[tuple[str, str]]) -> str:
    """The SigV4 canonical query string of DECODED (name, value) pairs."""
    encoded = sorted((uri_encode(k, keep_slash=False), uri_encode(v, keep_slash=False)) for k, v in pairs)
    return "&".join(f"{k}={v}" for k, v in encoded)


def trim_header_value(value: str) -> str:
    """Trimall: strip and collapse runs of whitespace to one space (as botocore does)."""
    return " ".join(value.split())


def canonical_headers(items: Iterable[tuple[str, str]], signed: Iterable[str]) -> str:
    """The canonical header block (with its trailing newline) for the `signed` names.

    `items` are (lowercase name, value) in wire order; repeated names are joined
    with "," in that order. A signed name absent from `items` gets an empty value,
    which simply makes the signature fail rather than being an error of its own.
    """
    by_name: dict[str, list[str]] = {}
    for name, value in items:
        by_name.setdefault(name, []).append(trim_header_value(value))
    return "".join(f"{name}:{','.join(by_name.get(name, ()))}\n" for name in signed)


def canonical_request(
    *,
    method: str,
    canonical_uri: str,
    canonical_query: str,
    canonical_header_block: str,
    signed_headers: str,
    payload_hash: str,
) -> str:
    return "\n".join((method, canonical_uri, canonical_query, canonical_header_block, signed_headers, payload_hash))


def string_to_sign(amz_date: str, scope: str, canonical_req: str) -> str:
    # surrogateescape: header values that were not UTF-8 on the wire hash as their original bytes.
    return "\n".join((ALGORITHM, amz_date, scope, sha256_hex(canonical_req.encode("utf-8", "surrogateescape"))))


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def hmac_sha256(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode("utf-8", "surrogateescape"), hashlib.sha256).digest()


@functools.lru_cache(maxsize=1024)
def derive_signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    """kSigning = HMAC(HMAC(HMAC(HMAC("AWS4"+secret, date), region), service), "aws4_request").

    Cached: a key is valid for a whole day and costs four HMACs on every request otherwise.
    """
    key = hmac_sha256(("AWS4" + secret).encode("utf-8"), date)
    key = hmac_sha256(key, region)
    key = hmac_sha256(key, service)
    return hmac_sha256(key, "aws4_request")


def signature_hex(signing_key: bytes, to_sign: str) -> str:
    return hmac.new(signing_key, to_sign.encode("utf-8", "surrogateescape"), hashlib.sha256).hexdigest()


def format_amz_date(now: datetime) -> str:
    # A naive datetime is taken as UTC: signing with local time would be off by the UTC offset.
    if now.tzinfo is not None:
        now = now.astimezone(timezone.utc)
    return now.strftime(AMZ_DATE_FORMAT)


def sign_request_v4(
    *,
    method: str,
    path: str,
    query: list[tuple[str, str]],
    headers: Mapping[str, str],
    payload_hash: str,
    access_key: str,
    secret_key: str,
    region: str,
    now: datetime,
    service: str = "s3",
) -> dict[str, str]:
    """Sign a request; returns the headers to add (authorization, x-amz-date, x-amz-content-sha256).

    `path` and `query` are DECODED; they are encoded once here, the way S3 expects
    (no path normalisation). `headers` has lowercase names and must include "host";
    all of them are signed, plus x-amz-date and x-amz-content-sha256.
    """
    if "host" not in headers:
        raise ValueError("headers must include 'host'")
    amz_date = format_amz_date(now)
    to_sign = {name.lower(): value for name, value in headers.items()}
    to_sign["x-amz-date"] = amz_date
    to_sign["x-amz-content-sha256"] = payload_hash
    names = sorted(to_sign)
    signed_headers = ";".join(names)
    creq = canonical_request(
        method=method.upper(),
        canonical_uri=uri_encode(path, keep_slash=True),
        canonical_query=canonical_query_string(query),
        canonical_header_block=canonical_headers(to_sign.items(), names),
        signed_headers=signed_headers,
        payload_hash=payload_hash,
    )
    scope = f"{amz_date[:8]}/{region}/{service}/aws4_request"
    key = derive_signing_key(secret_key, amz_date[:8], region, service)
    signature = signature_hex(key, string_to_sign(amz_date, scope, creq))
    return {
        "authorization": f"{ALGORITHM} Credential={access_key}/{scope}, SignedHeaders={signed_headers}, Signature={signature}",
        "x-amz-date": amz_date,
        "x-amz-content-sha256": payload_hash,
    }
