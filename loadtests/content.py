"""Object bodies derived from a seed and a name, and the checks that a body read back is that one.

A scenario never needs to keep what it wrote: the bytes of an object are a function of
(seed, name, size), so any reader that knows those three regenerates them, or their sha256,
and compares. Every 64 KiB chunk starts with a hash of (seed, name, chunk index) and goes on
with a per-seed random pad rotated by that hash, so no two chunks of any two objects are
alike (a block served from the wrong object or the wrong offset is caught), and making a
chunk costs a hash and a copy, not a random generator (several hundred MB/s).
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import itertools
import math
import random
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

CHUNK = 64 * 1024

_UNITS = {"": 1, "B": 1, "K": 10**3, "KB": 10**3, "KIB": 2**10, "M": 10**6, "MB": 10**6, "MIB": 2**20,
          "G": 10**9, "GB": 10**9, "GIB": 2**30}


def parse_size(text: str) -> int:
    """'4096', '4KiB', '1MB', '1.5GiB' -> bytes."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    if match is None or match.group(2).upper() not in _UNITS:
        raise ValueError(f"not a size: {text!r} (e.g. 4096, 4KiB, 1MiB, 1MB)")
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


@dataclass(frozen=True, slots=True)
class SizeSpec:
    """A fixed size ('64KiB') or a range ('1KiB-4MiB', log-uniform: as many 1-10 KiB objects as 100 KiB-1 MiB)."""

    low: int
    high: int

    @classmethod
    def parse(cls, text: str) -> SizeSpec:
        low, _, high = text.partition("-")
        spec = cls(parse_size(low), parse_size(high) if high else parse_size(low))
        if spec.low < 0 or spec.high < spec.low:
            raise ValueError(f"not a size range: {text!r}")
        return spec

    def pick(self, rng: random.Random) -> int:
        if self.low == self.high:
            return self.low
        low = max(self.low, 1)
        return min(self.high, max(self.low, round(math.exp(rng.uniform(math.log(low), math.log(self.high + 1))) - 1)))


@functools.lru_cache(maxsize=8)
def _pad(seed: str) -> bytes:
    return random.Random(f"loadtests-pad:{seed}").randbytes(CHUNK)


@dataclass(frozen=True, slots=True)
class Body:
    """The bytes of one object: a function of (seed, name, size)."""

    seed: str
    name: str
    size: int

    def _chunk(self, index: int) -> bytes:
        head = hashlib.sha256(f"{self.seed}\0{self.name}\0{index}".encode()).digest()
        offset = int.from_bytes(head[:4], "big") % CHUNK
        pad = _pad(self.seed)
        length = min(CHUNK, self.size - index * CHUNK)
        return (head + pad[offset:] + pad[:offset])[:length]

    def chunks(self, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """The bytes [start, end) in pieces of at most CHUNK."""
        end = self.size if end is None else min(end, self.size)
        position = start
        while position < end:
            index = position // CHUNK
            chunk = self._chunk(index)
            piece = chunk[position - index * CHUNK:end - index * CHUNK]
            yield piece
            position += len(piece)

    def bytes(self, start: int = 0, end: int | None = None) -> bytes:
        return b"".join(self.chunks(start, end))

    def sha256(self) -> str:
        return _sha256(self)

    def reader(self) -> BodyReader:
        return BodyReader(self)


@functools.lru_cache(maxsize=65536)
def _sha256(body: Body) -> str:
    digest = hashlib.sha256()
    for piece in body.chunks():
        digest.update(piece)
    return digest.hexdigest()


class BodyReader:
    """A file-like read() over a Body, for uploads that must not hold the whole object."""

    def __init__(self, body: Body) -> None:
        self._pieces = body.chunks()
        self._buffer = b""

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self._buffer) < size:
            piece = next(self._pieces, None)
            if piece is None:
                break
            self._buffer += piece
        if size < 0:
            out, self._buffer = self._buffer, b""
        else:
            out, self._buffer = self._buffer[:size], self._buffer[size:]
        return out


def mismatch(body: Body, got: Iterable[bytes], start: int = 0, end: int | None = None) -> str | None:
    """None when `got` is exactly body[start:end], else what differs (length, first differing byte, or digests)."""
    end = body.size if end is None else min(end, body.size)
    if start == 0 and end == body.size:
        digest = hashlib.sha256()
        length = 0
        for piece in got:
            digest.update(piece)
            length += len(piece)
        if length != end - start:
            return f"{length} bytes instead of {end - start}"
        if digest.hexdigest() != body.sha256():
            return f"sha256 {digest.hexdigest()} instead of {body.sha256()}"
        return None
    expected = body.bytes(start, end)
    data = b"".join(got)
    if len(data) != len(expected):
        return f"{len(data)} bytes instead of {len(expected)}"
    if data != expected:
        first = next(i for i, (a, b) in enumerate(zip(data, expected, strict=True)) if a != b)
        return f"byte {start + first} differs"
    return None


class Zipf:
    """Ranks 0..n-1 drawn with P(rank k) proportional to 1/(k+1)**exponent (0: uniform)."""

    def __init__(self, n: int, exponent: float) -> None:
        if n < 1:
            raise ValueError("Zipf over no items")
        self.cumulative = list(itertools.accumulate(1.0 / (k + 1) ** exponent for k in range(n)))

    def sample(self, rng: random.Random) -> int:
        point = rng.random() * self.cumulative[-1]
        return min(bisect.bisect_right(self.cumulative, point), len(self.cumulative) - 1)
