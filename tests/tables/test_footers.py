"""Footer ranges found from a file's tail as an engine finds them: Parquet's footer (with page
indexes when written, without the bloom filters), ORC's postscript, footer, stripe statistics and
stripe footers (checked against the file by tests/tables/orcfile.py's own reading of it)."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.orc as orc
import pyarrow.parquet as pq
import pytest

from gateway.tables.footers import TAIL, NeedMore, footer_ranges
from tests.tables.orcfile import COMPRESSIONS, assert_stripe_footers, orc_file

ROWS = pa.table({"id": list(range(60_000)), "name": [f"name-{i}" for i in range(60_000)]})


def parquet(**options: object) -> bytes:
    out = io.BytesIO()
    pq.write_table(ROWS, out, row_group_size=20_000, **options)
    return out.getvalue()


def found(data: bytes, tail: int = TAIL):  # type: ignore[no-untyped-def]
    """footer_ranges as a caller drives it: the tail, then more from where it says."""
    start = max(0, len(data) - tail)
    for _ in range(3):
        try:
            return footer_ranges(data[start:], len(data))
        except NeedMore as more:
            assert more.start < start
            start = more.start
    raise AssertionError("asked for more three times")


def footer_start(data: bytes) -> int:
    return len(data) - 8 - int.from_bytes(data[-8:-4], "little")


def test_a_parquet_footer_is_its_last_bytes_and_pyarrow_reads_it_alone():
    data = parquet(write_page_index=False)
    footer = found(data)
    assert footer.format == "parquet" and footer.ranges == ((footer_start(data), len(data)),)
    # What the range holds is enough for a reader: the metadata parses with every other byte zeroed.
    start = footer.ranges[0][0]
    assert pq.read_metadata(io.BytesIO(bytes(start) + data[start:])).num_rows == ROWS.num_rows
    assert footer.bytes < len(data) // 100


def test_page_indexes_come_with_the_footer():
    with_indexes, without = parquet(write_page_index=True), parquet(write_page_index=False)
    footer = found(with_indexes)
    (start, end), = footer.ranges
    assert end == len(with_indexes) and start < footer_start(with_indexes)
    meta = pq.ParquetFile(io.BytesIO(with_indexes)).metadata
    chunks = [meta.row_group(g).column(c) for g in range(meta.num_row_groups) for c in range(meta.num_columns)]
    assert start == max((chunk.dictionary_page_offset or chunk.data_page_offset) + chunk.total_compressed_size
                        for chunk in chunks)  # right after the last column chunk's pages
    assert footer.bytes > found(without).bytes


def test_bloom_filters_are_left_out():
    data = parquet(write_page_index=True, bloom_filter_options={"id": {"ndv": 60_000, "fpp": 0.01}})
    footer = found(data)
    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    blooms = [meta.row_group(g).column(0).bloom_filter_offset for g in range(meta.num_row_groups)]
    assert all(blooms)
    for start, end in footer.ranges:
        assert not any(start <= offset < end for offset in blooms)
    assert footer.ranges[-1] == (footer_start(data), len(data))


def test_a_footer_longer_than_the_first_tail_read_asks_for_more():
    data = parquet(write_page_index=False)
    with pytest.raises(NeedMore) as more:
        footer_ranges(data[-100:], len(data))
    assert more.value.start == footer_start(data)
    assert found(data, tail=100).ranges == ((footer_start(data), len(data)),)


def test_orc_tail_is_postscript_footer_and_stripe_statistics():
    out = io.BytesIO()
    orc.write_table(ROWS, out, stripe_size=64 * 1024)
    data = out.getvalue()
    footer = found(data, tail=64)
    reader = orc.ORCFile(io.BytesIO(data))
    length = 1 + reader.file_postscript_length + reader.file_footer_length + reader.stripe_statistics_length
    assert footer.format == "orc" and footer.ranges[-1][1] == len(data)
    assert footer.ranges[-1][0] < len(data) - length < footer.ranges[-1][0] + 1024  # with the last stripe's footer
    assert reader.nstripes > 1


@pytest.mark.parametrize("compression", COMPRESSIONS)
@pytest.mark.parametrize("tail", [TAIL, 64])
def test_orc_stripe_footers_are_where_the_file_says(compression: str, tail: int):
    data = orc_file(compression)
    footer = found(data, tail)
    assert footer.format == "orc" and orc.ORCFile(io.BytesIO(data)).nstripes > 4
    assert_stripe_footers(data, footer.ranges, columns=3)  # the root struct, id, name


def test_orc_ranges_are_all_a_reader_needs_to_open_every_stripe():
    data = orc_file("zstd")
    ranges = found(data).ranges
    kept, tail_only = bytearray(len(data)), bytearray(len(data))
    for start, end in ranges:
        kept[start:end] = data[start:end]
    tail_only[ranges[-1][0]:] = data[ranges[-1][0]:]
    with_footers, without = orc.ORCFile(io.BytesIO(bytes(kept))), orc.ORCFile(io.BytesIO(bytes(tail_only)))
    for stripe in range(with_footers.nstripes - 1):  # every byte zero but the ranges': each stripe footer parses
        with_footers.read_stripe(stripe, columns=[])
        with pytest.raises(OSError):  # and it is the ranges that it parses
            without.read_stripe(stripe, columns=[])


@pytest.mark.parametrize("data", [b"", b"x" * 100, b"not parquet PAR1", b"\xff\xff\xff\x7fPAR1", b"junk ORC\x05"])
def test_other_files_have_no_footer(data: bytes):
    assert found(data).format is None
