"""SigV4 as the SDKs sign a GET or HEAD (the Authorization header) and as they presign one (the
query): only what the signature covers, built once.

An SDK signs each request anew (its own x-amz-date and amz-sdk-invocation-id), so the signature
memo (auth.memo) never answers it, nor s3api.replays by its bytes (by its shape, auth.shaped checks
its signature anew with what this module keeps), and the general check (sigv4) cost ~270,000
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
import importlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import ModuleType

from gateway.s3api.auth.common import _parse_amz_date
from gateway.s3api.auth.model import Identity, PayloadCheck, RequestView, SecretLookup
from gateway.s3api.auth.payload import _HEX64
from gateway.s3api.auth.presigned import MAX_PRESIGN_EXPIRES
from gateway.s3api.auth.sigv4 import SERVICE
from gateway.signing import ALGORITHM, UNSIGNED_PAYLOAD, derive_signing_key

__all__ = ["COMPILED", "IMPLEMENTATION", "fast_identity", "presigned_fast", "sigv4_fast"]


def _implementation() -> ModuleType:
    """The compiled _sigv4check when `pip install` built it, else its pure-Python twin sigv4check:
    the same functions with the same answers (tests/s3api/test_sigv4check_twin.py)."""
    try:
        return importlib.import_module("gateway.s3api.auth._sigv4check")
    except ImportError:
        return importlib.import_module("gateway.s3api.auth.sigv4check")


_check = _implementation()
COMPILED = _check.__name__.endswith("._sigv4check")
IMPLEMENTATION = ("compiled (gateway/s3api/auth/_sigv4check.c)" if COMPILED else
                  "pure Python (auth.sigv4check): _sigv4check.c was not built; `pip install` builds it with gcc, "
                  "python3-dev and libssl-dev there")
_header_parts = _check.header_parts
_canonical_query = _check.canonical_query
_verify = _check.verify


def fast_identity(view: RequestView, secret_for: SecretLookup, now: datetime, max_skew: timedelta) -> Identity | None:
    """The identity of an SDK's GET or HEAD, signed in its headers or presigned, as the general
    check gives it; None when that check must answer."""
    query = view.query_string
    # (Where the SDKs put it, the last parameter, seen without searching the query)
    if query and (query[-80:-64] == "X-Amz-Signature=" or "X-Amz-Signature=" in query):
        return presigned_fast(view, secret_for, now, max_skew)
    return sigv4_fast(view, secret_for, now, max_skew)


_TERMINAL = "aws4_request"
_UNSIGNED = PayloadCheck("unsigned")


@dataclass(slots=True)  # (not frozen: its __init__ a third cheaper, made for each new x-amz-date)
class _Checked:
    """What a request's credential, signed headers and date make, once their checks passed; never
    changed once made, but for `keyed`."""

    time: datetime  # x-amz-date (X-Amz-Date)
    identity: Identity  # what the request answers with
    access_key: str
    date: str
    region: str
    names: tuple[str, ...]  # the signed headers' names, in their order
    keyed: dict[str, object] = field(default_factory=dict)  # _check.keyed() of its signing key, by secret


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


def _signed(signed_text: str) -> tuple[str, ...] | None:
    """SignedHeaders as the general path reads it, when its names are lowercase, each once,
    host among them, and nothing to strip."""
    names = signed_text.split(";")
    if (signed_text != signed_text.strip() or signed_text != signed_text.lower() or "" in names
            or "host" not in names or len(set(names)) != len(names)):
        return None
    return tuple(names)


@functools.lru_cache(maxsize=256)
def _scoped(credential: str, signed_text: str) -> tuple[tuple[str, str, str], tuple[str, ...]] | None:
    """(_scope, _signed) of a Credential and SignedHeaders when both pass: the same for every
    x-amz-date of one key's day (_checked runs once for each)."""
    scope, names = _scope(credential), _signed(signed_text)
    return None if scope is None or names is None else (scope, names)


def _checked(credential: str, signed_text: str, amz_date: str, payload: PayloadCheck,
             valid: tuple[timedelta, timedelta]) -> _Checked | None:
    """The scope, signed headers and date checks of a request; `valid`: its window around its
    date (less, more)."""
    scoped = _scoped(credential, signed_text)
    request_time = _parse_amz_date(amz_date)
    if scoped is None or request_time is None or amz_date[:8] != scoped[0][1]:
        return None
    (access_key, date, region), names = scoped
    identity = Identity(access_key, payload, valid_from=request_time - valid[0], valid_until=request_time + valid[1])
    return _Checked(request_time, identity, access_key, date, region, names)


@functools.lru_cache(maxsize=256)
def _header_signed(credential: str, signed_text: str, amz_date: str, payload_hash: str,
                   max_skew: timedelta) -> _Checked | None:
    """_checked for a header signature: x-amz-content-sha256 UNSIGNED-PAYLOAD or a sha256, the
    window `max_skew` either side of x-amz-date. A function of its arguments alone (Identity is
    immutable): the requests of one second by one key share it."""
    payload = _payload_check(payload_hash)
    if payload is None:
        return None
    return _checked(credential, signed_text, amz_date, payload, (max_skew, max_skew))


@functools.lru_cache(maxsize=64)
def _payload_check(payload_hash: str) -> PayloadCheck | None:
    """What x-amz-content-sha256 asks of a GET or HEAD: UNSIGNED-PAYLOAD, a sha256 (an SDK's over
    http: the empty body's, on every request), else None (immutable: shared)."""
    if payload_hash == UNSIGNED_PAYLOAD:
        return _UNSIGNED
    if _HEX64.fullmatch(payload_hash):
        return PayloadCheck("sha256", expected_sha256=payload_hash.lower())
    return None


@functools.lru_cache(maxsize=256)
def _presigned(credential: str, signed_text: str, amz_date: str, expires: str, max_skew: timedelta) -> _Checked | None:
    """_checked for a presigned URL: X-Amz-Expires digits of at most a week, the window from
    X-Amz-Date less `max_skew` to X-Amz-Date plus X-Amz-Expires."""
    if not expires.isascii() or not expires.isdigit() or len(expires) > 12 or int(expires) > MAX_PRESIGN_EXPIRES:
        return None
    return _checked(credential, signed_text, amz_date, _UNSIGNED, (max_skew, timedelta(seconds=int(expires))))


def _keyed(secret: str, amz_date: str, checked: _Checked) -> object:
    """HMAC-SHA256 with the signing key of (secret, date, region, s3) and the string to sign's
    first part (x-amz-date and the scope) taken in, made by the check in use (its keyed()): kept
    with `checked`, which the requests of one second by one key share (an access key has one
    secret, two while it is rotated)."""
    keyed = checked.keyed.get(secret)
    if keyed is None:
        keyed = checked.keyed[secret] = _check.keyed(
            derive_signing_key(secret, checked.date, checked.region, SERVICE),
            f"{ALGORITHM}\n{amz_date}\n{checked.date}/{checked.region}/{SERVICE}/{_TERMINAL}\n")
    return keyed


# long: every SDK-signed hit runs it; one frame of straight-line checks, each a call less (instructions counted)
def sigv4_fast(view: RequestView, secret_for: SecretLookup, now: datetime, max_skew: timedelta) -> Identity | None:
    """The identity the general check (dispatch._authenticate) gives this GET or HEAD, or None:
    not of the usual shape, or some check failed; the general path answers it then.

    The checks, each as sigv4 makes it: one mechanism (one Authorization header, no signing
    parameter in the query); Credential, SignedHeaders and Signature once each; the scope's
    date, service s3 and terminal; host signed; x-amz-date valid, the scope's date its own, the
    clock within `max_skew` of it; x-amz-content-sha256 present and UNSIGNED-PAYLOAD or a
    sha256; the access key known; every x-amz-* header signed (_check.verify); the signature of
    the canonical request matched in constant time (_check.verify).
    """
    method = view.method
    if method != "GET" and method != "HEAD" or "Signature=" in view.query_string:
        return None  # presigned (SigV4 or SigV2) most likely: left before it costs
    parts = _header_parts(view.headers)
    if parts is None:
        return None
    credential, signed_text, provided, amz_date, payload_hash = parts
    if credential is None or amz_date is None or payload_hash is None:
        return None
    checked = _header_signed(credential, signed_text, amz_date, payload_hash, max_skew)
    if checked is None or abs(now - checked.time) > max_skew:
        return None
    query = view.query_string
    if query:
        canonical = _canonical_query(query)
        if canonical is None or canonical[1]:
            return None  # a signing parameter in the query (or one twice): the general path refuses it
        query = canonical[0]
    secret = secret_for(checked.access_key)
    if secret is None:
        return None
    keyed = _keyed(secret, amz_date, checked)
    if _verify(method, view.raw_path, query, view.headers, checked.names, signed_text, payload_hash, keyed, provided):
        return checked.identity
    return None


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
    if method != "GET" and method != "HEAD":
        return None
    parts = _header_parts(view.headers)
    if parts is None or parts[0] is not None or parts[4] is not None:
        return None  # an Authorization header, or x-amz-content-sha256
    canonical = _canonical_query(view.query_string)
    if canonical is None or canonical[1] is None:
        return None
    query = canonical[0]
    algorithm, credential, amz_date, expires, signed_text, provided, v2_key, v2_signature = canonical[1]
    if (algorithm != ALGORITHM or credential is None or amz_date is None or expires is None or signed_text is None
            or provided is None or v2_key is not None or v2_signature is not None):
        return None  # one missing, or a SigV2 one too
    checked = _presigned(credential, signed_text, amz_date, expires, max_skew)
    if checked is None:
        return None
    assert checked.identity.valid_until is not None
    if checked.time - now > max_skew or now > checked.identity.valid_until:
        return None
    secret = secret_for(checked.access_key)
    if secret is None:
        return None
    keyed = _keyed(secret, amz_date, checked)
    if _verify(method, view.raw_path, query, view.headers, checked.names, signed_text, UNSIGNED_PAYLOAD, keyed,
               provided):
        return checked.identity
    return None
