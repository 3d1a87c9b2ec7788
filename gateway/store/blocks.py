"""Block naming and block arithmetic: pure functions, no I/O."""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field

from awscrt.checksums import crc32c

# Bumping this renames every block, which is how an incompatible change to the encoding
# below would retire old cache contents instead of misreading them.
_NAME_DOMAIN = b"gateway.block.v1\x00"
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")


def _field(text: str) -> bytes:
    # Length-prefixed so that ("ab", "c") and ("a", "bc") never encode alike; surrogatepass
    # so that a key decoded with surrogateescape still has a name instead of an exception.
    raw = text.encode("utf-8", "surrogatepass")
    return _U32.pack(len(raw)) + raw


@dataclass(frozen=True, slots=True)
class BlockId:
    """One block of one version of one object.

    `version` is the object's ETag or version id: a changed object gets new block names,
    so cached blocks never need invalidating. `name` is a stable 32-hex-digit digest of
    the four fields (the same in every process and on every node), computed once.
    """

    bucket: str
    key: str
    version: str
    index: int
    name: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.index < 0:
            raise ValueError(f"block index must be >= 0, not {self.index}")
        encoded = _NAME_DOMAIN + _field(self.bucket) + _field(self.key) + _field(self.version) + _U64.pack(self.index)
        object.__setattr__(self, "name", hashlib.blake2b(encoded, digest_size=16).hexdigest())


def block_span(start: int, end: int, block_size: int) -> range:
    """Indexes of the blocks that hold any byte of the inclusive range [start, end].

    An empty range (end < start) touches no block.
    """
    if block_size <= 0:
        raise ValueError(f"block_size must be > 0, not {block_size}")
    if start < 0:
        raise ValueError(f"start must be >= 0, not {start}")
    if end < start:
        return range(0)
    return range(start // block_size, end // block_size + 1)


def block_bounds(index: int, block_size: int, object_size: int) -> tuple[int, int]:
    """The inclusive byte range [first, last] of the object held by block `index`.

    The last block of an object is short; an index past the end is a ValueError.
    """
    if block_size <= 0:
        raise ValueError(f"block_size must be > 0, not {block_size}")
    first = index * block_size
    if index < 0 or first >= object_size:
        raise ValueError(f"block {index} is outside an object of {object_size} bytes")
    return first, min(first + block_size, object_size) - 1


def slice_for(index: int, block_size: int, start: int, end: int) -> tuple[int, int]:
    """Offsets (lo, hi) within block `index` to serve for the inclusive range [start, end].

    Half-open, for slicing: `block[lo:hi]`. The block must be one of block_span(start, end).
    """
    first = index * block_size
    lo = max(start, first) - first
    hi = min(end + 1, first + block_size) - first
    if lo >= hi:
        raise ValueError(f"block {index} holds no byte of {start}-{end}")
    return lo, hi


def checksum(data: bytes | bytearray | memoryview) -> int:
    """The checksum stored with every block on disk and verified on every read.

    A CRC because the threat is torn writes and bit rot, not an adversary with write access
    to the cache folder (who could rewrite the checksum as well): it catches every burst
    error up to 32 bits. CRC-32C (Castagnoli) through awscrt, which uses the CPU's CRC
    instructions: 0.15 ms per 4 MiB block here, against 1.3 ms for zlib's CRC-32.
    """
    return crc32c(data)
