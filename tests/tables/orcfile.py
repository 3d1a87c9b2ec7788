"""ORC files of several stripes written by pyarrow, and a reader of their stripe footers that owes
nothing to pyarrow's: ORC's compressed chunks undone (zlib, snappy, zstd, lz4) and the few protobuf
fields of a StripeFooter read by hand, so that the ranges gateway.tables.footers finds can be checked
against what the file holds."""

from __future__ import annotations

import io
import random
import zlib

import pyarrow as pa
import pyarrow.orc as orc

COMPRESSIONS = ("uncompressed", "zlib", "snappy", "zstd", "lz4")
STRIPE_SIZE = 128 * 1024  # small stripes: a file of some 20, most of them before a 64 KiB tail


def orc_file(compression: str, rows: int = 200_000, stripe_size: int = STRIPE_SIZE) -> bytes:
    """Random integers (that compress little, so stripes stay apart) and short strings."""
    draw = random.Random(7)
    table = pa.table({"id": [draw.getrandbits(62) for _ in range(rows)],
                      "name": [f"name-{draw.randrange(1000)}" for _ in range(rows)]})
    out = io.BytesIO()
    orc.write_table(table, out, stripe_size=stripe_size, compression=compression)
    return out.getvalue()


def assert_stripe_footers(data: bytes, ranges: tuple[tuple[int, int], ...], columns: int) -> None:
    """`ranges` are an ORC file's stripe footers, the last one's joined to the range of its
    stripe statistics, footer and postscript: each decodes (all of it, no more) and lies right
    after its stripe's streams, of `columns` columns (the root struct one of them)."""
    reader = orc.ORCFile(io.BytesIO(data))
    compression = reader.compression.lower()
    stripes_end = len(data) - 1 - reader.file_postscript_length - reader.file_footer_length - \
        reader.stripe_statistics_length
    *apart, (last, end) = ranges
    assert end == len(data) and len(apart) == reader.nstripes - 1, (ranges, reader.nstripes)
    at = 3  # the first stripe comes after "ORC"
    for start, stop in [*apart, (last, stripes_end)]:
        streams, encodings = stripe_footer(data[start:stop], compression)
        assert (at + streams, encodings) == (start, columns), (start, stop)
        at = stop
    assert at == stripes_end


def stripe_footer(data: bytes, compression: str) -> tuple[int, int]:
    """(the bytes of the stripe's streams, its column encodings) as the StripeFooter `data` says:
    the sum of its Stream.length (field 3 of field 1) and the count of field 2."""
    message = _decompressed(data, compression) if compression != "uncompressed" else data
    streams = columns = 0
    for field, value in _fields(message):
        if field == 1:
            assert isinstance(value, bytes)
            streams += sum(int(length) for number, length in _fields(value) if number == 3)
        elif field == 2:
            columns += 1
    return streams, columns


def _fields(message: bytes) -> list[tuple[int, int | bytes]]:
    """A protobuf message's (field number, value): varints as int, length-delimited as bytes."""
    fields, at = [], 0
    while at < len(message):
        key, at = _varint(message, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(message, at)
            fields.append((number, value))
        elif wire == 2:
            length, at = _varint(message, at)
            assert at + length <= len(message), "a field runs past the message"
            fields.append((number, message[at:at + length]))
            at += length
        else:
            raise AssertionError(f"wire type {wire}: not a StripeFooter")
    return fields


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        value, at, shift = value | (byte & 0x7F) << shift, at + 1, shift + 7
        if byte < 0x80:
            return value, at


def _decompressed(data: bytes, compression: str) -> bytes:
    """ORC's compressed stream: chunks behind a 3-byte header (length << 1 | original)."""
    out, at = bytearray(), 0
    while at < len(data):
        header = int.from_bytes(data[at:at + 3], "little")
        chunk, at = data[at + 3:at + 3 + (header >> 1)], at + 3 + (header >> 1)
        assert len(chunk) == header >> 1, "a chunk runs past the range"
        out += chunk if header & 1 else _CODECS[compression](chunk)
    return bytes(out)


def _snappy(chunk: bytes) -> bytes:
    size, _ = _varint(chunk, 0)  # snappy's preamble: the uncompressed length
    return pa.decompress(chunk, decompressed_size=size, codec="snappy", asbytes=True)  # type: ignore[no-any-return]


def _zstd(chunk: bytes) -> bytes:
    descriptor = chunk[4]  # after the magic: the frame header descriptor, then the content size
    single, dictionary, size_flag = descriptor >> 5 & 1, descriptor & 3, descriptor >> 6
    at = 5 + (0 if single else 1) + (0, 1, 2, 4)[dictionary]
    width = (1 if single else 0, 2, 4, 8)[size_flag]
    assert width, "a zstd frame without its content size"
    size = int.from_bytes(chunk[at:at + width], "little") + (256 if width == 2 else 0)
    return pa.decompress(chunk, decompressed_size=size, codec="zstd", asbytes=True)  # type: ignore[no-any-return]


def _lz4(chunk: bytes) -> bytes:
    """An LZ4 block: (token, literals, offset, match) sequences; the last has literals only."""
    out, at = bytearray(), 0
    while at < len(chunk):
        token, at = chunk[at], at + 1
        literals, at = _lz4_length(chunk, at, token >> 4)
        out += chunk[at:at + literals]
        at += literals
        if at >= len(chunk):
            break
        offset, at = int.from_bytes(chunk[at:at + 2], "little"), at + 2
        match, at = _lz4_length(chunk, at, token & 15)
        for _ in range(match + 4):
            out.append(out[-offset])
    return bytes(out)


def _lz4_length(chunk: bytes, at: int, length: int) -> tuple[int, int]:
    if length == 15:
        while True:
            more, at = chunk[at], at + 1
            length += more
            if more != 255:
                break
    return length, at


_CODECS = {"zlib": lambda chunk: zlib.decompress(chunk, -15), "snappy": _snappy, "zstd": _zstd, "lz4": _lz4}
