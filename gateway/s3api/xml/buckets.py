"""ListBuckets (parsed from the origin, rendered for the client) and CreateBucket's configuration."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.s3api.xml.common import (
    _DECLARATION,
    DEFAULT_XML_LIMIT,
    S3_NS,
    Owner,
    _child,
    _children,
    _el,
    _parse_client,
    _parse_origin,
    _parse_owner,
    _render_owner,
    _text,
)


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


def parse_create_bucket_configuration(body: bytes, *, limit: int = DEFAULT_XML_LIMIT) -> str | None:
    """The LocationConstraint of a CreateBucket body; None for an empty body or element."""
    if not body.strip():
        return None
    root = _parse_client(body, "CreateBucketConfiguration", limit)
    location = _text(root, "LocationConstraint")
    if location is None:
        return None
    return location.strip() or None
