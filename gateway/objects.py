"""What the gateway knows of an object: its metadata as the origin described it, a
remembered 404, and the form both take in the shared (Redis) level."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime

import orjson

from gateway.errors import S3Error


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    """What a HEAD of the object told us: size, validators and the headers S3 sends with it."""

    size: int
    etag: str
    last_modified: datetime
    headers: dict[str, str]  # lowercase names, origin hop headers removed
    # False when taken from a ranged GET, which leaves out the object's checksums.
    complete: bool = True

    @property
    def version_id(self) -> str | None:
        return self.headers.get("x-amz-version-id")

    @property
    def version_query(self) -> list[tuple[str, str]]:
        """The query that asks the origin for exactly this version: its versionId, none for an
        unversioned object (no id, or S3's "null")."""
        version_id = self.version_id
        return [("versionId", version_id)] if version_id and version_id != "null" else []


def block_version(version_id: str | None, etag: str) -> str:
    """What names the blocks of an object version: its version id, else (unversioned: no id, or
    S3's "null") its ETag."""
    return version_id if version_id and version_id != "null" else etag


class ObjectChanged(S3Error):
    """The object at the origin is no longer the version our metadata described."""

    def __init__(self) -> None:
        super().__init__("ServiceUnavailable", "The object changed while it was being read; retry the request.")



@dataclass(frozen=True, slots=True)
class Missing:
    """A remembered 404, re-raised as the same S3 error while it is fresh."""

    code: str
    message: str
    status: int
    headers: tuple[tuple[str, str], ...]
    extra: tuple[tuple[str, str], ...] = ()  # the error's own elements, as NoSuchBucket's BucketName

    @classmethod
    def of(cls, error: S3Error) -> Missing:
        return cls(error.code, error.message, error.status, tuple(error.headers.items()), tuple(error.extra.items()))

    def error(self) -> S3Error:
        return S3Error(self.code, self.message, status=self.status, headers=dict(self.headers), extra=dict(self.extra))


# The shared (L2) form of metadata; "v" lets nodes of different versions share a Redis
# (an entry of an unknown version is a miss). Not bumped for headers_carried: an entry of
# an older node (or a peer's answer) may hold a value no header can carry, so decoding
# makes its headers safe again (idempotent), and nothing written so far turns into a miss.
_META_FORMAT = 3  # 3: no Content-MD5 kept (entries of 2 may hold one)


def encode_meta(value: ObjectMeta | Missing) -> bytes:
    if isinstance(value, Missing):
        return orjson.dumps({"v": _META_FORMAT, "missing": {
            "code": value.code, "message": value.message, "status": value.status, "headers": value.headers,
            "extra": value.extra}})
    return orjson.dumps({"v": _META_FORMAT, "size": value.size, "etag": value.etag,
                         "last_modified": value.last_modified.isoformat(), "headers": value.headers,
                         "complete": value.complete})


def decode_meta(payload: bytes) -> ObjectMeta | Missing | None:
    try:
        data = orjson.loads(payload)
        if data.get("v") != _META_FORMAT:
            return None
        if "missing" in data:
            m = data["missing"]
            return Missing(str(m["code"]), str(m["message"]), int(m["status"]),
                           tuple((str(n), str(v)) for n, v in m["headers"]),
                           tuple((str(n), str(v)) for n, v in m.get("extra", ())))  # older entries: none
        return ObjectMeta(size=int(data["size"]), etag=str(data["etag"]),
                          last_modified=datetime.fromisoformat(data["last_modified"]),
                          headers=headers_carried({str(n): str(v) for n, v in data["headers"].items()}),
                          complete=bool(data["complete"]))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def meta_from_headers(items: Iterable[tuple[str, str]]) -> ObjectMeta:
    """The metadata in the headers of a HEAD, or of a GET of the whole object."""
    headers: dict[str, str] = {}
    for name, value in items:
        name = name.lower()
        if name in _NOT_OBJECT_HEADERS or name.startswith("access-control-"):
            continue
        headers[name] = value
    headers = headers_carried(headers)
    try:
        size = int(headers.get("content-length", "0"))
    except ValueError:
        raise S3Error("InternalError", "The origin sent an invalid Content-Length.") from None
    last_modified = _parse_date(headers.get("last-modified"))
    _qualify_composite_checksums(headers)
    return ObjectMeta(size=size, etag=headers.get("etag", ""), last_modified=last_modified, headers=headers)


def meta_from_ranged_get(items: Iterable[tuple[str, str]], size: int) -> ObjectMeta:
    """The metadata in the headers of a GET of part of the object (`size` from its
    Content-Range). Such an answer carries no checksums of the whole object, so none
    are kept and the metadata is marked incomplete."""
    kept = [(n, v) for n, v in items if n.lower() != "content-length" and not n.lower().startswith("x-amz-checksum-")]
    meta = meta_from_headers([*kept, ("content-length", str(size))])
    return ObjectMeta(meta.size, meta.etag, meta.last_modified, meta.headers, complete=False)


_NOT_OBJECT_HEADERS = frozenset({
    "connection", "keep-alive", "transfer-encoding", "date", "server", "x-amz-request-id",
    "x-amz-id-2", "content-range", "accept-ranges",
    # The digest of an upload's body, which some origins (moto) replay: S3 never answers a read
    # with it, and a client checks it against whatever it received (a range, say) and fails.
    "content-md5",
    # CORS: the origin's answer to the gateway's own request (moto adds them to every answer of a
    # bucket with CORS rules); the gateway answers each client's Origin itself (s3api.cors).
    "vary",
})


def _qualify_composite_checksums(headers: dict[str, str]) -> None:
    """Mark a multipart object's checksum-of-checksums as such (`value-N`, COMPOSITE).

    S3 writes a composite checksum as `value-N`; some origins (moto) answer HEAD with
    the bare value and no type, and SDKs would then check it against the whole body
    and reject a correct download.
    """
    parts = re.fullmatch(r'"?[0-9a-fA-F]+-(\d+)"?', headers.get("etag", ""))
    if parts is None or headers.get("x-amz-checksum-type", "").upper() == "FULL_OBJECT":
        return
    qualified = False
    for name in [n for n in headers if n.startswith("x-amz-checksum-") and n not in _CHECKSUM_SETTINGS]:
        if "-" not in headers[name]:
            headers[name] = f"{headers[name]}-{parts.group(1)}"
            qualified = True
    if qualified:
        headers.setdefault("x-amz-checksum-type", "COMPOSITE")


# What HTTP lets a header carry (RFC 9110 5.1 and 5.5): a name is a token; a value holds no
# control character but the tab (obs-text, bytes 0x80-0xFF, passes as it always did).
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_NOT_IN_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def headers_carried(headers: Mapping[str, str]) -> dict[str, str]:
    """The origin's object headers (names lower-cased, values latin-1 text of their bytes)
    as headers can carry them to a client, the way S3 answers metadata REST cannot carry:
    a user metadata value with a control character comes RFC 2047 encoded (the B encoding
    of its UTF-8 bytes: `=?UTF-8?B?...?=`); a user metadata entry that cannot be sent (a
    name that is no token, a value that is no UTF-8) is left out and counted in
    `x-amz-missing-meta`; any other header that cannot be sent is left out. Every other
    header is kept byte for byte. Applying it twice changes nothing more.

    (Else the ASGI server refuses the whole answer, and the hit path writes what it refused.)
    """
    if not any(_NOT_IN_VALUE.search(value) or not _TOKEN.fullmatch(name) for name, value in headers.items()):
        return dict(headers)
    out: dict[str, str] = {}
    missing = 0
    for name, value in headers.items():
        user = name.startswith("x-amz-meta-")
        if _TOKEN.fullmatch(name) and not _NOT_IN_VALUE.search(value):
            out[name] = value
        elif user and _TOKEN.fullmatch(name) and (encoded := _b_encoded(value)) is not None:
            out[name] = encoded
        elif user:
            missing += 1
    if missing:
        try:
            missing += int(out.get("x-amz-missing-meta", "0"))
        except ValueError:
            pass
        out["x-amz-missing-meta"] = str(missing)
    return out


def _b_encoded(value: str) -> str | None:
    """One RFC 2047 encoded-word of the value's UTF-8 bytes, or None if its bytes are no UTF-8.

    One word however long (RFC 2047 would split at 75 characters, into words a client joins
    again): user metadata is at most 2 KiB, and a single word is decoded by anything."""
    try:
        raw = value.encode("latin-1")
        raw.decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return None
    return f"=?UTF-8?B?{base64.b64encode(raw).decode('ascii')}?="


_CHECKSUM_SETTINGS = frozenset({"x-amz-checksum-type", "x-amz-checksum-mode", "x-amz-checksum-algorithm"})


def _parse_date(value: str | None) -> datetime:
    if value:
        try:
            parsed = parsedate_to_datetime(value)
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)
        except (TypeError, ValueError):
            pass
    return datetime.fromtimestamp(0, timezone.utc)
