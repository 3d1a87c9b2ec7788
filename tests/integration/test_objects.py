"""Object operations through the gateway equal the same calls made directly against the origin."""

from __future__ import annotations

import base64
import hashlib
import os
from datetime import datetime, timedelta, timezone

import pytest
from botocore.exceptions import ClientError

pytestmark = pytest.mark.usefixtures("clean_origin")


def error_code(exc: pytest.ExceptionInfo[ClientError]) -> str:
    return exc.value.response["Error"]["Code"]


def status(exc: pytest.ExceptionInfo[ClientError]) -> int:
    return exc.value.response["ResponseMetadata"]["HTTPStatusCode"]


def test_put_get_head_round_trip(s3, direct):
    s3.create_bucket(Bucket="bkt")
    data = os.urandom(300_000)
    put = s3.put_object(Bucket="bkt", Key="dir/obj.bin", Body=data, ContentType="application/x-test",
                        Metadata={"colour": "blue"}, CacheControl="max-age=60", ContentDisposition="inline",
                        ContentEncoding="identity", ContentLanguage="en")
    assert put["ETag"] == '"%s"' % hashlib.md5(data).hexdigest()
    got = s3.get_object(Bucket="bkt", Key="dir/obj.bin")
    assert got["Body"].read() == data
    head_gw = s3.head_object(Bucket="bkt", Key="dir/obj.bin")
    head_origin = direct.head_object(Bucket="bkt", Key="dir/obj.bin")
    for field in ("ETag", "ContentLength", "ContentType", "Metadata", "CacheControl", "ContentDisposition",
                  "ContentEncoding", "ContentLanguage", "LastModified", "AcceptRanges"):
        assert head_gw.get(field) == head_origin.get(field), field
    assert got["ContentType"] == "application/x-test"
    assert head_gw["ResponseMetadata"]["HTTPHeaders"]["x-amz-request-id"]


def test_stored_bytes_and_headers_equal_a_direct_put(s3, direct):
    s3.create_bucket(Bucket="bkt")
    s3.put_object(Bucket="bkt", Key="k", Body=b"payload", ContentType="text/plain")
    assert direct.get_object(Bucket="bkt", Key="k")["Body"].read() == b"payload"
    head = direct.head_object(Bucket="bkt", Key="k")
    assert head["ContentType"] == "text/plain"
    assert "aws-chunked" not in head.get("ContentEncoding", "")


def test_the_gateway_adds_no_headers_of_its_own_to_a_write(s3, direct):
    # No Content-Type from the client: the origin picks its default, exactly as when the
    # client writes to it directly (an HTTP library's default content type must not leak in).
    s3.create_bucket(Bucket="bkt")
    s3.put_object(Bucket="bkt", Key="via-gateway", Body=b"x")
    direct.put_object(Bucket="bkt", Key="direct", Body=b"x")
    via_gateway = direct.head_object(Bucket="bkt", Key="via-gateway")
    assert via_gateway["ContentType"] == direct.head_object(Bucket="bkt", Key="direct")["ContentType"]
    assert "ContentEncoding" not in via_gateway


@pytest.mark.parametrize(
    "header, expected",
    [
        ("bytes=0-9", (0, 9)),
        ("bytes=10-", (10, 999)),
        ("bytes=-5", (995, 999)),
        ("bytes=990-5000", (990, 999)),
    ],
)
def test_ranges(s3, header, expected):
    s3.create_bucket(Bucket="bkt")
    data = os.urandom(1000)
    s3.put_object(Bucket="bkt", Key="k", Body=data)
    got = s3.get_object(Bucket="bkt", Key="k", Range=header)
    start, end = expected
    assert got["Body"].read() == data[start:end + 1]
    assert got["ContentRange"] == f"bytes {start}-{end}/1000"
    assert got["ResponseMetadata"]["HTTPStatusCode"] == 206


def test_unsatisfiable_range_is_416(s3):
    s3.create_bucket(Bucket="bkt")
    s3.put_object(Bucket="bkt", Key="k", Body=b"x" * 10)
    with pytest.raises(ClientError) as exc:
        s3.get_object(Bucket="bkt", Key="k", Range="bytes=20-30")
    assert error_code(exc) == "InvalidRange"
    assert status(exc) == 416


def test_conditionals(s3):
    s3.create_bucket(Bucket="bkt")
    etag = s3.put_object(Bucket="bkt", Key="k", Body=b"hello")["ETag"]
    assert s3.get_object(Bucket="bkt", Key="k", IfMatch=etag)["Body"].read() == b"hello"
    with pytest.raises(ClientError) as exc:
        s3.get_object(Bucket="bkt", Key="k", IfMatch='"0000"')
    assert error_code(exc) == "PreconditionFailed" and status(exc) == 412
    with pytest.raises(ClientError) as exc:
        s3.get_object(Bucket="bkt", Key="k", IfNoneMatch=etag)
    assert status(exc) == 304
    last_modified = s3.head_object(Bucket="bkt", Key="k")["LastModified"]
    past = datetime.now(timezone.utc) - timedelta(days=1)
    with pytest.raises(ClientError) as exc:
        s3.get_object(Bucket="bkt", Key="k", IfModifiedSince=last_modified)
    assert status(exc) == 304
    assert s3.get_object(Bucket="bkt", Key="k", IfModifiedSince=past)["Body"].read() == b"hello"
    # A date in the future is not a valid validator: ignored, as S3 does.
    future = datetime.now(timezone.utc) + timedelta(days=1)
    assert s3.get_object(Bucket="bkt", Key="k", IfModifiedSince=future)["Body"].read() == b"hello"
    with pytest.raises(ClientError) as exc:
        s3.get_object(Bucket="bkt", Key="k", IfUnmodifiedSince=past)
    assert status(exc) == 412
    # S3: If-Match true wins over a false If-Unmodified-Since.
    assert s3.get_object(Bucket="bkt", Key="k", IfMatch=etag, IfUnmodifiedSince=past)["Body"].read() == b"hello"
    # Ranged reads carrying If-Match, as parallel downloaders send them.
    assert s3.get_object(Bucket="bkt", Key="k", IfMatch=etag, Range="bytes=1-2")["Body"].read() == b"el"


def test_response_overrides(s3):
    s3.create_bucket(Bucket="bkt")
    s3.put_object(Bucket="bkt", Key="k", Body=b"hello", ContentType="text/plain")
    got = s3.get_object(Bucket="bkt", Key="k", ResponseContentType="application/json",
                        ResponseContentDisposition="attachment; filename=x.json", ResponseCacheControl="no-cache")
    assert got["ContentType"] == "application/json"
    assert got["ContentDisposition"] == "attachment; filename=x.json"
    assert got["CacheControl"] == "no-cache"


def test_missing_key_and_bucket(s3):
    s3.create_bucket(Bucket="bkt")
    with pytest.raises(ClientError) as exc:
        s3.get_object(Bucket="bkt", Key="nope")
    assert error_code(exc) == "NoSuchKey" and status(exc) == 404
    with pytest.raises(ClientError) as exc:
        s3.head_object(Bucket="bkt", Key="nope")
    assert status(exc) == 404
    with pytest.raises(ClientError) as exc:
        s3.get_object(Bucket="missing-bucket", Key="k")
    assert error_code(exc) == "NoSuchBucket"


def test_content_md5_is_verified(s3, direct):
    s3.create_bucket(Bucket="bkt")
    good = base64.b64encode(hashlib.md5(b"data").digest()).decode()
    s3.put_object(Bucket="bkt", Key="ok", Body=b"data", ContentMD5=good)
    bad = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    with pytest.raises(ClientError) as exc:
        s3.put_object(Bucket="bkt", Key="bad", Body=b"data", ContentMD5=bad)
    assert error_code(exc) == "BadDigest"
    with pytest.raises(ClientError) as exc:
        s3.put_object(Bucket="bkt", Key="bad", Body=b"data", ContentMD5="not-base64!")
    assert error_code(exc) == "InvalidDigest"
    keys = [o["Key"] for o in direct.list_objects_v2(Bucket="bkt").get("Contents", [])]
    assert keys == ["ok"]


def test_copy_object_metadata_directive(s3):
    s3.create_bucket(Bucket="bkt")
    s3.put_object(Bucket="bkt", Key="src", Body=b"abc", Metadata={"a": "1"}, ContentType="text/plain")
    s3.copy_object(Bucket="bkt", Key="copy", CopySource={"Bucket": "bkt", "Key": "src"})
    assert s3.head_object(Bucket="bkt", Key="copy")["Metadata"] == {"a": "1"}
    s3.copy_object(Bucket="bkt", Key="replaced", CopySource="bkt/src", MetadataDirective="REPLACE",
                   Metadata={"b": "2"}, ContentType="application/x-new")
    head = s3.head_object(Bucket="bkt", Key="replaced")
    assert head["Metadata"] == {"b": "2"} and head["ContentType"] == "application/x-new"
    assert s3.get_object(Bucket="bkt", Key="replaced")["Body"].read() == b"abc"


def test_delete_object_and_delete_objects(s3):
    s3.create_bucket(Bucket="bkt")
    for i in range(5):
        s3.put_object(Bucket="bkt", Key=f"k{i}", Body=b"x")
    s3.delete_object(Bucket="bkt", Key="k0")
    verbose = s3.delete_objects(Bucket="bkt", Delete={"Objects": [{"Key": "k1"}, {"Key": "k2"}]})
    assert sorted(d["Key"] for d in verbose["Deleted"]) == ["k1", "k2"]
    quiet = s3.delete_objects(Bucket="bkt", Delete={"Objects": [{"Key": "k3"}], "Quiet": True})
    assert "Deleted" not in quiet
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="bkt")["Contents"]] == ["k4"]


def test_delete_objects_over_1000_keys_is_malformed(s3):
    s3.create_bucket(Bucket="bkt")
    with pytest.raises(ClientError) as exc:
        s3.delete_objects(Bucket="bkt", Delete={"Objects": [{"Key": f"k{i}"} for i in range(1001)]})
    assert error_code(exc) == "MalformedXML"


@pytest.mark.parametrize("key", ["a b", "ünï/cödé", "x+y=z&w", "dots/../and/./more", "//lead", "pct%41", "tilde~!*'()"])
def test_awkward_keys(s3, direct, key):
    s3.create_bucket(Bucket="bkt")
    s3.put_object(Bucket="bkt", Key=key, Body=key.encode())
    assert s3.get_object(Bucket="bkt", Key=key)["Body"].read() == key.encode()
    assert direct.get_object(Bucket="bkt", Key=key)["Body"].read() == key.encode()
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="bkt")["Contents"]] == [key]


def test_versioned_get(s3, direct):
    s3.create_bucket(Bucket="bkt")
    direct.put_bucket_versioning(Bucket="bkt", VersioningConfiguration={"Status": "Enabled"})
    v1 = s3.put_object(Bucket="bkt", Key="k", Body=b"one")["VersionId"]
    s3.put_object(Bucket="bkt", Key="k", Body=b"two")
    assert s3.get_object(Bucket="bkt", Key="k", VersionId=v1)["Body"].read() == b"one"
    assert s3.get_object(Bucket="bkt", Key="k")["Body"].read() == b"two"
    assert s3.head_object(Bucket="bkt", Key="k", VersionId=v1)["VersionId"] == v1
    versions = s3.list_object_versions(Bucket="bkt")["Versions"]
    assert len(versions) == 2
