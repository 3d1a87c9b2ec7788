"""The SigV4 fast path's pure work in Python: the twin of the compiled _sigv4check.c, answer for answer.

auth.fastpath uses the compiled module when it was built (`pip install` with a C compiler and
Python's headers) and this one otherwise; tests/s3api/test_sigv4check_twin.py gives both the
same requests and compares what they build, byte for byte. Each function answers None for a
request outside the shapes built here (a character above U+00FF in the path or query, a header
name or signed value that is not ASCII, a header twice, a signed header absent, an x-amz-*
header not signed): auth.fastpath then leaves it to the general path. The checks of scopes,
dates, keys and windows are auth.fastpath's. `shape` and `signs` are auth.shaped's (a request head
cut around what changes between two sends of it; a canonical request's signature compared), held
to the compiled ones by tests/s3api/test_auth_shaped.py.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
from collections.abc import Callable
from dataclasses import dataclass
from operator import itemgetter
from typing import cast

from gateway.s3api.auth.common import _percent_decode
from gateway.s3api.auth.sigv4 import _canonical_uris
from gateway.signing import ALGORITHM, uri_encode

__all__ = ["AUTH_PARAMS", "AuthValues", "canonical", "canonical_query", "header_parts", "keyed", "shape", "signs", "verify"]

Keyed = tuple["hashlib._Hash", "hashlib._Hash", str]  # inner, outer, the string to sign's first part
Parts = tuple["str | None", "str | None", "str | None", "str | None", "str | None"]

_PREFIX = ALGORITHM + " Credential="
_SIGNED_HEADERS = ", SignedHeaders="
_SIGNATURE = ", Signature="
# The query parameters that name a signing mechanism or a presigned URL's parts: canonical_query's
# values are theirs, in this order.
AUTH_PARAMS = ("X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires", "X-Amz-SignedHeaders",
               "X-Amz-Signature", "AWSAccessKeyId", "Signature")
AuthValues = tuple["str | None", "str | None", "str | None", "str | None", "str | None", "str | None", "str | None",
                   "str | None"]
_AUTH_INDEX = {name: index for index, name in enumerate(AUTH_PARAMS)}
_NONE = (None,) * len(AUTH_PARAMS)
_SHA256 = hashlib.sha256()
# A path that signing.uri_encode keeps as it is: the one canonical URI the general path tries.
_PLAIN_PATH = re.compile(r"/[A-Za-z0-9_.~/-]*")
# Query names and values (the same ones come again and again) as they decode and encode, remembered
# up to 128 characters: made-up long ones cannot fill memory.
_REMEMBERED = 128
_decode = functools.lru_cache(maxsize=4096)(_percent_decode)
_encode = functools.lru_cache(maxsize=4096)(functools.partial(uri_encode, keep_slash=False))


def header_parts(headers: tuple[tuple[str, str], ...]) -> Parts | None:
    """(Credential, SignedHeaders, Signature, x-amz-date, x-amz-content-sha256) of the request,
    each None when absent (the last of a name counts); None when the Authorization header is not
    "AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=<64 characters>" as every SDK
    writes it, in ASCII, with those two commas only."""
    by_name = dict(headers)
    authorization = by_name.get("authorization")
    amz_date, payload_hash = by_name.get("x-amz-date"), by_name.get("x-amz-content-sha256")
    if authorization is None:
        return None, None, None, amz_date, payload_hash
    if not authorization.isascii() or not authorization.startswith(_PREFIX) or authorization.count(",") != 2:
        return None
    credential, found, rest = authorization[len(_PREFIX):].partition(_SIGNED_HEADERS)
    signed_text, found_too, provided = rest.partition(_SIGNATURE)
    if not found or not found_too or len(provided) != 64:
        return None
    return credential, signed_text, provided, amz_date, payload_hash


def canonical_query(query_string: str) -> tuple[str, AuthValues | None] | None:
    """The canonical query string of every parameter but X-Amz-Signature, and the decoded values
    of the parameters that name a signing mechanism (AUTH_PARAMS, in its order; None for each
    absent, and instead of them all when none is there); None when one of those comes twice."""
    try:
        query_string.encode("latin-1")
    except UnicodeEncodeError:
        return None
    found: list[str | None] = [None] * len(AUTH_PARAMS)
    pairs = []
    for part in query_string.split("&"):
        if not part:
            continue
        raw_name, _, raw_value = part.partition("=")
        name = _decode(raw_name) if len(raw_name) <= _REMEMBERED else _percent_decode(raw_name)
        value = _decode(raw_value) if len(raw_value) <= _REMEMBERED else _percent_decode(raw_value)
        which = _AUTH_INDEX.get(name)
        if which is not None:
            if found[which] is not None:
                return None
            found[which] = value
            if name == "X-Amz-Signature":
                continue
        pairs.append((_encode(name) if len(name) <= _REMEMBERED else uri_encode(name, keep_slash=False),
                      _encode(value) if len(value) <= _REMEMBERED else uri_encode(value, keep_slash=False)))
    pairs.sort()
    values = cast(AuthValues, tuple(found))
    return "&".join(f"{name}={value}" for name, value in pairs), (None if values == _NONE else values)


def keyed(key: bytes, to_sign: str) -> Keyed:
    """HMAC-SHA256 with `key` as its two hashes, the padded key already taken in (RFC 2104) and in
    the inner one also `to_sign`, the string to sign's first part ("AWS4-HMAC-SHA256\\n<x-amz-date>\\n
    <scope>\\n"), which the requests of one second share: only ever copied, never updated themselves."""
    if len(key) > 64 or not to_sign.isascii():
        raise ValueError("keyed(signing key: at most 64 bytes, string to sign's first part: ASCII)")
    padded = key.ljust(64, b"\0")
    inner, outer = _SHA256.copy(), _SHA256.copy()
    inner.update(bytes(b ^ 0x36 for b in padded))
    inner.update(to_sign.encode())
    outer.update(bytes(b ^ 0x5C for b in padded))
    return inner, outer, to_sign


def verify(method: str, raw_path: str, canonical_query: str, headers: tuple[tuple[str, str], ...],
           names: tuple[str, ...], signed_text: str, payload_hash: str, keyed: Keyed, provided: str) -> bool | None:
    """Whether `provided` is the signature of one of the request's canonical forms (compared in
    constant time); None when the request is not of a shape built here."""
    forms = canonical(method, raw_path, canonical_query, headers, names, signed_text, payload_hash, keyed)
    if forms is None:
        return None
    if len(provided) != 64 or not provided.isascii():
        return False
    matched = False
    for _, _, signature in forms:
        matched |= hmac.compare_digest(signature, provided)
    return matched


@dataclass(frozen=True, slots=True)
class _Signed:
    """What a list of signed headers makes of a request's headers."""

    values: Callable[[dict[str, str]], tuple[str, ...]]  # the names' values in their order (KeyError: one absent)
    block: str  # "name:%s\n" for each name: with the values, the canonical header block
    amz: int  # how many different names start with x-amz-
    ascii: bool  # whether every name is ASCII


@functools.lru_cache(maxsize=256)
def _signed(names: tuple[str, ...]) -> _Signed:
    values = itemgetter(*names) if len(names) > 1 else lambda headers: tuple(headers[name] for name in names)
    return _Signed(values, "".join(f"{name.replace('%', '%%')}:%s\n" for name in names),  # type: ignore[arg-type]
                   len({name for name in names if name.startswith("x-amz-")}), "".join(names).isascii())


def _header_block(names: tuple[str, ...], headers: tuple[tuple[str, str], ...]) -> str | None:
    """The canonical header block of the signed `names`, or None: a header name twice or not
    ASCII, an x-amz-* header not signed, a signed header absent or its value not ASCII."""
    by_name = dict(headers)
    joined = "\n".join(by_name)
    signed = _signed(names)
    if len(by_name) != len(headers) or not joined.isascii() or not signed.ascii:
        return None
    if joined.count("\n") == len(by_name) - 1:  # no name with a newline: each x-amz-* name counted once
        if ("\n" + joined).count("\nx-amz-") != signed.amz:
            return None  # more x-amz-* headers than signed ones (when one signed is absent: None below)
    elif not frozenset(names).issuperset(name for name in by_name if name.startswith("x-amz-")):
        return None
    try:
        values: tuple[str, ...] = signed.values(by_name)
    except KeyError:
        return None
    text = " ".join(values)
    if not text.isascii():
        return None
    if not text.isprintable() or "  " in text or text[:1] == " " or text[-1:] == " ":
        # Some value to trim: printable ASCII without two spaces in a row nor one at either end
        # (seen next to the joining space) is what trimming leaves as it is.
        values = tuple(" ".join(value.split()) for value in values)
    return signed.block % values


def canonical(method: str, raw_path: str, canonical_query: str, headers: tuple[tuple[str, str], ...],
              names: tuple[str, ...], signed_text: str, payload_hash: str,
              keyed: Keyed) -> tuple[tuple[str, str, str], ...] | None:
    """(canonical request, string to sign, signature) for each canonical URI the general path
    tries (sigv4._canonical_uris); None when the request is not of a shape built here."""
    if not (method + canonical_query + signed_text + payload_hash).isascii():
        return None
    try:
        raw_path.encode("latin-1")
    except UnicodeEncodeError:
        return None
    block = _header_block(names, headers)
    if block is None:
        return None
    inner, outer, to_sign = keyed
    forms = []
    for uri in (raw_path,) if _PLAIN_PATH.fullmatch(raw_path) else _canonical_uris(raw_path):
        request = f"{method}\n{uri}\n{canonical_query}\n{block}\n{signed_text}\n{payload_hash}"
        digest = _SHA256.copy()  # (a copy costs less than a new hash: no look-up of the algorithm)
        digest.update(request.encode())
        request_hash = digest.hexdigest()
        mac = inner.copy()
        mac.update(request_hash.encode())
        signature = outer.copy()
        signature.update(mac.digest())
        forms.append((request, to_sign + request_hash, signature.hexdigest()))
    return tuple(forms)


Shape = tuple[bytes, str, str, str, "str | None", "str | None", "str | None"]

_REQUEST_LINE = re.compile(rb"(?:GET|HEAD) /[A-Za-z0-9\-._~!$&'()*+,;=:@/%?]* HTTP/1\.1")
_HEADER_LINE = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+):[\x20-\x7e\t]*")
_PLAIN_VALUE = re.compile(rb"[\x21-\x7e]+(?: [\x21-\x7e]+)*")  # visible ASCII, single inner spaces
_AMZ_DATE = re.compile(rb"[0-9]{8}T[0-9]{6}Z")
_AUTHORIZATION = re.compile(rb"AWS4-HMAC-SHA256 Credential=[\x21-\x2b\x2d-\x2e\x30-\x7e]+/([0-9]{8})/"
                            rb"[\x21-\x2b\x2d-\x2e\x30-\x7e]+/s3/aws4_request, SignedHeaders=[\x21-\x2b\x2d-\x7e]+"
                            rb", Signature=([0-9a-f]{64})")
_SLOTS = {b"x-amz-date": 0, b"authorization": 2, b"amz-sdk-invocation-id": 3, b"amz-sdk-request": 4, b"range": 5}


_PRESIGN_VALUES = {
    b"X-Amz-Algorithm": re.compile(rb"AWS4-HMAC-SHA256"),
    b"X-Amz-Credential": re.compile(rb"[A-Za-z0-9]+%2F([0-9]{8})%2F[A-Za-z0-9-]+%2Fs3%2Faws4_request"),
    b"X-Amz-Date": re.compile(rb"[0-9]{8}T[0-9]{6}Z"),
    b"X-Amz-Expires": re.compile(rb"[0-9]{1,12}"),
    b"X-Amz-SignedHeaders": re.compile(rb".+", re.DOTALL),
    b"X-Amz-Signature": re.compile(rb"[0-9a-f]{64}"),
}


def _signing_name(text: bytes) -> bool:
    lowered = text.lower()
    return b"signature" in lowered or b"x-amz-" in lowered or b"awsaccesskeyid" in lowered


def _presigned_query(query: bytes, offset: int, cuts: dict[int, tuple[int, int]]) -> bool:
    """A presigned URL's query (at `offset` in the head): the six X-Amz-* parameters once each, named
    as the SDKs name them, of their forms, their slots into `cuts`; no other parameter whose name may
    name a signing one."""
    found = set()
    for part in query.split(b"&"):
        name, eq, value = part.partition(b"=")
        if _signing_name(name) or b"%" in name:
            form = _PRESIGN_VALUES.get(name)
            if form is None or not eq or name in found:
                return False
            match = form.fullmatch(value)
            if match is None:
                return False
            found.add(name)
            at = offset + len(name) + 1
            if name == b"X-Amz-Credential":
                cuts[1] = (at + match.start(1), 8)
            elif name == b"X-Amz-Date":
                cuts[0] = (at, 16)
            elif name == b"X-Amz-Signature":
                cuts[2] = (at, 64)
        offset += len(part) + 1
    return len(found) == len(_PRESIGN_VALUES)


def _shape_line(line: bytes, offset: int, cuts: dict[int, tuple[int, int]], presigned: bool) -> bool:
    """One header line of a head being shaped: its slots' (offset, length) into `cuts` (by slot:
    0 x-amz-date, 1 the credential's date, 2 the signature, 3 and 4 the SDK's two, 5 Range); False
    when it is not of the usual shape."""
    match = _HEADER_LINE.fullmatch(line)
    if match is None:
        return False
    if presigned and match[1].lower() == b"x-amz-content-sha256":
        return False  # (auth.fastpath.presigned_fast leaves it to the general path)
    slot = _SLOTS.get(match[1].lower())
    if slot is None:
        return True
    value, at = line[len(match[1]) + 2:], offset + len(match[1]) + 2
    if slot in cuts or line[len(match[1]) + 1:len(match[1]) + 2] != b" " or not _PLAIN_VALUE.fullmatch(value):
        return False
    if slot == 0 and not _AMZ_DATE.fullmatch(value):
        return False
    if slot == 2:
        form = _AUTHORIZATION.fullmatch(value)
        if form is None:
            return False
        cuts[1] = (at + form.start(1), 8)
        at, value = at + form.start(2), form[2]
    cuts[slot] = (at, len(value))
    return True


def shape(head: bytes) -> Shape | None:
    """(key, x-amz-date, the credential's date, the signature, amz-sdk-invocation-id, amz-sdk-request,
    Range) of one whole request head (bytes as read) of the usual SDK shape: GET or HEAD, the request line
    as gateway.requesthead reads it, header lines `name:value` of visible ASCII; signed either in its
    headers (exactly one Authorization of the SDKs' form "AWS4-HMAC-SHA256 Credential=AK/YYYYMMDD/
    REGION/s3/aws4_request, SignedHeaders=..., Signature=<64 lowercase hex>" and one x-amz-date
    YYYYMMDDTHHMMSSZ, no signing parameter in the query) or presigned (the six X-Amz-* parameters
    once each as the SDKs write them, no Authorization, x-amz-date or x-amz-content-sha256 header);
    at most one of each of the SDK's two headers and of Range; each of those headers written "Name: value" with a
    value that is its own canonical form (visible ASCII, single inner spaces). The key is the head
    with those values cut out (names and separators kept). None: any other head."""
    if not isinstance(head, bytes):
        raise TypeError("shape takes the bytes of a request head")
    if not head.endswith(b"\r\n\r\n"):
        return None
    lines = head[:-4].split(b"\r\n")
    if not _REQUEST_LINE.fullmatch(lines[0]):
        return None
    target = lines[0].split(b" ")[1]
    path, question, query = target.partition(b"?")
    cuts: dict[int, tuple[int, int]] = {}
    presigned = bool(question) and _signing_name(query)
    if presigned and not _presigned_query(query, lines[0].index(b" ") + 1 + len(path) + 1, cuts):
        return None
    offset = len(lines[0]) + 2
    for line in lines[1:]:
        if not _shape_line(line, offset, cuts, presigned):
            return None
        offset += len(line) + 2
    if 0 not in cuts or 2 not in cuts:
        return None
    key, start = [], 0
    for at, length in sorted(cuts.values()):
        key.append(head[start:at])
        start = at + length
    key.append(head[start:])
    values = [head[at:at + length].decode("ascii") for at, length in (cuts[0], cuts[1], cuts[2])]
    sdk = [head[cuts[slot][0]:sum(cuts[slot])].decode("ascii") if slot in cuts else None for slot in (3, 4, 5)]
    return b"".join(key), values[0], values[1], values[2], sdk[0], sdk[1], sdk[2]


def signs(canonical_request: bytes, keyed: Keyed, provided: str) -> bool:
    """Whether `provided` is the signature of `canonical_request` (bytes, as hashed) with `keyed`,
    compared in constant time."""
    if not isinstance(canonical_request, bytes) or not isinstance(provided, str):
        raise TypeError("signs(canonical request: bytes, keyed: bytes, signature: str)")
    if len(provided) != 64 or not provided.isascii():
        return False
    inner, outer, _ = keyed
    digest = _SHA256.copy()
    digest.update(canonical_request)
    mac = inner.copy()
    mac.update(digest.hexdigest().encode())
    signature = outer.copy()
    signature.update(mac.digest())
    return hmac.compare_digest(signature.hexdigest(), provided)
