"""Fuzz target `ranges`: Range, If-Range and conditional headers (gateway/s3api/ranges.py).

Text: line 1 the Range header, line 2 If-Range, further lines `name: value` conditional
headers (If-Match, If-None-Match, If-Modified-Since, If-Unmodified-Since), latin-1 as on the
wire. Controls: the object's size, its ETag, its Last-Modified, GET/HEAD or not.
Contract: None, a ByteRange inside the object, or S3Error 416/412/304; dates round-trip.
"""

from __future__ import annotations

import sys
from datetime import datetime, timedelta, timezone

import atheris
from _harness import Controls, check, client_error, main, seed

with atheris.instrument_imports(include=["gateway"]):
    from gateway.errors import S3Error
    from gateway.s3api import ranges

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=timezone.utc)
SIZES = (0, 1, 2, 10, 100, 1023, 1024, 4096, 10**6, 5 * 2**40)
ETAGS = ('"d41d8cd98f00b204e9800998ecf8427e"', "d41d8cd98f00b204e9800998ecf8427e", 'W/"abc"', '"abc-2"', '""')
MODIFIED = (NOW - timedelta(days=1), NOW, NOW + timedelta(days=1), datetime(1970, 1, 1, tzinfo=timezone.utc),
            datetime(2024, 4, 30, 8, 49, 37, 500000, tzinfo=timezone.utc))
ALLOWED = {"InvalidRange": 416, "PreconditionFailed": 412, "NotModified": 304}


def test_one_input(data: bytes) -> None:
    ctl = Controls(data)
    size = SIZES[ctl.pick(len(SIZES) - 1)]
    etag = ETAGS[ctl.pick(len(ETAGS) - 1)]
    modified = MODIFIED[ctl.pick(len(MODIFIED) - 1)]
    is_get = ctl.flag()
    lines = ctl.rest().decode("latin-1").split("\n")
    range_header = lines[0] if lines[0] != "-" else None
    if_range = lines[1] if len(lines) > 1 and lines[1] != "-" else None
    headers = {}
    for line in lines[2:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()

    try:
        byte_range = ranges.parse_range(range_header, size)
    except Exception as exc:
        client_error(exc)
        check(exc.code == "InvalidRange" and exc.status == 416, f"parse_range raised {exc!r}")
        byte_range = None
    else:
        if byte_range is not None:
            check(0 <= byte_range.start <= byte_range.end < size, f"{byte_range} outside an object of {size} bytes")
            check(byte_range.length == byte_range.end - byte_range.start + 1, "length")
            want = ranges.wanted(range_header)
            # What a cold read asks the origin for before the size is known holds the range.
            if want.suffix is not None:
                check((byte_range.start, byte_range.end) == (max(size - want.suffix, 0), size - 1),
                      f"{want} but the range is {byte_range}")
            else:
                check(want.start == byte_range.start and (want.end is None or byte_range.end <= want.end),
                      f"{want} but the range is {byte_range}")

    try:
        ranges.wanted(range_header)
        ranges.if_range_allows(if_range, etag=etag, last_modified=modified)
    except Exception as exc:
        client_error(exc)
        raise AssertionError(f"wanted/if_range_allows raised {exc!r}") from exc

    try:
        ranges.evaluate_preconditions(headers, etag=etag, last_modified=modified, is_get_or_head=is_get, now=NOW)
    except S3Error as exc:
        check(ALLOWED.get(exc.code) == exc.status, f"evaluate_preconditions raised {exc!r}")
    except Exception as exc:
        client_error(exc)

    for value in (if_range, *headers.values()):
        if value is None:
            continue
        try:
            parsed = ranges.parse_http_date(value, now=NOW)
        except Exception as exc:
            client_error(exc)
            raise AssertionError(f"parse_http_date raised {exc!r}") from exc
        if parsed is not None:
            check(parsed.tzinfo is not None, "a naive date")
            again = ranges.parse_http_date(ranges.format_http_date(parsed), now=NOW)
            check(again == parsed, f"{value!r} -> {parsed} -> {again}")


def seeds() -> dict[str, bytes]:
    lm = "Tue, 30 Apr 2024 12:00:00 GMT"
    return {
        "range-first-last": seed("bytes=0-99\n-\n", 6, 0, 0, 1),
        "range-open": seed("bytes=512-\n-\n", 5, 0, 0, 1),
        "range-suffix": seed("bytes=-500\n\"d41d8cd98f00b204e9800998ecf8427e\"\n", 8, 0, 0, 1),
        "range-multi": seed("bytes=0-1,5-9\n-\n", 4, 0, 0, 1),
        "range-past-end": seed("bytes=100-200\n-\n", 3, 0, 0, 1),
        "if-range-date": seed(f"bytes=10-\n{lm}\n", 6, 0, 0, 1),
        "if-match": seed('-\n-\nif-match: "d41d8cd98f00b204e9800998ecf8427e", W/"x"\n', 6, 0, 0, 1),
        "if-none-match": seed('-\n-\nif-none-match: *\nif-modified-since: Sat, 27 Apr 2024 10:00:00 GMT\n', 6, 0, 0, 1),
        "if-unmodified": seed("-\n-\nif-unmodified-since: Sunday, 28-Apr-24 10:00:00 GMT\n", 6, 0, 1, 0),
        "asctime": seed("bytes=0-0\nSun Apr 28 10:00:00 2024\nif-modified-since: Sun Apr 28 10:00:00 2024\n",
                        6, 1, 2, 1),
    }


if __name__ == "__main__":
    main("ranges", test_one_input, seeds)
    sys.exit(0)
