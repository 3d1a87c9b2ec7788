"""CompleteMultipartUpload: the client's part list checked as S3 checks it, and re-rendered for the origin."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from gateway.errors import S3Error
from gateway.s3api.xml.common import (
    _DECLARATION,
    DEFAULT_XML_LIMIT,
    S3_NS,
    _children,
    _el,
    _is_int32,
    _malformed,
    _parse_client,
    _text,
)

# Checksum elements of a <Part>, in the order the AWS SDKs write them.
_PART_CHECKSUMS = ("ChecksumCRC32", "ChecksumCRC32C", "ChecksumCRC64NVME", "ChecksumSHA1", "ChecksumSHA256")


@dataclass(frozen=True, slots=True)
class CompletedPart:
    part_number: int
    etag: str
    checksums: dict[str, str] = field(default_factory=dict)  # element name -> value


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
        if not _is_int32(text):
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
