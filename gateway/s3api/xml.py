"""S3's XML: parse what clients and the origin send (defusedxml only), render what S3 sends: pure."""

# Rendering follows S3's wire format byte for byte where it is known: the declaration
# on its own line, S3's namespace on every result (none on <Error>), elements in S3's
# order, empty elements written as a start and end tag, and `"` written as `&quot;`.

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from urllib.parse import quote_plus, unquote_plus

import defusedxml.ElementTree as SafeET
from defusedxml import DefusedXmlException

from gateway.errors import S3Error

__all__ = [
    "DEFAULT_XML_LIMIT",
    "S3_NS",
    "Bucket",
    "CompletedPart",
    "DeleteCondition",
    "DeleteErrorEntry",
    "DeleteRequest",
    "DeleteResult",
    "DeletedEntry",
    "ListBucketsResult",
    "ListPage",
    "ObjectEntry",
    "Owner",
    "RestoreStatus",
    "error_document",
    "parse_complete_multipart",
    "parse_create_bucket_configuration",
    "parse_delete_objects",
    "parse_delete_result",
    "parse_list_buckets",
    "parse_list_objects",
    "render_complete_multipart_request",
    "render_delete_request",
    "render_delete_result",
    "render_list_buckets",
    "render_list_objects_v1",
    "render_list_objects_v2",
    "url_encode",
    "validate_max_keys",
    "xml_escape",
]

S3_NS = "http://s3.amazonaws.com/doc/2006-03-01/"
_DECLARATION = '<?xml version="1.0" encoding="UTF-8"?>\n'

# Large enough for 1000 keys of 1024 bytes, or 10000 parts with every checksum.
DEFAULT_XML_LIMIT = 4 * 1024 * 1024

# S3's own wording has no final full stop (the shared table's entry does).
_MALFORMED_MESSAGE = "The XML you provided was not well-formed or did not validate against our published schema"


# --- models ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Owner:
    id: str | None = None
    display_name: str | None = None  # absent in regions created after S3 dropped it


@dataclass(frozen=True, slots=True)
class Bucket:
    name: str
    creation_date: str  # as S3 wrote it: 2009-02-03T16:45:09.000Z
    bucket_region: str | None = None


@dataclass(slots=True)
class ListBucketsResult:
    """Mutable so a handler can drop the buckets a user may not see."""

    owner: Owner | None
    buckets: list[Bucket]
    continuation_token: str | None = None
    prefix: str | None = None


@dataclass(frozen=True, slots=True)
class RestoreStatus:
    is_restore_in_progress: bool
    restore_expiry_date: str | None = None


@dataclass(frozen=True, slots=True)
class ObjectEntry:
    """One <Contents> of a listing; strings are kept as the origin wrote them."""

    key: str
    last_modified: str
    etag: str
    size: int
    storage_class: str = "STANDARD"
    owner: Owner | None = None
    checksum_algorithm: tuple[str, ...] = ()  # S3 may repeat the element
    checksum_type: str | None = None
    restore_status: RestoreStatus | None = None


@dataclass(slots=True)
class ListPage:
    """A ListObjects (v1 or v2) page, URL-decoded: every key and prefix is the real one.

    The echo fields (name, prefix, marker, ...) record what the origin said; the
    renderers echo the client's own request instead.
    """

    contents: list[ObjectEntry] = field(default_factory=list)
    common_prefixes: list[str] = field(default_factory=list)
    is_truncated: bool = False
    next_marker: str | None = None
    next_continuation_token: str | None = None
    name: str | None = None
    prefix: str | None = None
    delimiter: str | None = None
    marker: str | None = None
    start_after: str | None = None
    continuation_token: str | None = None
    max_keys: int | None = None
    key_count: int | None = None
    encoding_type: str | None = None


@dataclass(frozen=True, slots=True)
class DeleteCondition:
    """The conditional-delete fields of one <Object>, re-sent to the origin verbatim."""

    etag: str | None = None
    last_modified_time: str | None = None
    size: str | None = None


@dataclass(slots=True)
class DeleteRequest:
    """A DeleteObjects body.  `conditions` is keyed by (key, version_id), so a request
    rebuilt from a filtered `objects` list can pass it on unchanged."""

    quiet: bool
    objects: list[tuple[str, str | None]]
    conditions: dict[tuple[str, str | None], DeleteCondition] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DeletedEntry:
    key: str
    version_id: str | None = None
    delete_marker: bool | None = None
    delete_marker_version_id: str | None = None


@dataclass(frozen=True, slots=True)
class DeleteErrorEntry:
    key: str
    code: str
    message: str
    version_id: str | None = None


@dataclass(slots=True)
class DeleteResult:
    deleted: list[DeletedEntry] = field(default_factory=list)
    errors: list[DeleteErrorEntry] = field(default_factory=list)


# Checksum elements of a <Part>, in the order the AWS SDKs write them.
_PART_CHECKSUMS = ("ChecksumCRC32", "ChecksumCRC32C", "ChecksumCRC64NVME", "ChecksumSHA1", "ChecksumSHA256")


@dataclass(frozen=True, slots=True)
class CompletedPart:
    part_number: int
    etag: str
    checksums: dict[str, str] = field(default_factory=dict)  # element name -> value


# --- escaping --------------------------------------------------------------------------------

# S3 writes C0 controls as hexadecimal character references (`&#x1b;`), even the
# ones XML 1.0 forbids, so a listing holding such a key is not well-formed XML:
# S3's documentation warns that "a 200 OK response can contain valid or invalid
# XML", and that is why SDKs ask for encoding-type=url.  We do the same, so such a
# client fails here exactly as it fails against S3, and \r survives a round trip.
_ESCAPES: dict[int, str] = {ord("&"): "&amp;", ord("<"): "&lt;", ord(">"): "&gt;", ord('"'): "&quot;"}
_ESCAPES.update({c: f"&#x{c:x};" for c in range(0x20)})
_ESCAPES.update({c: f"&#x{c:x};" for c in (*range(0xD800, 0xE000), 0xFFFE, 0xFFFF)})


def xml_escape(text: str) -> str:
    """Text or attribute content as S3 writes it."""
    return text.translate(_ESCAPES)


def url_encode(text: str) -> str:
    """S3's encoding-type=url form: Java's URLEncoder, but `/` left as it is.

    Measured against S3: `a b` -> `a+b`, `a+b` -> `a%2Bb`, `100%` -> `100%25`,
    non-ASCII as UTF-8 percent escapes, `/` unescaped.  `*` kept and `~` escaped
    follow URLEncoder; either way botocore's unquote_plus reads them back.
    """
    return quote_plus(text, safe="/*", encoding="utf-8", errors="surrogatepass").replace("~", "%7E")


def _el(name: str, text: str) -> str:
    return f"<{name}>{xml_escape(text)}</{name}>"


def _bool(value: bool) -> str:
    return "true" if value else "false"


# --- parsing helpers ---------------------------------------------------------------------------


def _local(tag: object) -> str:
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def _namespace(tag: str) -> str | None:
    return tag[1:].split("}", 1)[0] if tag.startswith("{") else None


def _fromstring(body: bytes) -> ET.Element:
    """defusedxml with DTDs forbidden: a DOCTYPE (and so every entity bomb and
    external entity) is refused before expat expands anything."""
    return SafeET.fromstring(body, forbid_dtd=True, forbid_entities=True, forbid_external=True)


# Everything expat, defusedxml or a bad encoding declaration can raise on bad input.
_PARSE_ERRORS = (ET.ParseError, DefusedXmlException, ValueError, LookupError)


def _malformed() -> S3Error:
    return S3Error("MalformedXML", _MALFORMED_MESSAGE)


def _parse_client(body: bytes, root: str, limit: int) -> ET.Element:
    """A client's request body: oversized, malformed, or the wrong document -> 4xx."""
    if len(body) > limit:
        raise S3Error("MaxMessageLengthExceeded")
    try:
        element = _fromstring(body)
    except _PARSE_ERRORS:
        raise _malformed() from None
    if _local(element.tag) != root or _namespace(element.tag) not in (None, S3_NS):
        raise _malformed()
    return element


def _parse_origin(body: bytes, root: str) -> ET.Element:
    """The origin's answer: garbage from it is our failure (500), not the client's."""
    try:
        element = _fromstring(body)
    except _PARSE_ERRORS:
        raise S3Error("InternalError") from None
    if _local(element.tag) != root:
        raise S3Error("InternalError")
    return element


def _children(element: ET.Element, name: str) -> Iterator[ET.Element]:
    return (child for child in element if _local(child.tag) == name)


def _child(element: ET.Element, name: str) -> ET.Element | None:
    return next(_children(element, name), None)


def _text(element: ET.Element, name: str) -> str | None:
    """The text of the first child called `name`: None if absent, "" if empty."""
    child = _child(element, name)
    if child is None:
        return None
    return child.text or ""


def _int(value: str | None) -> int | None:
    """A number in the origin's answer; a non-number there is the origin's fault."""
    if value is None:
        return None
    try:
        return int(value.strip())
    except ValueError:
        raise S3Error("InternalError") from None


def _flag(value: str | None) -> bool | None:
    return None if value is None else value.strip().lower() == "true"


# --- errors ------------------------------------------------------------------------------------


def error_document(
    code: str,
    message: str,
    *,
    resource: str | None,
    request_id: str,
    extra: dict[str, str] | None = None,
    host_id: str | None = None,
) -> bytes:
    """S3's error body: no namespace; Code, Message, the error's own elements
    (S3 writes e.g. RangeRequested, ActualObjectSize), Resource, RequestId, HostId."""
    parts = [_DECLARATION, "<Error>", _el("Code", code), _el("Message", message)]
    parts.extend(_el(name, value) for name, value in (extra or {}).items())
    if resource:
        parts.append(_el("Resource", resource))
    parts.append(_el("RequestId", request_id))
    if host_id is not None:
        parts.append(_el("HostId", host_id))
    parts.append("</Error>")
    return "".join(parts).encode("utf-8")


# --- ListBuckets ----------------------------------------------------------------------------------


def _parse_owner(element: ET.Element | None) -> Owner | None:
    if element is None:
        return None
    return Owner(id=_text(element, "ID"), display_name=_text(element, "DisplayName"))


def _render_owner(owner: Owner) -> str:
    inner = ""
    if owner.id is not None:
        inner += _el("ID", owner.id)
    if owner.display_name is not None:
        inner += _el("DisplayName", owner.display_name)
    return f"<Owner>{inner}</Owner>"


def parse_list_buckets(body: bytes) -> ListBucketsResult:
    root = _parse_origin(body, "ListAllMyBucketsResult")
    buckets: list[Bucket] = []
    container = _child(root, "Buckets")
    if container is not None:
        for bucket in _children(container, "Bucket"):
            buckets.append(Bucket(
                name=_text(bucket, "Name") or "",
                creation_date=_text(bucket, "CreationDate") or "",
                bucket_region=_text(bucket, "BucketRegion"),
            ))
    return ListBucketsResult(
        owner=_parse_owner(_child(root, "Owner")),
        buckets=buckets,
        continuation_token=_text(root, "ContinuationToken"),
        prefix=_text(root, "Prefix"),
    )


def render_list_buckets(result: ListBucketsResult) -> bytes:
    parts = [_DECLARATION, f'<ListAllMyBucketsResult xmlns="{S3_NS}">']
    if result.owner is not None:
        parts.append(_render_owner(result.owner))
    parts.append("<Buckets>")
    for bucket in result.buckets:
        parts.append("<Bucket>" + _el("Name", bucket.name) + _el("CreationDate", bucket.creation_date))
        if bucket.bucket_region is not None:
            parts.append(_el("BucketRegion", bucket.bucket_region))
        parts.append("</Bucket>")
    parts.append("</Buckets>")
    if result.continuation_token is not None:
        parts.append(_el("ContinuationToken", result.continuation_token))
    if result.prefix is not None:
        parts.append(_el("Prefix", result.prefix))
    parts.append("</ListAllMyBucketsResult>")
    return "".join(parts).encode("utf-8")


# --- ListObjects v1 / v2 --------------------------------------------------------------------------

_MAX_INT32 = 2**31 - 1
_INTEGER = re.compile(r"[+-]?[0-9]+", re.ASCII)


def validate_max_keys(value: str | None) -> int:
    """The max-keys query parameter as S3 checks it (default 1000).

    Not an int32 -> "Provided max-keys not an integer or within integer range";
    negative -> "Argument maxKeys must be an integer between 0 and 2147483647".
    Values above 1000 are returned as asked: S3 never lists more than 1000 per
    page, which is for the caller to apply when it asks the origin.
    """
    if value is None:
        return 1000
    if _INTEGER.fullmatch(value) is None or not -(2**31) <= int(value) <= _MAX_INT32:
        raise S3Error("InvalidArgument", "Provided max-keys not an integer or within integer range",
                      extra={"ArgumentName": "max-keys", "ArgumentValue": value})
    number = int(value)
    if number < 0:
        raise S3Error("InvalidArgument", "Argument maxKeys must be an integer between 0 and 2147483647",
                      extra={"ArgumentName": "maxKeys", "ArgumentValue": str(number)})
    return number


def parse_list_objects(body: bytes) -> ListPage:
    """The origin's ListBucketResult (v1 or v2), URL-decoded when it says EncodingType=url."""
    root = _parse_origin(body, "ListBucketResult")
    encoding = _text(root, "EncodingType")
    decode: Callable[[str], str] = unquote_plus if encoding == "url" else _identity

    def decoded(name: str) -> str | None:
        value = _text(root, name)
        return None if value is None else decode(value)

    contents = []
    for item in _children(root, "Contents"):
        restore = _child(item, "RestoreStatus")
        contents.append(ObjectEntry(
            key=decode(_text(item, "Key") or ""),
            last_modified=_text(item, "LastModified") or "",
            etag=_text(item, "ETag") or "",
            size=_int(_text(item, "Size")) or 0,
            storage_class=_text(item, "StorageClass") or "STANDARD",
            owner=_parse_owner(_child(item, "Owner")),
            checksum_algorithm=tuple(c.text or "" for c in _children(item, "ChecksumAlgorithm")),
            checksum_type=_text(item, "ChecksumType"),
            restore_status=None if restore is None else RestoreStatus(
                is_restore_in_progress=bool(_flag(_text(restore, "IsRestoreInProgress"))),
                restore_expiry_date=_text(restore, "RestoreExpiryDate"),
            ),
        ))
    prefixes = [decode(_text(cp, "Prefix") or "") for cp in _children(root, "CommonPrefixes")]
    return ListPage(
        contents=contents,
        common_prefixes=prefixes,
        is_truncated=bool(_flag(_text(root, "IsTruncated"))),
        next_marker=decoded("NextMarker"),
        next_continuation_token=_text(root, "NextContinuationToken"),
        name=_text(root, "Name"),
        prefix=decoded("Prefix"),
        delimiter=decoded("Delimiter"),
        marker=decoded("Marker"),
        start_after=decoded("StartAfter"),
        continuation_token=_text(root, "ContinuationToken"),
        max_keys=_int(_text(root, "MaxKeys")),
        key_count=_int(_text(root, "KeyCount")),
        encoding_type=encoding,
    )


def _identity(text: str) -> str:
    return text


def _encoder(encoding_type: str | None) -> Callable[[str], str]:
    return url_encode if encoding_type == "url" else _identity


def _render_contents(page: ListPage, encode: Callable[[str], str], *, with_owner: bool) -> Iterator[str]:
    # Order measured on S3's wire: Key, LastModified, ETag, ChecksumAlgorithm,
    # ChecksumType, Size, Owner, StorageClass.
    for item in page.contents:
        yield "<Contents>" + _el("Key", encode(item.key)) + _el("LastModified", item.last_modified) + _el("ETag", item.etag)
        for algorithm in item.checksum_algorithm:
            yield _el("ChecksumAlgorithm", algorithm)
        if item.checksum_type is not None:
            yield _el("ChecksumType", item.checksum_type)
        yield _el("Size", str(item.size))
        if with_owner and item.owner is not None:
            yield _render_owner(item.owner)
        yield _el("StorageClass", item.storage_class)
        if item.restore_status is not None:
            status = item.restore_status
            yield "<RestoreStatus>" + _el("IsRestoreInProgress", _bool(status.is_restore_in_progress))
            if status.restore_expiry_date is not None:
                yield _el("RestoreExpiryDate", status.restore_expiry_date)
            yield "</RestoreStatus>"
        yield "</Contents>"
    for prefix in page.common_prefixes:
        yield "<CommonPrefixes>" + _el("Prefix", encode(prefix)) + "</CommonPrefixes>"


def render_list_objects_v2(
    page: ListPage,
    *,
    bucket: str,
    prefix: str | None,
    delimiter: str | None,
    max_keys: int,
    continuation_token: str | None,
    start_after: str | None,
    fetch_owner: bool,
    encoding_type: str | None,
) -> bytes:
    """ListObjectsV2 as S3 answers it, echoing the client's own parameters.

    StartAfter is echoed only when no continuation token displaces it;
    NextContinuationToken only on a truncated page; Delimiter only when non-empty;
    Owner only with fetch-owner=true.
    """
    encode = _encoder(encoding_type)
    parts = [_DECLARATION, f'<ListBucketResult xmlns="{S3_NS}">', _el("Name", bucket), _el("Prefix", encode(prefix or ""))]
    if start_after and continuation_token is None:
        parts.append(_el("StartAfter", encode(start_after)))
    if continuation_token is not None:
        parts.append(_el("ContinuationToken", continuation_token))
    if page.is_truncated and page.next_continuation_token:
        parts.append(_el("NextContinuationToken", page.next_continuation_token))
    parts.append(_el("KeyCount", str(len(page.contents) + len(page.common_prefixes))))
    parts.append(_el("MaxKeys", str(max_keys)))
    if delimiter:
        parts.append(_el("Delimiter", encode(delimiter)))
    if encoding_type is not None:
        parts.append(_el("EncodingType", encoding_type))
    parts.append(_el("IsTruncated", _bool(page.is_truncated)))
    parts.extend(_render_contents(page, encode, with_owner=fetch_owner))
    parts.append("</ListBucketResult>")
    return "".join(parts).encode("utf-8")


def render_list_objects_v1(
    page: ListPage,
    *,
    bucket: str,
    prefix: str | None,
    delimiter: str | None,
    max_keys: int,
    marker: str | None,
    encoding_type: str | None,
) -> bytes:
    """ListObjects (v1) as S3 answers it.

    Marker is always present (empty when none was sent).  NextMarker appears only
    on a truncated page of a delimited listing, as S3 documents; when the origin
    gave none it is the last key or common prefix of the page.
    """
    encode = _encoder(encoding_type)
    parts = [_DECLARATION, f'<ListBucketResult xmlns="{S3_NS}">', _el("Name", bucket),
             _el("Prefix", encode(prefix or "")), _el("Marker", encode(marker or ""))]
    if delimiter and page.is_truncated:
        next_marker = page.next_marker or _last_entry(page)
        if next_marker is not None:
            parts.append(_el("NextMarker", encode(next_marker)))
    parts.append(_el("MaxKeys", str(max_keys)))
    if delimiter:
        parts.append(_el("Delimiter", encode(delimiter)))
    if encoding_type is not None:
        parts.append(_el("EncodingType", encoding_type))
    parts.append(_el("IsTruncated", _bool(page.is_truncated)))
    parts.extend(_render_contents(page, encode, with_owner=True))
    parts.append("</ListBucketResult>")
    return "".join(parts).encode("utf-8")


def _last_entry(page: ListPage) -> str | None:
    candidates = [c for c in (page.contents[-1].key if page.contents else None,
                              page.common_prefixes[-1] if page.common_prefixes else None) if c is not None]
    # Code point order is UTF-8 byte order, which is S3's listing order.
    return max(candidates) if candidates else None


# --- DeleteObjects -------------------------------------------------------------------------------


def parse_delete_objects(body: bytes, *, max_keys: int = 1000, limit: int = DEFAULT_XML_LIMIT) -> DeleteRequest:
    """A client's <Delete>.  No objects, or more than `max_keys`, is MalformedXML
    (S3's answer to a 1001-key request, however surprising)."""
    root = _parse_client(body, "Delete", limit)
    quiet = False
    quiet_text = _text(root, "Quiet")
    if quiet_text is not None:
        value = quiet_text.strip().lower()
        if value not in ("true", "false", "1", "0"):  # xs:boolean
            raise _malformed()
        quiet = value in ("true", "1")
    objects: list[tuple[str, str | None]] = []
    conditions: dict[tuple[str, str | None], DeleteCondition] = {}
    for item in _children(root, "Object"):
        if len(objects) >= max_keys:
            raise _malformed()
        keys = list(_children(item, "Key"))
        if len(keys) != 1:
            raise _malformed()
        key = keys[0].text or ""
        version_id = _text(item, "VersionId")
        condition = DeleteCondition(etag=_text(item, "ETag"), last_modified_time=_text(item, "LastModifiedTime"),
                                    size=_text(item, "Size"))
        objects.append((key, version_id))
        if condition != DeleteCondition():
            conditions[(key, version_id)] = condition
    if not objects:
        raise _malformed()
    return DeleteRequest(quiet=quiet, objects=objects, conditions=conditions)


def render_delete_request(request: DeleteRequest) -> bytes:
    """The <Delete> body to send to the origin, conditions included."""
    parts = [_DECLARATION, f'<Delete xmlns="{S3_NS}">']
    for key, version_id in request.objects:
        parts.append("<Object>" + _el("Key", key))
        if version_id is not None:
            parts.append(_el("VersionId", version_id))
        condition = request.conditions.get((key, version_id))
        if condition is not None:
            if condition.etag is not None:
                parts.append(_el("ETag", condition.etag))
            if condition.last_modified_time is not None:
                parts.append(_el("LastModifiedTime", condition.last_modified_time))
            if condition.size is not None:
                parts.append(_el("Size", condition.size))
        parts.append("</Object>")
    if request.quiet:
        parts.append("<Quiet>true</Quiet>")
    parts.append("</Delete>")
    return "".join(parts).encode("utf-8")


def parse_delete_result(body: bytes) -> DeleteResult:
    """The origin's <DeleteResult>."""
    root = _parse_origin(body, "DeleteResult")
    result = DeleteResult()
    for item in root:
        name = _local(item.tag)
        if name == "Deleted":
            result.deleted.append(DeletedEntry(
                key=_text(item, "Key") or "",
                version_id=_text(item, "VersionId"),
                delete_marker=_flag(_text(item, "DeleteMarker")),
                delete_marker_version_id=_text(item, "DeleteMarkerVersionId"),
            ))
        elif name == "Error":
            result.errors.append(DeleteErrorEntry(
                key=_text(item, "Key") or "",
                code=_text(item, "Code") or "",
                message=_text(item, "Message") or "",
                version_id=_text(item, "VersionId"),
            ))
    return result


def render_delete_result(deleted: Iterable[DeletedEntry], errors: Iterable[DeleteErrorEntry], quiet: bool) -> bytes:
    """S3's <DeleteResult>; in quiet mode only the failures are reported."""
    parts = [_DECLARATION, f'<DeleteResult xmlns="{S3_NS}">']
    if not quiet:
        for entry in deleted:
            parts.append("<Deleted>" + _el("Key", entry.key))
            if entry.version_id is not None:
                parts.append(_el("VersionId", entry.version_id))
            if entry.delete_marker is not None:
                parts.append(_el("DeleteMarker", _bool(entry.delete_marker)))
            if entry.delete_marker_version_id is not None:
                parts.append(_el("DeleteMarkerVersionId", entry.delete_marker_version_id))
            parts.append("</Deleted>")
    for error in errors:
        parts.append("<Error>" + _el("Key", error.key))
        if error.version_id is not None:
            parts.append(_el("VersionId", error.version_id))
        parts.append(_el("Code", error.code) + _el("Message", error.message) + "</Error>")
    parts.append("</DeleteResult>")
    return "".join(parts).encode("utf-8")


# --- CompleteMultipartUpload -----------------------------------------------------------------------


def parse_complete_multipart(body: bytes, *, limit: int = DEFAULT_XML_LIMIT) -> list[CompletedPart]:
    """A client's <CompleteMultipartUpload>, checked the way S3 checks it.

    No parts, or a part without one PartNumber and one ETag -> MalformedXML;
    PartNumber < 1 -> InvalidArgument; not strictly ascending (duplicates
    included) -> InvalidPartOrder; PartNumber > 10000 -> InvalidPart, since no such
    part can have been uploaded.
    """
    root = _parse_client(body, "CompleteMultipartUpload", limit)
    parts: list[CompletedPart] = []
    for item in _children(root, "Part"):
        numbers = list(_children(item, "PartNumber"))
        etags = list(_children(item, "ETag"))
        if len(numbers) != 1 or len(etags) != 1:
            raise _malformed()
        text = (numbers[0].text or "").strip()
        if _INTEGER.fullmatch(text) is None or not -(2**31) <= int(text) <= _MAX_INT32:
            raise _malformed()
        number = int(text)
        if number < 1:
            raise S3Error("InvalidArgument", "PartNumber must be >= 1")
        checksums = {name: value for name in _PART_CHECKSUMS if (value := _text(item, name)) is not None}
        parts.append(CompletedPart(part_number=number, etag=etags[0].text or "", checksums=checksums))
    if not parts:
        raise _malformed()
    for previous, current in zip(parts, parts[1:]):
        if current.part_number <= previous.part_number:
            raise S3Error("InvalidPartOrder",
                          "The list of parts was not in ascending order. Parts must be ordered by part number.")
    if parts[-1].part_number > 10000:
        raise S3Error("InvalidPart", "One or more of the specified parts could not be found.  The part may not "
                      "have been uploaded, or the specified entity tag may not match the part's entity tag.")
    return parts


def render_complete_multipart_request(parts: Iterable[CompletedPart]) -> bytes:
    """The <CompleteMultipartUpload> body to send to the origin, in the SDKs' element order."""
    out = [_DECLARATION, f'<CompleteMultipartUpload xmlns="{S3_NS}">']
    for part in parts:
        out.append("<Part>" + _el("ETag", part.etag))
        out.extend(_el(name, part.checksums[name]) for name in _PART_CHECKSUMS if name in part.checksums)
        out.append(_el("PartNumber", str(part.part_number)) + "</Part>")
    out.append("</CompleteMultipartUpload>")
    return "".join(out).encode("utf-8")


# --- CreateBucket / GetBucketLocation ----------------------------------------------------------------


def parse_create_bucket_configuration(body: bytes, *, limit: int = DEFAULT_XML_LIMIT) -> str | None:
    """The LocationConstraint of a CreateBucket body; None for an empty body or element."""
    if not body.strip():
        return None
    root = _parse_client(body, "CreateBucketConfiguration", limit)
    location = _text(root, "LocationConstraint")
    if location is None:
        return None
    return location.strip() or None


