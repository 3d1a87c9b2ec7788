"""SigV4 checked anew for a request of a kept shape: an SDK's GET or HEAD sent again with only its
x-amz-date, credential date, signature, amz-sdk-invocation-id, amz-sdk-request and Range new (or a
presigned URL made anew: only its X-Amz-Date, the Credential's date, X-Amz-Signature and Range new).
An engine reads row groups and column chunks of one file each with its own Range: its value is cut
out as the date is, and put back in its place in the canonical request when the Range is signed
(as the SDKs sign it), so the signature still covers it; s3api.replays answers each Range anew.

`shape_of` (the compiled _sigv4check.shape, or its twin) cuts those values out of a request head;
two heads with the same rest (the key) have the same method, target, headers and values but
those, so their canonical requests differ only where those values are signed. `template` cuts the
canonical request of a request the full check passed (auth.fastpath or the general path) around
those places, and checks that joined again with the request's own values it gives the request's
own signature; `signed_anew` makes for a new request of the same key every check sigv4_fast (or
presigned_fast) makes that those values take part in (the credential's date is x-amz-date's, the
clock within the skew of x-amz-date or the URL's window, the signature of the canonical request
matched in constant time, with the signing key of the same secret). Whatever fails is left to the
full path, which gives its own answer.
"""

from __future__ import annotations

import operator
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final, cast

from gateway.s3api.auth.fastpath import _check, _Checked, _header_signed, _keyed, _presigned
from gateway.s3api.auth.model import RequestView
from gateway.signing import UNSIGNED_PAYLOAD

__all__ = ["RANGE", "Shape", "Template", "shape_of", "signed_anew", "template"]

Shape = tuple[bytes, str, str, str, "str | None", "str | None", "str | None"]
"""(key, x-amz-date, the credential's date, the signature, amz-sdk-invocation-id, amz-sdk-request, Range)."""
RANGE: Final = 6  # the Range's place in a Shape

shape_of = _check.shape
_signs = _check.signs

# The values that change between two sends, by their place in a Shape; each is given a value found
# nowhere else (letters and digits: URI-encoding keeps it) while the kept request's canonical request
# is built, to find its places: the headers' (x-amz-date, the SDK's two, Range) and, presigned, the
# query's. (A Range not signed is in no place: any value passes the full check too.)
_TOKEN = secrets.token_hex(8)
_HEADER_SLOTS = {"x-amz-date": 1, "amz-sdk-invocation-id": 4, "amz-sdk-request": 5, "range": RANGE}
_SENTINELS = {f"S3GW{_TOKEN}SLOT{index}": index for index in (1, 2, 4, 5, RANGE)}
_SENTINEL_OF = {index: sentinel for sentinel, index in _SENTINELS.items()}


@dataclass(frozen=True, slots=True)
class Template:
    """The canonical requests (one per canonical URI the general path tries) of a kept request, cut
    around the values that change: each of `forms` a %-format of one, its %s in turn the Shape's
    values `slots[j]` (`values` picks them out of a Shape, as a tuple)."""

    forms: tuple[str, ...]
    slots: tuple[int, ...]
    values: Callable[[Shape], tuple[str | None, ...]]
    credential: tuple[str, str]  # the Credential before and after its date
    signed_text: str
    payload_hash: str
    expires: str | None = None  # a presigned URL's X-Amz-Expires (None: signed in its headers)


def _cut(request: str) -> tuple[str, tuple[int, ...]]:
    """The canonical request as a %-format with a %s in the place of each sentinel, and the Shape
    value each %s stands for, in turn: one format and one encoding per check, not a join of pieces."""
    pieces, slots = [], []
    at = 0
    while True:
        found = [(place, sentinel) for sentinel in _SENTINELS if (place := request.find(sentinel, at)) >= 0]
        if not found:
            break
        place, sentinel = min(found)
        pieces.append(request[at:place].replace("%", "%%"))
        slots.append(_SENTINELS[sentinel])
        at = place + len(sentinel)
    pieces.append(request[at:].replace("%", "%%"))
    return "%s".join(pieces), tuple(slots)


def _presigned_query(query_string: str, shape: Shape) -> str:
    """The raw query of a presigned URL with X-Amz-Date's value and the Credential's date (as the
    SDKs encode it, between two %2F) made sentinels."""
    parts = []
    for part in query_string.split("&"):
        if part.startswith("X-Amz-Date="):
            part = "X-Amz-Date=" + _SENTINEL_OF[1]
        elif part.startswith("X-Amz-Credential="):
            part = part.replace(f"%2F{shape[2]}%2F", f"%2F{_SENTINEL_OF[2]}%2F", 1)
        parts.append(part)
    return "&".join(parts)


def _checked_for(view: RequestView, shape: Shape, max_skew: timedelta,
                 ) -> tuple[_Checked, str, str, str, str, str | None, str] | None:
    """(its checks, the Credential, SignedHeaders, x-amz-date, payload hash, X-Amz-Expires, the raw
    query with sentinels) of a request as auth.fastpath reads it, when they are `shape`'s."""
    parts = _check.header_parts(view.headers)
    if parts is None:
        return None
    if parts[0] is not None:  # signed in its headers
        credential, signed_text, provided, amz_date, payload_hash = parts
        if amz_date is None or payload_hash is None:
            return None
        checked = _header_signed(credential, signed_text, amz_date, payload_hash, max_skew)
        expires, query = None, view.query_string
    else:
        canonical = _check.canonical_query(view.query_string)
        if canonical is None or canonical[1] is None or parts[3] is not None or parts[4] is not None:
            return None
        algorithm, credential, amz_date, expires, signed_text, provided, v2_key, v2_signature = canonical[1]
        if (algorithm is None or credential is None or amz_date is None or expires is None or signed_text is None
                or provided is None or v2_key is not None or v2_signature is not None):
            return None  # one missing, or a SigV2 one too
        payload_hash = UNSIGNED_PAYLOAD
        checked = _presigned(credential, signed_text, amz_date, expires, max_skew)
        query = _presigned_query(view.query_string, shape)
    if checked is None or provided != shape[3] or amz_date != shape[1] or checked.date != shape[2]:
        return None
    return checked, credential, signed_text, amz_date, payload_hash, expires, query


def template(view: RequestView, shape: Shape, secret: str, max_skew: timedelta) -> Template | None:
    """The Template of a request whose signature the full check accepted, `shape` its Shape; None
    when it cannot be made (not of the shape auth.fastpath builds, or the Template joined again with
    the request's own values does not give its own signature)."""
    found = _checked_for(view, shape, max_skew)
    if found is None:
        return None
    checked, credential, signed_text, amz_date, payload_hash, expires, query = found
    scope = credential.split("/")
    if len(scope) != 5:
        return None
    if query:
        canonical_query = _check.canonical_query(query)
        if canonical_query is None or (expires is None and canonical_query[1]):
            return None
        query = canonical_query[0]
    headers = tuple((name, _SENTINEL_OF[_HEADER_SLOTS[name]] if name in _HEADER_SLOTS else value)
                    for name, value in view.headers)
    keyed = _keyed(secret, amz_date, checked)
    forms = _check.canonical(view.method, view.raw_path, query, headers, checked.names, signed_text, payload_hash,
                             keyed)
    if not forms:
        return None
    cut = [_cut(request) for request, _, _ in forms]
    slots = cut[0][1]
    if (any(form_slots != slots for _, form_slots in cut) or slots.count(1) != 1 or len(set(slots)) != len(slots)
            or (2 in slots) != (expires is not None)):
        return None  # x-amz-date signed once (presigned: the Credential's date too), each value in one place
    made = Template(tuple(form for form, _ in cut), slots, _picker(slots), (scope[0] + "/", "/" + "/".join(scope[2:])),
                    signed_text, payload_hash, expires)
    return made if _matches(made, shape, keyed) else None


def _picker(slots: tuple[int, ...]) -> Callable[[Shape], tuple[str | None, ...]]:
    """What picks the values of `slots` (never the key's place, 0) out of a Shape, as a tuple (one slot too)."""
    pick = (lambda shape: (shape[slots[0]],)) if len(slots) == 1 else operator.itemgetter(*slots)
    return cast(Callable[[Shape], tuple[str | None, ...]], pick)


def _matches(made: Template, shape: Shape, keyed: object) -> bool:
    """Whether one of the Template's forms with `shape`'s values put in is signed by its signature."""
    values = made.values(shape)
    if None in values:
        return False  # (the key holds the same headers: not seen)
    matched = False
    for form in made.forms:
        matched |= _signs((form % values).encode(), keyed, shape[3])  # type: ignore[arg-type]
    return matched


def signed_anew(made: Template, shape: Shape, secret: str, now: datetime, max_skew: timedelta) -> bool:
    """Whether a request of the kept key, its values `shape`'s, passes every check auth.fastpath
    makes (sigv4_fast, or presigned_fast for a presigned URL) with `secret`, the access key's secret
    the kept request was checked with."""
    amz_date, date = shape[1], shape[2]
    if date != amz_date[:8]:
        return False
    before, after = made.credential
    if made.expires is None:
        checked = _header_signed(before + date + after, made.signed_text, amz_date, made.payload_hash, max_skew)
        if checked is None or abs(now - checked.time) > max_skew:
            return False
    else:
        checked = _presigned(before + date + after, made.signed_text, amz_date, made.expires, max_skew)
        if checked is None or checked.time - now > max_skew or now > checked.identity.valid_until:  # type: ignore[operator]
            return False
    return _matches(made, shape, _keyed(secret, amz_date, checked))
