"""Delta Lake: the current version of a table from its `_delta_log` (the newest checkpoint,
read with pyarrow, then the JSON commits after it), as the data and deletion-vector files
that version is made of."""

from __future__ import annotations

import io
import re
from collections.abc import Iterable
from typing import Any

import orjson

from gateway.errors import S3Error

LOG = "_delta_log/"
_COMMIT = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet$")
_V2_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint\.[0-9a-fA-F-]{36}\.(json|parquet)$")
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


class Log:
    """What a listing of `_delta_log/` says: the newest complete checkpoint (its version and
    file names) and the commits after it, in order."""

    def __init__(self, names: Iterable[str], version: int | None = None) -> None:
        commits: dict[int, str] = {}
        parts: dict[tuple[int, int], set[str]] = {}  # (version, parts) -> names found
        v2: set[int] = set()
        for name in names:
            if (commit := _COMMIT.match(name)) is not None:
                commits[int(commit.group(1))] = name
            elif (checkpoint := _CHECKPOINT.match(name)) is not None:
                parts.setdefault((int(checkpoint.group(1)), int(checkpoint.group(3) or 1)), set()).add(name)
            elif (other := _V2_CHECKPOINT.match(name)) is not None:
                v2.add(int(other.group(1)))
        newest = max(commits, default=None)
        if version is not None and version not in commits and not any(v == version for v, _ in parts):
            raise S3Error("InvalidArgument", f"version {version} is not in the table's log (cleaned up?)")
        self.version = version if version is not None else newest
        complete = [key for key, found in parts.items() if len(found) == key[1]
                    and (self.version is None or key[0] <= self.version)]
        self.checkpoint_version, count = max(complete, default=(-1, 0))
        if self.version is None and self.checkpoint_version >= 0:
            self.version = self.checkpoint_version
        if self.version is None:
            raise S3Error("InvalidRequest", "no Delta commit or checkpoint in _delta_log/: not a Delta table")
        if any(self.checkpoint_version < v <= self.version for v in v2):
            raise S3Error("NotImplemented", "the table has a V2 checkpoint (checkpointPolicy v2), which this "
                                            "gateway does not read yet")
        self.checkpoint = sorted(parts.get((self.checkpoint_version, count), ()))
        missing = [v for v in range(self.checkpoint_version + 1, self.version + 1) if v not in commits]
        if missing:
            raise S3Error("InvalidRequest", f"the table's log lacks commit {missing[0]} and has no checkpoint "
                                            "after it")
        self.commits = [commits[v] for v in range(self.checkpoint_version + 1, self.version + 1)]


class Replay:
    """The table's files as actions add and remove them: keyed by (path, deletion vector) as
    the protocol says, the last action winning."""

    def __init__(self) -> None:
        self.files: dict[tuple[str, str], dict[str, Any]] = {}

    def checkpoint(self, data: bytes, where: str) -> None:
        import pyarrow.parquet as pq  # the `tables` extra: only a table load needs it

        try:
            table = pq.read_table(io.BytesIO(data), columns=["add"])
        except Exception as exc:  # whatever pyarrow says of bytes that are not a checkpoint
            raise S3Error("InvalidRequest", f"{where} is not a Delta checkpoint ({exc})") from None
        for row in table.column("add").to_pylist():
            if row is not None and row.get("path") is not None:
                self.action("add", row)

    def commit(self, data: bytes, where: str) -> None:
        for line in data.splitlines():
            if not line.strip():
                continue
            try:
                action = orjson.loads(line)
            except orjson.JSONDecodeError:
                raise S3Error("InvalidRequest", f"{where} is not a Delta commit (a line is not JSON)") from None
            for kind in ("add", "remove"):
                if isinstance(action, dict) and isinstance(action.get(kind), dict):
                    self.action(kind, action[kind])

    def action(self, kind: str, fields: dict[str, Any]) -> None:
        key = (str(fields["path"]), _dv_id(fields.get("deletionVector")))
        if kind == "add":
            self.files[key] = fields
        else:
            self.files.pop(key, None)

    def live(self) -> list[tuple[str, int | None, dict[str, object], list[str]]]:
        """(path as the log has it, size, partition values, deletion-vector paths) per live file;
        a DV path is absolute, or relative to the table's folder and not escaped."""
        found = []
        for (path, _), fields in sorted(self.files.items()):
            values = fields.get("partitionValues") or {}
            if isinstance(values, list):  # a map read from Parquet: [(key, value), ...]
                values = dict(values)
            dv = _dv_path(fields.get("deletionVector"))
            size = fields.get("size")
            found.append((path, None if size is None else int(size), dict(values), [] if dv is None else [dv]))
        return found


def _dv_id(dv: Any) -> str:
    if not isinstance(dv, dict):
        return ""
    return f"{dv.get('storageType')}{dv.get('pathOrInlineDv')}" + (f"@{dv['offset']}" if dv.get("offset") else "")


def _dv_path(dv: Any) -> str | None:
    """Where a deletion vector is stored: `p` an absolute path, `u` a file named by a UUID
    (Z85-encoded in the last 20 characters, a folder prefix before them); `i` inline: nowhere."""
    if not isinstance(dv, dict):
        return None
    kind, value = dv.get("storageType"), str(dv.get("pathOrInlineDv") or "")
    if kind == "p":
        return value
    if kind == "u" and len(value) >= 20:
        prefix, encoded = value[:-20], value[-20:]
        raw = _z85_decode(encoded).hex()
        uuid = f"{raw[:8]}-{raw[8:12]}-{raw[12:16]}-{raw[16:20]}-{raw[20:]}"
        return (f"{prefix}/" if prefix else "") + f"deletion_vector_{uuid}.bin"
    return None


def _z85_decode(text: str) -> bytes:
    out = bytearray()
    for start in range(0, len(text), 5):
        value = 0
        for char in text[start:start + 5]:
            value = value * 85 + _Z85.index(char)
        out += value.to_bytes(4, "big")
    return bytes(out)
