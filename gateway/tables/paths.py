"""Where a table's files are: `s3://bucket/key` locations (s3a and s3n too) as (bucket, key),
and the one file a table names, with its size and recorded partition values."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import unquote

from gateway.errors import S3Error

SCHEMES = ("s3://", "s3a://", "s3n://")


@dataclass(frozen=True, slots=True)
class TableFile:
    """A file a table is made of: where it is, its size as the table recorded it (None when
    the table does not say), and the partition values it recorded for it."""

    bucket: str
    key: str
    size: int | None = None
    partition: dict[str, object] = field(default_factory=dict, compare=False, hash=False)


def split_location(location: str) -> tuple[str, str]:
    """`s3://bucket/key` as (bucket, key); raises S3Error InvalidArgument for anything else
    (a table whose files are on another file system cannot be loaded through this gateway)."""
    for scheme in SCHEMES:
        if location.startswith(scheme):
            bucket, _, key = location[len(scheme):].partition("/")
            if bucket:
                return bucket, key
    raise S3Error("InvalidArgument", f"{location!r} is not an s3:// location")


def resolve(bucket: str, base: str, path: str, *, escaped: bool = False) -> tuple[str, str]:
    """A path a table names, absolute (`s3://...`) or relative to the table's folder `base`
    (a key prefix ending in "/"); `escaped`: a relative path is URI-escaped (Delta's)."""
    if "://" in path:
        return split_location(path)
    return bucket, base + (unquote(path) if escaped else path)
