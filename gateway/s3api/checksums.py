"""The checksums S3 carries in x-amz-checksum-* headers and trailers, plus MD5 for Content-MD5."""

from __future__ import annotations

import base64
import binascii
import hashlib
import zlib
from collections.abc import Callable
from typing import Protocol

from awscrt import checksums as _crt

from gateway.errors import S3Error

ALGORITHMS = ("CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256")

# Digest length in bytes: a header value decoding to any other length is malformed.
DIGEST_SIZES = {"CRC32": 4, "CRC32C": 4, "CRC64NVME": 8, "SHA1": 20, "SHA256": 32, "MD5": 16}

HEADER_PREFIX = "x-amz-checksum-"


class Checksum(Protocol):
    def update(self, data: bytes) -> None: ...

    def digest(self) -> bytes: ...

    def b64digest(self) -> str: ...


class _Crc:
    """An incremental CRC whose digest is the big-endian integer, as S3 sends it."""

    __slots__ = ("_fn", "_size", "_mask", "_value")

    def __init__(self, fn: Callable[[bytes, int], int], size: int) -> None:
        self._fn = fn
        self._size = size
        self._mask = (1 << (8 * size)) - 1
        self._value = 0

    def update(self, data: bytes) -> None:
        self._value = self._fn(data, self._value) & self._mask

    def digest(self) -> bytes:
        return self._value.to_bytes(self._size, "big")

    def b64digest(self) -> str:
        return base64.b64encode(self.digest()).decode("ascii")


class _Hash:
    __slots__ = ("_h",)

    def __init__(self, name: str) -> None:
        # usedforsecurity=False: MD5/SHA1 are integrity checks here, and FIPS builds refuse them otherwise.
        self._h = hashlib.new(name, usedforsecurity=False)

    def update(self, data: bytes) -> None:
        self._h.update(data)

    def digest(self) -> bytes:
        return self._h.digest()

    def b64digest(self) -> str:
        return base64.b64encode(self._h.digest()).decode("ascii")

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def new_checksum(algorithm: str) -> Checksum:
    """A fresh checksum for one of ALGORITHMS (or "MD5"); case-insensitive.

    The name usually comes from the client, so an unknown one is an S3Error.
    """
    alg = algorithm.upper()
    if alg == "CRC32":
        return _Crc(zlib.crc32, 4)
    if alg == "CRC32C":
        return _Crc(_crt.crc32c, 4)
    if alg == "CRC64NVME":
        return _Crc(_crt.crc64nvme, 8)
    if alg in ("SHA1", "SHA256", "MD5"):
        return _Hash(alg.lower())
    raise S3Error("InvalidRequest", f"Checksum algorithm {algorithm!r} is not supported.")


def header_name(algorithm: str) -> str:
    """"CRC32" -> "x-amz-checksum-crc32"."""
    return HEADER_PREFIX + algorithm.lower()


def algorithm_of_header(name: str) -> str | None:
    """"x-amz-checksum-crc32" -> "CRC32"; None for names that are not a known checksum header."""
    name = name.lower()
    if not name.startswith(HEADER_PREFIX):
        return None
    alg = name[len(HEADER_PREFIX):].upper()
    return alg if alg in ALGORITHMS else None


def decode_digest(algorithm: str, value: str) -> bytes | None:
    """The raw digest of a base64 header value, or None if it is not valid for `algorithm`."""
    try:
        raw = base64.b64decode(value.strip().encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        return None
    return raw if len(raw) == DIGEST_SIZES[algorithm.upper()] else None
