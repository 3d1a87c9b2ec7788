"""s3api.checksums: known vectors and agreement with botocore's own implementations."""

from __future__ import annotations

import base64

import pytest
from botocore import httpchecksum
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import S3Error
from gateway.s3api.checksums import (
    ALGORITHMS,
    algorithm_of_header,
    decode_digest,
    header_name,
    new_checksum,
)


def b64_of_hex(hex_digest: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_digest)).decode()


@pytest.mark.parametrize(
    ("algorithm", "data", "hex_digest"),
    [
        ("CRC32", b"", "00000000"),
        ("CRC32", b"123456789", "cbf43926"),
        ("CRC32C", b"", "00000000"),
        ("CRC32C", b"123456789", "e3069283"),
        ("CRC64NVME", b"", "0000000000000000"),
        ("CRC64NVME", b"123456789", "ae8b14860a799888"),
        ("SHA1", b"", "da39a3ee5e6b4b0d3255bfef95601890afd80709"),
        ("SHA1", b"abc", "a9993e364706816aba3e25717850c26c9cd0d89d"),
        ("SHA256", b"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
        ("SHA256", b"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        ("MD5", b"", "d41d8cd98f00b204e9800998ecf8427e"),
    ],
)
def test_known_vectors(algorithm: str, data: bytes, hex_digest: str) -> None:
    c = new_checksum(algorithm)
    c.update(data)
    assert c.digest().hex() == hex_digest
    assert c.b64digest() == b64_of_hex(hex_digest)


def test_names_are_case_insensitive_and_unknown_is_an_s3_error() -> None:
    assert new_checksum("crc32c").b64digest() == "AAAAAA=="
    with pytest.raises(S3Error) as info:
        new_checksum("XXHASH64")
    assert info.value.code == "InvalidRequest"


def test_header_names() -> None:
    assert ALGORITHMS == ("CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256")
    assert header_name("CRC64NVME") == "x-amz-checksum-crc64nvme"
    assert algorithm_of_header("X-Amz-Checksum-Sha256") == "SHA256"
    assert algorithm_of_header("x-amz-checksum-type") is None
    assert algorithm_of_header("content-md5") is None


def test_decode_digest() -> None:
    assert decode_digest("CRC32", "y/Q5Jg==") == bytes.fromhex("cbf43926")
    assert decode_digest("CRC32", " y/Q5Jg== ") == bytes.fromhex("cbf43926")
    for bad in ("y/Q5Jg", "y/Q5Jg==x", "AAAAAAAA", "é===", "", "!!!!"):
        assert decode_digest("CRC32", bad) is None
    assert decode_digest("CRC64NVME", "y/Q5Jg==") is None  # right base64, wrong length


BOTOCORE = {
    "CRC32": httpchecksum.Crc32Checksum,
    "CRC32C": httpchecksum.CrtCrc32cChecksum,
    "CRC64NVME": httpchecksum.CrtCrc64NvmeChecksum,
    "SHA1": httpchecksum.Sha1Checksum,
    "SHA256": httpchecksum.Sha256Checksum,
}


@settings(max_examples=150, deadline=None)
@given(
    algorithm=st.sampled_from(ALGORITHMS),
    data=st.binary(max_size=5000),
    cuts=st.lists(st.integers(min_value=0, max_value=5000), max_size=6),
)
def test_agrees_with_botocore_for_any_split(algorithm: str, data: bytes, cuts: list[int]) -> None:
    ours = new_checksum(algorithm)
    bounds = sorted({0, len(data), *(c for c in cuts if c <= len(data))})
    for start, end in zip(bounds, bounds[1:]):
        ours.update(data[start:end])
    theirs = BOTOCORE[algorithm]()
    theirs.update(data)
    assert ours.b64digest() == theirs.b64digest()
