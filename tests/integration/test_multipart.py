"""Multipart uploads through the gateway, by the SDK's own transfer manager and by hand."""

from __future__ import annotations

import hashlib
import io
import os

import pytest
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

pytestmark = pytest.mark.usefixtures("clean_origin")
MiB = 1024 * 1024


def code(exc: pytest.ExceptionInfo[ClientError]) -> str:
    return exc.value.response["Error"]["Code"]


def test_transfer_manager_upload_and_download(s3, direct):
    s3.create_bucket(Bucket="bkt")
    data = os.urandom(12 * MiB + 123)
    config = TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB, max_concurrency=4)
    s3.upload_fileobj(io.BytesIO(data), "bkt", "big.bin", Config=config)
    assert hashlib.sha256(direct.get_object(Bucket="bkt", Key="big.bin")["Body"].read()).digest() == hashlib.sha256(data).digest()
    out = io.BytesIO()
    s3.download_fileobj("bkt", "big.bin", out, Config=config)
    assert out.getvalue() == data


def test_multipart_by_hand(s3, direct, gateway):
    s3.create_bucket(Bucket="bkt")
    upload = s3.create_multipart_upload(Bucket="bkt", Key="mp", ContentType="text/x-parts", Metadata={"m": "v"})
    uid = upload["UploadId"]
    assert upload["Bucket"] == "bkt" and upload["Key"] == "mp"
    part1 = os.urandom(5 * MiB)
    part2 = b"tail"
    e1 = s3.upload_part(Bucket="bkt", Key="mp", UploadId=uid, PartNumber=1, Body=part1)["ETag"]
    e2 = s3.upload_part(Bucket="bkt", Key="mp", UploadId=uid, PartNumber=2, Body=part2)["ETag"]
    parts = s3.list_parts(Bucket="bkt", Key="mp", UploadId=uid)["Parts"]
    assert [p["PartNumber"] for p in parts] == [1, 2]
    uploads = s3.list_multipart_uploads(Bucket="bkt")["Uploads"]
    assert [u["UploadId"] for u in uploads] == [uid]
    done = s3.complete_multipart_upload(Bucket="bkt", Key="mp", UploadId=uid, MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]})
    assert done["Location"].startswith(gateway.endpoint)
    assert done["ETag"].endswith('-2"')
    assert s3.get_object(Bucket="bkt", Key="mp")["Body"].read() == part1 + part2
    head = s3.head_object(Bucket="bkt", Key="mp")
    assert head["ContentType"] == "text/x-parts" and head["Metadata"] == {"m": "v"}
    # partNumber is passed through: the answer is the origin's (moto ignores it and sends the object).
    by_part = s3.get_object(Bucket="bkt", Key="mp", PartNumber=2)
    assert by_part["Body"].read() == direct.get_object(Bucket="bkt", Key="mp", PartNumber=2)["Body"].read()


def test_upload_part_copy(s3):
    s3.create_bucket(Bucket="bkt")
    source = os.urandom(6 * MiB)
    s3.put_object(Bucket="bkt", Key="src", Body=source)
    uid = s3.create_multipart_upload(Bucket="bkt", Key="dst")["UploadId"]
    e1 = s3.upload_part_copy(Bucket="bkt", Key="dst", UploadId=uid, PartNumber=1, CopySource="bkt/src",
                             CopySourceRange=f"bytes=0-{5 * MiB - 1}")["CopyPartResult"]["ETag"]
    e2 = s3.upload_part_copy(Bucket="bkt", Key="dst", UploadId=uid, PartNumber=2, CopySource={"Bucket": "bkt", "Key": "src"},
                             CopySourceRange=f"bytes={5 * MiB}-{6 * MiB - 1}")["CopyPartResult"]["ETag"]
    s3.complete_multipart_upload(Bucket="bkt", Key="dst", UploadId=uid, MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]})
    assert s3.get_object(Bucket="bkt", Key="dst")["Body"].read() == source


def test_abort(s3):
    s3.create_bucket(Bucket="bkt")
    uid = s3.create_multipart_upload(Bucket="bkt", Key="k")["UploadId"]
    s3.upload_part(Bucket="bkt", Key="k", UploadId=uid, PartNumber=1, Body=b"x")
    s3.abort_multipart_upload(Bucket="bkt", Key="k", UploadId=uid)
    assert "Uploads" not in s3.list_multipart_uploads(Bucket="bkt")
    with pytest.raises(ClientError) as exc:
        s3.list_parts(Bucket="bkt", Key="k", UploadId=uid)
    assert code(exc) == "NoSuchUpload"


def test_complete_without_parts_is_malformed(s3):
    s3.create_bucket(Bucket="bkt")
    uid = s3.create_multipart_upload(Bucket="bkt", Key="k")["UploadId"]
    with pytest.raises(ClientError) as exc:
        s3.complete_multipart_upload(Bucket="bkt", Key="k", UploadId=uid, MultipartUpload={"Parts": []})
    assert code(exc) == "MalformedXML"


def test_complete_unknown_upload(s3):
    s3.create_bucket(Bucket="bkt")
    with pytest.raises(ClientError) as exc:
        s3.complete_multipart_upload(Bucket="bkt", Key="k", UploadId="no-such-upload",
                                     MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": '"x"'}]})
    assert code(exc) == "NoSuchUpload"
