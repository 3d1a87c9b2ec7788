"""Two gateways sharing one Redis: metadata and listings shared, writes invalidated on both,
and a Redis outage costs speed, never answers."""

from __future__ import annotations

import dataclasses

import pytest
from botocore.exceptions import ClientError

from gateway.config import RedisSettings
from gateway.engine import Engine
from tests.support import RunningGateway, base_settings, client
from tests.waiting import wait_for


def engine(gateway: RunningGateway) -> Engine:
    return gateway.server.config.app.s3.engine



def keys(s3, prefix: str) -> list[str]:  # type: ignore[no-untyped-def]
    return [o["Key"] for o in s3.list_objects_v2(Bucket="bkt", Prefix=prefix).get("Contents", [])]


@pytest.fixture
def pair(start_gateway, clean_origin, clean_redis):
    """Gateways A and B on the same Redis and origin; TTLs long enough that only
    invalidations (never expiry) can explain a change seen during a test."""
    settings = base_settings(clean_origin)
    sections = {
        "redis": RedisSettings(url=clean_redis.url, socket_timeout=0.3, retry_interval=0.2),
        "metadata": dataclasses.replace(settings.metadata, ttl=60.0, negative_ttl=60.0),
        "listing": dataclasses.replace(settings.listing, ttl=60.0),
    }
    a, b = start_gateway(**sections), start_gateway(**sections)
    # Subscribed, and past the distrust that follows a new subscription (Invalidations.listening).
    wait_for(lambda: engine(a).shared.invalidation.listening() and engine(b).shared.invalidation.listening(),
             "both listen")
    s3a, s3b = client(a.endpoint), client(b.endpoint)
    s3a.create_bucket(Bucket="bkt")
    return a, b, s3a, s3b


def test_one_gateway_answers_from_what_the_other_fetched(pair):
    _, b, s3a, s3b = pair
    s3a.put_object(Bucket="bkt", Key="dir/k", Body=b"shared")
    etag = s3a.head_object(Bucket="bkt", Key="dir/k")["ETag"]  # A: origin, then L1 + Redis
    assert keys(s3a, "dir/") == ["dir/k"]
    before = dict(engine(b).stats)
    assert s3b.head_object(Bucket="bkt", Key="dir/k")["ETag"] == etag
    assert s3b.get_object(Bucket="bkt", Key="dir/k")["Body"].read() == b"shared"
    assert keys(s3b, "dir/") == ["dir/k"]
    stats = engine(b).stats
    assert stats["meta_l2_hit"] == before.get("meta_l2_hit", 0) + 1  # then B's own L1
    # (but for the checksums boto3's whole GET asks for, which A's HEAD, from a GET of the object's tail,
    # did not bring: B's GET of the object brings them with its bytes, one origin request as before)
    assert stats["meta_miss"] == before.get("meta_miss", 0) + 1
    assert stats["list_l2_hit"] == before.get("list_l2_hit", 0) + 1
    assert stats["list_miss"] == before.get("list_miss", 0)
    # A remembered 404 is shared too.
    with pytest.raises(ClientError):
        s3a.head_object(Bucket="bkt", Key="absent")
    with pytest.raises(ClientError) as exc:
        s3b.head_object(Bucket="bkt", Key="absent")
    assert exc.value.response["Error"]["Code"] == "404"
    assert engine(b).stats["meta_l2_hit"] == before.get("meta_l2_hit", 0) + 2


def test_a_write_through_one_gateway_is_seen_at_once_through_the_other(pair):
    _, _, s3a, s3b = pair
    s3a.put_object(Bucket="bkt", Key="dir/k", Body=b"one")
    old = s3b.head_object(Bucket="bkt", Key="dir/k")["ETag"]
    assert keys(s3b, "dir/") == ["dir/k"]
    with pytest.raises(ClientError):
        s3b.head_object(Bucket="bkt", Key="dir/new")  # remembered as missing, for 60 s

    new = s3a.put_object(Bucket="bkt", Key="dir/k", Body=b"two!")["ETag"]
    s3a.put_object(Bucket="bkt", Key="dir/new", Body=b"new")
    wait_for(lambda: s3b.head_object(Bucket="bkt", Key="dir/k")["ETag"] == new, "B sees the new ETag", within=2)
    assert s3b.get_object(Bucket="bkt", Key="dir/k")["Body"].read() == b"two!"
    assert s3b.head_object(Bucket="bkt", Key="dir/new")["ContentLength"] == 3
    wait_for(lambda: keys(s3b, "dir/") == ["dir/k", "dir/new"], "B lists the new key", within=2)
    assert old != new

    # DeleteObjects names no key on the way to the origin: the whole bucket is dropped.
    s3b.delete_objects(Bucket="bkt", Delete={"Objects": [{"Key": "dir/k"}]})
    with pytest.raises(ClientError) as exc:
        s3a.head_object(Bucket="bkt", Key="dir/k")
    assert exc.value.response["Error"]["Code"] == "404"
    assert keys(s3a, "dir/") == ["dir/new"]


def test_redis_outage_costs_speed_not_answers(pair, clean_redis, direct):
    a, b, s3a, s3b = pair
    s3a.put_object(Bucket="bkt", Key="k", Body=b"one")
    assert s3b.head_object(Bucket="bkt", Key="k")["ContentLength"] == 3  # cached on B
    clean_redis.stop()

    # Both keep answering: from their own caches, else from the origin.
    assert s3b.head_object(Bucket="bkt", Key="k")["ContentLength"] == 3
    assert s3a.get_object(Bucket="bkt", Key="k")["Body"].read() == b"one"
    s3a.put_object(Bucket="bkt", Key="during", Body=b"during the outage")
    assert s3b.get_object(Bucket="bkt", Key="during")["Body"].read() == b"during the outage"
    assert s3a.get_object(Bucket="bkt", Key="during")["Body"].read() == b"during the outage"
    s3a.put_object(Bucket="bkt", Key="k", Body=b"changed while Redis was down")
    assert s3a.get_object(Bucket="bkt", Key="k")["Body"].read() == b"changed while Redis was down"
    assert sorted(keys(s3b, "")) == ["during", "k"]
    wait_for(lambda: not engine(b).shared.invalidation.subscribed.is_set(), "B loses the channel", within=2)
    # B cannot hear A's invalidations now: it asks the origin before answering from its
    # cache (a conditional HEAD), so A's acknowledged write is seen through B at once.
    assert s3b.get_object(Bucket="bkt", Key="k")["Body"].read() == b"changed while Redis was down"
    s3a.delete_object(Bucket="bkt", Key="during")
    assert keys(s3b, "") == ["k"]
    with pytest.raises(ClientError):
        s3b.head_object(Bucket="bkt", Key="during")
    s3a.put_object(Bucket="bkt", Key="during", Body=b"back")
    assert sum(engine(a).shared.redis.errors.values()) >= 1

    clean_redis.start()
    wait_for(lambda: engine(a).shared.invalidation.subscribed.is_set()
             and engine(b).shared.invalidation.subscribed.is_set(), "both subscribe again")
    # B missed A's invalidation while Redis was down; having resubscribed it dropped
    # what it cached, and A's waiting invalidation was replayed.
    assert s3b.get_object(Bucket="bkt", Key="k")["Body"].read() == b"changed while Redis was down"
    wait_for(lambda: not engine(a).shared.invalidation._pending, "A sends what it kept", within=2)
    # Invalidations flow again.
    new = s3a.put_object(Bucket="bkt", Key="k", Body=b"after")["ETag"]
    wait_for(lambda: s3b.head_object(Bucket="bkt", Key="k")["ETag"] == new, "B sees the new ETag", within=2)
    assert direct.get_object(Bucket="bkt", Key="k")["Body"].read() == b"after"
