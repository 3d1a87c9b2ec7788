"""POST Object's documents: the `tagging` field a form may carry, and the 201 answer."""

from __future__ import annotations

from gateway.errors import S3Error
from gateway.s3api.xml.common import DEFAULT_XML_LIMIT, S3_NS, _children, _el, _parse_client, _text

MAX_TAGS = 10  # S3's limit per object


def parse_tagging(body: bytes, *, limit: int = DEFAULT_XML_LIMIT) -> list[tuple[str, str]]:
    """The (key, value) pairs of a <Tagging><TagSet><Tag>... document."""
    root = _parse_client(body, "Tagging", limit)
    tags: list[tuple[str, str]] = []
    for tag_set in _children(root, "TagSet"):
        for tag in _children(tag_set, "Tag"):
            key, value = _text(tag, "Key"), _text(tag, "Value")
            if key is None:
                raise S3Error("MalformedXML")
            tags.append((key, value or ""))
    if len(tags) > MAX_TAGS or len({k for k, _ in tags}) != len(tags):
        raise S3Error("InvalidTag", "Object tags must be at most 10, each key once.")
    return tags


def render_post_response(location: str, bucket: str, key: str, etag: str) -> bytes:
    """The body of a 201 answer to POST Object (success_action_status=201)."""
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<PostResponse xmlns="{S3_NS}">{_el("Location", location)}{_el("Bucket", bucket)}'
            f'{_el("Key", key)}{_el("ETag", etag)}</PostResponse>').encode()
