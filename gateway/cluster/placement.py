"""Which nodes own a block: rendezvous (highest-random-weight) hashing. Pure, no I/O.

Every node ranks the live members for a block by a stable hash of (member, block) and
takes the highest: the same answer on every node that sees the same members, whatever
order it sees them in. A member joining takes over only the blocks it now ranks first
for; a member leaving hands over only its own blocks, each to the one ranked next.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable

_DOMAIN = b"gateway.placement.v1\x00"
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")


def _field(text: str) -> bytes:
    raw = text.encode("utf-8", "surrogatepass")
    return _U32.pack(len(raw)) + raw  # length-prefixed: ("ab", "c") and ("a", "bc") differ


def placement_name(bucket: str, key: str, index: int) -> bytes:
    """What a block is placed by: its object and index, not the object's version.

    Without the version, a node can tell who owns the first block of an object before
    it knows the object's ETag (a cold read asks that owner for the metadata and the
    block together), and every version of an object has its blocks on the same nodes.
    """
    return _DOMAIN + _field(bucket) + _field(key) + _U64.pack(index)


def weight(member: str, name: bytes) -> int:
    """The stable weight of `member` for the block `name` (blake2b, never the salted hash())."""
    return int.from_bytes(hashlib.blake2b(_field(member) + name, digest_size=8).digest(), "big")


def ranked(name: bytes, members: Iterable[str]) -> list[str]:
    """Every member, highest weight first (ties, which need a 64-bit collision, by name)."""
    return sorted(set(members), key=lambda member: (weight(member, name), member), reverse=True)


def owners(name: bytes, members: Iterable[str], n: int = 1) -> list[str]:
    """The `n` members that own the block `name`, in the order they are asked."""
    return ranked(name, members)[:n]
