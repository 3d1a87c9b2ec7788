"""Hive-style partition filters: parsed from the CLI's text, matched over key=value path segments
and over the partition values a table records."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.errors import S3Error
from gateway.tables.partitions import matches, parse_filter, parse_filters, path_partitions

PATH = "warehouse/sales/dt=2026-12-03/region=eu/part-0.parquet"


@pytest.mark.parametrize("text, kept", [
    ("dt=2026-12-03", True), ("dt!=2026-12-03", False), ("dt<2026-12-03", False), ("dt<=2026-12-03", True),
    ("dt>2026-12-01", True), ("dt>=2026-12-04", False), ("region in (us, eu)", True), ("region IN ('us')", False),
    ("missing=1", False),
])
def test_each_operator_over_path_segments(text: str, kept: bool):
    assert matches([parse_filter(text)], PATH) is kept


def test_every_filter_must_hold_and_no_filter_keeps_everything():
    assert matches(parse_filters(["dt>=2026-12-01", "dt<2026-12-04", "region=eu"]), PATH)
    assert not matches(parse_filters(["dt>=2026-12-01", "region=us"]), PATH)
    assert matches([], "anything/at/all")


def test_numbers_compare_as_numbers():
    assert matches([parse_filter("hour>=9")], "t/hour=10/f.orc")  # as strings "10" < "9"
    assert not matches([parse_filter("hour<9")], "t/hour=10/f.orc")


def test_recorded_values_win_and_a_null_or_hive_default_matches_nothing():
    assert matches([parse_filter("dt=2026-12-05")], "t/data/f.parquet", {"dt": "2026-12-05"})
    assert not matches([parse_filter("dt=2026-12-03")], PATH, {"dt": "2026-12-05"})
    assert not matches([parse_filter("dt!=x")], PATH, {"dt": None})
    assert not matches([parse_filter("dt!=x")], "t/dt=__HIVE_DEFAULT_PARTITION__/f")


def test_path_values_are_unescaped_and_the_file_name_is_no_partition():
    assert path_partitions("t/city=S%C3%A3o%20Paulo/ts=12%3A00/x=1.parquet") == {"city": "São Paulo", "ts": "12:00"}


@pytest.mark.parametrize("text", ["dt", "dt=", "=3", "dt ~ 3", "region in eu", "region in ()"])
def test_bad_filters_say_how_to_write_one(text: str):
    with pytest.raises(S3Error) as raised:
        parse_filter(text)
    assert raised.value.code == "InvalidArgument" and repr(text) in raised.value.message


@given(st.integers(-10**6, 10**6), st.integers(-10**6, 10**6))
def test_comparisons_agree_with_python_on_numbers(value: int, bound: int):
    path = f"t/n={value}/f"
    for op, holds in (("<", value < bound), ("<=", value <= bound), (">", value > bound), (">=", value >= bound),
                      ("=", value == bound), ("!=", value != bound)):
        assert matches([parse_filter(f"n{op}{bound}")], path) is holds, (value, op, bound)


def test_a_filter_prints_as_it_reads():
    assert [str(f) for f in parse_filters(["dt >= 2026-12-01", "r in (a,b)"])] == ["dt>=2026-12-01", "r in (a,b)"]
