"""Iceberg: which metadata file is current, which manifests a snapshot has, and which data and
delete files those manifests hold. The manifest list and manifests are Avro, read with fastavro."""

from __future__ import annotations

import gzip
import io
import re
from collections.abc import Iterable
from typing import Any

import orjson

from gateway.errors import S3Error

_VERSION = re.compile(r"^v?(\d+)[-.]")  # v3.metadata.json (Hadoop tables), 00003-<uuid>.metadata.json (catalogs)
DELETED = 2  # a manifest entry's status: 0 existing, 1 added, 2 deleted


def current_metadata(names: Iterable[str]) -> str | None:
    """Of the file names in a table's metadata/ folder, the metadata file of the highest
    version, None when there is none. (A catalog knows which file is current; without one the
    highest version is the table's state, as Hadoop tables and Trino's file metastore keep it.
    A commit that lost a race may leave a file of the same number: naming the metadata file
    itself instead of the table's folder is exact.)"""
    best: tuple[int, str] | None = None
    for name in names:
        if not (name.endswith(".metadata.json") or name.endswith(".metadata.json.gz")):
            continue
        match = _VERSION.match(name)
        if match is not None and (best is None or (int(match.group(1)), name) > best):
            best = (int(match.group(1)), name)
    return None if best is None else best[1]


def parse_metadata(data: bytes, where: str) -> dict[str, Any]:
    """A table metadata file (gzipped or not) as a document."""
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError:
        document = None
    if not isinstance(document, dict) or "format-version" not in document:
        raise S3Error("InvalidRequest", f"{where} is not an Iceberg table metadata file")
    return document


def snapshot(metadata: dict[str, Any], snapshot_id: int | None, where: str) -> dict[str, Any] | None:
    """The snapshot `snapshot_id` (the current one when None) of a table's metadata; None
    for a table without a snapshot yet (nothing to load). Raises S3Error for an id the table
    does not have (any more: expired)."""
    wanted = metadata.get("current-snapshot-id") if snapshot_id is None else snapshot_id
    if wanted is None or wanted == -1:
        if snapshot_id is not None:
            raise S3Error("InvalidArgument", f"snapshot {snapshot_id} is not in {where}")
        return None
    for entry in metadata.get("snapshots") or ():
        if entry.get("snapshot-id") == wanted:
            return dict(entry)
    raise S3Error("InvalidArgument", f"snapshot {wanted} is not in {where} (expired?)")


def manifest_list(data: bytes, where: str) -> list[str]:
    """The manifests (data and delete manifests alike) a manifest list names."""
    return [str(entry["manifest_path"]) for entry in _records(data, where)]


def manifest_entries(data: bytes, where: str) -> list[tuple[str, int, dict[str, object]]]:
    """(file location, size, partition values) of the live data and delete files of a
    manifest: entries whose status is not "deleted"."""
    files = []
    for entry in _records(data, where):
        if entry.get("status") == DELETED:
            continue
        data_file = entry["data_file"]
        partition = data_file.get("partition") or {}
        files.append((str(data_file["file_path"]), int(data_file["file_size_in_bytes"]), dict(partition)))
    return files


def _records(data: bytes, where: str) -> list[dict[str, Any]]:
    import fastavro  # the `tables` extra: only a table load needs it

    try:
        return [record for record in fastavro.reader(io.BytesIO(data)) if isinstance(record, dict)]
    except Exception as exc:  # whatever fastavro says of bytes that are not a manifest
        raise S3Error("InvalidRequest", f"{where} is not an Iceberg manifest file ({exc})") from None
