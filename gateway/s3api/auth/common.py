"""What both signature versions read alike: the wire's bytes and percent-escapes, query pairs, dates, the clock, secrets."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from email.utils import parsedate_to_datetime
from urllib.parse import unquote_to_bytes

from gateway.errors import S3Error
from gateway.s3api.auth.model import SecretLookup

_AMZ_DATE = re.compile(r"\d{8}T\d{6}Z")
MSG_NEED_DATE = "AWS authentication requires a valid Date or x-amz-date header"


def _lookup(secret_for: SecretLookup, access_key: str) -> str:
    secret = secret_for(access_key)
    if secret is None:
        raise S3Error("InvalidAccessKeyId", extra={"AWSAccessKeyId": access_key})
    return secret


def _check_skew(request_time: datetime, raw: str, now: datetime, max_skew: timedelta) -> None:
    if abs(now - request_time) > max_skew:
        raise S3Error(
            "RequestTimeTooSkewed",
            extra={
                "RequestTime": raw[:64],
                "ServerTime": _iso(now),
                "MaxAllowedSkewMilliseconds": str(int(max_skew.total_seconds() * 1000)),
            },
        )


def _parse_amz_date(value: str) -> datetime | None:
    if not _AMZ_DATE.fullmatch(value):
        return None
    try:  # strptime is a measurable share of a small GET; fromisoformat reads this form in C, a
        # quarter of the int() calls' cost (the same dates: tests/s3api/test_amz_date.py)
        if value.isascii():
            return datetime.fromisoformat(value)  # (Z: timezone.utc)
        return datetime(int(value[0:4]), int(value[4:6]), int(value[6:8]), int(value[9:11]),
                        int(value[11:13]), int(value[13:15]), tzinfo=timezone.utc)
    except ValueError:
        return None


def _parse_http_date(value: str) -> datetime | None:
    try:
        parsed = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return _utc(parsed)


def _utc(value: datetime) -> datetime:
    if value.tzinfo is timezone.utc:
        return value  # what the gateway passes (datetime.now(timezone.utc)): nothing to make
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


def _iso(value: datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def _wire_bytes(text: str) -> bytes:
    # The server decoded wire bytes as latin-1; a caller handing us real text gets UTF-8.
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape")


def _wire_text(text: str) -> str:
    """Wire bytes read as UTF-8 (what clients sign); bytes that are not UTF-8 survive as surrogates."""
    return _wire_bytes(text).decode("utf-8", "surrogateescape")


def _percent_decode(text: str) -> str:
    """%XX-decode (no "+" as space), keeping undecodable bytes as surrogates so they re-encode exactly."""
    if "%" not in text and text.isascii():
        return text
    return unquote_to_bytes(_wire_bytes(text)).decode("utf-8", "surrogateescape")


def _parse_query(query_string: str) -> list[tuple[str, str]]:
    """Decoded (name, value) pairs in wire order; empty segments ("a=1&&b") are skipped."""
    pairs = []
    for part in query_string.split("&"):
        if part:
            name, _, value = part.partition("=")
            pairs.append((_percent_decode(name), _percent_decode(value)))
    return pairs


def _is_digits(text: str) -> bool:
    return text.isascii() and text.isdigit()
