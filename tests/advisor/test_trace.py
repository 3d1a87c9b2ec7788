"""Reading the gateway's access log and CSV traces into reads, and how object sizes are found."""

from __future__ import annotations

import io

import orjson
import pytest

from gateway.advisor.trace import (
    TraceError,
    open_trace,
    read_access_log,
    read_csv_trace,
)


def line(**fields: object) -> str:
    entry = {"request_id": "r", "user": "u", "operation": "GetObject", "method": "GET", "bucket": "b", "key": "k",
             "range": None, "status": 200, "bytes": 0, "cache": "miss", "latency_ms": 1.0}
    entry.update(fields)
    return "INFO gateway.access " + orjson.dumps(entry).decode()


def test_whole_ranged_open_and_suffix_reads() -> None:
    trace = read_access_log([
        line(key="whole", bytes=3000),
        line(key="r", range="bytes=100-199", status=206, bytes=100),
        line(key="r", range="bytes=1000-", status=206, bytes=500),  # open range: r is 1500 bytes
        line(key="s", range="bytes=-10", status=206, bytes=10),  # suffix of an object never sized
        line(key="t", range="bytes=-10", status=206, bytes=10),
        line(key="t", range="bytes=0-99999", status=206, bytes=4000),  # clamped: t is 4000 bytes
        line(key="u", range="bytes=50-149", status=206, bytes=100),  # only a lower bound: 150
        line(key="v", range="bytes=-10", status=206, bytes=10, size=777),  # the proposed size field
    ])
    got = [(r.key, r.start, r.end, r.size) for r in trace.reads]
    assert got == [("whole", 0, 2999, 3000), ("r", 100, 199, 1500), ("r", 1000, 1499, 1500),
                   ("t", 3990, 3999, 4000), ("t", 0, 3999, 4000), ("u", 50, 149, 150), ("v", 767, 776, 777)]
    s = trace.stats
    assert (s.unplaced, s.sized_by_field, s.sized_by_trace, s.sized_by_bound) == (1, 1, 5, 1)


def test_other_lines_are_skipped_and_writes_make_new_versions() -> None:
    trace = read_access_log([
        "uvicorn started",  # not JSON
        line(operation="HeadObject", method="HEAD", bytes=0),
        line(status=304, bytes=0),
        line(status=404, bytes=300),
        line(operation="ListObjectsV2", key=None, bytes=900),
        line(bytes=10),
        line(operation="PutObject", method="PUT", status=200, bytes=0),
        line(bytes=12),
        line(operation="PutObject", method="PUT", status=403, bytes=0),  # refused: same version
        line(bytes=12),
        line(operation="PostObject", method="POST", status=204, bytes=0),  # a form upload of the key
        line(bytes=14),
    ])
    assert [(r.version, r.size) for r in trace.reads] == [(0, 10), (1, 12), (1, 12), (2, 14)]
    assert trace.stats.writes == 2 and trace.stats.skipped == 6


def test_garbled_and_empty_logs_are_one_line_errors() -> None:
    with pytest.raises(TraceError, match="no gateway access log lines found in 2 lines"):
        read_access_log(["hello", "{not json"])
    with pytest.raises(TraceError, match="no successful GetObject"):
        read_access_log([line(operation="HeadObject", method="HEAD")])


def test_csv_with_and_without_header() -> None:
    with_header = read_csv_trace(io.StringIO("key,offset,length,time\nbkt/a/b.parquet,0,100,5\nbkt/a/b.parquet,100,50,9\n"))
    assert [(r.bucket, r.key, r.start, r.end, r.size) for r in with_header.reads] == [
        ("bkt", "a/b.parquet", 0, 99, 150), ("bkt", "a/b.parquet", 100, 149, 150)]
    assert with_header.stats.period == 4
    plain = read_csv_trace(io.StringIO("1,obj,0,0,64\n2,obj,32,100,64\n"))
    assert [(r.bucket, r.key, r.start, r.end, r.size) for r in plain.reads] == [("csv", "obj", 0, 63, 64),
                                                                                 ("csv", "obj", 32, 63, 64)]
    with pytest.raises(TraceError, match="line 2: not time,key,offset,length"):
        read_csv_trace(io.StringIO("1,obj,0,10\n2,obj,zero,10\n"))


def test_open_trace_names_a_missing_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(TraceError, match="No such file"):
        open_trace(str(tmp_path / "absent.log"))
