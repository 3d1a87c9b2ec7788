"""The bytes engines read of a columnar file before they decide what else to read: Parquet's
footer and page indexes, ORC's postscript, footer, stripe statistics and stripe footers. Found as
an engine finds them, from the file's tail (`TAIL` bytes first, more when the footer is longer),
the footer itself parsed with pyarrow; an ORC stripe's footer where pyarrow's reader asks for it."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyarrow.orc import ORCFile

TAIL = 64 * 1024  # the first read of a file's end, as Arrow's readers do (Trino reads 48 KiB)
MAX_STRIPE_FOOTER = 16 * 1024**2  # an ORC stripe footer longer than this is taken for a broken file


@dataclass(frozen=True, slots=True)
class Footer:
    """What `footer_ranges` found: the format ("parquet", "orc", or None for neither) and the
    byte ranges [start, end) to load."""

    format: str | None
    ranges: tuple[tuple[int, int], ...] = ()

    @property
    def bytes(self) -> int:
        return sum(end - start for start, end in self.ranges)


class NeedMore(Exception):
    """The footer starts before the tail read: read from `start` to the end and ask again."""

    def __init__(self, start: int) -> None:
        super().__init__(start)
        self.start = start


def footer_ranges(tail: bytes, size: int) -> Footer:
    """The ranges to load of a file of `size` bytes whose last len(tail) bytes are `tail`;
    raises NeedMore when the footer reaches further back than `tail`."""
    if size >= 12 and tail[-4:] == b"PAR1":
        return _parquet(tail, size)
    if size >= 4 and tail[-4:-1] == b"ORC":
        return _orc(tail, size)
    return Footer(None)


def _parquet(tail: bytes, size: int) -> Footer:
    footer_start = size - 8 - int.from_bytes(tail[-8:-4], "little")
    if footer_start < 4:
        return Footer(None)  # not a Parquet file after all: nothing an engine would trust
    if footer_start < size - len(tail):
        raise NeedMore(footer_start)
    import pyarrow.parquet as pq  # the `tables` extra: only a table load needs it

    known = _Tail(tail, size)
    try:
        metadata = pq.ParquetFile(known).metadata
    except Exception:  # pyarrow read before the tail (it wraps the error), or cannot parse the footer
        if known.wanted is not None:
            raise NeedMore(known.wanted) from None
        return Footer("parquet", ((footer_start, size),))  # the footer as found: an engine reads it too
    data_end, blooms = 4, []
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        for column in range(row_group.num_columns):
            chunk = row_group.column(column)
            starts = [offset for offset in (chunk.dictionary_page_offset, chunk.data_page_offset) if offset]
            data_end = max(data_end, min(starts, default=4) + chunk.total_compressed_size)
            if chunk.bloom_filter_offset:
                blooms.append(chunk.bloom_filter_offset)
    # Page indexes (column and offset indexes) lie between the last column chunk and the
    # footer; bloom filters, when written, after them: read only for predicates on their column.
    indexes_end = min([footer_start, *(offset for offset in blooms if offset >= data_end)])
    if indexes_end > data_end and indexes_end == footer_start:
        return Footer("parquet", ((data_end, size),))
    ranges = ((data_end, indexes_end),) if indexes_end > data_end else ()
    return Footer("parquet", (*ranges, (footer_start, size)))


def _orc(tail: bytes, size: int) -> Footer:
    ps_length = tail[-1]
    if ps_length + 1 > len(tail):
        raise NeedMore(size - 1 - ps_length)
    import pyarrow.orc as orc  # the `tables` extra

    known = _Tail(tail, size)
    try:
        reader = orc.ORCFile(known)
        start = size - 1 - ps_length - reader.file_footer_length - reader.stripe_statistics_length
    except Exception:  # pyarrow read before the tail (it wraps the error), or this is no ORC file
        if known.wanted is not None:
            raise NeedMore(known.wanted) from None
        return Footer(None)
    if start < size - len(tail):
        raise NeedMore(start)
    return Footer("orc", _joined([*_stripe_footers(reader, known), (start, size)]))


def _stripe_footers(reader: ORCFile, known: _Tail) -> list[tuple[int, int]]:
    """The byte ranges of an ORC file's stripe footers (each at its stripe's offset + index length +
    data length, its footer length long, as the file footer's stripe information says): the first
    read pyarrow's reader asks for of each stripe when it reads no column (the footer, and nothing
    else). A stripe pyarrow cannot read otherwise adds none."""
    ranges = []
    for stripe in range(reader.nstripes):
        known.asked.clear()
        try:
            reader.read_stripe(stripe, columns=[])
        except Exception:  # it asked for the footer before the tail (recorded), or the stripe is broken
            pass
        if known.asked:
            offset, length = known.asked[0]
            if 0 <= offset and offset + length <= known.size and length <= MAX_STRIPE_FOOTER:
                ranges.append((offset, offset + length))
    return ranges


def _joined(ranges: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """`ranges` in order, those that touch or overlap made one."""
    joined: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if joined and start <= joined[-1][1]:
            joined[-1] = (joined[-1][0], max(end, joined[-1][1]))
        else:
            joined.append((start, end))
    return tuple(joined)


class _Tail(io.RawIOBase):
    """A read-only file of `size` bytes of which only the last len(tail) are known: enough
    for pyarrow to parse a footer; a read before them fails. `asked` records every read's
    (offset, length), `wanted` the first byte a failed one asked for."""

    def __init__(self, tail: bytes, size: int) -> None:
        super().__init__()
        self._tail, self.size, self._at = tail, size, 0
        self._base = size - len(tail)
        self.asked: list[tuple[int, int]] = []

    @property
    def wanted(self) -> int | None:
        return min((offset for offset, _ in self.asked if offset < self._base), default=None)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        self._at = offset if whence == 0 else self._at + offset if whence == 1 else self.size + offset
        return self._at

    def tell(self) -> int:
        return self._at

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if self._at >= self.size:
            return 0
        self.asked.append((self._at, len(buffer)))
        if self._at < self._base:
            raise OSError(f"byte {self._at} is before the tail read")
        chunk = self._tail[self._at - self._base:self._at - self._base + len(buffer)]
        buffer[:len(chunk)] = chunk
        self._at += len(chunk)
        return len(chunk)
