"""Metadata and listing caches through a gateway on moto: fresh answers from memory, changes seen
at once. What happens past a TTL is tested on an injected clock (tests/engine/test_metadata.py)."""

from __future__ import annotations

import dataclasses

import pytest
from botocore.exceptions import ClientError

from tests.support import RunningGateway, base_settings, client


def engine_stats(gateway: RunningGateway) -> dict[str, int]:
    return dict(gateway.server.config.app.s3.engine.stats)


@pytest.fixture
def cached(start_gateway, clean_origin):
    """A gateway whose TTLs no test outlives: what it caches stays fresh throughout."""
    settings = base_settings(clean_origin)
    gateway = start_gateway(
        metadata=dataclasses.replace(settings.metadata, ttl=600.0, negative_ttl=600.0),
        listing=dataclasses.replace(settings.listing, ttl=30.0),
    )
    s3 = client(gateway.endpoint)
    s3.create_bucket(Bucket="bkt")
    return gateway, s3


def test_metadata_is_served_from_memory_while_fresh(cached, direct):
    gateway, s3 = cached
    s3.put_object(Bucket="bkt", Key="k", Body=b"one")
    s3.head_object(Bucket="bkt", Key="k")
    before = engine_stats(gateway)
    for _ in range(5):
        s3.head_object(Bucket="bkt", Key="k")
    after = engine_stats(gateway)
    assert after.get("meta_hit", 0) - before.get("meta_hit", 0) == 5
    assert after.get("meta_miss", 0) == before.get("meta_miss", 0)


def test_change_behind_the_gateway_is_seen_by_a_get_within_the_ttl(cached, direct):
    gateway, s3 = cached
    s3.put_object(Bucket="bkt", Key="k", Body=b"one")
    old_etag = s3.head_object(Bucket="bkt", Key="k")["ETag"]
    direct.put_object(Bucket="bkt", Key="k", Body=b"two, longer")
    assert s3.head_object(Bucket="bkt", Key="k")["ETag"] == old_etag  # within the TTL: cached
    # A GET within the TTL finds the origin changed under it and serves the current version.
    got = s3.get_object(Bucket="bkt", Key="k")
    assert got["Body"].read() == b"two, longer" and got["ETag"] != old_etag


def test_strict_mode_sees_changes_at_once(start_gateway, clean_origin, direct):
    settings = base_settings(clean_origin)
    gateway = start_gateway(metadata=dataclasses.replace(settings.metadata, ttl=3600.0, strict=True))
    s3 = client(gateway.endpoint)
    s3.create_bucket(Bucket="bkt")
    s3.put_object(Bucket="bkt", Key="k", Body=b"one")
    s3.head_object(Bucket="bkt", Key="k")
    direct.put_object(Bucket="bkt", Key="k", Body=b"two")
    assert s3.head_object(Bucket="bkt", Key="k")["ContentLength"] == 3
    assert s3.get_object(Bucket="bkt", Key="k")["Body"].read() == b"two"
    direct.delete_object(Bucket="bkt", Key="k")
    with pytest.raises(ClientError) as exc:
        s3.get_object(Bucket="bkt", Key="k")
    assert exc.value.response["Error"]["Code"] == "NoSuchKey"


def test_404_is_remembered_briefly_and_forgotten_on_write(cached, direct):
    gateway, s3 = cached
    for _ in range(2):
        with pytest.raises(ClientError) as exc:
            s3.get_object(Bucket="bkt", Key="later")
        assert exc.value.response["Error"]["Code"] == "NoSuchKey"
    assert engine_stats(gateway)["meta_hit"] >= 1  # the second 404 came from memory
    direct.put_object(Bucket="bkt", Key="later", Body=b"now")
    with pytest.raises(ClientError):
        s3.get_object(Bucket="bkt", Key="later")  # still remembered as missing
    # A write through the gateway is visible at once, whatever was remembered.
    with pytest.raises(ClientError):
        s3.head_object(Bucket="bkt", Key="fresh")
    s3.put_object(Bucket="bkt", Key="fresh", Body=b"x")
    assert s3.get_object(Bucket="bkt", Key="fresh")["Body"].read() == b"x"


def test_missing_bucket_is_remembered_with_its_own_code(cached):
    gateway, s3 = cached
    errors = []
    for _ in range(2):
        with pytest.raises(ClientError) as exc:
            s3.get_object(Bucket="no-such-bucket", Key="k")
        errors.append({k: v for k, v in exc.value.response["Error"].items() if k not in ("RequestId", "HostId")})
    assert engine_stats(gateway)["meta_hit"] >= 1  # the second came from memory
    # ... and is the origin's answer, with every element of it (S3 names the bucket).
    assert errors[0] == errors[1] and errors[0]["Code"] == "NoSuchBucket"
    assert errors[0]["BucketName"] == "no-such-bucket"


def test_listing_cache_and_invalidation_by_writes(cached, direct):
    gateway, s3 = cached
    s3.put_object(Bucket="bkt", Key="a/1", Body=b"x")
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="bkt", Prefix="a/")["Contents"]] == ["a/1"]
    direct.put_object(Bucket="bkt", Key="a/2", Body=b"x")  # behind the gateway: not seen within the TTL
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="bkt", Prefix="a/")["Contents"]] == ["a/1"]
    assert engine_stats(gateway)["list_hit"] >= 1
    s3.put_object(Bucket="bkt", Key="a/3", Body=b"x")  # through the gateway: dropped at once
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="bkt", Prefix="a/")["Contents"]] == ["a/1", "a/2", "a/3"]
    s3.delete_objects(Bucket="bkt", Delete={"Objects": [{"Key": "a/1"}]})
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="bkt", Prefix="a/")["Contents"]] == ["a/2", "a/3"]
    s3.copy_object(Bucket="bkt", Key="a/4", CopySource="bkt/a/2")
    assert len(s3.list_objects_v2(Bucket="bkt", Prefix="a/")["Contents"]) == 3

