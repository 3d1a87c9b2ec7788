"""What real clients put on the wire, and hostile input: raw HTTP, signed by the test, to the running gateway.

Every request here is built byte by byte on a plain socket, so the framing is exactly
what is written: `Transfer-Encoding: chunked` without Content-Length, `Expect:
100-continue`, odd header case, truncated bodies. Each case checks the status, the S3
error `<Code>`, the `x-amz-request-id`, and what the origin holds afterwards.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import re
import socket
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit

import pytest
from awscrt import checksums as crt
from botocore.exceptions import ClientError

from gateway.signing import (
    EMPTY_SHA256,
    derive_signing_key,
    sign_request_v4,
    signature_hex,
    uri_encode,
)
from tests.support import ADMIN, READER, REGION, client
from tests.waiting import wait_for

BUCKET = "wire-bkt"
TIMEOUT = 10.0


# --- a raw HTTP/1.1 client -----------------------------------------------------------------------


@dataclass
class Response:
    status: int
    headers: dict[str, str]  # lowercase names; repeated names joined with ","
    body: bytes
    interim: list[int] = field(default_factory=list)  # 1xx statuses seen before this one

    @property
    def code(self) -> str | None:
        match = re.search(rb"<Code>([^<]*)</Code>", self.body)
        return match.group(1).decode() if match else None

    def __repr__(self) -> str:
        return f"Response({self.status}, {self.headers!r}, {self.body[:400]!r})"


class Conn:
    """One TCP connection to the gateway, with a read buffer."""

    def __init__(self, endpoint: str, timeout: float = TIMEOUT) -> None:
        parts = urlsplit(endpoint)
        self.host = parts.netloc
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout)
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise EOFError("the server closed the connection")
        self.buf += chunk

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill()
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def _exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def read_head(self) -> tuple[int, dict[str, str]]:
        status_line = self._line()
        parts = status_line.split(b" ", 2)
        assert parts[0].startswith(b"HTTP/1."), status_line
        headers: dict[str, str] = {}
        while line := self._line():
            name, _, value = line.decode("latin-1").partition(":")
            name, value = name.strip().lower(), value.strip()
            headers[name] = f"{headers[name]},{value}" if name in headers else value
        return int(parts[1]), headers

    def read_response(self, *, head: bool = False) -> Response:
        interim = []
        while True:
            status, headers = self.read_head()
            if 100 <= status < 200:
                interim.append(status)
                continue
            break
        if head or status in (204, 304):
            body = b""
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            pieces = []
            while True:
                size = int(self._line().split(b";")[0], 16)
                if size == 0:
                    while self._line():
                        pass
                    break
                pieces.append(self._exact(size))
                assert self._exact(2) == b"\r\n"
            body = b"".join(pieces)
        elif "content-length" in headers:
            body = self._exact(int(headers["content-length"]))
        else:
            body = self.read_to_eof()
        return Response(status, headers, body, interim)

    def read_to_eof(self) -> bytes:
        while True:
            try:
                self._fill()
            except EOFError:
                break
        data, self.buf = self.buf, b""
        return data

    def closed_by_server(self, wait: float = 2.0) -> bool:
        """True when the server closed (or reset) the connection within `wait` seconds."""
        self.sock.settimeout(wait)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False
        finally:
            self.sock.settimeout(TIMEOUT)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Conn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- requests signed by the test -----------------------------------------------------------------


def target(path: str, query: list[tuple[str, str]] = ()) -> str:  # type: ignore[assignment]
    """The request target for a DECODED path and query, encoded the way SigV4 encodes them."""
    out = uri_encode(path, keep_slash=True)
    if query:
        out += "?" + "&".join(
            uri_encode(k, keep_slash=False) + ("=" + uri_encode(v, keep_slash=False) if v else "") for k, v in query
        )
    return out


def sign(
    method: str,
    path: str,
    host: str,
    *,
    query: list[tuple[str, str]] = (),  # type: ignore[assignment]
    headers: dict[str, str] | None = None,
    payload_hash: str = EMPTY_SHA256,
    key: tuple[str, str] = ADMIN,
) -> dict[str, str]:
    """All `headers` (lowercase) plus host are signed; returns them with the auth headers added."""
    to_sign = {"host": host, **{k.lower(): v for k, v in (headers or {}).items()}}
    to_sign.update(sign_request_v4(
        method=method, path=path, query=list(query), headers=to_sign, payload_hash=payload_hash,
        access_key=key[0], secret_key=key[1], region=REGION, now=datetime.now(timezone.utc),
    ))
    return to_sign


def head_bytes(method: str, request_target: str, headers: dict[str, str] | list[tuple[str, str]]) -> bytes:
    items = headers.items() if isinstance(headers, dict) else headers
    lines = [f"{method} {request_target} HTTP/1.1"] + [f"{k}: {v}" for k, v in items]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def exchange(gw, data: bytes, *, head: bool = False) -> Response:  # type: ignore[no-untyped-def]
    with Conn(gw.endpoint) as conn:
        conn.send(data)
        return conn.read_response(head=head)


def request(  # type: ignore[no-untyped-def]
    gw,
    method: str,
    path: str,
    *,
    query: list[tuple[str, str]] = (),  # type: ignore[assignment]
    headers: dict[str, str] | None = None,
    body: bytes = b"",
    payload_hash: str | None = None,
    key: tuple[str, str] = ADMIN,
    content_length: bool = True,
) -> Response:
    """A signed request with a plain (Content-Length) body."""
    host = urlsplit(gw.endpoint).netloc
    signed = sign(method, path, host, query=query, headers=headers,
                  payload_hash=payload_hash if payload_hash is not None else hashlib.sha256(body).hexdigest(), key=key)
    if content_length and (body or method in ("PUT", "POST")):
        signed["content-length"] = str(len(body))
    return exchange(gw, head_bytes(method, target(path, query), signed) + body, head=method == "HEAD")


# --- aws-chunked, HTTP chunked, checksums ---------------------------------------------------------


@dataclass(frozen=True)
class Seed:
    """What chunk signing needs: the key, the request's date and scope, and its signature."""

    key: bytes
    amz_date: str
    scope: str
    signature: str

    @classmethod
    def of(cls, signed: dict[str, str], secret: str) -> Seed:
        amz_date = signed["x-amz-date"]
        seed = re.search(r"Signature=([0-9a-f]{64})", signed["authorization"])
        assert seed is not None
        return cls(derive_signing_key(secret, amz_date[:8], REGION, "s3"), amz_date,
                   f"{amz_date[:8]}/{REGION}/s3/aws4_request", seed.group(1))


def aws_chunked(
    payload: bytes,
    size: int,
    *,
    seed: Seed | None = None,
    trailers: list[tuple[str, str]] | None = None,
) -> bytes:
    """The test's own aws-chunked encoder: chunks of `size`, signed when a seed is given."""
    prev = seed.signature if seed else ""

    def chunk_sig(kind: str, *lines: str) -> str:
        assert seed is not None
        return signature_hex(seed.key, "\n".join((kind, seed.amz_date, seed.scope, prev, *lines)))

    out = bytearray()
    pieces = [payload[i : i + size] for i in range(0, len(payload), size)]
    for piece in [*pieces, b""]:
        out += f"{len(piece):x}".encode()
        if seed:
            prev = chunk_sig("AWS4-HMAC-SHA256-PAYLOAD", EMPTY_SHA256, hashlib.sha256(piece).hexdigest())
            out += f";chunk-signature={prev}".encode()
        out += b"\r\n" + piece + (b"\r\n" if piece else b"")
    for name, value in trailers or ():
        out += f"{name}:{value}\r\n".encode()
    if seed and trailers:
        canonical = "".join(f"{n}:{v}\n" for n, v in sorted(trailers)).encode()
        out += f"x-amz-trailer-signature:{chunk_sig('AWS4-HMAC-SHA256-TRAILER', hashlib.sha256(canonical).hexdigest())}\r\n".encode()
    return bytes(out + b"\r\n")


def http_chunked(body: bytes, size: int = 7000) -> bytes:
    """HTTP/1.1 Transfer-Encoding: chunked framing around `body`."""
    out = bytearray()
    for i in range(0, len(body), size):
        piece = body[i : i + size]
        out += f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    return bytes(out + b"0\r\n\r\n")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def crc32(data: bytes) -> str:
    return b64(zlib.crc32(data).to_bytes(4, "big"))


def crc32c(data: bytes) -> str:
    return b64(crt.crc32c(data).to_bytes(4, "big"))


def crc64nvme(data: bytes) -> str:
    return b64(crt.crc64nvme(data).to_bytes(8, "big"))


def md5_b64(data: bytes) -> str:
    return b64(hashlib.md5(data).digest())


# --- assertions ----------------------------------------------------------------------------------


def assert_error(resp: Response, status: int, code: str) -> None:
    assert resp.status == status, resp
    assert resp.code == code, resp
    assert resp.headers.get("x-amz-request-id"), resp


def assert_ok(resp: Response, status: int = 200) -> None:
    assert resp.status == status, resp
    assert resp.headers.get("x-amz-request-id"), resp


def stored(direct, key: str) -> bytes:  # type: ignore[no-untyped-def]
    return direct.get_object(Bucket=BUCKET, Key=key)["Body"].read()


def assert_absent(direct, key: str | None = None) -> None:  # type: ignore[no-untyped-def]
    """No object `key` (or, with key None, no object at all) in the origin's bucket."""
    listed = direct.list_objects_v2(Bucket=BUCKET).get("Contents", [])
    keys = [o["Key"] for o in listed]
    assert (key not in keys) if key is not None else not keys, keys


@contextlib.contextmanager
def answers(gw) -> Iterator[list[dict[str, Any]]]:  # type: ignore[no-untyped-def]
    """Within: the access-log entries of the requests the gateway finished meanwhile (an entry is
    made once a request's handling ended, answered or not)."""
    seen: list[dict[str, Any]] = []
    observers = gw.server.config.app.s3.accounts.observers
    observers.append(seen.append)
    try:
        yield seen
    finally:
        observers.remove(seen.append)


def accepted(gw, conns: list[Conn]) -> bool:  # type: ignore[no-untyped-def]
    """Whether the gateway holds each of `conns` as one of its connections."""
    held = {tuple(protocol.client) for protocol in list(gw.server.server_state.connections) if protocol.client}
    return all(conn.sock.getsockname() in held for conn in conns)


def assert_healthy(gw) -> None:  # type: ignore[no-untyped-def]
    """A normal request on a new connection is answered."""
    resp = request(gw, "GET", f"/{BUCKET}", query=[("list-type", "2")])
    assert_ok(resp)
    assert b"<ListBucketResult" in resp.body


@pytest.fixture
def gw(gateway, s3):  # type: ignore[no-untyped-def]
    """The session gateway, with an empty origin holding one bucket."""
    s3.create_bucket(Bucket=BUCKET)
    return gateway


def host_of(gw) -> str:  # type: ignore[no-untyped-def]
    return urlsplit(gw.endpoint).netloc


def streaming_put(  # type: ignore[no-untyped-def]
    gw,
    key: str,
    payload: bytes,
    *,
    mode: str = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
    content_encoding: str | None = "aws-chunked",
    trailer: str | None = None,
    trailer_value: str | None = None,
    chunk_size: int = 20_000,
    tamper=None,
    query: list[tuple[str, str]] = (),  # type: ignore[assignment]
    http_chunked_framing: bool = False,
    extra: dict[str, str] | None = None,
) -> Response:
    """A streaming PutObject/UploadPart as the SDKs send it; `tamper(body) -> body` alters the wire body."""
    headers = {"x-amz-decoded-content-length": str(len(payload))}
    if content_encoding is not None:
        headers["content-encoding"] = content_encoding
    if trailer is not None:
        headers["x-amz-trailer"] = trailer
    headers.update(extra or {})
    signed_mode = mode.startswith("STREAMING-AWS4-HMAC-SHA256-PAYLOAD")
    trailers = [(trailer, trailer_value)] if trailer is not None and trailer_value is not None else None
    if not http_chunked_framing:
        # The encoded length is known before signing: it depends only on sizes, not on signatures.
        probe = aws_chunked(payload, chunk_size, seed=Seed(b"k", "d", "s", "0" * 64) if signed_mode else None,
                            trailers=trailers)
        headers["content-length"] = str(len(probe))
    signed = sign("PUT", f"/{BUCKET}/{key}", host_of(gw), query=query, headers=headers, payload_hash=mode)
    body = aws_chunked(payload, chunk_size, seed=Seed.of(signed, ADMIN[1]) if signed_mode else None, trailers=trailers)
    if tamper is not None:
        body = tamper(body)
    if http_chunked_framing:
        signed["transfer-encoding"] = "chunked"
        body = http_chunked(body)
    else:
        assert len(body) == int(headers["content-length"]) or tamper is not None
    return exchange(gw, head_bytes("PUT", target(f"/{BUCKET}/{key}", query), signed) + body)


PAYLOAD = os.urandom(70_000)  # four chunks of 20 000 bytes (the last one short), then the final chunk


def flip_data_byte(body: bytes) -> bytes:
    """Change one payload byte in the second chunk (the framing stays intact)."""
    first_end = body.index(b"\r\n", body.index(b"\r\n") + 2 + 20_000 - 1)
    pos = first_end + 2 + body[first_end + 2 :].index(b"\r\n") + 2 + 100
    return body[:pos] + bytes([body[pos] ^ 0x01]) + body[pos + 1 :]


def flip_chunk_signature(body: bytes) -> bytes:
    """Change one hex digit of the third chunk signature."""
    starts = [m.end() for m in re.finditer(rb"chunk-signature=", body)]
    pos = starts[2]
    digit = b"0" if body[pos : pos + 1] != b"0" else b"1"
    return body[:pos] + digit + body[pos + 1 :]


# --- 1. STREAMING-AWS4-HMAC-SHA256-PAYLOAD with Content-Encoding: aws-chunked ----------------------


@pytest.mark.parametrize(("encoding", "kept"), [("aws-chunked", None), ("aws-chunked, gzip", "gzip")])
def test_signed_streaming_put(gw, direct, encoding, kept):
    resp = streaming_put(gw, "signed.bin", PAYLOAD, content_encoding=encoding)
    assert_ok(resp)
    assert resp.headers["etag"] == f'"{hashlib.md5(PAYLOAD).hexdigest()}"'
    assert stored(direct, "signed.bin") == PAYLOAD
    head = direct.head_object(Bucket=BUCKET, Key="signed.bin")
    assert "aws-chunked" not in head.get("ContentEncoding", "")
    assert head.get("ContentEncoding") == kept
    assert head["ContentLength"] == len(PAYLOAD)


@pytest.mark.parametrize("tamper", [flip_data_byte, flip_chunk_signature], ids=["chunk-data", "chunk-signature"])
def test_signed_streaming_put_tampered(gw, direct, tamper):
    resp = streaming_put(gw, "tampered.bin", PAYLOAD, tamper=tamper)
    assert_error(resp, 403, "SignatureDoesNotMatch")
    assert_absent(direct)
    assert_healthy(gw)


def test_signed_streaming_put_wrong_decoded_length(gw, direct):
    resp = streaming_put(gw, "short.bin", PAYLOAD, extra={"x-amz-decoded-content-length": str(len(PAYLOAD) + 1)})
    assert resp.status == 400 and resp.code == "IncompleteBody", resp
    assert_absent(direct)


# --- 2. announced only by x-amz-content-sha256 (minio-go, Hadoop S3A / AWS SDK for Java v1) --------


def test_signed_streaming_put_without_content_encoding(gw, direct):
    resp = streaming_put(gw, "minio.bin", PAYLOAD, content_encoding=None)
    assert_ok(resp)
    assert stored(direct, "minio.bin") == PAYLOAD
    assert direct.head_object(Bucket=BUCKET, Key="minio.bin").get("ContentEncoding") is None


@pytest.mark.parametrize("tamper", [flip_data_byte, flip_chunk_signature], ids=["chunk-data", "chunk-signature"])
def test_signed_streaming_put_without_content_encoding_tampered(gw, direct, tamper):
    resp = streaming_put(gw, "minio.bin", PAYLOAD, content_encoding=None, tamper=tamper)
    assert_error(resp, 403, "SignatureDoesNotMatch")
    assert_absent(direct)


# --- 3. STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER with a signed crc32c trailer ---------------------

SIGNED_TRAILER = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"


def test_signed_trailer_put(gw, direct):
    resp = streaming_put(gw, "trailer.bin", PAYLOAD, mode=SIGNED_TRAILER, trailer="x-amz-checksum-crc32c",
                         trailer_value=crc32c(PAYLOAD))
    assert_ok(resp)
    assert resp.headers.get("x-amz-checksum-crc32c") in (None, crc32c(PAYLOAD))
    assert stored(direct, "trailer.bin") == PAYLOAD
    assert "aws-chunked" not in direct.head_object(Bucket=BUCKET, Key="trailer.bin").get("ContentEncoding", "")


def test_signed_trailer_wrong_checksum(gw, direct):
    # The trailer is correctly signed, but the checksum it carries is of other bytes.
    resp = streaming_put(gw, "trailer.bin", PAYLOAD, mode=SIGNED_TRAILER, trailer="x-amz-checksum-crc32c",
                         trailer_value=crc32c(PAYLOAD + b"x"))
    assert_error(resp, 400, "BadDigest")
    assert_absent(direct)


def test_signed_trailer_wrong_signature(gw, direct):
    def tamper(body: bytes) -> bytes:
        pos = body.index(b"x-amz-trailer-signature:") + len(b"x-amz-trailer-signature:")
        digit = b"0" if body[pos : pos + 1] != b"0" else b"1"
        return body[:pos] + digit + body[pos + 1 :]

    resp = streaming_put(gw, "trailer.bin", PAYLOAD, mode=SIGNED_TRAILER, trailer="x-amz-checksum-crc32c",
                         trailer_value=crc32c(PAYLOAD), tamper=tamper)
    assert_error(resp, 403, "SignatureDoesNotMatch")
    assert_absent(direct)


def test_signed_trailer_swapped_checksum_keeps_signature(gw, direct):
    """A trailer value changed in flight (signature left as it was) must not pass."""
    good = crc32c(PAYLOAD)
    bad = crc32c(PAYLOAD + b"x")
    resp = streaming_put(gw, "trailer.bin", PAYLOAD, mode=SIGNED_TRAILER, trailer="x-amz-checksum-crc32c",
                         trailer_value=good, tamper=lambda body: body.replace(good.encode(), bad.encode()))
    assert resp.status in (400, 403) and resp.code in ("SignatureDoesNotMatch", "BadDigest"), resp
    assert_absent(direct)


# --- 4. STREAMING-UNSIGNED-PAYLOAD-TRAILER over Transfer-Encoding: chunked, no Content-Length -------

UNSIGNED_TRAILER = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"


@pytest.mark.parametrize(
    ("trailer", "checksum"),
    [("x-amz-checksum-crc64nvme", crc64nvme), ("x-amz-checksum-crc32", crc32)],
)
def test_unsigned_trailer_put_http_chunked(gw, direct, trailer, checksum):
    resp = streaming_put(gw, "js.bin", PAYLOAD, mode=UNSIGNED_TRAILER, trailer=trailer, trailer_value=checksum(PAYLOAD),
                         chunk_size=65_536, http_chunked_framing=True)
    assert_ok(resp)
    assert stored(direct, "js.bin") == PAYLOAD
    head = direct.head_object(Bucket=BUCKET, Key="js.bin", ChecksumMode="ENABLED")
    assert "aws-chunked" not in head.get("ContentEncoding", "")


def test_unsigned_trailer_put_http_chunked_wrong_checksum(gw, direct):
    resp = streaming_put(gw, "js.bin", PAYLOAD, mode=UNSIGNED_TRAILER, trailer="x-amz-checksum-crc64nvme",
                         trailer_value=crc64nvme(PAYLOAD[:-1]), http_chunked_framing=True)
    assert_error(resp, 400, "BadDigest")
    assert_absent(direct)


def test_unsigned_trailer_upload_part_http_chunked(gw, s3, direct):
    """PyArrow (AWS C++ SDK) UploadPart: unsigned trailer, HTTP chunked, no Content-Length; then completed and read."""
    part1 = os.urandom(5 * 1024 * 1024)
    part2 = os.urandom(123_457)
    upload = s3.create_multipart_upload(Bucket=BUCKET, Key="mpu.bin")["UploadId"]
    etags = []
    for number, (data, trailer, checksum) in enumerate(
        [(part1, "x-amz-checksum-crc64nvme", crc64nvme), (part2, "x-amz-checksum-crc32", crc32)], start=1
    ):
        resp = streaming_put(gw, "mpu.bin", data, mode=UNSIGNED_TRAILER, trailer=trailer, trailer_value=checksum(data),
                             chunk_size=65_536, http_chunked_framing=True,
                             query=[("partNumber", str(number)), ("uploadId", upload)])
        assert_ok(resp)
        assert resp.headers["etag"] == f'"{hashlib.md5(data).hexdigest()}"'
        etags.append(resp.headers["etag"])
    s3.complete_multipart_upload(Bucket=BUCKET, Key="mpu.bin", UploadId=upload, MultipartUpload={
        "Parts": [{"PartNumber": n, "ETag": e} for n, e in enumerate(etags, start=1)]})
    assert stored(direct, "mpu.bin") == part1 + part2
    assert s3.get_object(Bucket=BUCKET, Key="mpu.bin")["Body"].read() == part1 + part2


def test_unsigned_trailer_upload_part_wrong_checksum(gw, s3, direct):
    data = os.urandom(50_000)
    upload = s3.create_multipart_upload(Bucket=BUCKET, Key="mpu.bin")["UploadId"]
    resp = streaming_put(gw, "mpu.bin", data, mode=UNSIGNED_TRAILER, trailer="x-amz-checksum-crc64nvme",
                         trailer_value=crc64nvme(b"other"), http_chunked_framing=True,
                         query=[("partNumber", "1"), ("uploadId", upload)])
    assert_error(resp, 400, "BadDigest")
    assert direct.list_parts(Bucket=BUCKET, Key="mpu.bin", UploadId=upload).get("Parts", []) == []


# --- 5. Expect: 100-continue ---------------------------------------------------------------------


def test_expect_100_continue_odd_case(gw, direct):
    body = os.urandom(30_000)
    host = host_of(gw)
    signed = sign("PUT", f"/{BUCKET}/expect.bin", host, headers={"content-type": "application/octet-stream"},
                  payload_hash=hashlib.sha256(body).hexdigest())
    # Odd letter case on the wire for every header name, and for the expectation itself.
    wire = [(name.upper() if i % 2 else name.title(), value) for i, (name, value) in enumerate(signed.items())]
    wire += [("CONTENT-LENGTH", str(len(body))), ("expect", "100-Continue")]
    with Conn(gw.endpoint) as conn:
        conn.send(head_bytes("PUT", target(f"/{BUCKET}/expect.bin"), wire))
        status, _ = conn.read_head()
        assert status == 100
        conn.send(body)
        resp = conn.read_response()
    assert_ok(resp)
    assert stored(direct, "expect.bin") == body


def test_expect_100_continue_refused_before_body(gw, direct):
    body = os.urandom(200_000)
    signed = sign("PUT", f"/{BUCKET}/denied.bin", host_of(gw), payload_hash=hashlib.sha256(body).hexdigest(), key=READER)
    signed["content-length"] = str(len(body))
    signed["Expect"] = "100-continue"
    with Conn(gw.endpoint) as conn:
        conn.send(head_bytes("PUT", target(f"/{BUCKET}/denied.bin"), signed))
        resp = conn.read_response()  # the final answer comes without a 100 and without the body
        assert_error(resp, 403, "AccessDenied")
        assert resp.interim == []
        assert resp.headers.get("connection", "").lower() == "close"
        assert conn.closed_by_server()
    assert_absent(direct)
    assert_healthy(gw)


def test_pipelined_requests_on_one_connection(gw, direct):
    """PUT and GET written back to back on one keep-alive connection: both answered, in order."""
    body = os.urandom(50_000)
    host = host_of(gw)
    put = sign("PUT", f"/{BUCKET}/pipe", host, payload_hash=hashlib.sha256(body).hexdigest())
    put["content-length"] = str(len(body))
    get = sign("GET", f"/{BUCKET}/pipe", host)
    with Conn(gw.endpoint) as conn:
        conn.send(head_bytes("PUT", target(f"/{BUCKET}/pipe"), put) + body + head_bytes("GET", target(f"/{BUCKET}/pipe"), get))
        first = conn.read_response()
        second = conn.read_response()
    assert_ok(first)
    assert_ok(second)
    assert second.body == body
    assert first.headers["x-amz-request-id"] != second.headers["x-amz-request-id"]


def test_connection_after_an_error_that_read_the_body(gw, direct):
    """After a refused upload the connection is either reusable or announced closed (never half-broken)."""
    host = host_of(gw)
    bad = sign("PUT", f"/{BUCKET}/sha", host, payload_hash=hashlib.sha256(b"claimed").hexdigest())
    bad["content-length"] = "6"
    good = sign("PUT", f"/{BUCKET}/sha", host, payload_hash=hashlib.sha256(b"actual").hexdigest())
    good["content-length"] = "6"
    with Conn(gw.endpoint) as conn:
        conn.send(head_bytes("PUT", target(f"/{BUCKET}/sha"), bad) + b"actual")
        first = conn.read_response()
        assert_error(first, 400, "XAmzContentSHA256Mismatch")
        if first.headers.get("connection", "").lower() == "close":
            # Recorded: the gateway closes even though it read the whole body (server.py's
            # _unread_body only knows a body was read when it verified).
            assert conn.closed_by_server()
            conn.close()
            conn = Conn(gw.endpoint)
        conn.send(head_bytes("PUT", target(f"/{BUCKET}/sha"), good) + b"actual")
        assert_ok(conn.read_response())
        conn.close()
    assert stored(direct, "sha") == b"actual"


# --- 6. x-id query parameters --------------------------------------------------------------------


def test_x_id_put_and_get(gw, direct):
    body = b"x-id body"
    resp = request(gw, "PUT", f"/{BUCKET}/xid.txt", query=[("x-id", "PutObject")], body=body)
    assert_ok(resp)
    assert stored(direct, "xid.txt") == body
    got = request(gw, "GET", f"/{BUCKET}/xid.txt", query=[("x-id", "GetObject")])
    assert_ok(got)
    assert got.body == body


# --- 7. DeleteObjects integrity headers ----------------------------------------------------------

DELETE_XML = b'<Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Object><Key>a</Key></Object><Object><Key>b</Key></Object></Delete>'


def _two_objects(direct) -> None:  # type: ignore[no-untyped-def]
    for key in ("a", "b", "c"):
        direct.put_object(Bucket=BUCKET, Key=key, Body=key.encode())


@pytest.mark.parametrize(
    "headers",
    [
        {"x-amz-checksum-crc32": crc32(DELETE_XML)},
        {"x-amz-sdk-checksum-algorithm": "CRC32", "x-amz-checksum-crc32": crc32(DELETE_XML)},
        {"x-amz-sdk-checksum-algorithm": "CRC64NVME", "x-amz-checksum-crc64nvme": crc64nvme(DELETE_XML)},
        {"content-md5": md5_b64(DELETE_XML)},
    ],
    ids=["crc32", "sdk-crc32", "sdk-crc64nvme", "content-md5"],
)
def test_delete_objects_integrity(gw, direct, headers):
    _two_objects(direct)
    resp = request(gw, "POST", f"/{BUCKET}", query=[("delete", "")], headers={"content-type": "application/xml", **headers},
                   body=DELETE_XML)
    assert_ok(resp)
    assert resp.body.count(b"<Deleted>") == 2, resp
    assert [o["Key"] for o in direct.list_objects_v2(Bucket=BUCKET)["Contents"]] == ["c"]


@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [
        ({}, 400, "InvalidRequest"),  # S3: "Missing required header for this request: Content-MD5"
        ({"content-md5": md5_b64(DELETE_XML + b" ")}, 400, "BadDigest"),
        ({"x-amz-checksum-crc32": crc32(DELETE_XML + b" ")}, 400, "BadDigest"),
    ],
    ids=["no-digest", "wrong-md5", "wrong-crc32"],
)
def test_delete_objects_refused(gw, direct, headers, status, code):
    _two_objects(direct)
    resp = request(gw, "POST", f"/{BUCKET}", query=[("delete", "")], headers={"content-type": "application/xml", **headers},
                   body=DELETE_XML)
    assert_error(resp, status, code)
    assert len(direct.list_objects_v2(Bucket=BUCKET)["Contents"]) == 3


# --- 8. malformed and hostile input --------------------------------------------------------------

BOMB = (
    b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
    b'<!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">'
    b'<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">'
    b'<!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">]>'
)
XXE = b'<?xml version="1.0"?><!DOCTYPE d [<!ENTITY x SYSTEM "file:///etc/passwd">]>'


@pytest.mark.parametrize(
    "body",
    [
        b"this is not xml",
        b"<Delete><Object><Key>a</Key></Object>",  # unclosed
        b"<NotDelete><Object><Key>a</Key></Object></NotDelete>",
        BOMB + b"<Delete><Object><Key>&lol4;</Key></Object></Delete>",
        XXE + b"<Delete><Object><Key>&x;</Key></Object></Delete>",
        b"",
    ],
    ids=["garbage", "unclosed", "wrong-root", "entity-bomb", "external-entity", "empty"],
)
def test_delete_objects_malformed_xml(gw, direct, body):
    _two_objects(direct)
    resp = request(gw, "POST", f"/{BUCKET}", query=[("delete", "")], headers={"content-md5": md5_b64(body)}, body=body)
    assert_error(resp, 400, "MalformedXML")
    assert len(direct.list_objects_v2(Bucket=BUCKET)["Contents"]) == 3


@pytest.mark.parametrize(
    "body",
    [
        b"\x00\xff garbage",
        BOMB + b"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>&lol4;</ETag></Part></CompleteMultipartUpload>",
        b"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber>",
    ],
    ids=["garbage", "entity-bomb", "unclosed"],
)
def test_complete_multipart_malformed_xml(gw, s3, direct, body):
    upload = s3.create_multipart_upload(Bucket=BUCKET, Key="mpu.bin")["UploadId"]
    s3.upload_part(Bucket=BUCKET, Key="mpu.bin", UploadId=upload, PartNumber=1, Body=b"part")
    resp = request(gw, "POST", f"/{BUCKET}/mpu.bin", query=[("uploadId", upload)], body=body)
    assert_error(resp, 400, "MalformedXML")
    assert_absent(direct)


def test_unknown_method(gw, direct):
    resp = request(gw, "PATCH", f"/{BUCKET}/k", body=b"patch")
    assert_error(resp, 405, "MethodNotAllowed")
    assert_absent(direct)


def test_unknown_bucket_subresource_is_a_listing(gw, direct):
    direct.put_object(Bucket=BUCKET, Key="listed", Body=b"1")
    resp = request(gw, "GET", f"/{BUCKET}", query=[("no-such-subresource", ""), ("foo", "bar")])
    assert_ok(resp)
    assert b"<ListBucketResult" in resp.body and b"<Key>listed</Key>" in resp.body


@pytest.mark.parametrize(
    "header", ["bytes=5-2", "bytes=0-1,3-4", "items=0-3", "bytes=-", "bytes = 1-2", "bytes=a-b"],
)
def test_ignored_ranges_answer_the_whole_object(gw, direct, header):
    direct.put_object(Bucket=BUCKET, Key="ten", Body=b"0123456789")
    resp = request(gw, "GET", f"/{BUCKET}/ten", headers={"range": header})
    assert_ok(resp, 200)
    assert resp.body == b"0123456789"
    assert "content-range" not in resp.headers


def test_range_start_past_the_end_is_416(gw, direct):
    direct.put_object(Bucket=BUCKET, Key="four", Body=b"0123")
    resp = request(gw, "GET", f"/{BUCKET}/four", headers={"range": "bytes=5-2"})
    assert_error(resp, 416, "InvalidRange")
    assert resp.headers.get("content-range") == "bytes */4"


def test_key_too_long(gw, direct):
    resp = request(gw, "PUT", f"/{BUCKET}/" + "k" * 1025, body=b"x")
    assert_error(resp, 400, "KeyTooLongError")
    ok = request(gw, "PUT", f"/{BUCKET}/" + "k" * 1024, body=b"x")
    assert_ok(ok)
    assert [o["Key"] for o in direct.list_objects_v2(Bucket=BUCKET)["Contents"]] == ["k" * 1024]


@pytest.mark.parametrize(
    "raw_key",
    ["bad%FFutf8", "bad%C3%28", "nul%00key", "nul%00", "bad%ZZescape", "trailing%", "half%4"],
)
def test_invalid_uri(gw, direct, raw_key):
    """S3 answers 400 InvalidURI for a path that is not valid percent-encoded UTF-8, or holds a NUL.

    Signed over the path as a lenient server would read it (malformed escapes kept literally),
    so only the URI check can refuse it.
    """
    signed = sign("PUT", f"/{BUCKET}/{raw_key}", host_of(gw), payload_hash=hashlib.sha256(b"x").hexdigest())
    signed["content-length"] = "1"
    resp = exchange(gw, head_bytes("PUT", f"/{BUCKET}/{raw_key}", signed) + b"x")
    assert_error(resp, 400, "InvalidURI")
    assert_absent(direct)


def test_body_shorter_than_content_length(gw, direct):
    body = os.urandom(10_000)
    signed = sign("PUT", f"/{BUCKET}/cut.bin", host_of(gw), payload_hash="UNSIGNED-PAYLOAD")
    signed["content-length"] = str(len(body) * 2)
    with answers(gw) as seen:
        with Conn(gw.endpoint) as conn:
            conn.send(head_bytes("PUT", target(f"/{BUCKET}/cut.bin"), signed) + body)
        # The gateway notices the disconnect asynchronously: once it is done with the request,
        # it would have sent the object to the origin.
        wait_for(lambda: any(entry["key"] == "cut.bin" for entry in seen), "the gateway is done with the PUT")
    assert_absent(direct)
    assert_healthy(gw)


def test_body_shorter_than_content_length_half_close(gw, direct):
    body = os.urandom(10_000)
    signed = sign("PUT", f"/{BUCKET}/cut.bin", host_of(gw), payload_hash="UNSIGNED-PAYLOAD")
    signed["content-length"] = str(len(body) * 2)
    with answers(gw) as seen:
        with Conn(gw.endpoint) as conn:
            conn.send(head_bytes("PUT", target(f"/{BUCKET}/cut.bin"), signed) + body)
            conn.sock.shutdown(socket.SHUT_WR)
            # Whatever the server does (answer 400 IncompleteBody, or just close), it must not hang or 500.
            try:
                resp = conn.read_response()
            except (EOFError, ConnectionResetError):
                resp = None
        if resp is not None:
            assert resp.status == 400 and resp.code == "IncompleteBody", resp
        wait_for(lambda: any(entry["key"] == "cut.bin" for entry in seen), "the gateway is done with the PUT")
    assert_absent(direct)
    assert_healthy(gw)


def test_put_without_content_length(gw, direct):
    """Neither Content-Length nor chunked framing: S3's 411 MissingContentLength, before any body is read."""
    body = b"no length here"
    signed = sign("PUT", f"/{BUCKET}/nolen", host_of(gw), payload_hash=hashlib.sha256(body).hexdigest())
    with Conn(gw.endpoint) as conn:
        conn.send(head_bytes("PUT", target(f"/{BUCKET}/nolen"), signed))
        resp = conn.read_response()
    assert_error(resp, 411, "MissingContentLength")
    assert_absent(direct)
    assert_healthy(gw)


def test_put_without_content_length_body_follows(gw, direct):
    """The same with the body in the same packet: HTTP/1.1 makes the body the next "request".

    Recorded behaviour: uvicorn's parser sees that garbage first and answers its own plain-text
    400 "Invalid HTTP request received." and closes; never a 5xx, nothing stored.
    """
    body = b"no length here"
    signed = sign("PUT", f"/{BUCKET}/nolen", host_of(gw), payload_hash=hashlib.sha256(body).hexdigest())
    resp = exchange(gw, head_bytes("PUT", target(f"/{BUCKET}/nolen"), signed) + body)
    assert resp.status in (400, 411), resp
    if resp.headers.get("x-amz-request-id"):
        assert resp.code == "MissingContentLength", resp
    assert_absent(direct)
    assert_healthy(gw)


def test_content_sha256_mismatch(gw, direct):
    resp = request(gw, "PUT", f"/{BUCKET}/sha", body=b"actual", payload_hash=hashlib.sha256(b"claimed").hexdigest())
    assert_error(resp, 400, "XAmzContentSHA256Mismatch")
    assert_absent(direct)


@pytest.mark.parametrize(
    ("mode", "body"),
    [
        (UNSIGNED_TRAILER, b"zz\r\nhello\r\n0\r\n\r\n"),  # non-hex size
        (UNSIGNED_TRAILER, b"5\r\nhelloEXTRA\r\n0\r\n\r\n"),  # size does not match the data
        (UNSIGNED_TRAILER, b"5\r\nhel"),  # truncated
        ("STREAMING-AWS4-HMAC-SHA256-PAYLOAD", b"zz;chunk-signature=" + b"0" * 64 + b"\r\nhello\r\n"),
        ("STREAMING-AWS4-HMAC-SHA256-PAYLOAD", b"5\r\nhello\r\n0\r\n\r\n"),  # signed mode, no signatures
    ],
    ids=["non-hex", "size-mismatch", "truncated", "signed-non-hex", "signed-unsigned-chunks"],
)
def test_aws_chunked_bad_framing(gw, direct, mode, body):
    headers = {"content-encoding": "aws-chunked", "x-amz-decoded-content-length": "5"}
    resp = request(gw, "PUT", f"/{BUCKET}/framing", headers=headers, body=body, payload_hash=mode)
    assert 400 <= resp.status < 500, resp
    assert resp.code in ("InvalidRequest", "IncompleteBody", "SignatureDoesNotMatch"), resp
    assert resp.headers.get("x-amz-request-id")
    assert_absent(direct)


@pytest.mark.parametrize(
    ("headers", "body", "codes"),
    [
        # The trailer was announced but never came.
        ({"x-amz-trailer": "x-amz-checksum-crc32"}, b"5\r\nhello\r\n0\r\n\r\n", ("MalformedTrailerError",)),
        # A trailer that was not announced.
        ({}, b"5\r\nhello\r\n0\r\nx-amz-checksum-crc32:" + crc32(b"hello").encode() + b"\r\n\r\n",
         ("InvalidRequest", "MalformedTrailerError")),
        # A trailer value that is not base64 of 4 bytes.
        ({"x-amz-trailer": "x-amz-checksum-crc32"}, b"5\r\nhello\r\n0\r\nx-amz-checksum-crc32:!!\r\n\r\n",
         ("InvalidRequest", "MalformedTrailerError")),
        # A chunk size beyond any limit.
        ({}, b"fffffffffffffffff\r\nhello\r\n", ("InvalidRequest",)),
        # More data than x-amz-decoded-content-length.
        ({"x-amz-decoded-content-length": "3"}, b"5\r\nhello\r\n0\r\n\r\n", ("IncompleteBody",)),
    ],
    ids=["missing-trailer", "unannounced-trailer", "bad-trailer-value", "huge-chunk-size", "longer-than-decoded"],
)
def test_unsigned_trailer_hostile(gw, direct, headers, body, codes):
    all_headers = {"content-encoding": "aws-chunked", "x-amz-decoded-content-length": "5", **headers}
    resp = request(gw, "PUT", f"/{BUCKET}/trailer", headers=all_headers, body=body, payload_hash=UNSIGNED_TRAILER)
    assert resp.status == 400 and resp.code in codes, resp
    assert resp.headers.get("x-amz-request-id")
    assert_absent(direct)


def test_signed_trailer_without_trailer_signature(gw, direct):
    """Signed trailers whose x-amz-trailer-signature line was cut off must not pass."""
    def strip(body: bytes) -> bytes:
        return re.sub(rb"x-amz-trailer-signature:[0-9a-f]{64}\r\n", b"", body)

    # HTTP chunked framing, so that the shortened body still ends where the wire says it does.
    resp = streaming_put(gw, "trailer.bin", PAYLOAD, mode=SIGNED_TRAILER, trailer="x-amz-checksum-crc32c",
                         trailer_value=crc32c(PAYLOAD), tamper=strip, http_chunked_framing=True)
    assert resp.status in (400, 403) and resp.code in ("MalformedTrailerError", "SignatureDoesNotMatch"), resp
    assert_absent(direct)


def test_decoded_length_above_the_object_limit(gw, direct):
    """Refused from the headers alone, before the body is read."""
    headers = {"content-encoding": "aws-chunked", "x-amz-decoded-content-length": str(6 * 1024**3)}
    signed = sign("PUT", f"/{BUCKET}/big", host_of(gw), headers=headers, payload_hash=UNSIGNED_TRAILER)
    signed["transfer-encoding"] = "chunked"
    with Conn(gw.endpoint) as conn:
        conn.send(head_bytes("PUT", target(f"/{BUCKET}/big"), signed) + b"10\r\n")  # the body never comes
        resp = conn.read_response()
    assert_error(resp, 400, "EntityTooLarge")
    assert_absent(direct)


@pytest.mark.parametrize(
    "framing",
    [
        [("content-length", "5"), ("transfer-encoding", "chunked")],
        [("content-length", "5"), ("content-length", "6")],
        [("content-length", "-5")],
    ],
    ids=["cl-and-te", "two-lengths", "negative-length"],
)
def test_conflicting_http_framing(gw, direct, framing):
    """Request-smuggling shapes: refused (uvicorn's 400 or an S3 4xx), never a 2xx or 5xx; nothing stored."""
    signed = sign("PUT", f"/{BUCKET}/smuggled", host_of(gw), payload_hash="UNSIGNED-PAYLOAD")
    wire = list(signed.items()) + framing
    try:
        resp = exchange(gw, head_bytes("PUT", target(f"/{BUCKET}/smuggled"), wire) + b"5\r\nhello\r\n0\r\n\r\n")
    except (EOFError, ConnectionResetError):
        resp = None
    if resp is not None:
        assert 400 <= resp.status < 500, resp
    assert_absent(direct)
    assert_healthy(gw)


def test_transfer_coding_other_than_chunked(gw, direct):
    """`Transfer-Encoding: gzip, chunked`: the server strips only the chunked framing, so the body is
    still gzip; S3 answers 501 NotImplemented naming the header, and nothing may be stored."""
    signed = sign("PUT", f"/{BUCKET}/gz", host_of(gw), payload_hash="UNSIGNED-PAYLOAD")
    signed["transfer-encoding"] = "gzip, chunked"
    resp = exchange(gw, head_bytes("PUT", target(f"/{BUCKET}/gz"), signed) + http_chunked(zlib.compress(b"hello")))
    assert_error(resp, 501, "NotImplemented")
    assert b"<Header>Transfer-Encoding</Header>" in resp.body
    assert_absent(direct)
    assert_healthy(gw)


def test_many_headers(gw, direct):
    """~200 small headers (~5 KiB, under S3's 8 KiB header limit): answered normally."""
    direct.put_object(Bucket=BUCKET, Key="obj", Body=b"body")
    signed = sign("GET", f"/{BUCKET}/obj", host_of(gw))
    wire = list(signed.items()) + [(f"X-Filler-{i}", f"value-{i}") for i in range(200)]
    resp = exchange(gw, head_bytes("GET", target(f"/{BUCKET}/obj"), wire))
    assert_ok(resp)
    assert resp.body == b"body"
    assert_healthy(gw)


def assert_header_section_too_large(resp: Response | None) -> None:
    """S3: 400 RequestHeaderSectionTooLarge (MaxSizeAllowed 8192). uvicorn refusing it first (400/431,
    or dropping the connection) would also do; a 2xx, or a 5xx, would not."""
    if resp is None:
        return
    assert resp.status in (400, 431), resp
    if resp.headers.get("x-amz-request-id"):  # answered by the gateway, not by uvicorn itself
        assert resp.code == "RequestHeaderSectionTooLarge", resp


def test_huge_header_value(gw, direct):
    """One 64 KiB header value (unsigned, not x-amz-*)."""
    direct.put_object(Bucket=BUCKET, Key="obj", Body=b"body")
    signed = sign("GET", f"/{BUCKET}/obj", host_of(gw))
    wire = list(signed.items()) + [("X-Huge", "v" * 65536)]
    try:
        resp = exchange(gw, head_bytes("GET", target(f"/{BUCKET}/obj"), wire))
    except (EOFError, ConnectionResetError):
        resp = None
    assert_header_section_too_large(resp)
    assert_healthy(gw)


def test_many_headers_above_8_kib(gw, direct):
    """200 headers of 80 bytes each: ~16 KiB of header section, above S3's 8 KiB."""
    direct.put_object(Bucket=BUCKET, Key="obj", Body=b"body")
    signed = sign("GET", f"/{BUCKET}/obj", host_of(gw))
    wire = list(signed.items()) + [(f"X-Filler-{i}", "v" * 64) for i in range(200)]
    try:
        resp = exchange(gw, head_bytes("GET", target(f"/{BUCKET}/obj"), wire))
    except (EOFError, ConnectionResetError):
        resp = None
    assert_header_section_too_large(resp)
    assert_healthy(gw)


def test_huge_signed_metadata_header(gw, direct):
    """A signed 64 KiB x-amz-meta-* value on a PUT: refused as S3 refuses it, nothing stored."""
    resp = request(gw, "PUT", f"/{BUCKET}/meta", headers={"x-amz-meta-big": "v" * 65536}, body=b"meta")
    assert_header_section_too_large(resp)
    assert_absent(direct)
    assert_healthy(gw)


def test_metadata_too_large(gw, direct):
    """User metadata above S3's 2 KiB (headers still under 8 KiB): 400 MetadataTooLarge, nothing stored."""
    resp = request(gw, "PUT", f"/{BUCKET}/meta", headers={"x-amz-meta-big": "v" * 3000}, body=b"meta")
    assert_error(resp, 400, "MetadataTooLarge")
    assert_absent(direct)


# --- 9. slow-loris -------------------------------------------------------------------------------


def test_stalled_clients_do_not_block_others(gw, s3):
    s3.put_object(Bucket=BUCKET, Key="live", Body=b"still here")
    stalled = []
    try:
        # Half a request line and headers, never finished.
        conn = Conn(gw.endpoint)
        conn.send(f"GET /{BUCKET}/live HTTP/1.1\r\nHost: {host_of(gw)}\r\nX-Amz-Da".encode())
        stalled.append(conn)
        # Whole headers, half the body.
        signed = sign("PUT", f"/{BUCKET}/stall", host_of(gw), payload_hash="UNSIGNED-PAYLOAD")
        signed["content-length"] = "100000"
        conn = Conn(gw.endpoint)
        conn.send(head_bytes("PUT", target(f"/{BUCKET}/stall"), signed) + b"x" * 5000)
        stalled.append(conn)
        # A streaming body that stops mid-chunk.
        signed = sign("PUT", f"/{BUCKET}/stall2", host_of(gw), payload_hash=UNSIGNED_TRAILER,
                      headers={"content-encoding": "aws-chunked", "x-amz-decoded-content-length": "100"})
        signed["transfer-encoding"] = "chunked"
        conn = Conn(gw.endpoint)
        conn.send(head_bytes("PUT", target(f"/{BUCKET}/stall2"), signed) + b"10\r\n64\r\nabc")
        stalled.append(conn)
        wait_for(lambda: accepted(gw, stalled), "the gateway holds the stalled connections")

        results: list[bytes] = []

        def get() -> None:
            fresh = client(gw.endpoint, connect_timeout=3, read_timeout=5)
            results.append(fresh.get_object(Bucket=BUCKET, Key="live")["Body"].read())

        started = time.monotonic()
        worker = threading.Thread(target=get, daemon=True)
        worker.start()
        worker.join(timeout=8)
        assert not worker.is_alive(), "a GET was blocked by stalled clients"
        assert results == [b"still here"]
        assert time.monotonic() - started < 5
    finally:
        for conn in stalled:
            conn.close()
    with pytest.raises(ClientError):
        s3.head_object(Bucket=BUCKET, Key="stall")
