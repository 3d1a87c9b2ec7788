"""Small Iceberg and Delta tables written by hand for the table-load tests: Parquet data files from
pyarrow, Iceberg manifests and manifest lists in Avro from fastavro (the fields gateway.tables reads,
as the Iceberg spec names them), Delta commits as JSON lines and a checkpoint from pyarrow."""

from __future__ import annotations

import datetime
import io
import json
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq

_DATA_FILE = {"type": "record", "name": "r2", "fields": [
    {"name": "content", "type": "int"},
    {"name": "file_path", "type": "string"},
    {"name": "file_format", "type": "string"},
    {"name": "partition", "type": {"type": "record", "name": "r102", "fields": [
        {"name": "dt", "type": ["null", {"type": "int", "logicalType": "date"}]}]}},
    {"name": "record_count", "type": "long"},
    {"name": "file_size_in_bytes", "type": "long"},
]}
MANIFEST = fastavro.parse_schema({"type": "record", "name": "manifest_entry", "fields": [
    {"name": "status", "type": "int"},
    {"name": "snapshot_id", "type": ["null", "long"]},
    {"name": "data_file", "type": _DATA_FILE},
]})
MANIFEST_LIST = fastavro.parse_schema({"type": "record", "name": "manifest_file", "fields": [
    {"name": "manifest_path", "type": "string"},
    {"name": "manifest_length", "type": "long"},
    {"name": "partition_spec_id", "type": "int"},
    {"name": "content", "type": "int"},
    {"name": "added_snapshot_id", "type": "long"},
]})


def parquet_file(rows: int, seed: int = 0) -> bytes:
    """A Parquet file of `rows` rows in row groups of 10,000, with page indexes."""
    table = pa.table({"id": list(range(seed, seed + rows)), "name": [f"name-{i:08d}" for i in range(rows)]})
    out = io.BytesIO()
    pq.write_table(table, out, row_group_size=10_000, write_page_index=True, compression="none")
    return out.getvalue()


def avro(schema: Any, records: list[dict[str, Any]]) -> bytes:
    out = io.BytesIO()
    fastavro.writer(out, schema, records)
    return out.getvalue()


def manifest(entries: list[tuple[int, str, int, str | None, int]]) -> bytes:
    """A manifest of (status, s3 location, size, dt as YYYY-MM-DD or None, content) entries."""
    return avro(MANIFEST, [{
        "status": status, "snapshot_id": 1,
        "data_file": {"content": content, "file_path": path, "file_format": "PARQUET",
                      "partition": {"dt": None if dt is None else datetime.date.fromisoformat(dt)},
                      "record_count": 1, "file_size_in_bytes": size}}
        for status, path, size, dt, content in entries])


def manifest_list(paths: list[str]) -> bytes:
    return avro(MANIFEST_LIST, [{"manifest_path": path, "manifest_length": 1, "partition_spec_id": 0,
                                 "content": 0, "added_snapshot_id": 1} for path in paths])


def iceberg_metadata(location: str, snapshots: dict[int, str], current: int | None) -> bytes:
    """A format-version 2 metadata file with these {snapshot id: manifest list location}."""
    return json.dumps({
        "format-version": 2, "table-uuid": "9c12d441-03fe-4693-9a96-a0705ddf69c1", "location": location,
        "last-sequence-number": len(snapshots), "last-updated-ms": 1, "last-column-id": 2,
        "current-snapshot-id": -1 if current is None else current,
        "snapshots": [{"snapshot-id": sid, "sequence-number": n + 1, "timestamp-ms": n + 1,
                       "manifest-list": listing, "summary": {"operation": "append"}}
                      for n, (sid, listing) in enumerate(snapshots.items())],
    }).encode()


def delta_commit(*actions: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(action).encode() + b"\n" for action in actions)


def delta_add(path: str, size: int, day: str | None = None, dv: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"add": {"path": path, "size": size, "partitionValues": {} if day is None else {"day": day},
                    "modificationTime": 1, "dataChange": True, "deletionVector": dv}}


def delta_remove(path: str) -> dict[str, Any]:
    return {"remove": {"path": path, "deletionTimestamp": 2, "dataChange": True}}


def delta_checkpoint(adds: list[dict[str, Any]]) -> bytes:
    """A classic checkpoint: one row per live file (column add), and a protocol row."""
    add_type = pa.struct([("path", pa.string()), ("size", pa.int64()),
                          ("partitionValues", pa.map_(pa.string(), pa.string())),
                          ("modificationTime", pa.int64()), ("dataChange", pa.bool_())])
    protocol_type = pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32())])
    rows = [{"path": a["add"]["path"], "size": a["add"]["size"],
             "partitionValues": list(a["add"]["partitionValues"].items()), "modificationTime": 1,
             "dataChange": False} for a in adds]
    table = pa.table({"add": pa.array([*rows, None], add_type),
                      "protocol": pa.array([None] * len(rows) + [{"minReaderVersion": 1, "minWriterVersion": 2}],
                                           protocol_type)})
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()
