"""Range, If-Range and conditional request headers, decided the way S3 decides them: pure."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

from gateway.engine import Want
from gateway.errors import S3Error

__all__ = [
    "ByteRange",
    "evaluate_preconditions",
    "format_http_date",
    "if_range_allows",
    "parse_http_date",
    "parse_range",
]


@dataclass(frozen=True, slots=True)
class ByteRange:
    """A satisfiable byte range: 0 <= start <= end < size of the object it was resolved against."""

    start: int
    end: int  # inclusive, as in HTTP

    @property
    def length(self) -> int:
        return self.end - self.start + 1

    def content_range(self, size: int) -> str:
        return f"bytes {self.start}-{self.end}/{size}"


# One range spec of the `bytes` unit.  Anything else (other units, several ranges,
# signs, spaces, "-" alone) is not a range S3 serves: it answers the whole object.
_RANGE = re.compile(r"bytes=(\d*)-(\d*)", re.IGNORECASE | re.ASCII)


def parse_range(header: str | None, size: int) -> ByteRange | None:
    """Resolve a Range header against an object of `size` bytes.

    None means "send the whole object with 200": no header, or one S3 ignores.
    S3 is far more forgiving than RFC 9110: a malformed header, a multi-range
    request, or a range whose last byte precedes its first (`bytes=1-0`) is served
    as a plain GET.  Only two cases are refused, with 416 InvalidRange: a first byte
    at or past the end (which includes every `bytes=N-` on an empty object) and the
    empty suffix `bytes=-0`.  A suffix longer than the object is the whole object
    (206), and on an empty object a suffix is ignored, not refused.
    """
    if header is None:
        return None
    match = _RANGE.fullmatch(header.strip())
    if match is None:
        return None
    first, last = match.group(1), match.group(2)
    if first:
        start = int(first)
        # Checked before the end is looked at: S3 refuses `bytes=5-2` on a 4-byte
        # object rather than ignoring it.
        if start >= size:
            raise _invalid_range(header, size)
        end = min(int(last), size - 1) if last else size - 1
        if end < start:
            return None
        return ByteRange(start, end)
    if not last:
        return None  # "bytes=-"
    suffix = int(last)
    if suffix == 0:
        raise _invalid_range(header, size)
    if size == 0:
        return None
    return ByteRange(max(size - suffix, 0), size - 1)


def wanted(header: str | None) -> Want:
    """What a GET with this Range header reads, as far as that is known before the object's
    size (what a cold read asks the origin for): the whole object without a header or with
    one S3 ignores, `bytes=S-[E]` from S (to E), `bytes=-N` the last N bytes."""
    match = _RANGE.fullmatch(header.strip()) if header is not None else None
    if match is None:
        return Want()
    first, last = match.group(1), match.group(2)
    if first:
        if last and int(last) < int(first):
            return Want()  # ignored: the whole object
        return Want(int(first), int(last) if last else None)
    return Want(suffix=int(last)) if last else Want()


def _invalid_range(header: str, size: int) -> S3Error:
    # S3 writes RangeRequested before ActualObjectSize in the error document.
    return S3Error(
        "InvalidRange",
        headers={"Content-Range": f"bytes */{size}"},
        extra={"RangeRequested": header, "ActualObjectSize": str(size)},
    )


# --- conditional requests ----------------------------------------------------------------


def evaluate_preconditions(
    headers: Mapping[str, str],
    *,
    etag: str,
    last_modified: datetime,
    is_get_or_head: bool = True,
    now: datetime | None = None,
) -> None:
    """Raise 412 PreconditionFailed or 304 NotModified as S3 would, else return.

    The order is RFC 9110 13.2.2, which is also what S3 documents: If-Match, then
    If-Unmodified-Since only without If-Match (so If-Match true with
    If-Unmodified-Since false is a 200), then If-None-Match, then If-Modified-Since
    only without If-None-Match (so If-None-Match false with If-Modified-Since true
    is a 304).  Unparseable dates, and If-Modified-Since dates in the future, are
    ignored.  The 412 names the failed header in <Condition>, as S3's does; the
    caller adds ETag/Last-Modified to a 304.
    """
    if not any(name[:3].lower() == "if-" for name in headers):
        return  # no conditional header (most reads): nothing to evaluate
    current = _entity_tag(etag)
    modified = _seconds(last_modified)
    if_match = _header(headers, "if-match")
    if if_match is not None:
        if not _matches(if_match, current, weak=False):
            raise _failed("If-Match")
    else:
        since = _date_header(headers, "if-unmodified-since", now)
        if since is not None and modified > since:
            raise _failed("If-Unmodified-Since")
    if_none_match = _header(headers, "if-none-match")
    if if_none_match is not None:
        if _matches(if_none_match, current, weak=True):
            if is_get_or_head:
                raise S3Error("NotModified")
            raise _failed("If-None-Match")
    elif is_get_or_head:
        since = _date_header(headers, "if-modified-since", now)
        current_time = _seconds(now) if now is not None else _seconds(datetime.now(timezone.utc))
        if since is not None and since <= current_time and modified <= since:
            raise S3Error("NotModified")


def if_range_allows(header: str | None, *, etag: str, last_modified: datetime) -> bool:
    """Whether a Range may be honoured given If-Range (RFC 9110 13.1.5).

    A validator that no longer describes the object means "send all of it": the
    client's partial copy is stale.  ETags compare strongly (a weak one never
    matches); a date must equal Last-Modified to the second.
    """
    if header is None:
        return True
    value = header.strip()
    if not value:
        return True
    if not value.startswith(('"', "W/")):
        when = parse_http_date(value)
        if when is not None:
            return when == _seconds(last_modified)
    return _matches(value, _entity_tag(etag), weak=False)


def _failed(condition: str) -> S3Error:
    return S3Error("PreconditionFailed", extra={"Condition": condition})


def _header(headers: Mapping[str, str], name: str) -> str | None:
    """Case-insensitive lookup; an empty value counts as absent (S3 ignores it)."""
    value = headers.get(name)
    if value is None:
        for key, candidate in headers.items():
            if key.lower() == name:
                value = candidate
                break
    if value is None or not value.strip():
        return None
    return value


def _date_header(headers: Mapping[str, str], name: str, now: datetime | None) -> datetime | None:
    value = _header(headers, name)
    return None if value is None else parse_http_date(value, now=now)


def _entity_tag(etag: str) -> str:
    """The opaque part of an ETag, whether it came quoted, weak or bare."""
    value = etag.strip()
    if value.startswith("W/"):
        value = value[2:]
    return value.strip('"')


def _matches(header: str, current: str, *, weak: bool) -> bool:
    """Whether an If-Match / If-None-Match / If-Range list names the current ETag.

    S3 is lenient about quoting (moto's AWS-verified tests: an ETag with no quotes,
    or with only one, still matches), so bare and half-quoted tags are accepted.
    """
    for is_weak, tag in _entity_tags(header):
        if tag == "*":
            return True
        if is_weak and not weak:
            continue
        if tag == current:
            return True
    return False


def _entity_tags(header: str) -> list[tuple[bool, str]]:
    """Split `"a", W/"b", c` into (weak, opaque-tag) pairs; commas may sit inside quotes."""
    tags: list[tuple[bool, str]] = []
    i, n = 0, len(header)
    while i < n:
        while i < n and header[i] in " \t,":
            i += 1
        if i >= n:
            break
        weak = header.startswith("W/", i)
        if weak:
            i += 2
        if i < n and header[i] == '"':
            close = header.find('"', i + 1)
            if close < 0:
                close = n
            tag = header[i + 1 : close]
            i = close + 1
        else:
            comma = header.find(",", i)
            if comma < 0:
                comma = n
            tag = header[i:comma].strip().strip('"')
            i = comma
        tags.append((weak, tag))
    return tags


# --- HTTP dates ----------------------------------------------------------------------------

_MONTHS = {m: i for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun",
                                        "jul", "aug", "sep", "oct", "nov", "dec"), start=1)}
_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTH_NAMES = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")

# The three forms of RFC 9110 5.6.7, matched leniently on case and spacing.
_IMF_FIXDATE = re.compile(
    r"[A-Za-z]{3},\s*(\d{1,2})\s+([A-Za-z]{3})\s+(\d{4})\s+(\d{2}):(\d{2}):(\d{2})\s+GMT", re.ASCII
)
_RFC850 = re.compile(
    r"[A-Za-z]{6,9},\s*(\d{1,2})-([A-Za-z]{3})-(\d{2})\s+(\d{2}):(\d{2}):(\d{2})\s+GMT", re.ASCII
)
_ASCTIME = re.compile(
    r"[A-Za-z]{3}\s+([A-Za-z]{3})\s+(\d{1,2})\s+(\d{2}):(\d{2}):(\d{2})\s+(\d{4})", re.ASCII
)


def format_http_date(dt: datetime) -> str:
    """IMF-fixdate, the only form HTTP senders may generate; naive datetimes are UTC."""
    utc = _utc(dt)
    return (f"{_WEEKDAYS[utc.weekday()]}, {utc.day:02d} {_MONTH_NAMES[utc.month - 1]} "
            f"{utc.year:04d} {utc.hour:02d}:{utc.minute:02d}:{utc.second:02d} GMT")


def parse_http_date(value: str, *, now: datetime | None = None) -> datetime | None:
    """An HTTP-date in any of the three RFC 9110 forms, as aware UTC; None if invalid.

    RFC 850's two-digit year is read as the most recent year with those digits
    that is not more than 50 years ahead of `now`.
    """
    text = value.strip()
    try:
        if match := _IMF_FIXDATE.fullmatch(text):
            day, month, year, hour, minute, second = match.groups()
            return _build(int(year), month, day, hour, minute, second)
        if match := _RFC850.fullmatch(text):
            day, month, yy, hour, minute, second = match.groups()
            current = _utc(now).year if now is not None else datetime.now(timezone.utc).year
            year = current - current % 100 + int(yy)
            if year > current + 50:
                year -= 100
            return _build(year, month, day, hour, minute, second)
        if match := _ASCTIME.fullmatch(text):
            month, day, hour, minute, second, year = match.groups()
            return _build(int(year), month, day, hour, minute, second)
    except ValueError:  # a well-shaped but impossible date: 31 Feb, 25:00
        return None
    return None


def _build(year: int, month: str, day: str, hour: str, minute: str, second: str) -> datetime | None:
    number = _MONTHS.get(month.lower())
    if number is None:
        return None
    return datetime(year, number, int(day), int(hour), int(minute), int(second), tzinfo=timezone.utc)


def _utc(dt: datetime) -> datetime:
    return dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt.astimezone(timezone.utc)


def _seconds(dt: datetime) -> datetime:
    """HTTP dates carry whole seconds, so comparisons drop the fraction."""
    return _utc(dt).replace(microsecond=0)
