"""Protocol points found by the outside review (issue 14, items 3, 5 and 8-12), each checked
through the gateway and, where it matters, at the origin directly."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import http.server
import threading
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from awscrt import checksums as crt
from botocore.exceptions import ClientError

from tests.integration.test_wire import exchange, head_bytes, request, sign, target
from tests.support import base_settings, client

MiB = 1024 * 1024


@pytest.fixture
def bkt(s3):  # type: ignore[no-untyped-def]
    s3.create_bucket(Bucket="bkt")
    return s3


def _raw_header(response: httpx.Response, name: str) -> bytes | None:
    for key, value in response.headers.raw:
        if key.lower() == name.encode():
            return value
    return None


# --- item 3: header bytes reach the origin as the client sent them -------------------------------


@pytest.mark.parametrize("name, text", [
    ("x-amz-meta-note", "caf\u00e9 \u2014 \u6587"),
    ("content-disposition", 'attachment; filename="r\u00e9sum\u00e9.pdf"'),
])
def test_utf8_header_values_are_stored_as_sent(gateway, bkt, direct, name, text):
    host = urlsplit(gateway.endpoint).netloc
    body = b"hello"
    signed = sign("PUT", "/bkt/k", host, headers={name: text},
                  payload_hash=hashlib.sha256(body).hexdigest())
    signed["content-length"] = str(len(body))
    # On the wire: the UTF-8 bytes of the text (head_bytes writes each character as one byte).
    wire = {k: v.encode("utf-8").decode("latin-1") for k, v in signed.items()}
    response = exchange(gateway, head_bytes("PUT", target("/bkt/k"), wire) + body)
    assert response.status == 200, response
    # At the origin (boto3's raw headers are the wire bytes read as latin-1).
    stored = direct.head_object(Bucket="bkt", Key="k")["ResponseMetadata"]["HTTPHeaders"][name]
    assert stored.encode("latin-1") == text.encode("utf-8")
    url = bkt.generate_presigned_url("get_object", Params={"Bucket": "bkt", "Key": "k"}, ExpiresIn=60)
    for _ in range(2):  # from the origin, then from the cache
        through = httpx.get(url)
        assert through.status_code == 200 and through.content == body
        assert _raw_header(through, name) == text.encode("utf-8")


def test_header_bytes_that_are_not_utf8_are_refused(gateway, bkt, direct):
    host = urlsplit(gateway.endpoint).netloc
    signed = sign("PUT", "/bkt/k", host, headers={"x-amz-meta-note": "caf\udce9"},
                  payload_hash=hashlib.sha256(b"").hexdigest())
    signed["content-length"] = "0"
    wire = {k: v.encode("utf-8", "surrogateescape").decode("latin-1") for k, v in signed.items()}
    response = exchange(gateway, head_bytes("PUT", target("/bkt/k"), wire))
    assert response.status == 400 and response.code == "InvalidArgument", response
    with pytest.raises(ClientError):
        direct.head_object(Bucket="bkt", Key="k")


# --- item 5: a relayed 206 keeps its Content-Range -------------------------------------------------


class _PartsOrigin(http.server.BaseHTTPRequestHandler):
    """An origin that serves GET ?partNumber=N as S3 does (moto ignores partNumber)."""

    PARTS = [b"hello", b"world!"]

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        number = int(parse_qs(urlsplit(self.path).query).get("partNumber", ["0"])[0])
        part = self.PARTS[number - 1]
        start = sum(len(p) for p in self.PARTS[: number - 1])
        self.send_response(206)
        self.send_header("Content-Length", str(len(part)))
        self.send_header("Content-Range", f"bytes {start}-{start + len(part) - 1}/{sum(map(len, self.PARTS))}")
        self.send_header("ETag", '"0123456789abcdef0123456789abcdef-2"')
        self.send_header("x-amz-mp-parts-count", "2")
        self.end_headers()
        self.wfile.write(part)

    def log_message(self, *args: object) -> None:
        pass


def test_get_part_number_keeps_content_range(start_gateway, origin_endpoint):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _PartsOrigin)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        gateway = start_gateway(origin=dataclasses.replace(base_settings(origin_endpoint).origin, endpoint=endpoint))
        got = client(gateway.endpoint).get_object(Bucket="bkt", Key="mp", PartNumber=2)
        assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
        assert got["ContentRange"] == "bytes 5-10/11"
        assert got["PartsCount"] == 2
        assert got["Body"].read() == b"world!"
    finally:
        server.shutdown()
        server.server_close()


# --- item 8: no Content-MD5 on reads ---------------------------------------------------------------


def test_reads_never_answer_with_the_uploads_content_md5(gateway, bkt):
    data = bytes(range(256)) * 64
    bkt.put_object(Bucket="bkt", Key="k", Body=data)  # boto3 sends Content-MD5 (moto stores and replays it)
    url = bkt.generate_presigned_url("get_object", Params={"Bucket": "bkt", "Key": "k"}, ExpiresIn=60)
    for headers in ({}, {"Range": "bytes=10-99"}, {}, {"Range": "bytes=10-99"}):  # cold, then cached
        response = httpx.get(url, headers=headers)
        assert response.status_code in (200, 206)
        assert "content-md5" not in response.headers
    assert "content-md5" not in httpx.head(bkt.generate_presigned_url(
        "head_object", Params={"Bucket": "bkt", "Key": "k"}, ExpiresIn=60)).headers


# --- item 9: CompleteMultipartUpload's checksum headers describe the object -----------------------


def test_complete_with_the_objects_composite_checksum_is_passed_on(gateway, bkt, direct):
    upload = bkt.create_multipart_upload(Bucket="bkt", Key="mp", ChecksumAlgorithm="CRC32C")["UploadId"]
    parts, digests = [], []
    for number, fill in ((1, b"x"), (2, b"y")):
        chunk = fill * (5 * MiB)
        digest = crt.crc32c(chunk).to_bytes(4, "big")
        digests.append(digest)
        etag = bkt.upload_part(Bucket="bkt", Key="mp", UploadId=upload, PartNumber=number, Body=chunk,
                               ChecksumCRC32C=base64.b64encode(digest).decode())["ETag"]
        parts.append({"PartNumber": number, "ETag": etag, "ChecksumCRC32C": base64.b64encode(digest).decode()})
    composite = base64.b64encode(crt.crc32c(b"".join(digests)).to_bytes(4, "big")).decode() + "-2"
    payload = "<CompleteMultipartUpload>" + "".join(
        f"<Part><PartNumber>{p['PartNumber']}</PartNumber><ETag>{p['ETag']}</ETag>"
        f"<ChecksumCRC32C>{p['ChecksumCRC32C']}</ChecksumCRC32C></Part>" for p in parts) + "</CompleteMultipartUpload>"
    body = payload.encode()
    # As minio-go sends it: the object's composite checksum in a header, next to an XML body.
    response = request(gateway, "POST", "/bkt/mp", query=[("uploadId", upload)], body=body,
                       headers={"x-amz-checksum-crc32c": composite, "content-type": "application/xml"})
    assert response.status == 200, response
    assert b"<Bucket>bkt</Bucket>" in response.body
    assert direct.head_object(Bucket="bkt", Key="mp")["ContentLength"] == 10 * MiB


def test_complete_retried_after_success_is_answered_by_the_origin(bkt, direct):
    upload = bkt.create_multipart_upload(Bucket="bkt", Key="mp")["UploadId"]
    etag = bkt.upload_part(Bucket="bkt", Key="mp", UploadId=upload, PartNumber=1, Body=b"z" * 1000)["ETag"]
    done = {"Parts": [{"PartNumber": 1, "ETag": etag}]}
    first = bkt.complete_multipart_upload(Bucket="bkt", Key="mp", UploadId=upload, MultipartUpload=done)
    # What the origin itself answers to the retry is what the client gets.
    try:
        origin_answer: object = direct.complete_multipart_upload(Bucket="bkt", Key="mp", UploadId=upload, MultipartUpload=done)["ETag"]
    except ClientError as exc:
        origin_answer = exc.response["Error"]["Code"]
    try:
        through: object = bkt.complete_multipart_upload(Bucket="bkt", Key="mp", UploadId=upload, MultipartUpload=done)["ETag"]
    except ClientError as exc:
        through = exc.response["Error"]["Code"]
    assert through == origin_answer
    assert first["ETag"] == direct.head_object(Bucket="bkt", Key="mp")["ETag"]


# --- item 10: an origin error stays that error -----------------------------------------------------


def test_head_version_null_answers_what_the_origin_answers(bkt, direct):
    bkt.put_object(Bucket="bkt", Key="k", Body=b"v")
    def status(c) -> int:  # type: ignore[no-untyped-def]
        try:
            return c.head_object(Bucket="bkt", Key="k", VersionId="null")["ResponseMetadata"]["HTTPStatusCode"]
        except ClientError as exc:
            return int(exc.response["ResponseMetadata"]["HTTPStatusCode"])
    origin = status(direct)
    assert status(bkt) == origin != 503
    assert status(bkt) == origin  # and again, from whatever the gateway cached


# --- item 12: GetObjectAttributes keeps its request headers ----------------------------------------


def test_get_object_attributes_sends_its_headers_on(bkt, direct):
    data = b"attributes" * 100
    bkt.put_object(Bucket="bkt", Key="k", Body=data, ChecksumAlgorithm="SHA256")
    want = ["ETag", "Checksum", "ObjectSize", "StorageClass"]
    through = bkt.get_object_attributes(Bucket="bkt", Key="k", ObjectAttributes=want)
    origin = direct.get_object_attributes(Bucket="bkt", Key="k", ObjectAttributes=want)
    assert through["ObjectSize"] == origin["ObjectSize"] == len(data)
    assert through["ETag"] == origin["ETag"]
    assert through.get("Checksum") == origin.get("Checksum")
    assert through.get("StorageClass") == origin.get("StorageClass")
