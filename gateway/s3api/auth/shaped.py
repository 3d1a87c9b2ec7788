"""SigV4 checked anew for a request of a kept shape: an SDK's GET or HEAD sent again with only its
x-amz-date, credential date, signature, amz-sdk-invocation-id and amz-sdk-request new.

`shape_of` (the compiled _sigv4check.shape, or its twin) cuts those values out of a request head;
two heads with the same rest (the key) have the same method, target, headers and values but
those, so their canonical requests differ only where those values are signed. `template` cuts the
canonical request of a request the full check passed (auth.fastpath or the general path) around
those places, and checks that joined again with the request's own values it gives the request's
own signature; `signed_anew` makes for a new request of the same key every check sigv4_fast makes
that those values take part in (the credential's date is x-amz-date's, the clock within the skew
of x-amz-date, the signature of the canonical request matched in constant time, with the signing
key of the same secret). Whatever fails is left to the full path, which gives its own answer.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from gateway.s3api.auth.fastpath import _check, _header_signed, _keyed
from gateway.s3api.auth.model import RequestView

__all__ = ["Shape", "Template", "shape_of", "signed_anew", "template"]

Shape = tuple[bytes, str, str, str, "str | None", "str | None"]
"""(key, x-amz-date, the credential's date, the signature, amz-sdk-invocation-id, amz-sdk-request)."""

shape_of = _check.shape
_signs = _check.signs

# The headers whose values change between two sends, by their place in a Shape; each is given a
# value found nowhere else while the kept request's canonical request is built, to find its places.
_SLOTS = {"x-amz-date": 1, "amz-sdk-invocation-id": 4, "amz-sdk-request": 5}
_TOKEN = secrets.token_hex(8)
_SENTINELS = {name: f"S3GW{_TOKEN}SLOT{index}" for name, index in _SLOTS.items()}


@dataclass(frozen=True, slots=True)
class Template:
    """The canonical requests (one per canonical URI the general path tries) of a kept request, cut
    around the values that change: forms[i] pieces, and between two pieces the Shape value `slots[j]`."""

    forms: tuple[tuple[bytes, ...], ...]
    slots: tuple[int, ...]
    credential: tuple[str, str]  # the Credential before and after its date
    signed_text: str
    payload_hash: str


def _cut(request: str) -> tuple[tuple[bytes, ...], tuple[int, ...]]:
    pieces, slots = [], []
    at = 0
    while True:
        found = [(place, name) for name, sentinel in _SENTINELS.items()
                 if (place := request.find(sentinel, at)) >= 0]
        if not found:
            break
        place, name = min(found)
        pieces.append(request[at:place].encode())
        slots.append(_SLOTS[name])
        at = place + len(_SENTINELS[name])
    pieces.append(request[at:].encode())
    return tuple(pieces), tuple(slots)


def template(view: RequestView, shape: Shape, secret: str, max_skew: timedelta) -> Template | None:
    """The Template of a request whose signature the full check accepted, `shape` its Shape; None
    when it cannot be made (not of the shape sigv4_fast builds, or the Template joined again with
    the request's own values does not give its own signature)."""
    parts = _check.header_parts(view.headers)
    if parts is None or parts[0] is None or parts[3] != shape[1] or parts[4] is None:
        return None
    credential, signed_text, provided, amz_date, payload_hash = parts
    checked = _header_signed(credential, signed_text, amz_date, payload_hash, max_skew)
    scope = credential.split("/")
    if checked is None or provided != shape[3] or len(scope) != 5 or scope[1] != shape[2]:
        return None
    query = view.query_string
    if query:
        canonical_query = _check.canonical_query(query)
        if canonical_query is None or canonical_query[1]:
            return None
        query = canonical_query[0]
    headers = tuple((name, _SENTINELS.get(name, value)) for name, value in view.headers)
    keyed = _keyed(secret, amz_date, checked)
    forms = _check.canonical(view.method, view.raw_path, query, headers, checked.names, signed_text, payload_hash,
                             keyed)
    if not forms:
        return None
    cut = [_cut(request) for request, _, _ in forms]
    slots = cut[0][1]
    if any(form_slots != slots for _, form_slots in cut) or slots.count(1) != 1 or len(set(slots)) != len(slots):
        return None  # x-amz-date signed once, each value in one place
    made = Template(tuple(pieces for pieces, _ in cut), slots, (scope[0] + "/", "/" + "/".join(scope[2:])),
                    signed_text, payload_hash)
    return made if _matches(made, shape, keyed) else None


def _matches(made: Template, shape: Shape, keyed: object) -> bool:
    """Whether one of the Template's forms joined with `shape`'s values is signed by its signature."""
    values = [shape[slot] for slot in made.slots]
    if None in values:
        return False  # (the key holds the same headers: not seen)
    matched = False
    for pieces in made.forms:
        joined = [pieces[0]]
        for value, piece in zip(values, pieces[1:]):
            joined += (value.encode(), piece)  # type: ignore[union-attr]
        matched |= _signs(b"".join(joined), keyed, shape[3])  # type: ignore[arg-type]
    return matched


def signed_anew(made: Template, shape: Shape, secret: str, now: datetime, max_skew: timedelta) -> bool:
    """Whether a request of the kept key, its values `shape`'s, passes every check sigv4_fast makes
    (with `secret`, the access key's secret the kept request was checked with)."""
    _, amz_date, date, provided, _, _ = shape
    if date != amz_date[:8]:
        return False
    before, after = made.credential
    checked = _header_signed(before + date + after, made.signed_text, amz_date, made.payload_hash, max_skew)
    if checked is None or abs(now - checked.time) > max_skew:
        return False
    return _matches(made, shape, _keyed(secret, amz_date, checked))
