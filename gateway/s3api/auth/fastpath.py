"""SigV4 as the SDKs sign a GET or HEAD (the Authorization header) and as they presign one (the
query): only what the signature covers, built once.

An SDK signs each request anew (its own x-amz-date and amz-sdk-invocation-id), so neither memo
(auth.memo, s3api.replays) ever answers it, and the general check (sigv4) cost ~270,000
instructions for one, most of it in the code around the cryptography (bench/auth_instructions.py).

`sigv4_fast` answers only with an identity the general check would give for the same request:
it takes a request of the usual shape (one Authorization header in the exact form the SDKs
write, a lowercase hex signature, every header once, ASCII values, x-amz-date, a known payload
hash, no mechanism in the query), makes each check the general path makes, and builds the
canonical request once from the raw values. Whatever it does not recognise and every check
that fails (a signature that does not match too) it leaves to the general path (None), which
then gives its own answer, its error included: the two never disagree by construction, and
tests/s3api/test_auth_fastpath.py checks it on requests botocore signs, mutated.

`presigned_fast` does the same for a presigned URL of the usual shape (the six X-Amz-*
parameters once each, no header signature, no x-amz-content-sha256): a web page's images, a
notebook's `generate_presigned_url` per file, each URL its own (tests/s3api/test_auth_presigned_fast.py).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from operator import itemgetter

from gateway.s3api.auth.common import _percent_decode, _parse_amz_date, _parse_query
from gateway.s3api.auth.model import Identity, PayloadCheck, RequestView, SecretLookup
from gateway.s3api.auth.payload import _HEX64
from gateway.s3api.auth.presigned import MAX_PRESIGN_EXPIRES
from gateway.s3api.auth.sigv4 import SERVICE, _canonical_uris
from gateway.signing import ALGORITHM, UNSIGNED_PAYLOAD, canonical_query_string, derive_signing_key, uri_encode

__all__ = ["fast_identity", "presigned_fast", "sigv4_fast"]


def fast_identity(view: RequestView, secret_for: SecretLookup, now: datetime, max_skew: timedelta) -> Identity | None:
    """The identity of an SDK's GET or HEAD, signed in its headers or presigned, as the general
    check gives it; None when that check must answer."""
    if "X-Amz-Signature=" in view.query_string:
        return presigned_fast(view, secret_for, now, max_skew)
    return sigv4_fast(view, secret_for, now, max_skew)

_PREFIX = ALGORITHM + " Credential="
_SIGNED_HEADERS = ", SignedHeaders="
_SIGNATURE = ", Signature="
_TERMINAL = "aws4_request"
# Query parameters that name a signing mechanism: with one, the general path refuses the request.
_MECHANISM_PARAMS = frozenset(("X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Signature", "AWSAccessKeyId", "Signature"))
# A path that signing.uri_encode keeps as it is: the one canonical URI the general path tries.
_PLAIN_PATH = re.compile(r"/[A-Za-z0-9_.~/-]*")
_UNSIGNED = PayloadCheck("unsigned")
_SHA256 = hashlib.sha256()


@functools.lru_cache(maxsize=256)
def _scope(credential: str) -> tuple[str, str, str] | None:
    """(access key, date, region) of a Credential as sigv4._parse_credential reads it, when it
    has nothing to strip and no "/" in its key (its rsplit("/", 4)); else None."""
    parts = credential.split("/")
    if len(parts) != 5 or credential != credential.strip():
        return None
    access_key, date, region, service, terminal = parts
    if (service != SERVICE or terminal != _TERMINAL or not access_key or not region
            or len(date) != 8 or not date.isascii() or not date.isdigit()):
        return None
    return access_key, date, region


@dataclass(frozen=True, slots=True)
class _Signed:
    """What a SignedHeaders list makes of a request's headers."""

    values: Callable[[dict[str, str]], tuple[str, ...]]  # the names' values in their order (KeyError: one absent)
    block: str  # "name:%s\n" for each name: with the values, the canonical header block
    amz: int  # how many of the names start with x-amz-


@functools.lru_cache(maxsize=256)
def _signed(signed_text: str) -> _Signed | None:
    """SignedHeaders as the general path reads it, when its names are lowercase, each once,
    host among them, and nothing to strip."""
    names = signed_text.split(";")
    if (signed_text != signed_text.strip() or signed_text != signed_text.lower() or "" in names
            or "host" not in names or len(set(names)) != len(names)):
        return None
    values = itemgetter(*names) if len(names) > 1 else _only(names[0])  # (itemgetter of one name: no tuple)
    return _Signed(values, "".join(f"{name.replace('%', '%%')}:%s\n" for name in names),
                   sum(name.startswith("x-amz-") for name in names))


def _only(name: str) -> Callable[[dict[str, str]], tuple[str, ...]]:
    return lambda headers: (headers[name],)


@functools.lru_cache(maxsize=256)
def _dated(amz_date: str, access_key: str, payload_hash: str, max_skew: timedelta) -> tuple[datetime, Identity] | None:
    """The time of x-amz-date and the identity a request of it answers with, once its checks
    pass; None if x-amz-date is not valid, or x-amz-content-sha256 is not UNSIGNED-PAYLOAD or a
    sha256. A function of its arguments alone (Identity is immutable): the requests of one
    second by one key share it, and an Identity costs as much as the rest of this module."""
    request_time = _parse_amz_date(amz_date)
    if request_time is None:
        return None
    if payload_hash == UNSIGNED_PAYLOAD:
        payload = _UNSIGNED
    elif _HEX64.fullmatch(payload_hash):
        payload = PayloadCheck("sha256", expected_sha256=payload_hash.lower())
    else:
        return None
    return request_time, Identity(access_key, payload, valid_from=request_time - max_skew,
                                  valid_until=request_time + max_skew)


@functools.lru_cache(maxsize=1024)
def _keyed(secret: str, date: str, region: str) -> tuple[hashlib._Hash, hashlib._Hash]:
    """HMAC-SHA256 with the signing key of (secret, date, region, s3), as its two hashes with
    the padded key already taken in (RFC 2104): only ever copied, never updated themselves.
    Cached as signing.derive_signing_key is: a key serves a whole day."""
    key = derive_signing_key(secret, date, region, SERVICE).ljust(64, b"\0")
    inner, outer = _SHA256.copy(), _SHA256.copy()
    inner.update(bytes(b ^ 0x36 for b in key))
    outer.update(bytes(b ^ 0x5C for b in key))
    return inner, outer


# long: every SDK-signed hit runs it; one frame of straight-line checks, each a call less (instructions counted)
def sigv4_fast(view: RequestView, secret_for: SecretLookup, now: datetime, max_skew: timedelta) -> Identity | None:
    """The identity the general check (dispatch._authenticate) gives this GET or HEAD, or None:
    not of the usual shape, or some check failed; the general path answers it then.

    The checks, each as sigv4 makes it: one mechanism (one Authorization header, no signing
    parameter in the query); Credential, SignedHeaders and Signature once each; the scope's
    date, service s3 and terminal; host signed; x-amz-date valid, the scope's date its own, the
    clock within `max_skew` of it; x-amz-content-sha256 present and UNSIGNED-PAYLOAD or a
    sha256; the access key known; every x-amz-* header signed; the signature of the canonical
    request matched in constant time.
    """
    method = view.method
    if method != "GET" and method != "HEAD" or "Signature=" in view.query_string:
        return None  # presigned (SigV4 or SigV2) most likely: left before it costs
    headers = dict(view.headers)
    if len(headers) != len(view.headers):
        return None  # a repeated header: joined with "," by the general path
    authorization = headers.get("authorization")
    # "AWS4-HMAC-SHA256 Credential=K/D/R/s3/aws4_request, SignedHeaders=a;b, Signature=hex", as
    # every SDK writes it: two commas, so the general path's split(",") finds the same three parts.
    if authorization is None or not authorization.startswith(_PREFIX) or authorization.count(",") != 2:
        return None
    credential, found, rest = authorization[len(_PREFIX):].partition(_SIGNED_HEADERS)
    signed_text, found_too, provided = rest.partition(_SIGNATURE)
    # The signature is compared as given: it matches only as lowercase hex, which the general
    # path's strip() and lower() leave as it is.
    if not found or not found_too or len(provided) != 64 or not provided.isascii():
        return None
    scope = _scope(credential)
    signed = _signed(signed_text)
    if scope is None or signed is None:
        return None
    access_key, date, region = scope
    amz_date = headers.get("x-amz-date")
    payload_hash = headers.get("x-amz-content-sha256")
    if amz_date is None or payload_hash is None or amz_date[:8] != date:
        return None
    dated = _dated(amz_date, access_key, payload_hash, max_skew)
    if dated is None:
        return None
    request_time, identity = dated
    if abs(now - request_time) > max_skew:
        return None
    if view.query_string:
        pairs = _parse_query(view.query_string)
        if any(name in _MECHANISM_PARAMS for name, _ in pairs):
            return None
        canonical_query = canonical_query_string(pairs)
    else:
        canonical_query = ""
    secret = secret_for(access_key)
    if secret is None:
        return None
    # Every x-amz-* header signed: the signed ones are all present (below), so as many names
    # that start with it (or more: a name with "\nx-amz-" inside) as signed means no other.
    if ("\n" + "\n".join(headers)).count("\nx-amz-") != signed.amz:
        return None
    header_block = _header_block(signed, headers)
    if header_block is None:
        return None
    signing = (secret, date, region, amz_date)
    return identity if _signed_so(view, canonical_query, header_block, signed_text, payload_hash, signing, provided) else None


def _header_block(signed: _Signed, headers: dict[str, str]) -> str | None:
    """The canonical header block of the signed headers, as the general path builds it; None
    when a signed header is absent (the general path signs it as empty) or a value is not ASCII
    (the general path reads it as UTF-8: _wire_text)."""
    try:
        values: tuple[str, ...] = signed.values(headers)
    except KeyError:
        return None
    joined = " ".join(values)
    if not joined.isascii():
        return None
    if not joined.isprintable() or "  " in joined or joined[:1] == " " or joined[-1:] == " ":
        # Some value to trim (canonical_headers): printable ASCII without two spaces in a row
        # nor one at either end (seen next to the joining space) is what trimming leaves as it is.
        values = tuple(" ".join(value.split()) for value in values)
    return signed.block % values


def _signed_so(view: RequestView, canonical_query: str, header_block: str, signed_text: str, payload_hash: str,
               signing: tuple[str, str, str, str], provided: str) -> bool:
    """Whether `provided` is the signature of the request's canonical form (each canonical URI
    the general path tries), with the signing key of signing = (secret, date, region, amz_date);
    compared in constant time."""
    secret, date, region, amz_date = signing
    raw_path = view.raw_path
    canonical_uris = (raw_path,) if _PLAIN_PATH.fullmatch(raw_path) else _canonical_uris(raw_path)
    inner, outer = _keyed(secret, date, region)
    prefix = f"{ALGORITHM}\n{amz_date}\n{date}/{region}/{SERVICE}/{_TERMINAL}\n"
    for canonical_uri in canonical_uris:
        request = _SHA256.copy()
        request.update(f"{view.method}\n{canonical_uri}\n{canonical_query}\n{header_block}\n{signed_text}\n"
                       f"{payload_hash}".encode("utf-8", "surrogateescape"))
        mac = inner.copy()
        mac.update(f"{prefix}{request.hexdigest()}".encode("utf-8", "surrogateescape"))
        signature = outer.copy()
        signature.update(mac.digest())
        if hmac.compare_digest(signature.hexdigest(), provided):
            return True
    return False


_PRESIGN_PARAMS = frozenset(("X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires",
                             "X-Amz-SignedHeaders", "X-Amz-Signature"))
_V2_PARAMS = frozenset(("AWSAccessKeyId", "Signature"))


# Query names and values (the same ones come again and again) as _parse_query decodes them and
# canonical_query_string encodes them, remembered up to 128 characters: made-up long ones cannot fill memory.
_REMEMBERED = 128
_decode = functools.lru_cache(maxsize=4096)(_percent_decode)
_encode = functools.lru_cache(maxsize=4096)(functools.partial(uri_encode, keep_slash=False))


@functools.lru_cache(maxsize=256)
def _window(amz_date: str, access_key: str, expires: str, max_skew: timedelta) -> tuple[datetime, Identity] | None:
    """The time of X-Amz-Date and the identity a presigned URL of it answers with, when X-Amz-Date
    is valid and X-Amz-Expires digits of at most a week; else None (as _dated, for presigned URLs)."""
    request_time = _parse_amz_date(amz_date)
    if request_time is None or not expires.isascii() or not expires.isdigit() or len(expires) > 12:
        return None
    seconds = int(expires)
    if seconds > MAX_PRESIGN_EXPIRES:
        return None
    return request_time, Identity(access_key, _UNSIGNED, valid_from=request_time - max_skew,
                                  valid_until=request_time + timedelta(seconds=seconds))


# long: every presigned hit runs it; one frame of straight-line checks, as sigv4_fast
def presigned_fast(view: RequestView, secret_for: SecretLookup, now: datetime, max_skew: timedelta) -> Identity | None:
    """The identity the general check (presigned._sigv4_query) gives this presigned GET or HEAD,
    or None: not of the usual shape, or some check failed; the general path answers it then.

    The checks, each as the general path makes it: one mechanism (no Authorization header, no
    SigV2 parameter); the six X-Amz-* parameters once each, the algorithm AWS4-HMAC-SHA256;
    the Credential's scope; X-Amz-Date valid and the scope's date its own; X-Amz-Expires at most
    a week; host signed; the clock within the URL's window (from X-Amz-Date less `max_skew` to
    X-Amz-Date plus X-Amz-Expires); the access key known; every x-amz-* header signed; the
    signature of the canonical request (payload UNSIGNED-PAYLOAD) matched in constant time.
    A request with x-amz-content-sha256 is left to the general path (its identity differs).
    """
    method = view.method
    if method != "GET" and method != "HEAD" or "X-Amz-Signature=" not in view.query_string:
        return None
    headers = dict(view.headers)
    if len(headers) != len(view.headers) or "authorization" in headers or "x-amz-content-sha256" in headers:
        return None
    params: dict[str, str] = {}
    pairs: list[tuple[str, str]] = []
    for part in view.query_string.split("&"):
        if not part:
            continue
        raw_name, _, raw_value = part.partition("=")
        # (_decoded and _encoded, written out: a call less for each of a dozen names and values)
        name = _decode(raw_name) if len(raw_name) <= _REMEMBERED else _percent_decode(raw_name)
        value = _decode(raw_value) if len(raw_value) <= _REMEMBERED else _percent_decode(raw_value)
        if name in _PRESIGN_PARAMS:
            if name in params:
                return None
            params[name] = value
            if name == "X-Amz-Signature":
                continue
        elif name in _V2_PARAMS:
            return None
        pairs.append((_encode(name) if len(name) <= _REMEMBERED else uri_encode(name, keep_slash=False),
                      _encode(value) if len(value) <= _REMEMBERED else uri_encode(value, keep_slash=False)))
    if len(params) != len(_PRESIGN_PARAMS) or params["X-Amz-Algorithm"] != ALGORITHM:
        return None
    provided = params["X-Amz-Signature"]
    scope = _scope(params["X-Amz-Credential"])
    signed_text = params["X-Amz-SignedHeaders"]
    signed = _signed(signed_text)
    if len(provided) != 64 or not provided.isascii() or scope is None or signed is None:
        return None
    access_key, date, region = scope
    amz_date = params["X-Amz-Date"]
    window = _window(amz_date, access_key, params["X-Amz-Expires"], max_skew) if amz_date[:8] == date else None
    if window is None:
        return None
    request_time, identity = window
    assert identity.valid_until is not None
    if request_time - now > max_skew or now > identity.valid_until:
        return None
    secret = secret_for(access_key)
    if secret is None:
        return None
    if ("\n" + "\n".join(headers)).count("\nx-amz-") != signed.amz:
        return None  # an x-amz-* header not signed (see sigv4_fast)
    header_block = _header_block(signed, headers)
    if header_block is None:
        return None
    pairs.sort()
    canonical_query = "&".join(f"{name}={value}" for name, value in pairs)
    signing = (secret, date, region, amz_date)
    return identity if _signed_so(view, canonical_query, header_block, signed_text, UNSIGNED_PAYLOAD, signing,
                                  provided) else None
