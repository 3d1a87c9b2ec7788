"""DeleteObjects: the client's <Delete> parsed and re-rendered for the origin, the origin's <DeleteResult> parsed and rendered."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from gateway.s3api.xml.common import (
    _DECLARATION,
    DEFAULT_XML_LIMIT,
    S3_NS,
    _bool,
    _children,
    _el,
    _flag,
    _local,
    _malformed,
    _parse_client,
    _parse_origin,
    _text,
)


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
