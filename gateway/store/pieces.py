"""Piece arithmetic: a partial block is one contiguous piece [lo, hi) of it. Pure functions.

A cold read that needs a few KiB of a 1 MiB block fetches those bytes rounded out to a
granule, not the whole block; what it brought is kept as the block's piece (MemoryTier), a
later read the piece covers is a hit, and a read that needs more of the block fetches only
what the piece lacks (one origin request) and the two join.

In a tier the workers of a node share (store.shared) a piece is kept as a block of its own, named
by `piece_id` (its block's version with PIECE_MARK after it: another name, the same owner worker)
and holding `encoded` bytes: where the piece starts in its block, then the piece.
"""

from __future__ import annotations

import struct

from gateway.store.blocks import BlockId

# What a piece's version ends with in a shared tier: a block version (an ETag or a version id, as
# objects.block_version makes it) never holds a NUL.
PIECE_MARK = "\x00piece"
_START = struct.Struct(">Q")


def piece_id(block: BlockId) -> BlockId:
    """The name the piece of `block` is kept under in a tier the node's workers share."""
    return BlockId(block.bucket, block.key, block.version + PIECE_MARK, block.index)


def block_of(piece: BlockId) -> BlockId:
    """The block a piece (piece_id) is part of."""
    return BlockId(piece.bucket, piece.key, piece.version.removesuffix(PIECE_MARK), piece.index)


def is_piece(block: BlockId) -> bool:
    """Whether `block` names a piece (piece_id), not a block."""
    return block.version.endswith(PIECE_MARK)


def encoded(lo: int, data: bytes) -> bytes:
    """A piece as kept in a shared tier: its start in the block, then its bytes."""
    return _START.pack(lo) + data


def decoded(raw: bytes | memoryview) -> tuple[int, bytes | memoryview]:
    """(lo, bytes) of a piece kept as `encoded` made it; ValueError for one too short."""
    if len(raw) <= _START.size:
        raise ValueError(f"a piece of {len(raw)} bytes holds no byte of its block")
    return _START.unpack_from(raw)[0], raw[_START.size:]


def rounded(lo: int, hi: int, granule: int, length: int) -> tuple[int, int]:
    """[lo, hi) rounded out to `granule` bounds, within a block of `length` bytes."""
    if granule <= 0:
        raise ValueError(f"granule must be > 0, not {granule}")
    if not 0 <= lo < hi <= length:
        raise ValueError(f"[{lo}, {hi}) is not a non-empty range of a block of {length} bytes")
    return lo // granule * granule, min(-(-hi // granule) * granule, length)


def covers(piece_lo: int, piece_hi: int, lo: int, hi: int) -> bool:
    """Whether the piece [piece_lo, piece_hi) holds every byte of [lo, hi)."""
    return piece_lo <= lo and hi <= piece_hi


def lacking(piece: tuple[int, int] | None, lo: int, hi: int) -> tuple[int, int]:
    """The one range to fetch so that, with the piece [piece_lo, piece_hi) held, every byte of
    [lo, hi) is in hand: [lo, hi) less the piece when the piece holds one end of it; all of
    [lo, hi) when the piece holds neither end (its bytes, apart or inside, are not used)."""
    if piece is None:
        return lo, hi
    piece_lo, piece_hi = piece
    if covers(piece_lo, piece_hi, lo, hi):
        raise ValueError(f"the piece [{piece_lo}, {piece_hi}) already holds [{lo}, {hi})")
    if piece_lo <= lo < piece_hi:
        return piece_hi, hi
    if piece_lo < hi <= piece_hi:
        return lo, piece_lo
    return lo, hi


def join(piece: tuple[int, bytes] | None, lo: int, data: bytes) -> tuple[int, bytes]:
    """The piece held once `data`, bytes [lo, lo + len(data)) of the block, arrives: the union
    when the two overlap or touch (one contiguous piece), else the new bytes alone."""
    if piece is None:
        return lo, data
    held_lo, held = piece
    held_hi, hi = held_lo + len(held), lo + len(data)
    if hi < held_lo or held_hi < lo:
        return lo, data
    if covers(held_lo, held_hi, lo, hi):
        return piece
    if covers(lo, hi, held_lo, held_hi):
        return lo, data
    if lo < held_lo:
        return lo, data + held[hi - held_lo:]
    return held_lo, held + data[held_hi - lo:]
