"""A block file read back is its block or BadBlockError, whatever happened to the file:
one read of a small file (header and data together), two of a large one, and a mapping of
either (store.mapped) alike."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.store import blockfile
from gateway.store.blockfile import BadBlockError
from gateway.store.blocks import BlockId, checksum
from tests.store.helpers import write_block

SIZES = st.sampled_from([0, 1, 4096, 64 * 1024 - 200, 64 * 1024 + 1, 200_000])
KEYS = st.text(min_size=1, max_size=40)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(size=SIZES, key=KEYS, where=st.floats(0, 1, exclude_max=True), flip=st.integers(1, 255),
       damage=st.sampled_from(["flip", "truncate", "append", "none"]))
def test_a_read_is_the_block_or_bad(tmp_path: Path, size: int, key: str, where: float, flip: int, damage: str) -> None:
    block = BlockId("bkt", key, "etag", 3)
    data = os.urandom(size)
    path = write_block(tmp_path, block, data)
    raw = bytearray(Path(path).read_bytes())
    at = int(where * len(raw))
    if damage == "flip":
        raw[at] ^= flip
    elif damage == "truncate":
        del raw[at:]
    elif damage == "append":
        raw += b"x"
    Path(path).write_bytes(bytes(raw))
    for read in (blockfile.read_block, mapped):
        try:
            got = read(path, block)
        except BadBlockError:
            assert damage != "none"
            continue
        assert got == data  # never other bytes (a flip in the header's reserved bytes changes nothing read)


def mapped(path: str, block: BlockId) -> bytes:
    """The block's bytes as a mapping of its file is checked (blockfile.map_file and check_mapped,
    store.mapped)."""
    mapping, _ = blockfile.map_file(path)
    try:
        data, crc = blockfile.check_mapped(mapping, block)
        assert checksum(data) == crc and data.readonly
        copy = data.tobytes()
        data.release()
        return copy
    finally:
        mapping.close()


def test_a_file_of_another_block_is_refused(tmp_path: Path) -> None:
    for size in (10, 100_000):  # read in one go, and header then data
        mine, other = BlockId("bkt", "k", "e", 0), BlockId("bkt", "k", "e", 1)
        path = write_block(tmp_path, other, os.urandom(size))
        for read in (blockfile.read_block, mapped):
            try:
                read(path, mine)
            except BadBlockError as exc:
                assert "another block" in str(exc)
            else:
                raise AssertionError("read a block under another block's name")


@given(root=st.sampled_from(["/", "/tmp", "/tmp/", "cache", "cache//tier/", "./a b/ü", ""]),
       name=st.text("0123456789abcdef", min_size=4, max_size=64))
def test_a_block_path_is_the_join_of_its_parts(root: str, name: str) -> None:
    assert blockfile.block_path(root, name) == os.path.join(root, name[0:2], name[2:4], name)
