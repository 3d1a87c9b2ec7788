"""A cold HEAD and a cold LIST through the gateway cost the origin one request each, as they
would cost going to it directly, and answer what the origin answers; since they go through the
range client (Origin.head, Origin.get_listing), the answers are its: a HEAD's Content-Length is
the object's, with no body after it, and a listing page arrives whole. Requests are counted at
a real moto, behind bench/shaped_proxy.py's relay (unshaped), by kind."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.servers import CountingProxy
from tests.support import base_settings, client

@pytest.fixture(scope="module")
def counted(origin_endpoint: str) -> Iterator[CountingProxy]:
    proxy = CountingProxy(origin_endpoint)
    yield proxy
    proxy.close()


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


def test_a_cold_head_is_one_origin_head_and_answers_the_object_s_length_without_a_body(cold, counted):
    _, s3 = cold
    key = "small/day=1/part-0.parquet"
    got = s3.head_object(Bucket="bkt", Key=key)
    assert (got["ContentLength"], got["Metadata"]) == (3008, {"day": "1"})
    assert counted.since() == {"HEAD": 1}
    counted.mark()
    for _ in range(2):  # known now: no origin request; the connection the HEAD used served on
        assert s3.head_object(Bucket="bkt", Key=key)["ETag"] == got["ETag"]
    assert s3.get_object(Bucket="bkt", Key=key, Range="bytes=-8")["Body"].read() == bytes(4) + b"PAR1"
    assert counted.since() == {"GET": 1}


def test_a_cold_head_of_a_missing_key_is_a_404_and_remembered(cold, counted):
    _, s3 = cold
    for _ in range(2):
        with pytest.raises(s3.exceptions.ClientError) as raised:
            s3.head_object(Bucket="bkt", Key="small/day=9/part-0.parquet")
        assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    # (a HEAD's 404 has no body: a GET of one byte tells NoSuchKey from NoSuchBucket, once)
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
