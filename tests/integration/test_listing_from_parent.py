"""A listing of a folder under one whose whole listing the gateway holds costs the origin nothing and
answers what the origin would: Trino lists a table's folder, then each partition's folder under it
(engine.sublistings). Requests are counted at a real moto behind tests.servers.CountingProxy; the
answers are compared with moto's own."""

from __future__ import annotations


import pytest

from tests.support import base_settings, client

# Hive partitions, and keys whose URL encoding and XML escaping must come through
KEYS = [f"t/day={day}/part-{n}.parquet" for day in (1, 2, 10) for n in range(2)] + \
       ["t/day=2/a b+c%d&e<f.parquet", "t/d\u00e9j\u00e0/x", "t/day=20/y", "u/other"]


@pytest.fixture
def listed(start_gateway, clean_origin, counted):  # type: ignore[no-untyped-def]
    gateway = start_gateway(origin=base_settings(counted.endpoint).origin)
    s3 = client(gateway.endpoint)
    s3.create_bucket(Bucket="bkt")
    for key in KEYS:
        s3.put_object(Bucket="bkt", Key=key, Body=key.encode())
    gateway.purge_caches()
    counted.mark()
    return s3, client(clean_origin)


def _seen(page: dict) -> tuple:  # type: ignore[type-arg]
    return ([(o["Key"], o["Size"], o["ETag"], o["LastModified"]) for o in page.get("Contents", [])],
            page.get("KeyCount"), page["Prefix"], page["IsTruncated"])


def test_the_folders_under_a_listed_folder_cost_no_origin_request(listed, counted):
    s3, direct = listed
    s3.list_objects_v2(Bucket="bkt", Prefix="t/", MaxKeys=1000)
    assert counted.since() == {"LIST": 1}
    for prefix in ("t/day=1/", "t/day=2/", "t/day=2/a b", "t/day=1", "t/d\u00e9j\u00e0/", "t/none/", "t/"):
        assert _seen(s3.list_objects_v2(Bucket="bkt", Prefix=prefix, MaxKeys=1000)) == \
            _seen(direct.list_objects_v2(Bucket="bkt", Prefix=prefix, MaxKeys=1000)), prefix
    assert counted.since() == {"LIST": 1}
    # ListObjects v1 pages are their own: one more listing of the folder, then none
    for prefix in ("t/", "t/day=10/", "t/day=2/a b"):
        got, want = (c.list_objects(Bucket="bkt", Prefix=prefix) for c in (s3, direct))
        assert [(o["Key"], o["ETag"]) for o in got["Contents"]] == [(o["Key"], o["ETag"]) for o in want["Contents"]]
        assert got["Prefix"] == prefix
    assert counted.since() == {"LIST": 2}


def test_what_a_folder_s_listing_cannot_answer_is_asked_of_the_origin(listed, counted):
    s3, _ = listed
    s3.list_objects_v2(Bucket="bkt", Prefix="t/", MaxKeys=4)  # truncated: not the whole folder
    s3.list_objects_v2(Bucket="bkt", Prefix="t/day=1/", MaxKeys=4)
    s3.list_objects_v2(Bucket="bkt", Prefix="t/", MaxKeys=1000)
    page = s3.list_objects_v2(Bucket="bkt", Prefix="t/day=2/", Delimiter="/", MaxKeys=1000)  # a delimiter
    assert [o["Key"] for o in page["Contents"]] == ["t/day=2/a b+c%d&e<f.parquet", "t/day=2/part-0.parquet",
                                                    "t/day=2/part-1.parquet"]
    assert counted.since() == {"LIST": 4}


def test_a_write_under_a_folder_is_in_its_folders_next_listing(listed, counted):
    s3, _ = listed
    s3.list_objects_v2(Bucket="bkt", Prefix="t/", MaxKeys=1000)
    assert len(s3.list_objects_v2(Bucket="bkt", Prefix="t/day=1/", MaxKeys=1000)["Contents"]) == 2
    s3.put_object(Bucket="bkt", Key="t/day=1/part-2.parquet", Body=b"new")
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="bkt", Prefix="t/day=1/", MaxKeys=1000)["Contents"]] == \
        [f"t/day=1/part-{n}.parquet" for n in range(3)]
