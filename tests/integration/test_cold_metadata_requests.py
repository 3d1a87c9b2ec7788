"""A cold HEAD and a cold LIST through the gateway cost the origin one request each, as they
would cost going to it directly, and answer what the origin answers. A cold HEAD is one GET of
the object's last metadata.head_tail bytes (engine.tails): its headers answer the HEAD exactly
as the origin's HEAD would have (the object's length, no body, no Content-Range), and the bytes
it brings answer the footer read engines send next (and a small object's whole read) without
another origin request. Requests are counted at a real moto, behind bench/shaped_proxy.py's
relay (unshaped unless a test shapes it), by kind."""

from __future__ import annotations

import dataclasses
import os
import threading

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.config import MetadataSettings
from tests.servers import CountingProxy
from tests.support import base_settings, client

KiB, MiB = 1024, 1024 * 1024
TAIL = MetadataSettings().head_tail  # 64 KiB
BLOCK = MiB  # (the default block size)
# What the origin's HEAD and the gateway's answer to one may differ in: the hop, not the object.
_HOP = {"date", "server", "connection", "keep-alive", "x-amzn-requestid", "x-amz-request-id", "x-amz-id-2",
        "access-control-allow-origin", "x-cache",
        "content-md5"}  # (moto replays an upload's; S3 never answers a read with it, nor does the gateway)
_DESCRIBED = dict(ContentType="application/x-parquet", CacheControl="max-age=60", ContentEncoding="identity",
                  ContentDisposition='attachment; filename="part-0.parquet"', ContentLanguage="en",
                  Expires="Wed, 21 Oct 2037 07:28:00 GMT", Metadata={"day": "1", "writer": "trino"},
                  StorageClass="STANDARD_IA", Tagging="team=data")


@pytest.fixture
def cold(start_gateway, clean_origin, counted):  # type: ignore[no-untyped-def]
    gateway = start_gateway(origin=base_settings(counted.endpoint).origin)
    s3 = client(gateway.endpoint)
    s3.create_bucket(Bucket="bkt")
    for day in range(3):
        s3.put_object(Bucket="bkt", Key=f"small/day={day}/part-0.parquet", Body=b"PAR1" + bytes(3000) + b"PAR1",
                      Metadata={"day": str(day)})
    gateway.purge_caches()
    counted.mark()
    return gateway, s3


def head_headers(s3, key: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """Every header of a HEAD of bkt/key (a presigned one: as sent), but the hop's."""
    response = httpx.head(s3.generate_presigned_url("head_object", Params={"Bucket": "bkt", "Key": key}), timeout=30)
    assert response.status_code == 200 and response.content == b""
    return {name: value for name, value in response.headers.items() if name not in _HOP}


def get_body(s3, key: str, byte_range: str | None = None) -> bytes:  # type: ignore[no-untyped-def]
    """The body of a GET (presigned, without x-amz-checksum-mode: a whole object's read that asks for
    checksums needs the origin's HEAD, a ranged GET does not carry them)."""
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "bkt", "Key": key})
    response = httpx.get(url, headers={"range": byte_range} if byte_range else {}, timeout=30)
    assert response.status_code == (206 if byte_range else 200), response.text
    return response.content


@pytest.mark.parametrize("size", [0, 1, TAIL - 1, TAIL, TAIL + 1, BLOCK, 3 * MiB + 5])
def test_a_cold_head_is_one_origin_get_and_answers_what_the_origin_s_head_answers(cold, counted, direct, size):
    gateway, s3 = cold
    body = os.urandom(size)
    key = f"sized/{size}.parquet"
    s3.put_object(Bucket="bkt", Key=key, Body=body, **_DESCRIBED)
    gateway.purge_caches()
    counted.mark()
    got = head_headers(s3, key)
    assert counted.since() == {"GET": 1}  # of the object's tail, not a HEAD
    assert got == head_headers(direct, key)
    assert got["content-length"] == str(size) and "content-range" not in got
    counted.mark()
    # The footer read engines send next (Trino, Spark, PyArrow, DuckDB: 8 bytes, then up to 64 KiB).
    for footer in (8, TAIL) if size else ():
        assert get_body(s3, key, f"bytes=-{footer}") == body[-footer:]
    if size <= TAIL:  # all of it came with the HEAD
        assert get_body(s3, key) == body
    assert counted.since() == {}


def test_the_tail_s_bytes_answer_the_reads_that_follow_and_the_head_again(cold, counted):
    gateway, s3 = cold
    key = "small/day=1/part-0.parquet"
    got = s3.head_object(Bucket="bkt", Key=key)
    assert (got["ContentLength"], got["Metadata"]) == (3008, {"day": "1"})
    assert counted.since() == {"GET": 1}
    for _ in range(2):  # known now: no origin request; the connection the HEAD used served on
        assert s3.head_object(Bucket="bkt", Key=key)["ETag"] == got["ETag"]
    assert s3.get_object(Bucket="bkt", Key=key, Range="bytes=-8")["Body"].read() == bytes(4) + b"PAR1"
    assert s3.get_object(Bucket="bkt", Key=key, Range="bytes=4-3003")["Body"].read() == bytes(3000)
    assert counted.since() == {"GET": 1}
    assert gateway.server.config.app.s3.engine.stats["meta_head_by_tail"] == 1


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(size=st.integers(0, 2 * BLOCK + TAIL), footer=st.integers(1, TAIL))
def test_a_cold_head_then_its_footer_cost_one_origin_get(cold, counted, size, footer):
    gateway, s3 = cold
    body, key = os.urandom(size), f"drawn/{os.urandom(8).hex()}"  # (of which nothing is held)
    s3.put_object(Bucket="bkt", Key=key, Body=body)
    counted.mark()
    assert s3.head_object(Bucket="bkt", Key=key)["ContentLength"] == size
    if size:
        assert get_body(s3, key, f"bytes=-{footer}") == body[-footer:]
    assert counted.since() == {"GET": 1}


@pytest.mark.parametrize("size", [100, 3 * MiB + 5])
def test_a_head_then_a_whole_read_asking_for_checksums_cost_what_going_to_s3_costs(cold, counted, direct, size):
    # The HEAD's metadata, from a ranged GET, has no checksums: the read that asks for them (boto3's whole
    # GETs do) asks the origin a HEAD for them when the cache holds the object whole (a small one), else the
    # GET of the object that brings its bytes; either way two origin requests, as a HEAD and a GET to S3.
    gateway, s3 = cold
    body = os.urandom(size)
    s3.put_object(Bucket="bkt", Key="summed", Body=body, ChecksumAlgorithm="SHA256")
    gateway.purge_caches()
    counted.mark()
    assert s3.head_object(Bucket="bkt", Key="summed")["ContentLength"] == size
    got = s3.get_object(Bucket="bkt", Key="summed", ChecksumMode="ENABLED")
    assert got["Body"].read() == body
    assert got["ChecksumSHA256"] == direct.head_object(Bucket="bkt", Key="summed", ChecksumMode="ENABLED")[
        "ChecksumSHA256"]
    assert counted.since() == ({"GET": 1, "HEAD": 1} if size < TAIL else {"GET": 2})


def test_a_cold_conditional_head_is_answered_as_the_origin_answers_it(cold, counted, direct):
    # Conditionals are decided on the metadata (s3api/reads.py:object_answer), whichever request brought it.
    _, s3 = cold
    cases = [("if-none-match", "etag", 304), ("if-match", '"0000"', 412), ("if-match", "etag", 200),
             ("if-modified-since", "modified", 304), ("if-unmodified-since", "earlier", 412),
             ("if-modified-since", "earlier", 200)]
    for number, (name, value, status) in enumerate(cases):
        key = f"conditional/{number}"  # (cold: nothing of it known or held)
        direct.put_object(Bucket="bkt", Key=key, Body=b"PAR1" + bytes(100) + b"PAR1")
        head = direct.head_object(Bucket="bkt", Key=key)
        modified = head["LastModified"]
        dates = {when: at.strftime("%a, %d %b %Y %H:%M:%S GMT")
                 for when, at in (("modified", modified), ("earlier", modified.replace(year=modified.year - 1)))}
        conditions = {name: {"etag": head["ETag"], **dates}.get(value, value)}
        counted.mark()
        url = s3.generate_presigned_url("head_object", Params={"Bucket": "bkt", "Key": key})
        assert httpx.head(url, headers=conditions, timeout=30).status_code == status, conditions
        assert counted.since() == {"GET": 1}, conditions
        direct_url = direct.generate_presigned_url("head_object", Params={"Bucket": "bkt", "Key": key})
        assert httpx.head(direct_url, headers=conditions, timeout=30).status_code == status, conditions


def test_a_head_asking_for_checksums_is_an_origin_head(cold, counted, direct):
    _, s3 = cold
    s3.put_object(Bucket="bkt", Key="summed", Body=b"checked bytes", ChecksumAlgorithm="SHA256")
    counted.mark()
    got = s3.head_object(Bucket="bkt", Key="summed", ChecksumMode="ENABLED")  # (a ranged GET brings none)
    assert got["ChecksumSHA256"] == direct.head_object(Bucket="bkt", Key="summed", ChecksumMode="ENABLED")[
        "ChecksumSHA256"]
    assert counted.since() == {"HEAD": 1}


def test_an_archived_object_s_head_is_answered_by_the_origin_s_head(cold, counted, direct):
    # S3 refuses a GET of an object in an archive storage class (403 InvalidObjectState); its HEAD answers.
    _, s3 = cold
    s3.put_object(Bucket="bkt", Key="archived", Body=b"x" * 100, StorageClass="GLACIER")
    counted.mark()
    assert head_headers(s3, "archived") == head_headers(direct, "archived")
    assert counted.since() == {"GET": 1, "HEAD": 1}


def test_a_cold_head_of_a_missing_key_or_bucket_is_one_request_and_remembered(cold, counted):
    _, s3 = cold
    for bucket, key in (("bkt", "small/day=9/part-0.parquet"), ("no-such-bucket", "k")):
        for _ in range(2):
            with pytest.raises(s3.exceptions.ClientError) as raised:
                s3.head_object(Bucket=bucket, Key=key)
            assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
        # (the GET's 404 says NoSuchKey or NoSuchBucket in its body: no second request to tell)
        assert counted.since() == {"GET": 1}
        counted.mark()
    with pytest.raises(s3.exceptions.ClientError) as raised:  # a GET of it is told which
        s3.get_object(Bucket="no-such-bucket", Key="k", Range="bytes=-8")
    assert raised.value.response["Error"]["Code"] == "NoSuchBucket"
    assert counted.since() == {}


def test_a_cold_head_and_a_footer_read_at_once_cost_one_origin_request(start_gateway, clean_origin, origin_endpoint):
    slow = CountingProxy(origin_endpoint, latency="150ms")  # (both arrive while the origin is being asked)
    try:
        gateway = start_gateway(origin=base_settings(slow.endpoint).origin)
        s3 = client(gateway.endpoint)
        s3.create_bucket(Bucket="bkt")
        bodies = {f"k{i}": os.urandom(200 * KiB + i) for i in range(4)}
        for key, body in bodies.items():
            s3.put_object(Bucket="bkt", Key=key, Body=body)
        gateway.purge_caches()
        slow.mark()
        barrier = threading.Barrier(2 * len(bodies))
        got: dict[tuple[str, str], object] = {}

        def head(key: str) -> None:
            barrier.wait()
            got[key, "HEAD"] = client(gateway.endpoint).head_object(Bucket="bkt", Key=key)["ContentLength"]

        def footer(key: str) -> None:
            barrier.wait()
            got[key, "GET"] = client(gateway.endpoint).get_object(Bucket="bkt", Key=key, Range="bytes=-8")[
                "Body"].read()

        threads = [threading.Thread(target=work, args=(key,)) for key in bodies for work in (head, footer)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert got == {**{(k, "HEAD"): len(b) for k, b in bodies.items()}, **{(k, "GET"): b[-8:] for k, b in bodies.items()}}
        assert slow.since() == {"GET": len(bodies)}
    finally:
        slow.close()


@pytest.mark.parametrize(("size", "footer"), [(3 * MiB + 100 * KiB, 8), (3 * MiB + 100 * KiB, TAIL), (3 * MiB + 5, TAIL)])
def test_a_footer_read_while_the_head_s_tail_still_streams_waits_for_it(start_gateway, direct, origin_endpoint,
                                                                        size, footer):
    # A HEAD is answered once the GET's headers are in; the tail's 64 KiB take 1/4 s to come at 256 KB/s:
    # the footer read arrives meanwhile and waits for them (a part of the last block, or the last block
    # whole and part of the one before) instead of asking the origin.
    slow = CountingProxy(origin_endpoint, rate="256KB")
    try:
        gateway = start_gateway(origin=base_settings(slow.endpoint).origin)
        s3 = client(gateway.endpoint)
        direct.create_bucket(Bucket="bkt")
        body = os.urandom(size)
        direct.put_object(Bucket="bkt", Key="k", Body=body)
        slow.mark()
        assert s3.head_object(Bucket="bkt", Key="k")["ContentLength"] == size
        assert get_body(s3, "k", f"bytes=-{footer}") == body[-footer:]
        assert slow.since() == {"GET": 1}
    finally:
        slow.close()


def test_with_no_tail_a_cold_head_is_one_origin_head(start_gateway, clean_origin, counted):
    settings = base_settings(counted.endpoint)
    gateway = start_gateway(origin=settings.origin, metadata=dataclasses.replace(settings.metadata, head_tail=0))
    s3 = client(gateway.endpoint)
    s3.create_bucket(Bucket="bkt")
    s3.put_object(Bucket="bkt", Key="k", Body=b"PAR1" + bytes(3000) + b"PAR1")
    gateway.purge_caches()
    counted.mark()
    assert s3.head_object(Bucket="bkt", Key="k")["ContentLength"] == 3008
    assert counted.since() == {"HEAD": 1}
    assert s3.get_object(Bucket="bkt", Key="k", Range="bytes=-8")["Body"].read() == bytes(4) + b"PAR1"
    assert counted.since() == {"HEAD": 1, "GET": 1}


def test_a_cold_listing_is_one_origin_list_and_answers_its_page(cold, counted):
    _, s3 = cold
    for prefix in ("small/day=0/", "small/day=2/"):
        page = s3.list_objects_v2(Bucket="bkt", Prefix=prefix, Delimiter="/", MaxKeys=1000)
        assert [(o["Key"], o["Size"]) for o in page["Contents"]] == [(prefix + "part-0.parquet", 3008)]
    page = s3.list_objects_v2(Bucket="bkt", Prefix="small/", Delimiter="/")
    assert [p["Prefix"] for p in page["CommonPrefixes"]] == [f"small/day={d}/" for d in range(3)]
    assert counted.since() == {"LIST": 3}
    counted.mark()
    s3.list_objects_v2(Bucket="bkt", Prefix="small/day=0/", Delimiter="/", MaxKeys=1000)
    assert counted.since() == {}
