"""s3api.body: receive, de-chunk, spool and verify request bodies."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import os
from collections.abc import AsyncIterator, Iterable
from datetime import datetime, timezone
from pathlib import Path

import botocore.auth
import pytest
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.httpchecksum import AwsChunkedWrapper, Crc32Checksum, CrtCrc32cChecksum

from gateway.errors import S3Error
from gateway.s3api.auth import ChunkSigner, PayloadCheck, RequestView, authenticate
from gateway.s3api.body import VerifiedBody, receive_verified_body
from gateway.s3api.headers import for_origin_write, strip_aws_chunked
from gateway.s3api.checksums import new_checksum
from gateway.signing import derive_signing_key

UNSIGNED = PayloadCheck("unsigned")
MAX = 10 * 1024 * 1024
NOW = datetime(2024, 3, 9, 12, 0, 0, tzinfo=timezone.utc)


async def feed(pieces: Iterable[bytes]) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece


def split(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)] or [b""]


def md5_b64(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()


def crc32_b64(data: bytes) -> str:
    c = Crc32Checksum()
    c.update(data)
    return c.b64digest()


async def receive(data: bytes | list[bytes], headers: dict[str, str], payload: PayloadCheck = UNSIGNED, **kw: object) -> VerifiedBody:
    pieces = split(data, 7000) if isinstance(data, bytes) else data
    return await receive_verified_body(feed(pieces), headers, payload, max_size=kw.pop("max_size", MAX), **kw)  # type: ignore[arg-type]


async def expect(code: str, data: bytes | list[bytes], headers: dict[str, str], payload: PayloadCheck = UNSIGNED, **kw: object) -> S3Error:
    with pytest.raises(S3Error) as info:
        await receive(data, headers, payload, **kw)
    assert info.value.code == code, info.value
    return info.value


async def read_chunks(body: VerifiedBody) -> bytes:
    return b"".join([piece async for piece in body.chunks()])


# --- plain bodies -------------------------------------------------------------------------------------


async def test_plain_body_in_memory() -> None:
    data = b"<Delete><Object><Key>k</Key></Object></Delete>"
    sha = hashlib.sha256(data).hexdigest()
    body = await receive(data, {"content-length": str(len(data)), "content-md5": md5_b64(data), "x-amz-content-sha256": sha}, PayloadCheck("sha256", sha))
    assert body.length == len(data)
    assert body.md5_hex == hashlib.md5(data).hexdigest()
    assert body.checksums == {}
    assert await body.read_all() == data
    assert await read_chunks(body) == data
    await body.aclose()


async def test_empty_body() -> None:
    body = await receive([], {"content-length": "0"})
    assert body.length == 0 and await body.read_all() == b"" and await read_chunks(body) == b""
    assert body.md5_hex == hashlib.md5(b"").hexdigest()


async def test_large_body_spools_to_disk_and_is_rereadable(tmp_path: Path) -> None:
    data = os.urandom(1_500_000)
    headers = {"content-length": str(len(data)), "x-amz-checksum-crc32c": _crc32c(data)}
    body = await receive(data, headers, spool_memory=100_000, spool_dir=str(tmp_path))
    assert len(list(tmp_path.iterdir())) == 1
    assert body.checksums == {"x-amz-checksum-crc32c": _crc32c(data)}
    assert await read_chunks(body) == data
    assert await read_chunks(body) == data  # e.g. an origin retry
    assert await body.read_all() == data
    async with body:
        pass
    assert list(tmp_path.iterdir()) == []


def _crc32c(data: bytes) -> str:
    c = CrtCrc32cChecksum()
    c.update(data)
    return c.b64digest()


async def test_every_checksum_algorithm_header() -> None:
    data = b"checksum me" * 1000
    for alg in ("CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256"):
        c = new_checksum(alg)
        c.update(data)
        name = f"x-amz-checksum-{alg.lower()}"
        body = await receive(data, {"content-length": str(len(data)), name: c.b64digest(), "x-amz-sdk-checksum-algorithm": alg})
        assert body.checksums == {name: c.b64digest()}
        err = await expect("BadDigest", data + b"!", {"content-length": str(len(data) + 1), name: c.b64digest()})
        assert err.message == f"The {alg} you specified did not match the calculated checksum."


async def test_content_md5() -> None:
    data = b"abc"
    await expect("BadDigest", data, {"content-length": "3", "content-md5": md5_b64(b"abd")})
    for bad in ("not base64!", md5_b64(data)[:-4], base64.b64encode(b"short").decode(), "é"):
        await expect("InvalidDigest", data, {"content-length": "3", "content-md5": bad})


async def test_content_sha256_mismatch() -> None:
    err = await expect("XAmzContentSHA256Mismatch", b"abc", {"content-length": "3"}, PayloadCheck("sha256", "00" * 32))
    assert err.extra["S3ComputedContentSHA256"] == hashlib.sha256(b"abc").hexdigest()


async def test_checksum_header_problems() -> None:
    base = {"content-length": "3"}
    await expect("InvalidRequest", b"abc", {**base, "x-amz-checksum-crc32": "nope"})
    await expect("InvalidRequest", b"abc", {**base, "x-amz-checksum-crc32": base64.b64encode(b"12345").decode()})
    await expect("InvalidRequest", b"abc", {**base, "x-amz-checksum-md17": "AAAA"})
    await expect("InvalidRequest", b"abc", {**base, "x-amz-checksum-crc32": crc32_b64(b"abc"), "x-amz-checksum-sha1": "AAAAAAAAAAAAAAAAAAAAAAAAAAA="})
    await expect("InvalidRequest", b"abc", {**base, "x-amz-sdk-checksum-algorithm": "CRC32"})
    await expect("InvalidRequest", b"abc", {**base, "x-amz-sdk-checksum-algorithm": "MD5", "x-amz-checksum-crc32": crc32_b64(b"abc")})
    await expect("InvalidRequest", b"abc", {**base, "x-amz-sdk-checksum-algorithm": "SHA1", "x-amz-checksum-crc32": crc32_b64(b"abc")})
    await expect("InvalidRequest", b"abc", {**base, "x-amz-trailer": "x-amz-checksum-crc32"})  # trailer without aws-chunked
    # Settings that share the prefix are not checksums.
    body = await receive(b"abc", {**base, "x-amz-checksum-type": "FULL_OBJECT", "x-amz-checksum-algorithm": "CRC32"})
    assert body.checksums == {}


async def test_lengths() -> None:
    await expect("IncompleteBody", b"abc", {"content-length": "4"})
    await expect("InvalidRequest", b"abcde", {"content-length": "4"})
    await expect("MissingContentLength", b"abc", {})
    for bad in ("abc", "-1", "1" * 40, "٣"):
        await expect("InvalidArgument", b"abc", {"content-length": bad})
    # HTTP chunked framing without Content-Length is fine: the length is what arrived.
    body = await receive(b"abc", {"transfer-encoding": "chunked"})
    assert body.length == 3


async def test_too_large_is_refused_before_reading() -> None:
    consumed = []

    async def source() -> AsyncIterator[bytes]:
        consumed.append(True)
        yield b"x"

    with pytest.raises(S3Error) as info:
        await receive_verified_body(source(), {"content-length": "11"}, UNSIGNED, max_size=10)
    assert info.value.code == "EntityTooLarge" and not consumed
    with pytest.raises(S3Error) as info:
        headers = {"transfer-encoding": "chunked", "content-encoding": "aws-chunked", "x-amz-decoded-content-length": "11"}
        await receive_verified_body(source(), headers, UNSIGNED, max_size=10)
    assert info.value.code == "EntityTooLarge" and not consumed


async def test_too_large_while_receiving_removes_the_spool(tmp_path: Path) -> None:
    pieces = [b"x" * 65536] * 40
    err = await expect("EntityTooLarge", pieces, {"transfer-encoding": "chunked"}, max_size=1_000_000, spool_memory=10_000, spool_dir=str(tmp_path))
    assert err.extra["MaxSizeAllowed"] == "1000000"
    assert list(tmp_path.iterdir()) == []


async def test_errors_after_spooling_remove_the_file(tmp_path: Path) -> None:
    data = b"y" * 500_000
    await expect("BadDigest", data, {"content-length": str(len(data)), "content-md5": md5_b64(b"other")}, spool_memory=1000, spool_dir=str(tmp_path))
    assert list(tmp_path.iterdir()) == []
    await expect("IncompleteBody", data, {"content-length": str(len(data) + 1)}, spool_memory=1000, spool_dir=str(tmp_path))
    assert list(tmp_path.iterdir()) == []


async def test_cancellation_removes_the_spool(tmp_path: Path) -> None:
    started = asyncio.Event()

    async def slow() -> AsyncIterator[bytes]:
        for _ in range(10):
            yield b"z" * 300_000
        started.set()
        await asyncio.Event().wait()  # and no more, ever
        yield b""

    task = asyncio.create_task(
        receive_verified_body(slow(), {"transfer-encoding": "chunked"}, UNSIGNED, max_size=MAX, spool_memory=1000, spool_dir=str(tmp_path))
    )
    await started.wait()
    assert len(list(tmp_path.iterdir())) == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert list(tmp_path.iterdir()) == []


# --- aws-chunked ---------------------------------------------------------------------------------------


def botocore_unsigned_trailer(data: bytes, chunk_size: int = 65536) -> tuple[bytes, dict[str, str]]:
    """The body and headers boto3 sends for an unsigned-payload PutObject with a CRC32 trailer."""
    wire = AwsChunkedWrapper(io.BytesIO(data), checksum_cls=Crc32Checksum, checksum_name="x-amz-checksum-crc32", chunk_size=chunk_size).read()
    headers = {
        "transfer-encoding": "chunked",
        "content-encoding": "aws-chunked",
        "x-amz-content-sha256": "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
        "x-amz-trailer": "x-amz-checksum-crc32",
        "x-amz-decoded-content-length": str(len(data)),
        "x-amz-sdk-checksum-algorithm": "CRC32",
    }
    return wire, headers


async def test_unsigned_trailer_from_botocore() -> None:
    data = os.urandom(200_000)
    wire, headers = botocore_unsigned_trailer(data)
    body = await receive(split(wire, 4099), headers, PayloadCheck("streaming-unsigned-trailer"))
    assert body.length == len(data) and await body.read_all() == data
    assert body.checksums == {"x-amz-checksum-crc32": crc32_b64(data)}
    # With a Content-Length of the encoded body instead of HTTP chunked framing.
    del headers["transfer-encoding"]
    body = await receive(wire, {**headers, "content-length": str(len(wire))}, PayloadCheck("streaming-unsigned-trailer"))
    assert body.checksums == {"x-amz-checksum-crc32": crc32_b64(data)}


async def test_unsigned_trailer_problems() -> None:
    data = b"hello trailer"
    wire, headers = botocore_unsigned_trailer(data)
    mode = PayloadCheck("streaming-unsigned-trailer")
    err = await expect("BadDigest", wire.replace(crc32_b64(data).encode(), crc32_b64(b"x").encode()), headers, mode)
    assert err.message == "The CRC32 you specified did not match the calculated checksum."
    await expect("InvalidRequest", wire.replace(crc32_b64(data).encode(), b"!!!!!!!!"), headers, mode)
    await expect("MalformedTrailerError", wire.replace(b"x-amz-checksum-crc32:" + crc32_b64(data).encode() + b"\r\n", b""), headers, mode)
    await expect("MalformedTrailerError", wire.replace(b"x-amz-checksum-crc32:", b"x-amz-checksum-sha1:"), headers, mode)
    await expect("InvalidRequest", wire, {**headers, "x-amz-trailer": "x-amz-meta-foo"}, mode)
    await expect("IncompleteBody", wire, {**headers, "x-amz-decoded-content-length": str(len(data) + 1)}, mode)
    await expect("IncompleteBody", wire, {**headers, "x-amz-decoded-content-length": str(len(data) - 1)}, mode)
    await expect("IncompleteBody", wire[:-5], headers, mode)
    no_length = {k: v for k, v in headers.items() if k != "x-amz-decoded-content-length"}
    await expect("MissingContentLength", wire, no_length, mode)
    await expect("MissingContentLength", wire, {k: v for k, v in headers.items() if k != "transfer-encoding"}, mode)


async def test_aws_chunked_announced_only_by_content_encoding() -> None:
    wire = b"5\r\nhello\r\n0\r\n\r\n"
    headers = {"content-encoding": "aws-chunked,gzip", "content-length": str(len(wire)), "x-amz-decoded-content-length": "5"}
    body = await receive(wire, headers, UNSIGNED)
    assert await body.read_all() == b"hello"
    await expect("InvalidArgument", wire, headers, PayloadCheck("sha256", hashlib.sha256(b"hello").hexdigest()))


async def test_signed_streaming_without_signer_is_refused() -> None:
    headers = {"x-amz-content-sha256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD", "content-length": "5", "x-amz-decoded-content-length": "0"}
    await expect("InvalidRequest", b"0\r\n\r\n", headers, UNSIGNED)
    await expect("InvalidRequest", b"0\r\n\r\n", headers, PayloadCheck("streaming-signed"))


AWS_EXAMPLE_BODY = (
    b"10000;chunk-signature=ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648\r\n"
    + b"a" * 65536
    + b"\r\n400;chunk-signature=0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497\r\n"
    + b"a" * 1024
    + b"\r\n0;chunk-signature=b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9\r\n\r\n"
)


async def test_aws_published_example_end_to_end() -> None:
    headers = {
        "host": "s3.amazonaws.com",
        "x-amz-date": "20130524T000000Z",
        "x-amz-storage-class": "REDUCED_REDUNDANCY",
        "authorization": "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
        "SignedHeaders=content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;"
        "x-amz-decoded-content-length;x-amz-storage-class,"
        "Signature=4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9",
        "x-amz-content-sha256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
        "content-encoding": "aws-chunked",
        "x-amz-decoded-content-length": "66560",
        "content-length": "66824",
    }
    view = RequestView("PUT", "/examplebucket/chunkObject.txt", "", tuple(headers.items()))
    secrets = {"AKIAIOSFODNN7EXAMPLE": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}
    identity = authenticate(view, secrets.get, now=datetime(2013, 5, 24, tzinfo=timezone.utc))
    body = await receive(split(AWS_EXAMPLE_BODY, 1000), headers, identity.payload)
    assert body.length == 66560 and await body.read_all() == b"a" * 66560
    assert strip_aws_chunked(headers["content-encoding"]) is None
    tampered = AWS_EXAMPLE_BODY.replace(b"a\r\n400", b"b\r\n400")
    await expect("SignatureDoesNotMatch", tampered, headers, identity.payload)


def sign_chunks(signer: ChunkSigner, data: bytes, size: int, trailer: tuple[str, str] | None) -> bytes:
    import hmac

    prev = signer.seed_signature
    out = bytearray()

    def sig(kind: str, tail: str) -> str:
        to_sign = "\n".join((kind, signer.amz_date, signer.scope, prev, tail))
        return hmac.new(signer.signing_key, to_sign.encode(), hashlib.sha256).hexdigest()

    for piece in [*(data[i : i + size] for i in range(0, len(data), size)), b""]:
        prev = sig("AWS4-HMAC-SHA256-PAYLOAD", hashlib.sha256(b"").hexdigest() + "\n" + hashlib.sha256(piece).hexdigest())
        out += f"{len(piece):x};chunk-signature={prev}\r\n".encode() + piece + (b"\r\n" if piece else b"")
    if trailer:
        out += f"{trailer[0]}:{trailer[1]}\r\n".encode()
        prev = sig("AWS4-HMAC-SHA256-TRAILER", hashlib.sha256(f"{trailer[0]}:{trailer[1]}\n".encode()).hexdigest())
        out += f"x-amz-trailer-signature:{prev}\r\n".encode()
    return bytes(out + b"\r\n")


async def test_signed_streaming_with_trailer_from_a_botocore_signed_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: NOW.replace(tzinfo=None))
    data = os.urandom(300_000)
    headers = {
        "Content-Encoding": "aws-chunked",
        "x-amz-decoded-content-length": str(len(data)),
        "x-amz-trailer": "x-amz-checksum-crc32",
        "x-amz-sdk-checksum-algorithm": "CRC32",
    }
    req = AWSRequest(method="PUT", url="http://s3.local/bucket/key", headers=headers)
    auth = type("Streaming", (botocore.auth.S3SigV4Auth,), {"payload": lambda self, r: "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"})
    auth(Credentials("AK", "SK"), "s3", "us-east-1").add_auth(req)
    view = RequestView("PUT", "/bucket/key", "", tuple((k.lower(), v) for k, v in req.headers.items()) + (("host", "s3.local"),))
    identity = authenticate(view, {"AK": "SK"}.get, now=NOW)
    assert identity.payload.chunk_signer is not None
    assert identity.payload.chunk_signer.signing_key == derive_signing_key("SK", "20240309", "us-east-1", "s3")
    wire = sign_chunks(identity.payload.chunk_signer, data, 65536, ("x-amz-checksum-crc32", crc32_b64(data)))
    lower = {k.lower(): v for k, v in req.headers.items()} | {"content-length": str(len(wire))}
    body = await receive(split(wire, 10_000), lower, identity.payload)
    assert body.checksums == {"x-amz-checksum-crc32": crc32_b64(data)}
    assert await read_chunks(body) == data
    # A checksum that is correctly signed but wrong for the data.
    bad = sign_chunks(identity.payload.chunk_signer, data, 65536, ("x-amz-checksum-crc32", crc32_b64(b"x")))
    await expect("BadDigest", bad, lower | {"content-length": str(len(bad))}, identity.payload)
    # A swapped trailer without a valid signature.
    swapped = wire.replace(crc32_b64(data).encode(), crc32_b64(b"x").encode())
    await expect("SignatureDoesNotMatch", swapped, lower, identity.payload)


def test_strip_aws_chunked() -> None:
    assert strip_aws_chunked(None) is None
    assert strip_aws_chunked("aws-chunked") is None
    assert strip_aws_chunked("aws-chunked, gzip") == "gzip"
    assert strip_aws_chunked("gzip,AWS-CHUNKED,br") == "gzip, br"


def test_a_write_reaches_the_origin_without_aws_chunked() -> None:
    """for_origin_write strips it (with strip_aws_chunked): the object is stored as the client encoded it."""
    assert "content-encoding" not in for_origin_write({"content-encoding": "aws-chunked", "content-type": "text/plain"})
    assert for_origin_write({"content-encoding": "aws-chunked,gzip"})["content-encoding"] == "gzip"
    assert for_origin_write({"content-encoding": "br"})["content-encoding"] == "br"


# --- real boto3 clients, end to end (captured before sending) ---------------------------------------------


def _boto3_requests(endpoint: str, **config: object) -> list[tuple[object, bytes]]:
    import boto3
    from botocore.awsrequest import AWSResponse
    from botocore.config import Config

    captured: list[tuple[object, bytes]] = []

    class _Raw:
        def stream(self, *a: object, **k: object) -> Iterable[bytes]:
            yield b""

        def read(self, *a: object, **k: object) -> bytes:
            return b""

    def before_send(request: object, **kw: object) -> AWSResponse:
        body = request.body  # type: ignore[attr-defined]
        data = body if isinstance(body, bytes) else body.read() if body is not None else b""
        captured.append((request, data))
        return AWSResponse(request.url, 200, {}, _Raw())  # type: ignore[attr-defined]

    client = boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id="AKBOTO", aws_secret_access_key="boto/secret+key",
        region_name="eu-west-1", config=Config(**config),  # type: ignore[arg-type]
    )
    client.meta.events.register("before-send", before_send)
    client.put_object(Bucket="bkt", Key="dir/a b+c%d~é", Body=b"hello world", Metadata={"note": "x y"})
    client.put_object(Bucket="bkt", Key="big", Body=io.BytesIO(os.urandom(300_000)))
    client.upload_part(Bucket="bkt", Key="big", UploadId="u+1", PartNumber=2, Body=b"part" * 1000)
    client.delete_objects(Bucket="bkt", Delete={"Objects": [{"Key": "x"}, {"Key": "y z"}]})
    return captured


@pytest.mark.parametrize(
    ("endpoint", "config"),
    [
        ("http://localhost:9000", {"s3": {"addressing_style": "path"}}),
        ("https://localhost:9000", {"s3": {"addressing_style": "path"}}),  # aws-chunked + unsigned CRC32 trailer
        ("http://s3.local:9000", {"s3": {"addressing_style": "virtual"}}),
        ("https://localhost:9000", {"s3": {"addressing_style": "path", "payload_signing_enabled": True}}),
        ("http://localhost:9000", {"s3": {"addressing_style": "path"}, "signature_version": "s3"}),
        ("http://s3.local:9000", {"s3": {"addressing_style": "virtual"}, "signature_version": "s3"}),
    ],
)
async def test_real_boto3_requests_authenticate_and_verify(endpoint: str, config: dict[str, object]) -> None:
    from urllib.parse import urlsplit

    for request, data in _boto3_requests(endpoint, **config):
        parts = urlsplit(request.url)  # type: ignore[attr-defined]
        headers = [(k.lower(), v.decode("latin-1") if isinstance(v, bytes) else v) for k, v in request.headers.items()]  # type: ignore[attr-defined]
        view = RequestView(request.method, parts.path, parts.query, tuple(headers))  # type: ignore[attr-defined]
        host = dict(headers).get("host", parts.netloc)
        bucket = host.split(".", 1)[0] if host.startswith("bkt.") else None
        identity = authenticate(view, {"AKBOTO": "boto/secret+key"}.get, now=datetime.now(timezone.utc), bucket_from_host=bucket)
        assert identity.access_key == "AKBOTO"
        flat = dict(headers)
        if "content-length" not in flat and "transfer-encoding" not in flat:
            flat["content-length"] = str(len(data))
        body = await receive(data, flat, identity.payload)
        decoded = await body.read_all()
        assert body.length == len(decoded) and len(decoded) > 0
        if "aws-chunked" in flat.get("content-encoding", ""):
            assert decoded != data and body.checksums  # framing removed, trailer checksum verified
        if "x-amz-checksum-crc32" in flat:
            assert body.checksums == {"x-amz-checksum-crc32": flat["x-amz-checksum-crc32"]}
