"""store.blocks: block arithmetic (property tests) and stable block names."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import subprocess
import sys

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from gateway.store.blocks import BlockId, block_bounds, block_span, checksum, slice_for

block_sizes = st.integers(min_value=1, max_value=64)


@st.composite
def objects_and_ranges(draw: st.DrawFn) -> tuple[bytes, int, int, int]:
    size = draw(st.integers(min_value=1, max_value=400))
    data = bytes(i % 251 for i in range(size))
    start = draw(st.integers(min_value=0, max_value=size - 1))
    end = draw(st.integers(min_value=start, max_value=size - 1))
    return data, start, end, draw(block_sizes)


@given(objects_and_ranges())
def test_slices_of_the_blocks_of_a_range_concatenate_to_the_range(case: tuple[bytes, int, int, int]) -> None:
    data, start, end, block_size = case
    pieces = []
    for index in block_span(start, end, block_size):
        first, last = block_bounds(index, block_size, len(data))
        block = data[first : last + 1]
        lo, hi = slice_for(index, block_size, start, end)
        assert 0 <= lo < hi <= len(block)
        pieces.append(block[lo:hi])
    assert b"".join(pieces) == data[start : end + 1]


@given(st.integers(min_value=0, max_value=10_000), block_sizes)
def test_blocks_tile_the_object(object_size: int, block_size: int) -> None:
    covered = []
    for index in block_span(0, object_size - 1, block_size):
        first, last = block_bounds(index, block_size, object_size)
        assert last - first + 1 == min(block_size, object_size - first)
        covered.append((first, last))
    if object_size == 0:
        assert covered == []
    else:
        assert covered[0][0] == 0 and covered[-1][1] == object_size - 1
        assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(covered))


@given(st.integers(min_value=0, max_value=10_000), st.integers(min_value=0, max_value=500), block_sizes)
def test_span_is_exactly_the_blocks_touched(start: int, length: int, block_size: int) -> None:
    end = start + length
    span = block_span(start, end, block_size)
    touched = {offset // block_size for offset in range(start, end + 1)}
    assert set(span) == touched


def test_block_arithmetic_edges() -> None:
    assert block_span(0, 0, 4) == range(1)
    assert block_span(3, 4, 4) == range(2)
    assert block_span(5, 4, 4) == range(0)  # empty range
    assert block_bounds(2, 4, 10) == (8, 9)  # the short last block
    assert slice_for(1, 4, 3, 4) == (0, 1)
    assert slice_for(0, 4, 3, 4) == (3, 4)
    with pytest.raises(ValueError):
        block_bounds(3, 4, 10)
    with pytest.raises(ValueError):
        block_span(0, 1, 0)
    with pytest.raises(ValueError):
        slice_for(5, 4, 0, 3)
    with pytest.raises(ValueError):
        BlockId("b", "k", "v", -1)


# Hard-coded: a change here renames every cached block on every node, so it must be deliberate.
EXPECTED_NAMES = {
    BlockId("b", "k", "etag", 0): "3e0f842abb476293585dae761e047980",
    BlockId("bucket", "data/part-0001.parquet", '"9b2cf535f27731c974343645a3985328"', 7): "fac420783eee867ff2b3f3ecf30036db",
    BlockId("bucket", "ключ/✓", "3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY+MTRCxf3vjVBH40Nr8X8gdRQBpUMLUo", 123456): "66342782aff197c050446f42175843fe",
}


def test_names_are_hard_coded_digests() -> None:
    for block_id, expected in EXPECTED_NAMES.items():
        assert block_id.name == expected, block_id
        assert len(block_id.name) == 32 and int(block_id.name, 16) >= 0


def test_name_is_the_documented_encoding() -> None:
    # blake2b-128 over a domain tag, then each string as u32 length + UTF-8, then the index as u64.
    def field(text: str) -> bytes:
        raw = text.encode()
        return len(raw).to_bytes(4, "big") + raw

    block_id = BlockId("bucket", "ключ/✓", "v1", 9)
    encoded = b"gateway.block.v1\x00" + field("bucket") + field("ключ/✓") + field("v1") + (9).to_bytes(8, "big")
    assert block_id.name == hashlib.blake2b(encoded, digest_size=16).hexdigest()


def test_names_are_stable_across_processes() -> None:
    # A fresh interpreter has a different hash() salt; the names must not notice.
    code = (
        "from gateway.store.blocks import BlockId\n"
        "print(BlockId('bucket', 'ключ/✓', 'v', 3).name)\n"
    )
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PYTHONHASHSEED": "12345", "PATH": ""})
    assert other.stdout.strip() == BlockId("bucket", "ключ/✓", "v", 3).name


ids = st.builds(BlockId, st.text(max_size=8), st.text(max_size=8), st.text(max_size=8), st.integers(min_value=0, max_value=2**40))


@given(ids, ids)
def test_distinct_ids_have_distinct_names(a: BlockId, b: BlockId) -> None:
    assume(a != b)
    assert a.name != b.name


@given(st.text(max_size=6), st.text(max_size=6), st.text(max_size=6))
def test_field_boundaries_are_unambiguous(x: str, y: str, z: str) -> None:
    # Moving characters between fields must change the name.
    assume(y)
    assert BlockId(x + y, z, "v", 0).name != BlockId(x, y + z, "v", 0).name
    assert BlockId("b", x + y, z, 0).name != BlockId("b", x, y + z, 0).name


def test_block_id_is_a_value() -> None:
    a = BlockId("b", "k", "v", 1)
    assert a == BlockId("b", "k", "v", 1) and hash(a) == hash(BlockId("b", "k", "v", 1))
    assert "name" not in repr(a)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.index = 2  # type: ignore[misc]


def test_checksum_is_crc32c() -> None:
    assert checksum(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert checksum(b"") == 0
