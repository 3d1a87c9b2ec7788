"""Range, If-Range and conditional headers against S3's observed behaviour."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.engine import Want
from gateway.errors import S3Error
from gateway.s3api.ranges import (
    ByteRange,
    evaluate_preconditions,
    format_http_date,
    if_range_allows,
    parse_http_date,
    parse_range,
    wanted,
)

# --- Range ---------------------------------------------------------------------------------------

SIZE = 10  # the size of localstack's AWS-validated fixture, "0123456789"


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("bytes=0-4", (0, 4)),
        ("bytes=1-1", (1, 1)),
        ("bytes=0-0", (0, 0)),
        ("bytes=1-", (1, 9)),
        ("bytes=-2", (8, 9)),
        ("bytes=-9", (1, 9)),
        ("bytes=-15", (0, 9)),  # a suffix longer than the object is all of it, still 206
        ("bytes=0-100", (0, 9)),  # the end is clamped
        ("bytes=9-9", (9, 9)),
        ("Bytes=2-3", (2, 3)),  # range units are case-insensitive
        (" bytes=2-3 ", (2, 3)),
    ],
)
def test_satisfiable_ranges(header: str, expected: tuple[int, int]) -> None:
    assert parse_range(header, SIZE) == ByteRange(*expected)


@pytest.mark.parametrize(
    "header",
    [
        None,
        "bytes=1-0",  # last before first: S3 serves the whole object with 200
        "bytes=9-3",
        "bytes=-1-",
        "bytes=0--1",
        "bytes=0-1,3-4,7-9",  # S3 does not do multi-range: whole object
        "bytes=0-1,",
        "0-1",  # no unit
        "bytes=-",
        "bytes=",
        "bytes",
        "",
        "bytes=a-b",
        "bytes=+1-2",
        "bytes = 0-1",
        "items=0-1",
        "bytes=٣-٤",  # non-ASCII digits are not digits here
    ],
)
def test_ranges_s3_ignores(header: str | None) -> None:
    assert parse_range(header, SIZE) is None


@pytest.mark.parametrize("header", ["bytes=-0", "bytes=100-200", "bytes=10-", "bytes=10-20", "bytes=12-3"])
def test_unsatisfiable_ranges(header: str) -> None:
    with pytest.raises(S3Error) as info:
        parse_range(header, SIZE)
    err = info.value
    assert (err.code, err.status) == ("InvalidRange", 416)
    assert err.message == "The requested range is not satisfiable"
    assert err.headers == {"Content-Range": "bytes */10"}
    # S3 writes RangeRequested, then ActualObjectSize.
    assert list(err.extra.items()) == [("RangeRequested", header), ("ActualObjectSize", "10")]


@pytest.mark.parametrize("header", ["bytes=0-", "bytes=0-0", "bytes=40-50", "bytes=-0"])
def test_ranges_on_an_empty_object_are_refused(header: str) -> None:
    with pytest.raises(S3Error) as info:
        parse_range(header, 0)
    assert info.value.extra["ActualObjectSize"] == "0"
    assert info.value.headers == {"Content-Range": "bytes */0"}


def test_a_suffix_range_on_an_empty_object_is_the_empty_object() -> None:
    # Trino reads tails of empty files from S3 this way and expects success.
    assert parse_range("bytes=-1", 0) is None
    assert parse_range("bytes=-500", 0) is None


def test_byte_range_helpers() -> None:
    r = ByteRange(5, 9)
    assert r.length == 5
    assert r.content_range(100) == "bytes 5-9/100"


sizes = st.integers(min_value=0, max_value=10**13)


@st.composite
def valid_range(draw: st.DrawFn) -> tuple[str, int, int, int]:
    """(header, size, expected start, expected end) for satisfiable ranges."""
    size = draw(st.integers(min_value=1, max_value=10**13))
    kind = draw(st.sampled_from(["closed", "open", "suffix"]))
    if kind == "suffix":
        n = draw(st.integers(min_value=1, max_value=2 * size))
        return f"bytes=-{n}", size, max(size - n, 0), size - 1
    start = draw(st.integers(min_value=0, max_value=size - 1))
    if kind == "open":
        return f"bytes={start}-", size, start, size - 1
    end = draw(st.integers(min_value=start, max_value=start + 2 * size))
    return f"bytes={start}-{end}", size, start, min(end, size - 1)


@given(valid_range())
def test_resolved_ranges_lie_inside_the_object(case: tuple[str, int, int, int]) -> None:
    header, size, start, end = case
    r = parse_range(header, size)
    assert r is not None
    assert 0 <= r.start <= r.end < size
    assert (r.start, r.end) == (start, end)
    assert r.length == end - start + 1
    assert r.content_range(size) == f"bytes {start}-{end}/{size}"


range_like = st.one_of(
    st.text(),
    st.from_regex(r"\A\s*[bB]ytes=[-0-9, +]{0,12}\s*\Z"),
    st.builds(lambda a, b: f"bytes={a}-{b}", st.integers(-5, 30), st.integers(-5, 30)),
)


@given(range_like, sizes)
def test_parse_range_never_raises_anything_but_invalid_range(header: str, size: int) -> None:
    try:
        r = parse_range(header, size)
    except S3Error as err:
        assert err.code == "InvalidRange" and err.status == 416
    else:
        assert r is None or 0 <= r.start <= r.end < size


@given(st.one_of(st.none(), range_like), sizes)
def test_what_a_cold_read_asks_for_holds_the_range_it_resolves_to(header: str | None, size: int) -> None:
    # A cold GET asks the origin for what wanted() says before the size is known: wherever the
    # range then resolves to, those bytes must be among what was asked for.
    want = wanted(header)
    try:
        r = parse_range(header, size)
    except S3Error:
        return
    if r is None:
        assert want.whole or want.suffix is not None and size == 0
    elif want.suffix is not None:
        assert (r.start, r.end) == (max(size - want.suffix, 0), size - 1)
    else:
        assert r.start == want.start and (want.end is None or r.end <= want.end)


@pytest.mark.parametrize("header, expected", [
    (None, Want()), ("bytes=0-9", Want(0, 9)), ("bytes=100-", Want(100)), ("bytes=-5", Want(suffix=5)),
    ("garbage", Want()), ("bytes=-", Want()), ("bytes=9-3", Want()), ("BYTES=3-9", Want(3, 9)),
])
def test_wanted(header: str | None, expected: Want) -> None:
    assert wanted(header) == expected


@pytest.mark.parametrize("want, block, asked", [
    (Want(), 100, None), (Want(0, 9), 100, "bytes=0-99"), (Want(150), 100, "bytes=100-"),
    (Want(150, 250), 100, "bytes=100-299"), (Want(suffix=5), 100, "bytes=-100"), (Want(suffix=500), 100, "bytes=-500"),
])
def test_a_cold_read_asks_the_origin_for_whole_blocks(want: Want, block: int, asked: str | None) -> None:
    assert want.origin_range(block) == asked


# --- conditional requests ---------------------------------------------------------------------------

ETAG = '"9b2cf535f27731c974343645a3985328"'
BARE = ETAG.strip('"')
LAST_MODIFIED = datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)
NOW = datetime(2024, 6, 1, tzinfo=timezone.utc)
BEFORE = format_http_date(LAST_MODIFIED - timedelta(days=1))
AT = format_http_date(LAST_MODIFIED)  # whole seconds: equal to the object's Last-Modified
AFTER = format_http_date(LAST_MODIFIED + timedelta(days=1))


def outcome(headers: dict[str, str], *, get: bool = True) -> tuple[int, str | None]:
    """(status, Condition) the request ends with: 200 when nothing is raised."""
    try:
        evaluate_preconditions(headers, etag=ETAG, last_modified=LAST_MODIFIED, is_get_or_head=get, now=NOW)
    except S3Error as err:
        return err.status, err.extra.get("Condition")
    return 200, None


@pytest.mark.parametrize(
    "value",
    [ETAG, BARE, ETAG[1:], ETAG[:-1], f'"other", {ETAG}', f'{ETAG},"other"', "*", f'  {ETAG}  '],
)
def test_if_match_passes(value: str) -> None:
    # Unquoted and half-quoted ETags match: S3 is lenient (moto's AWS-verified tests).
    assert outcome({"If-Match": value}) == (200, None)


@pytest.mark.parametrize("value", ['"other"', "other", f"W/{ETAG}", '"a", "b"'])
def test_if_match_fails(value: str) -> None:
    assert outcome({"If-Match": value}) == (412, "If-Match")


def test_precondition_failed_is_s3s_error() -> None:
    with pytest.raises(S3Error) as info:
        evaluate_preconditions({"if-match": '"x"'}, etag=ETAG, last_modified=LAST_MODIFIED)
    err = info.value
    assert (err.code, err.status, err.message) == (
        "PreconditionFailed", 412, "At least one of the pre-conditions you specified did not hold")


def test_if_unmodified_since() -> None:
    assert outcome({"If-Unmodified-Since": BEFORE}) == (412, "If-Unmodified-Since")
    assert outcome({"If-Unmodified-Since": AT}) == (200, None)
    assert outcome({"If-Unmodified-Since": AFTER}) == (200, None)


def test_if_match_true_wins_over_if_unmodified_since_false() -> None:
    # S3 documents this case: 200 OK and the data.
    assert outcome({"If-Match": ETAG, "If-Unmodified-Since": BEFORE}) == (200, None)
    assert outcome({"If-Match": '"x"', "If-Unmodified-Since": AFTER}) == (412, "If-Match")


@pytest.mark.parametrize("value", [ETAG, BARE, f"W/{ETAG}", "*", f'"x", {ETAG}'])
def test_if_none_match_matching_is_not_modified(value: str) -> None:
    assert outcome({"If-None-Match": value}) == (304, None)


def test_if_none_match_on_a_write_is_412() -> None:
    assert outcome({"If-None-Match": ETAG}, get=False) == (412, "If-None-Match")
    assert outcome({"If-Modified-Since": AFTER}, get=False) == (200, None)


def test_not_modified_is_s3s_304() -> None:
    with pytest.raises(S3Error) as info:
        evaluate_preconditions({"if-none-match": ETAG}, etag=ETAG, last_modified=LAST_MODIFIED)
    assert (info.value.code, info.value.status) == ("NotModified", 304)


def test_if_none_match_false_and_if_modified_since_true_is_304() -> None:
    # S3 documents this case: 304 Not Modified.
    assert outcome({"If-None-Match": ETAG, "If-Modified-Since": BEFORE}) == (304, None)


def test_if_modified_since_is_ignored_beside_if_none_match() -> None:
    # RFC 9110 13.2.2: without a matching ETag, the date is not looked at.
    assert outcome({"If-None-Match": '"x"', "If-Modified-Since": AFTER}) == (200, None)


def test_if_modified_since() -> None:
    assert outcome({"If-Modified-Since": BEFORE}) == (200, None)
    assert outcome({"If-Modified-Since": AT}) == (304, None)
    assert outcome({"If-Modified-Since": AFTER}) == (304, None)
    # A date after "now" is ignored (verified on S3 for x-amz-copy-source-if-modified-since).
    assert outcome({"If-Modified-Since": format_http_date(NOW + timedelta(days=1))}) == (200, None)


@pytest.mark.parametrize("value", ["yesterday", "", "Sun, 31 Feb 2021 00:00:00 GMT", "2024-01-01T00:00:00Z"])
def test_invalid_dates_are_ignored(value: str) -> None:
    assert outcome({"If-Modified-Since": value}) == (200, None)
    assert outcome({"If-Unmodified-Since": value}) == (200, None)


def test_if_match_false_beats_if_none_match() -> None:
    assert outcome({"If-Match": '"x"', "If-None-Match": ETAG}) == (412, "If-Match")


def test_header_names_are_case_insensitive() -> None:
    assert outcome({"IF-NONE-MATCH": ETAG}) == (304, None)
    assert outcome({"if-match": '"x"'}) == (412, "If-Match")


def test_no_headers_is_200() -> None:
    evaluate_preconditions({}, etag=ETAG, last_modified=LAST_MODIFIED)
    evaluate_preconditions({"If-Match": "   "}, etag=ETAG, last_modified=LAST_MODIFIED)


@given(st.dictionaries(st.sampled_from(["If-Match", "If-None-Match", "If-Modified-Since", "If-Unmodified-Since"]),
                       st.text(max_size=40)))
def test_preconditions_only_raise_412_or_304(headers: dict[str, str]) -> None:
    assert outcome(headers)[0] in (200, 304, 412)


# --- If-Range ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "allowed"),
    [
        (None, True),
        ("", True),
        (ETAG, True),
        (BARE, True),
        ('"other"', False),
        (f"W/{ETAG}", False),  # If-Range compares strongly
        (AT, True),
        (BEFORE, False),
        (AFTER, False),
        ("not a validator", False),
    ],
)
def test_if_range(value: str | None, allowed: bool) -> None:
    assert if_range_allows(value, etag=ETAG, last_modified=LAST_MODIFIED) is allowed


# --- HTTP dates -------------------------------------------------------------------------------------

EXPECTED = datetime(1994, 11, 6, 8, 49, 37, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    "value",
    ["Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994",
     "sun, 06 nov 1994 08:49:37 GMT", " Sun, 06 Nov 1994 08:49:37 GMT "],
)
def test_the_three_http_date_forms(value: str) -> None:
    assert parse_http_date(value, now=NOW) == EXPECTED


def test_rfc850_years_are_at_most_fifty_years_ahead() -> None:
    assert parse_http_date("Friday, 01-Jan-60 00:00:00 GMT", now=NOW) == datetime(2060, 1, 1, tzinfo=timezone.utc)
    assert parse_http_date("Sunday, 01-Jan-99 00:00:00 GMT", now=NOW) == datetime(1999, 1, 1, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    "value",
    ["", "Sun, 06 Nov 1994 08:49:37", "Sun, 06 Foo 1994 08:49:37 GMT", "Sun, 06 Nov 1994 25:49:37 GMT",
     "Sun, 30 Feb 1994 08:49:37 GMT", "1994-11-06T08:49:37Z", "Sun, 06 Nov 1994 08:49:37 GMT trailing"],
)
def test_invalid_http_dates(value: str) -> None:
    assert parse_http_date(value) is None


def test_format_http_date() -> None:
    assert format_http_date(EXPECTED) == "Sun, 06 Nov 1994 08:49:37 GMT"
    assert format_http_date(datetime(1994, 11, 6, 8, 49, 37)) == "Sun, 06 Nov 1994 08:49:37 GMT"  # naive is UTC
    plus_two = timezone(timedelta(hours=2))
    assert format_http_date(datetime(1994, 11, 6, 10, 49, 37, tzinfo=plus_two)) == "Sun, 06 Nov 1994 08:49:37 GMT"


@given(st.datetimes(min_value=datetime(1000, 1, 1), max_value=datetime(9999, 12, 31), timezones=st.just(timezone.utc)))
def test_http_dates_round_trip(dt: datetime) -> None:
    assert parse_http_date(format_http_date(dt)) == dt.replace(microsecond=0)


@given(st.text(max_size=60))
def test_parse_http_date_never_raises(value: str) -> None:
    parse_http_date(value)
