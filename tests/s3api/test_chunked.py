"""s3api.chunked: the aws-chunked decoder against AWS's published examples, botocore's encoder, and fuzzing."""

from __future__ import annotations

import hashlib
import hmac
import io

import pytest
from botocore.httpchecksum import AwsChunkedWrapper, Crc32Checksum
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import S3Error
from gateway.s3api.auth import ChunkSigner
from gateway.s3api.chunked import AwsChunkedDecoder
from gateway.signing import EMPTY_SHA256, derive_signing_key

# AWS's published chunked-upload examples: 65 KiB chunk + 1 KiB chunk of "a", us-east-1, 2013-05-24.
EXAMPLE_KEY = derive_signing_key("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "20130524", "us-east-1", "s3")
EXAMPLE_DATE = "20130524T000000Z"
EXAMPLE_SCOPE = "20130524/us-east-1/s3/aws4_request"
EXAMPLE_SIGNER = ChunkSigner(EXAMPLE_KEY, EXAMPLE_DATE, EXAMPLE_SCOPE, "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9")
EXAMPLE_BODY = (
    b"10000;chunk-signature=ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648\r\n"
    + b"a" * 65536
    + b"\r\n400;chunk-signature=0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497\r\n"
    + b"a" * 1024
    + b"\r\n0;chunk-signature=b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9\r\n\r\n"
)
TRAILER_SIGNER = ChunkSigner(EXAMPLE_KEY, EXAMPLE_DATE, EXAMPLE_SCOPE, "106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e")
TRAILER_BODY = (
    b"10000;chunk-signature=b474d8862b1487a5145d686f57f013e54db672cee1c953b3010fb58501ef5aa2\r\n"
    + b"a" * 65536
    + b"\r\n400;chunk-signature=1c1344b170168f8e65b41376b44b20fe354e373826ccbbe2c1d40a8cae51e5c7\r\n"
    + b"a" * 1024
    + b"\r\n0;chunk-signature=2ca2aba2005185cf7159c6277faf83795951dd77a3a99e6e65d5c9f85863f992\r\n"
    + b"x-amz-checksum-crc32c:sOO8/Q==\r\n"
    + b"x-amz-trailer-signature:d81f82fc3505edab99d459891051a732e8730629a2e4a59689829ca17fe2e435\r\n\r\n"
)


def decode(decoder: AwsChunkedDecoder, body: bytes, cuts: list[int] | tuple[int, ...] = ()) -> tuple[bytes, dict[str, str]]:
    bounds = sorted({0, len(body), *(c for c in cuts if 0 <= c <= len(body))})
    out = []
    for start, end in zip(bounds, bounds[1:]):
        out.extend(decoder.feed(body[start:end]))
    return b"".join(out), decoder.finish()


def encode(
    payload: bytes,
    sizes: list[int],
    *,
    signer: ChunkSigner | None = None,
    trailers: list[tuple[str, str]] | None = None,
) -> bytes:
    """An independent aws-chunked encoder (the test's own SigV4 chunk signing)."""
    prev = signer.seed_signature if signer else ""

    def sign(kind: str, last: str) -> str:
        assert signer is not None
        to_sign = "\n".join((kind, signer.amz_date, signer.scope, prev, last))
        return hmac.new(signer.signing_key, to_sign.encode(), hashlib.sha256).hexdigest()

    out = bytearray()
    pos = 0
    pieces = []
    for size in sizes:
        if pos >= len(payload):
            break
        pieces.append(payload[pos : pos + max(size, 1)])
        pos += max(size, 1)
    if pos < len(payload):
        pieces.append(payload[pos:])
    for piece in [*pieces, b""]:
        out += f"{len(piece):x}".encode()
        if signer:
            prev = sign("AWS4-HMAC-SHA256-PAYLOAD", EMPTY_SHA256 + "\n" + hashlib.sha256(piece).hexdigest())
            out += f";chunk-signature={prev}".encode()
        out += b"\r\n" + piece + (b"\r\n" if piece else b"")
    for name, value in trailers or ():
        out += f"{name}:{value}\r\n".encode()
    if signer and trailers:
        canonical = "".join(f"{n}:{v}\n" for n, v in sorted(trailers)).encode()
        out += f"x-amz-trailer-signature:{sign('AWS4-HMAC-SHA256-TRAILER', hashlib.sha256(canonical).hexdigest())}\r\n".encode()
    return bytes(out + b"\r\n")


def expect_error(code: str, decoder: AwsChunkedDecoder, body: bytes) -> S3Error:
    with pytest.raises(S3Error) as info:
        decode(decoder, body)
    assert info.value.code == code, info.value
    return info.value


# --- published vectors and real client encodings ------------------------------------------------


def test_aws_example_streaming_put() -> None:
    assert len(EXAMPLE_BODY) == 66824  # the example's Content-Length
    data, trailers = decode(AwsChunkedDecoder(EXAMPLE_SIGNER, expect_trailer=False), EXAMPLE_BODY)
    assert data == b"a" * 66560 and trailers == {}


def test_aws_example_byte_by_byte() -> None:
    decoder = AwsChunkedDecoder(EXAMPLE_SIGNER, expect_trailer=False)
    total = sum(len(p) for i in range(len(EXAMPLE_BODY)) for p in decoder.feed(EXAMPLE_BODY[i : i + 1]))
    assert total == 66560
    assert decoder.finish() == {}
    assert decoder.decoded_length == 66560


def test_aws_example_with_signed_trailer() -> None:
    data, trailers = decode(AwsChunkedDecoder(TRAILER_SIGNER, expect_trailer=True), TRAILER_BODY, [5, 70000, 66700])
    assert data == b"a" * 66560
    assert trailers == {"x-amz-checksum-crc32c": "sOO8/Q=="}


@pytest.mark.parametrize(
    ("body", "old", "new"),
    [
        (EXAMPLE_BODY, b"ad80c730", b"ad80c731"),  # first chunk signature
        (EXAMPLE_BODY, b"b6c6ea8a", b"b6c6ea8b"),  # final chunk signature
        (EXAMPLE_BODY, b"a\r\n400;", b"b\r\n400;"),  # one payload byte
        (TRAILER_BODY, b"sOO8/Q==", b"sOO8/R=="),  # the trailer checksum
        (TRAILER_BODY, b"d81f82fc", b"d81f82fd"),  # the trailer signature
    ],
)
def test_aws_examples_tampered(body: bytes, old: bytes, new: bytes) -> None:
    assert body.count(old) == 1
    signer = TRAILER_SIGNER if body is TRAILER_BODY else EXAMPLE_SIGNER
    expect_error("SignatureDoesNotMatch", AwsChunkedDecoder(signer, expect_trailer=True), body.replace(old, new))


def test_wrong_seed_fails_on_the_first_chunk() -> None:
    decoder = AwsChunkedDecoder(TRAILER_SIGNER, expect_trailer=False)
    with pytest.raises(S3Error) as info:
        decoder.feed(EXAMPLE_BODY[:70000])
    assert info.value.code == "SignatureDoesNotMatch"


def test_botocore_unsigned_trailer_encoding() -> None:
    payload = bytes(range(256)) * 50
    wire = AwsChunkedWrapper(io.BytesIO(payload), checksum_cls=Crc32Checksum, checksum_name="x-amz-checksum-crc32", chunk_size=1000).read()
    data, trailers = decode(AwsChunkedDecoder(None, expect_trailer=True), wire, [3, 1004, 1005, len(wire) - 3])
    expected = Crc32Checksum()
    expected.update(payload)
    assert data == payload
    assert trailers == {"x-amz-checksum-crc32": expected.b64digest()}


def test_botocore_without_checksum_and_empty_payload() -> None:
    wire = AwsChunkedWrapper(io.BytesIO(b"")).read()
    assert wire == b"0\r\n\r\n"
    assert decode(AwsChunkedDecoder(None, expect_trailer=True), wire) == (b"", {})
    # Lenient: a body that stops right after the final chunk line has lost nothing.
    assert decode(AwsChunkedDecoder(None, expect_trailer=True), b"0\r\n") == (b"", {})


def test_unsigned_chunks_ignore_extensions_and_trim_trailer_values() -> None:
    body = b"3;foo=bar\r\nabc\r\n0\r\nX-Amz-Checksum-CRC32: NSRBwg== \r\n\r\n"
    assert decode(AwsChunkedDecoder(None, expect_trailer=True), body) == (b"abc", {"x-amz-checksum-crc32": "NSRBwg=="})


# --- framing errors and their codes -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"zz\r\nabc\r\n0\r\n\r\n", "InvalidRequest"),  # non-hex size
        (b"-3\r\nabc\r\n0\r\n\r\n", "InvalidRequest"),
        (b" 3\r\nabc\r\n0\r\n\r\n", "InvalidRequest"),
        (b"\r\n", "InvalidRequest"),  # empty size line
        (b"3\nabc\r\n0\r\n\r\n", "InvalidRequest"),  # bare LF
        (b"3\r\nabcd\r\n0\r\n\r\n", "IncompleteBody"),  # data longer than its size
        (b"3\r\nabc\n0\r\n\r\n", "IncompleteBody"),  # no CRLF after data
        (b"3\r\nab", "IncompleteBody"),  # truncated
        (b"3\r\nabc\r\n", "IncompleteBody"),  # no final chunk
        (b"", "IncompleteBody"),
        (b"3\r\nabc\r\n0\r\n\r\nX", "InvalidRequest"),  # bytes after the end
        (b"3\r\nabc\r\n0\r\nx-amz-meta:1\r\n\r\n", "InvalidRequest"),  # trailer when none was announced
        (b"1" * 5000, "InvalidRequest"),  # a "header line" that never ends
        (b"ffffffff\r\n", "InvalidRequest"),  # oversize chunk
    ],
)
def test_framing_errors(body: bytes, code: str) -> None:
    expect_error(code, AwsChunkedDecoder(None, expect_trailer=False, max_chunk_size=1024), body)


@pytest.mark.parametrize(
    "trailer",
    [
        b"novalue\r\n",
        b":empty-name\r\n",
        b"bad name:1\r\n",
        b"x-amz-checksum-crc32:AAAAAA==\r\nx-amz-checksum-crc32:AAAAAA==\r\n",  # duplicate
        b"x-amz-meta:\xff\r\n",  # not ASCII
        b"x-amz-trailer-signature:" + b"0" * 64 + b"\r\n",  # a signature in an unsigned body
        b"".join(b"x-amz-meta-%d:%s\r\n" % (i, b"v" * 1000) for i in range(20)),  # oversize trailer
        b"x-amz-meta:" + b"v" * 5000 + b"\r\n",  # oversize line
    ],
)
def test_malformed_trailers(trailer: bytes) -> None:
    expect_error("MalformedTrailerError", AwsChunkedDecoder(None, expect_trailer=True), b"3\r\nabc\r\n0\r\n" + trailer + b"\r\n")


def test_a_signed_body_cut_between_its_trailers_is_incomplete() -> None:
    """Cut right after a trailer line, the signature is still to come: IncompleteBody (found
    by the truncation property below), while a body that ends after a blank line without the
    signature is refused as malformed (the next test)."""
    body = encode(b"\x00" * 15, [15], signer=SIGNER, trailers=[("x-amz-checksum-crc32", "0"), ("x-amz-checksum-sha256", "00")])
    after_first_trailer = body.index(b"x-amz-checksum-sha256")
    expect_error("IncompleteBody", AwsChunkedDecoder(SIGNER, expect_trailer=True), body[:after_first_trailer])


def test_signed_trailers_need_their_signature() -> None:
    signer = ChunkSigner(b"k" * 32, EXAMPLE_DATE, EXAMPLE_SCOPE, "0" * 64)
    body = encode(b"abc", [3], signer=signer, trailers=[("x-amz-checksum-crc32", "NSRBwg==")])
    assert decode(AwsChunkedDecoder(signer, expect_trailer=True), body)[1] == {"x-amz-checksum-crc32": "NSRBwg=="}
    stripped = body[: body.index(b"x-amz-trailer-signature")] + b"\r\n"
    expect_error("MalformedTrailerError", AwsChunkedDecoder(signer, expect_trailer=True), stripped)
    after_sig = body[:-2] + b"x-amz-meta:late\r\n\r\n"
    expect_error("MalformedTrailerError", AwsChunkedDecoder(signer, expect_trailer=True), after_sig)


def test_signed_chunks_need_a_chunk_signature() -> None:
    signer = ChunkSigner(b"k" * 32, EXAMPLE_DATE, EXAMPLE_SCOPE, "0" * 64)
    for header in (b"3\r\n", b"3;chunk-signature=abc\r\n", b"3;chunk-sig=" + b"0" * 64 + b"\r\n"):
        expect_error("InvalidRequest", AwsChunkedDecoder(signer, expect_trailer=False), header + b"abc\r\n0\r\n\r\n")


def test_errors_are_sticky() -> None:
    decoder = AwsChunkedDecoder(None, expect_trailer=False)
    with pytest.raises(S3Error):
        decoder.feed(b"zz\r\n")
    with pytest.raises(S3Error):
        decoder.feed(b"3\r\nabc\r\n0\r\n\r\n")
    with pytest.raises(S3Error):
        decoder.finish()


def test_lenient_end_without_final_crlf_keeps_signature_rules() -> None:
    signer = ChunkSigner(b"k" * 32, EXAMPLE_DATE, EXAMPLE_SCOPE, "1" * 64)
    body = encode(b"hello", [5], signer=signer, trailers=[("x-amz-checksum-crc32", "NhCmhg==")])
    assert decode(AwsChunkedDecoder(signer, expect_trailer=True), body[:-2])[0] == b"hello"


# --- properties --------------------------------------------------------------------------------------

SIGNER = ChunkSigner(derive_signing_key("secret", "20240309", "us-east-1", "s3"), "20240309T120000Z", "20240309/us-east-1/s3/aws4_request", "ab" * 32)
payloads = st.binary(max_size=3000)
sizes = st.lists(st.integers(min_value=1, max_value=1500), min_size=1, max_size=8)
cuts = st.lists(st.integers(min_value=0, max_value=4000), max_size=10)
trailer_lists = st.lists(
    st.tuples(st.sampled_from(["x-amz-checksum-crc32", "x-amz-checksum-sha256", "x-amz-meta-a"]), st.text("abcXYZ019+/=", min_size=1, max_size=20)),
    max_size=3,
    unique_by=lambda t: t[0],
)


@settings(max_examples=150, deadline=None)
@given(payload=payloads, sizes=sizes, cuts=cuts, signed=st.booleans(), trailers=trailer_lists)
def test_round_trip_any_split(payload: bytes, sizes: list[int], cuts: list[int], signed: bool, trailers: list[tuple[str, str]]) -> None:
    signer = SIGNER if signed else None
    body = encode(payload, sizes, signer=signer, trailers=trailers)
    data, got = decode(AwsChunkedDecoder(signer, expect_trailer=True), body, cuts)
    assert data == payload
    assert got == dict(trailers)


@settings(max_examples=300, deadline=None)
@given(payload=payloads, sizes=sizes, trailers=trailer_lists, where=st.integers(min_value=0), byte=st.integers(0, 255), cuts=cuts)
def test_any_single_byte_corruption_of_a_signed_body_is_caught(
    payload: bytes, sizes: list[int], trailers: list[tuple[str, str]], where: int, byte: int, cuts: list[int]
) -> None:
    body = bytearray(encode(payload, sizes, signer=SIGNER, trailers=trailers))
    where %= len(body)
    if body[where] == byte:
        byte ^= 0x01
    body[where] = byte
    try:
        data, got = decode(AwsChunkedDecoder(SIGNER, expect_trailer=True), bytes(body), cuts)
    except S3Error as exc:
        assert 400 <= exc.status < 500
    else:
        # Only changes that mean the same thing may pass: hex digit case, header-name case.
        assert data == payload and got == dict(trailers)


@settings(max_examples=200, deadline=None)
@given(payload=payloads, sizes=sizes, trailers=trailer_lists, where=st.integers(min_value=0), byte=st.integers(0, 255), signed=st.booleans())
def test_corruption_or_truncation_never_raises_anything_else(
    payload: bytes, sizes: list[int], trailers: list[tuple[str, str]], where: int, byte: int, signed: bool
) -> None:
    signer = SIGNER if signed else None
    body = encode(payload, sizes, signer=signer, trailers=trailers)
    where %= len(body)
    corrupted = body[:where] + bytes([byte]) + body[where + 1 :]
    for candidate in (corrupted, body[:where]):
        try:
            decode(AwsChunkedDecoder(signer, expect_trailer=True, max_chunk_size=2048), candidate)
        except S3Error as exc:
            assert 400 <= exc.status < 500


@settings(max_examples=100, deadline=None)
@given(payload=payloads, sizes=sizes, trailers=trailer_lists, cut=st.integers(min_value=0))
def test_truncation_is_incomplete_unless_only_the_last_crlf_is_missing(
    payload: bytes, sizes: list[int], trailers: list[tuple[str, str]], cut: int
) -> None:
    body = encode(payload, sizes, signer=SIGNER, trailers=trailers)
    cut %= len(body)
    try:
        data, got = decode(AwsChunkedDecoder(SIGNER, expect_trailer=True), body[:cut])
    except S3Error as exc:
        assert exc.code == "IncompleteBody"
    else:
        assert cut == len(body) - 2 and data == payload and got == dict(trailers)


def test_minio_go_signed_trailer_form() -> None:
    """minio-go (TrailingHeaders) ends the trailer line with LF alone and puts an empty line
    before the trailer signature; S3 and moto accept it, and so does the gateway, signature checked."""
    signer = ChunkSigner(b"k" * 32, EXAMPLE_DATE, EXAMPLE_SCOPE, "2" * 64)
    standard = encode(b"hello", [5], signer=signer, trailers=[("x-amz-checksum-crc32c", "lxyPbw==")])
    minio = standard.replace(b"x-amz-checksum-crc32c:lxyPbw==\r\n", b"x-amz-checksum-crc32c:lxyPbw==\n\r\n")
    assert minio != standard
    for cuts in ((), tuple(range(len(minio)))):
        data, trailers = decode(AwsChunkedDecoder(signer, expect_trailer=True), minio, cuts)
        assert data == b"hello" and trailers == {"x-amz-checksum-crc32c": "lxyPbw=="}
    expect_error("SignatureDoesNotMatch", AwsChunkedDecoder(signer, expect_trailer=True),
                 minio.replace(b"lxyPbw==\n", b"AAAAAA==\n"))
    # One separator only, and only before the signature.
    expect_error("MalformedTrailerError", AwsChunkedDecoder(signer, expect_trailer=True),
                 minio.replace(b"\n\r\n", b"\n\r\n\r\n", 1))
    # Without the signature it is still refused.
    expect_error("MalformedTrailerError", AwsChunkedDecoder(signer, expect_trailer=True),
                 minio[: minio.index(b"x-amz-trailer-signature")])
