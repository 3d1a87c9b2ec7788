"""Which headers cross the gateway, in each direction."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gateway.engine import headers_carried
from gateway.errors import S3Error

_MAX_USER_METADATA = 2048

# Object headers a client sets on writes and the origin must keep.
_WRITE_HEADERS = frozenset({
    "cache-control", "content-disposition", "content-encoding", "content-language",
    "content-type", "content-md5", "expires", "if-match", "if-none-match",
})
# Conditional and selection headers of reads, forwarded when the origin must decide.
_READ_HEADERS = frozenset({"range", "if-match", "if-none-match", "if-modified-since", "if-unmodified-since"})
# x-amz-* headers that belong to the client's own signature or body framing, never forwarded.
_PRIVATE_AMZ = frozenset({
    "x-amz-date", "x-amz-content-sha256", "x-amz-security-token", "x-amz-decoded-content-length",
    "x-amz-trailer", "x-amz-te", "x-amz-user-agent",
})
# Checksum values: replaced by the values the gateway verified itself (header or trailer).
CHECKSUM_VALUES = frozenset(
    f"x-amz-checksum-{alg}" for alg in ("crc32", "crc32c", "crc64nvme", "sha1", "sha256")
)
# Origin response headers that describe the origin's hop, not the object.
_HOP_HEADERS = frozenset({
    "connection", "keep-alive", "transfer-encoding", "content-length", "date", "server",
    "x-amz-request-id", "x-amz-id-2", "proxy-connection", "upgrade", "content-range",
    "content-md5",  # an upload's digest, replayed by some origins; S3 never answers a read with it
    "vary",  # with access-control-*: the origin's CORS answer to the gateway, not to the client (s3api.cors)
})
# x-amz headers that make a read the caller's own (encryption keys, payer, owner check):
# such a read goes to the origin and its answer is not shared through the cache.
_PERSONAL_READ_AMZ = (
    "x-amz-server-side-encryption-customer-", "x-amz-request-payer", "x-amz-expected-bucket-owner",
)
_OBJECT_READ_AMZ = (*_PERSONAL_READ_AMZ, "x-amz-checksum-mode")


_CONTROL = frozenset(chr(c) for c in (*range(0x20), 0x7F)) - {"\t"}


def check_no_control(name: str, value: str) -> None:
    """A value a client gave for a header (a response-* override, a form field): no control
    characters (CR or LF would end the header; S3 never sends them), else 400 InvalidArgument."""
    if any(c in _CONTROL for c in value):
        raise S3Error("InvalidArgument", "Header value cannot contain control characters.",
                      extra={"ArgumentName": name[:64], "ArgumentValue": value.encode("unicode_escape").decode()[:256]})


def as_sent(name: str, value: str) -> str:
    """A client's header value (its wire bytes, read as latin-1) as the text whose UTF-8 is
    exactly those bytes: the origin client sends and signs header text as UTF-8, so the
    origin receives the bytes the client sent (`café` stays `café`, not `cafÃ©`). Bytes
    that are not UTF-8 cannot be sent on as they came, so they are refused."""
    if value.isascii():
        return value
    try:
        return value.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        raise S3Error("InvalidArgument", "Header value is not valid UTF-8.",
                      extra={"ArgumentName": name}) from None


def for_origin_write(headers: Mapping[str, str]) -> dict[str, str]:
    """Headers of a client write (PUT/POST/DELETE) to send on to the origin."""
    out: dict[str, str] = {}
    for name, value in headers.items():
        if name in _WRITE_HEADERS or (name.startswith("x-amz-") and name not in _PRIVATE_AMZ
                                      and name not in CHECKSUM_VALUES):
            out[name] = as_sent(name, value)
    if "content-encoding" in out:
        encoding = strip_aws_chunked(out.pop("content-encoding"))
        if encoding is not None:
            out["content-encoding"] = encoding
    return out


def strip_aws_chunked(content_encoding: str | None) -> str | None:
    """Content-Encoding without the aws-chunked token (None if nothing is left): aws-chunked is
    the framing of this hop only, and a stored object never keeps it."""
    if content_encoding is None:
        return None
    kept = [t.strip() for t in content_encoding.split(",") if t.strip() and t.strip().lower() != "aws-chunked"]
    return ", ".join(kept) or None


def check_user_metadata(headers: Mapping[str, str]) -> None:
    """S3 refuses more than 2 KiB of user metadata (names after x-amz-meta- plus values, UTF-8)."""
    size = sum(len(name[len("x-amz-meta-"):].encode()) + len(value.encode("latin-1", "replace"))
               for name, value in headers.items() if name.startswith("x-amz-meta-"))
    if size > _MAX_USER_METADATA:
        raise S3Error("MetadataTooLarge", extra={"Size": str(size), "MaxSizeAllowed": str(_MAX_USER_METADATA)})


def personal_read_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers of a GET/HEAD that the origin must see and that keep it out of the cache."""
    return {name: as_sent(name, value) for name, value in headers.items() if name.startswith(_PERSONAL_READ_AMZ)}


def wants_checksums(headers: Mapping[str, str]) -> bool:
    return headers.get("x-amz-checksum-mode", "").upper() == "ENABLED"


def for_origin_subresource_read(headers: Mapping[str, str]) -> dict[str, str]:
    """Headers of a read the origin answers and the cache never keeps (a sub-resource, such
    as ?attributes with its x-amz-object-attributes and x-amz-max-parts): every signed
    x-amz-* header of the client's own, and the conditionals."""
    out = {name: as_sent(name, value) for name, value in headers.items()
           if name.startswith("x-amz-") and name not in _PRIVATE_AMZ}
    out.update((name, as_sent(name, value)) for name, value in headers.items() if name in _READ_HEADERS)
    return out


def object_checksums(headers: Mapping[str, str]) -> dict[str, str]:
    """The x-amz-checksum-<algorithm> values of a request, as sent."""
    return {name: as_sent(name, value) for name, value in headers.items() if name in CHECKSUM_VALUES}


def for_origin_read(headers: Mapping[str, str], *, conditionals: bool) -> dict[str, str]:
    """Headers of a client read (GET/HEAD) to send on to the origin."""
    out = {name: as_sent(name, value) for name, value in headers.items() if name.startswith(_OBJECT_READ_AMZ)}
    if conditionals:
        out.update((name, as_sent(name, value)) for name, value in headers.items() if name in _READ_HEADERS)
    return out


def from_origin(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Origin response headers worth passing to the client (lowercase names), as a header
    can carry them (objects.headers_carried: what the origin stored, another client wrote)."""
    return headers_carried({name.lower(): value for name, value in headers
                            if name.lower() not in _HOP_HEADERS and not name.lower().startswith("access-control-")})
