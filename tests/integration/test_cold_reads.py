"""A cold read (no metadata cached) asks the origin once: one ranged GET brings the object's
metadata and the first block together, where a HEAD and then a GET would cost two round trips."""

from __future__ import annotations

import hashlib
import os
from collections import Counter

import httpx
import pytest
from botocore.exceptions import ClientError

from gateway.config import CacheSettings
from tests.support import RunningGateway, client, concurrent_gets

KiB = 1024
BLOCK = 64 * KiB
DATA = os.urandom(5 * BLOCK + 1234)


def origin_requests(gateway: RunningGateway) -> Counter[str]:
    return Counter(gateway.server.config.app.s3.engine.origin.requests)


def sent_since(gateway: RunningGateway, before: Counter[str]) -> dict[str, int]:
    return {method: n for method, n in (origin_requests(gateway) - before).items() if n}


@pytest.fixture
def cold(start_gateway, clean_origin):
    gateway = start_gateway(cache=CacheSettings(block_size=BLOCK, memory_quota=4 * 1024 * KiB, readahead_blocks=0))
    s3 = client(gateway.endpoint)
    s3.create_bucket(Bucket="bkt")
    s3.put_object(Bucket="bkt", Key="k", Body=DATA)
    gateway.purge_caches()  # the write left nothing, but be explicit: nothing is known of "k"
    return gateway, s3


def test_a_cold_read_is_one_origin_request_and_then_a_hit(cold):
    gateway, s3 = cold
    before = origin_requests(gateway)
    got = s3.get_object(Bucket="bkt", Key="k", Range="bytes=10-99")
    assert got["Body"].read() == DATA[10:100]
    assert got["ContentRange"] == f"bytes 10-99/{len(DATA)}"
    assert got["ResponseMetadata"]["HTTPHeaders"]["x-cache"] == "miss"
    assert sent_since(gateway, before) == {"GET": 1}
    before = origin_requests(gateway)
    again = s3.get_object(Bucket="bkt", Key="k", Range="bytes=0-99")
    assert again["Body"].read() == DATA[:100] and again["ResponseMetadata"]["HTTPHeaders"]["x-cache"] == "hit-mem"
    assert sent_since(gateway, before) == {}
    assert s3.head_object(Bucket="bkt", Key="k")["ContentLength"] == len(DATA)


def test_a_cold_whole_object_read_without_checksums(cold):
    gateway, s3 = cold
    before = origin_requests(gateway)
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "bkt", "Key": "k"})
    response = httpx.get(url, timeout=30)
    assert response.status_code == 200 and response.content == DATA
    assert response.headers["content-length"] == str(len(DATA)) and "content-range" not in response.headers
    assert response.headers["etag"] == '"%s"' % hashlib.md5(DATA).hexdigest()
    assert response.headers["x-cache"] == "miss"
    assert sent_since(gateway, before) == {"GET": 1}  # the metadata and every block, as a client asks S3
    before = origin_requests(gateway)
    again = httpx.get(url, timeout=30)
    assert again.content == DATA and again.headers["x-cache"] == "hit-mem"
    assert sent_since(gateway, before) == {}  # every block was kept


def test_a_cold_read_mid_object_fetches_only_its_blocks(cold):
    gateway, s3 = cold
    before = origin_requests(gateway)
    start = 3 * BLOCK + 10
    got = s3.get_object(Bucket="bkt", Key="k", Range=f"bytes={start}-")
    assert got["Body"].read() == DATA[start:]
    assert sent_since(gateway, before) == {"GET": 1}  # blocks 3, 4 and the tail, in one answer
    before = origin_requests(gateway)
    assert s3.get_object(Bucket="bkt", Key="k", Range=f"bytes={3 * BLOCK}-")["Body"].read() == DATA[3 * BLOCK:]
    assert sent_since(gateway, before) == {}


def test_concurrent_cold_reads_share_one_request(cold):
    gateway, _ = cold
    before = origin_requests(gateway)
    assert concurrent_gets(gateway.endpoint, 8, Bucket="bkt", Key="k", Range="bytes=0-999") == [DATA[:1000]] * 8
    assert sent_since(gateway, before) == {"GET": 1}


def test_a_missing_key_or_bucket_on_a_cold_read(cold):
    gateway, s3 = cold
    with pytest.raises(ClientError) as missing_key:
        s3.get_object(Bucket="bkt", Key="nope", Range="bytes=0-9")
    assert missing_key.value.response["Error"]["Code"] == "NoSuchKey"
    with pytest.raises(ClientError) as missing_bucket:
        s3.get_object(Bucket="no-such-bucket", Key="k", Range="bytes=0-9")
    assert missing_bucket.value.response["Error"]["Code"] == "NoSuchBucket"
    before = origin_requests(gateway)
    with pytest.raises(ClientError) as again:
        s3.get_object(Bucket="bkt", Key="nope", Range="bytes=0-9")
    assert again.value.response["Error"]["Code"] == "NoSuchKey"
    assert sent_since(gateway, before) == {}  # the 404 is remembered (negative cache)


def test_an_empty_object_and_a_start_past_the_end(cold):
    gateway, s3 = cold
    s3.put_object(Bucket="bkt", Key="empty", Body=b"")
    s3.put_object(Bucket="bkt", Key="four", Body=b"1234")
    gateway.purge_caches()
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "bkt", "Key": "empty"})
    response = httpx.get(url, timeout=30)
    assert response.status_code == 200 and response.content == b""
    with pytest.raises(ClientError) as past_the_end:
        s3.get_object(Bucket="bkt", Key="four", Range="bytes=5-")
    assert past_the_end.value.response["Error"]["Code"] == "InvalidRange"
    assert past_the_end.value.response["ResponseMetadata"]["HTTPHeaders"]["content-range"] == "bytes */4"
    assert s3.get_object(Bucket="bkt", Key="four", Range="bytes=1-2")["Body"].read() == b"23"


def test_checksums_are_shown_after_a_ranged_first_read(cold, direct):
    gateway, s3 = cold
    s3.put_object(Bucket="bkt", Key="summed", Body=b"checked bytes", ChecksumAlgorithm="SHA256")
    gateway.purge_caches()
    assert s3.get_object(Bucket="bkt", Key="summed", Range="bytes=0-3")["Body"].read() == b"chec"
    whole = s3.get_object(Bucket="bkt", Key="summed", ChecksumMode="ENABLED")
    assert whole["Body"].read() == b"checked bytes"
    expected = direct.head_object(Bucket="bkt", Key="summed", ChecksumMode="ENABLED")["ChecksumSHA256"]
    assert whole["ChecksumSHA256"] == expected
    assert s3.head_object(Bucket="bkt", Key="summed", ChecksumMode="ENABLED")["ChecksumSHA256"] == expected


def test_conditions_are_checked_against_what_the_cold_read_found(cold):
    gateway, s3 = cold
    etag = '"%s"' % hashlib.md5(DATA).hexdigest()
    with pytest.raises(ClientError) as not_modified:
        s3.get_object(Bucket="bkt", Key="k", IfNoneMatch=etag, Range="bytes=0-9")
    assert not_modified.value.response["ResponseMetadata"]["HTTPStatusCode"] == 304
    gateway.purge_caches()
    with pytest.raises(ClientError) as failed:
        s3.get_object(Bucket="bkt", Key="k", IfMatch='"0000"', Range="bytes=0-9")
    assert failed.value.response["Error"]["Code"] == "PreconditionFailed"


def test_a_cold_read_of_an_older_version(cold):
    gateway, s3 = cold
    s3.put_bucket_versioning(Bucket="bkt", VersioningConfiguration={"Status": "Enabled"})
    first = s3.put_object(Bucket="bkt", Key="v", Body=b"first")["VersionId"]
    s3.put_object(Bucket="bkt", Key="v", Body=b"second")
    gateway.purge_caches()
    old = s3.get_object(Bucket="bkt", Key="v", VersionId=first, Range="bytes=0-99")
    assert old["Body"].read() == b"first" and old["VersionId"] == first
    assert s3.get_object(Bucket="bkt", Key="v", Range="bytes=0-99")["Body"].read() == b"second"


def test_concurrent_whole_reads_that_want_checksums_cost_no_more_than_going_to_s3(cold):
    # boto3 asks for checksums on every GetObject: a whole object's GET brings them (no HEAD in
    # front of it), and concurrent cold readers wait for the blocks it is bringing.
    gateway, _ = cold
    before = origin_requests(gateway)
    assert concurrent_gets(gateway.endpoint, 8, Bucket="bkt", Key="k") == [DATA] * 8
    sent = sent_since(gateway, before)
    assert set(sent) == {"GET"} and 1 <= sent["GET"] <= 8, sent
    before = origin_requests(gateway)
    assert concurrent_gets(gateway.endpoint, 8, Bucket="bkt", Key="k") == [DATA] * 8
    assert sent_since(gateway, before) == {}


def test_a_cold_suffix_read_is_one_origin_request(cold):
    # Engines read Parquet and ORC footers with suffix ranges: the origin is asked once, its
    # Content-Range gives the size, and the last block is kept for the reads that follow.
    gateway, s3 = cold
    before = origin_requests(gateway)
    got = s3.get_object(Bucket="bkt", Key="k", Range="bytes=-100")
    assert got["Body"].read() == DATA[-100:]
    assert got["ContentRange"] == f"bytes {len(DATA) - 100}-{len(DATA) - 1}/{len(DATA)}"
    assert sent_since(gateway, before) == {"GET": 1}
    before = origin_requests(gateway)
    again = s3.get_object(Bucket="bkt", Key="k", Range="bytes=-1000")
    assert again["Body"].read() == DATA[-1000:] and again["ResponseMetadata"]["HTTPHeaders"]["x-cache"] == "hit-mem"
    assert sent_since(gateway, before) == {}


def test_a_cold_suffix_longer_than_the_object_is_the_whole_object(cold):
    gateway, s3 = cold
    s3.put_object(Bucket="bkt", Key="small", Body=b"0123456789")
    before = origin_requests(gateway)
    got = s3.get_object(Bucket="bkt", Key="small", Range="bytes=-1000000")
    assert got["Body"].read() == b"0123456789" and got["ContentRange"] == "bytes 0-9/10"
    assert sent_since(gateway, before) == {"GET": 1}


def test_a_cold_whole_read_with_checksums_is_one_request_with_the_origins_checksums(cold, direct):
    # boto3 asks every whole-object GET for checksums (x-amz-checksum-mode: ENABLED): the GET of the
    # whole object brings them, no HEAD in front of it.
    gateway, s3 = cold
    s3.put_object(Bucket="bkt", Key="summed", Body=DATA, ChecksumAlgorithm="SHA256")
    before = origin_requests(gateway)
    got = s3.get_object(Bucket="bkt", Key="summed", ChecksumMode="ENABLED")
    assert got["Body"].read() == DATA
    assert got["ChecksumSHA256"] == direct.head_object(Bucket="bkt", Key="summed", ChecksumMode="ENABLED")["ChecksumSHA256"]
    assert sent_since(gateway, before) == {"GET": 1}
    before = origin_requests(gateway)
    again = s3.get_object(Bucket="bkt", Key="summed", ChecksumMode="ENABLED")
    assert again["Body"].read() == DATA and again["ChecksumSHA256"] == got["ChecksumSHA256"]
    assert again["ResponseMetadata"]["HTTPHeaders"]["x-cache"] == "hit-mem"
    assert sent_since(gateway, before) == {}


def test_a_cold_read_of_a_range_is_one_request_and_keeps_whole_blocks_only(cold):
    gateway, s3 = cold
    before = origin_requests(gateway)
    start, end = BLOCK + 5, 3 * BLOCK + 7  # blocks 1 to 3, in part
    assert s3.get_object(Bucket="bkt", Key="k", Range=f"bytes={start}-{end}")["Body"].read() == DATA[start:end + 1]
    assert sent_since(gateway, before) == {"GET": 1}
    before = origin_requests(gateway)
    assert s3.get_object(Bucket="bkt", Key="k", Range=f"bytes={BLOCK}-{4 * BLOCK - 1}")["Body"].read() == \
        DATA[BLOCK:4 * BLOCK]
    assert sent_since(gateway, before) == {}
