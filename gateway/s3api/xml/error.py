"""S3's error document."""

from __future__ import annotations

from gateway.s3api.xml.common import _DECLARATION, _el


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
