"""x-amz-date read as it always was: auth.common._parse_amz_date reads an ASCII date with
datetime.fromisoformat (in C) and any other with int() at fixed positions; both give the same
datetime (or None) as reading every one with int() does."""

from __future__ import annotations

from datetime import datetime, timezone

from hypothesis import given
from hypothesis import strategies as st

from gateway.s3api.auth.common import _AMZ_DATE, _parse_amz_date

# Digits of ASCII and of two other scripts (\d and int() read them), and near misses.
_DIGITS = "0123456789" * 4 + "٠١٢٣٤٥٦٧٨٩" + "０１２９" + "x -+:."
# Two digits near a calendar's bounds.
_BOUNDS = st.sampled_from(["00", "01", "02", "12", "13", "23", "24", "28", "29", "30", "31", "32", "59", "60",
                           "61", "99"])


def _by_int(value: str) -> datetime | None:
    """Every date read at fixed positions by int(), as _parse_amz_date read them all before."""
    if not _AMZ_DATE.fullmatch(value):
        return None
    try:
        return datetime(int(value[0:4]), int(value[4:6]), int(value[6:8]), int(value[9:11]),
                        int(value[11:13]), int(value[13:15]), tzinfo=timezone.utc)
    except ValueError:
        return None


@st.composite
def _amz_dates(draw: st.DrawFn) -> str:
    two = _BOUNDS | st.text(_DIGITS, min_size=2, max_size=2)
    year = draw(st.sampled_from(["0000", "0001", "1970", "2024", "2100", "9999"]) | st.text(_DIGITS, min_size=4,
                                                                                            max_size=4))
    month, day, hour, minute, second = (draw(two) for _ in range(5))
    tail = draw(st.sampled_from(["Z", "Z", "Z", "", "z", "ZZ", "+00:00"]))
    return f"{year}{month}{day}{draw(st.sampled_from('TTTt '))}{hour}{minute}{second}{tail}"


@given(_amz_dates())
def test_an_amz_date_is_read_as_int_reads_it(value: str) -> None:
    parsed = _parse_amz_date(value)
    assert parsed == _by_int(value)
    assert parsed is None or parsed.tzinfo is timezone.utc


@given(st.text(max_size=20))
def test_any_text_is_read_as_int_reads_it(value: str) -> None:
    assert _parse_amz_date(value) == _by_int(value)


_SCRIPTS = ("0123456789", "٠١٢٣٤٥٦٧٨٩", "０１２３４５６７８９")


@given(st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31)),
       st.lists(st.sampled_from(_SCRIPTS), min_size=14, max_size=14))
def test_a_valid_date_in_any_digits_is_read_as_int_reads_it(when: datetime, scripts: list[str]) -> None:
    ascii_value = f"{when.year:04d}{when:%m%d}T{when:%H%M%S}Z"
    digits = iter(scripts)
    value = "".join(next(digits)[int(c)] if c.isdigit() else c for c in ascii_value)
    parsed = _parse_amz_date(value)
    assert parsed is not None and parsed == _by_int(value) == when.replace(microsecond=0, tzinfo=timezone.utc)
