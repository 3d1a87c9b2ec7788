"""Read traces for the advisor: the gateway's own JSON access log, or a generic CSV.

A trace becomes a list of `Read`s: one GET of the inclusive byte range [start, end] of one
version of one object, with the object's size when it is known. Block indexes are then
`gateway.store.blocks.block_span(start, end, block_size)`, as the gateway computes them.

Access log lines (`gateway.access`, one JSON object per line; any text before the first
`{` on a line, such as a journald or syslog prefix, is ignored):

- Only GetObject answers with status 200 or 206 and some body bytes are reads. Other
  operations are skipped, except that a PutObject, PostObject, CopyObject, DeleteObject or
  CompleteMultipartUpload that succeeded on a key gives that key a new version, as a new
  ETag does in the gateway: its old blocks are never hit again. (DeleteObjects names its
  keys only in its body, and writes made behind the gateway are not in its log: both
  are missed, so the simulation may hit blocks the gateway would have renamed.)
- The range read is derived from `range` (the client's Range header) and `bytes` (body
  bytes sent): no range -> [0, bytes-1] and the object size is `bytes`; `bytes=a-b` ->
  [a, a+bytes-1] (S3 clamps b to the object's end, so if fewer than b-a+1 bytes came, the
  object ends there and its size is a+bytes); `bytes=a-` -> [a, a+bytes-1] and size
  a+bytes; `bytes=-n` (a suffix) -> the last `bytes` bytes, which needs the object size.
- The object size comes from a `size` field when the line has one (proposed for the
  access log: the object's total size, known to the gateway for every GET); otherwise it
  is what the whole trace tells about the object (above), else the largest byte offset
  read from it plus one, a lower bound. The size only matters for the length of the
  object's last block and for suffix ranges; a suffix read of an object whose size
  the trace never tells is dropped and counted in `TraceStats.unplaced`.
- An optional `time` field (seconds, or an ISO 8601 string) gives the period the trace
  covers; without it lines are in log order and the period is unknown.

CSV traces: a header naming the columns is optional; without one the columns are
`time,key,offset,length[,size]`. `key` may be `bucket/key`; `length` 0 or empty reads to
the end of the object (then `size` is needed).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TextIO

import orjson


class TraceError(ValueError):
    """The trace cannot be read; the message says where and why, on one line."""


@dataclass(slots=True)
class Read:
    """One GET: bytes [start, end] (inclusive) of one object version; size -1 if unknown."""

    bucket: str
    key: str
    version: int
    start: int
    end: int
    size: int = -1
    time: float | None = None
    cache: str | None = None  # the access log's `cache` field (x-cache), for validation


@dataclass(slots=True)
class TraceStats:
    lines: int = 0
    reads: int = 0
    writes: int = 0
    skipped: int = 0  # lines that are not successful GETs with a body (HEAD, LIST, 304, errors, ...)
    unplaced: int = 0  # suffix reads of objects whose size the trace never tells
    sized_by_field: int = 0  # reads whose object size came from a `size` field
    sized_by_trace: int = 0  # ... from other lines of the trace (whole reads, clamped or open ranges)
    sized_by_bound: int = 0  # ... only a lower bound (largest offset read + 1)
    first_time: float | None = None
    last_time: float | None = None

    @property
    def period(self) -> float | None:
        """Seconds the trace covers, when its lines carry times."""
        if self.first_time is None or self.last_time is None or self.last_time <= self.first_time:
            return None
        return self.last_time - self.first_time


@dataclass(slots=True)
class Trace:
    reads: list[Read] = field(default_factory=list)
    stats: TraceStats = field(default_factory=TraceStats)


_RANGE = re.compile(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*")
_WRITES = frozenset({"PutObject", "PostObject", "CopyObject", "DeleteObject", "CompleteMultipartUpload"})


def _time(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class _Builder:
    """Collects raw reads, then settles object sizes once the whole trace is known."""

    def __init__(self) -> None:
        self.trace = Trace()
        self.versions: dict[tuple[str, str], int] = {}
        self.exact: dict[tuple[str, str, int], int] = {}
        self.bound: dict[tuple[str, str, int], int] = {}
        # (read, suffix length or 0, size from a field or -1)
        self.pending: list[tuple[Read, int, int]] = []

    def see_time(self, when: float | None) -> None:
        if when is None:
            return
        stats = self.trace.stats
        stats.first_time = when if stats.first_time is None else min(stats.first_time, when)
        stats.last_time = when if stats.last_time is None else max(stats.last_time, when)

    def write(self, bucket: str, key: str) -> None:
        self.trace.stats.writes += 1
        self.versions[(bucket, key)] = self.versions.get((bucket, key), 0) + 1

    def read(self, bucket: str, key: str, start: int, length: int, *, to_end: bool, suffix: int = 0,
             size: int = -1, when: float | None = None, cache: str | None = None) -> None:
        """`length` bytes from `start` (suffix > 0: the last `length` bytes, start unknown yet);
        `to_end`: the read reached the object's end."""
        version = self.versions.get((bucket, key), 0)
        ident = (bucket, key, version)
        if size >= 0:
            self.exact[ident] = size
        if suffix:
            if length < suffix:  # S3 sends the whole object when it is shorter than the suffix
                self.exact.setdefault(ident, length)
        else:
            end = start + length - 1
            if to_end:
                self.exact.setdefault(ident, end + 1)
            if end + 1 > self.bound.get(ident, 0):
                self.bound[ident] = end + 1
        read = Read(bucket, key, version, start, start + length - 1, size, when, cache)
        self.pending.append((read, length if suffix else 0, size))
        self.trace.stats.reads += 1

    def finish(self) -> Trace:
        stats = self.trace.stats
        reads = self.trace.reads
        for read, suffix_length, field_size in self.pending:
            ident = (read.bucket, read.key, read.version)
            if field_size >= 0:
                stats.sized_by_field += 1
                size = field_size
            elif ident in self.exact:
                stats.sized_by_trace += 1
                size = self.exact[ident]
            else:
                size = self.bound.get(ident, -1)
                if size < 0:
                    stats.unplaced += 1
                    continue
                stats.sized_by_bound += 1
            if suffix_length:
                read.start = size - suffix_length
                read.end = size - 1
            read.size = max(size, read.end + 1)
            reads.append(read)
        self.pending = []
        return self.trace


def read_access_log(lines: Iterable[str], *, name: str = "access log") -> Trace:
    """Parse the gateway's JSON access log lines (see the module docstring)."""
    builder = _Builder()
    stats = builder.trace.stats
    json_lines = 0
    first_bad: tuple[int, str] | None = None
    for number, line in enumerate(lines, 1):
        stats.lines += 1
        brace = line.find("{")
        if brace < 0:
            stats.skipped += 1
            continue
        try:
            entry = orjson.loads(line[brace:])
        except orjson.JSONDecodeError as exc:
            stats.skipped += 1
            first_bad = first_bad or (number, str(exc).split(":")[0])
            continue
        if not isinstance(entry, dict) or "status" not in entry or "bucket" not in entry:
            stats.skipped += 1
            first_bad = first_bad or (number, "not an access log entry (no status or bucket)")
            continue
        json_lines += 1
        try:
            _log_entry(builder, entry)
        except (TypeError, ValueError) as exc:
            stats.skipped += 1
            first_bad = first_bad or (number, str(exc))
    if json_lines == 0:
        where = f" (line {first_bad[0]}: {first_bad[1]})" if first_bad else ""
        raise TraceError(f"{name}: no gateway access log lines found in {stats.lines} lines{where}")
    trace = builder.finish()
    if not trace.reads:
        raise TraceError(f"{name}: {json_lines} access log lines but no successful GetObject with a body")
    return trace


def _log_entry(builder: _Builder, entry: dict[str, Any]) -> None:
    status = int(entry["status"])
    operation = entry.get("operation")
    bucket, key = entry.get("bucket"), entry.get("key")
    if not bucket or not key:
        builder.trace.stats.skipped += 1
        return
    when = _time(entry.get("time", entry.get("ts")))
    builder.see_time(when)
    if operation in _WRITES and 200 <= status < 300:
        builder.write(str(bucket), str(key))
        return
    sent = int(entry.get("bytes") or 0)
    method = entry.get("method", "GET")
    if operation not in (None, "GetObject") or method != "GET" or status not in (200, 206) or sent <= 0:
        builder.trace.stats.skipped += 1
        return
    size = int(entry["size"]) if entry.get("size") is not None else -1
    cache = entry.get("cache")
    header = entry.get("range")
    match = _RANGE.fullmatch(header) if header and status == 206 else None
    if match is None or (not match[1] and not match[2]):
        # No range, or one S3 ignored (answered 200 with the whole object).
        builder.read(str(bucket), str(key), 0, sent, to_end=True, size=size, when=when, cache=cache)
    elif not match[1]:
        builder.read(str(bucket), str(key), 0, sent, to_end=True, suffix=int(match[2]), size=size,
                     when=when, cache=cache)
    else:
        first = int(match[1])
        asked = int(match[2]) - first + 1 if match[2] else None
        to_end = asked is None or sent < asked
        builder.read(str(bucket), str(key), first, sent, to_end=to_end, size=size, when=when, cache=cache)


_CSV_COLUMNS = ("time", "key", "offset", "length", "size")


def read_csv_trace(stream: TextIO, *, name: str = "CSV trace") -> Trace:
    """Parse a CSV trace of `time,key,offset,length[,size]` rows (see the module docstring)."""
    builder = _Builder()
    stats = builder.trace.stats
    rows = csv.reader(stream)
    columns: dict[str, int] | None = None
    for number, row in enumerate(rows, 1):
        stats.lines += 1
        if not row or not any(cell.strip() for cell in row) or row[0].lstrip().startswith("#"):
            stats.skipped += 1
            continue
        if columns is None:
            lowered = [cell.strip().lower() for cell in row]
            if "key" in lowered:
                columns = {column: lowered.index(column) for column in _CSV_COLUMNS if column in lowered}
                if "offset" not in columns:
                    raise TraceError(f"{name}: line {number}: the header needs key and offset columns, got {row}")
                continue
            columns = {column: i for i, column in enumerate(_CSV_COLUMNS)}
        try:
            _csv_row(builder, row, columns)
        except (IndexError, ValueError) as exc:
            raise TraceError(f"{name}: line {number}: not time,key,offset,length[,size]: {row!r} ({exc})") from None
    trace = builder.finish()
    if not trace.reads:
        raise TraceError(f"{name}: no reads in {stats.lines} lines")
    return trace


def _csv_row(builder: _Builder, row: list[str], columns: dict[str, int]) -> None:
    def cell(column: str) -> str:
        index = columns.get(column)
        return row[index].strip() if index is not None and index < len(row) else ""

    path = cell("key")
    if not path:
        raise ValueError("empty key")
    bucket, _, key = path.partition("/") if "/" in path else ("", "", path)
    offset = int(cell("offset") or 0)
    length = int(cell("length") or 0)
    size = int(cell("size")) if cell("size") else -1
    when = _time(float(cell("time"))) if cell("time") else None
    builder.see_time(when)
    if offset < 0 or length < 0:
        raise ValueError("negative offset or length")
    if length == 0:
        if size < 0:
            raise ValueError("length 0 reads to the end and needs a size")
        length = size - offset
        if length <= 0:
            return
    if size >= 0 and offset + length > size:
        length = size - offset
        if length <= 0:
            return
    builder.read(bucket or "csv", key, offset, length, to_end=size >= 0 and offset + length == size, size=size,
                 when=when)


def open_trace(path: str, *, csv_format: bool = False) -> Trace:
    """Read a trace file ('-' is stdin); TraceError with one line for anything wrong."""
    import sys

    try:
        stream: TextIO = sys.stdin if path == "-" else open(path, encoding="utf-8", errors="replace", newline="")  # noqa: SIM115
    except OSError as exc:
        raise TraceError(f"{path}: {exc.strerror or exc}") from None
    try:
        if csv_format:
            return read_csv_trace(stream, name=path)
        return read_access_log(_lines(stream), name=path)
    except UnicodeError as exc:
        raise TraceError(f"{path}: not text: {exc}") from None
    finally:
        if stream is not sys.stdin:
            stream.close()


def _lines(stream: TextIO | io.StringIO) -> Iterator[str]:
    for line in stream:
        line = line.strip()
        if line:
            yield line
