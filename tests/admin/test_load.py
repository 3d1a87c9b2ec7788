"""`gateway load` and `POST <admin>/load`: a prefix read once through the cache, so that
later reads are hits; progress streamed as JSON lines; failures reported, exit status 1."""

from __future__ import annotations

import json
import os

import httpx
import pytest
from click.testing import CliRunner, Result

from gateway.admin.summary import size
from gateway.cli import main
from gateway.config import AdminSettings, CacheSettings
from tests.support import client

TOKEN = "load-admin-token"
KiB = 1024
OBJECTS = {f"data/part-{i:03d}.bin": os.urandom(size) for i, size in enumerate([0, 1, 5 * KiB, 200 * KiB, 300 * KiB])}


@pytest.fixture
def gateway(start_gateway, clean_origin, direct):  # type: ignore[no-untyped-def]
    gateway = start_gateway(admin=AdminSettings(token=TOKEN), cache=CacheSettings(block_size=64 * KiB))
    direct.create_bucket(Bucket="bkt")
    for key, body in OBJECTS.items():  # written behind the gateway: nothing of them is cached
        direct.put_object(Bucket="bkt", Key=key, Body=body)
    direct.put_object(Bucket="bkt", Key="other/outside.bin", Body=b"not under the prefix")
    return gateway


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), env={"GATEWAY_ADMIN_TOKEN": None})  # type: ignore[dict-item]


def x_cache(gateway, key: str) -> str:  # type: ignore[no-untyped-def]
    got = client(gateway.endpoint).get_object(Bucket="bkt", Key=key)
    assert got["Body"].read() == OBJECTS.get(key, b"not under the prefix")
    return got["ResponseMetadata"]["HTTPHeaders"]["x-cache"]


def test_load_makes_every_object_under_the_prefix_a_hit(gateway):
    result = cli("load", "s3://bkt/data/", "--url", gateway.endpoint, "--token", TOKEN)
    assert result.exit_code == 0, result.output
    total = sum(len(body) for body in OBJECTS.values())
    assert result.output.strip() == f"loaded {len(OBJECTS)} of {len(OBJECTS)} objects under bkt/data/, {size(total)}"
    for key, body in OBJECTS.items():
        if body:  # an empty object has no blocks to hold
            assert x_cache(gateway, key) == "hit-mem", key
    assert x_cache(gateway, "other/outside.bin") == "miss"


def test_a_listing_of_the_loaded_prefix_is_answered_by_the_loads_pages(gateway):
    """Engines list a table's folder before they read it (Trino: ListObjectsV2 of the prefix); the
    load's own listing is that page, within listing.ttl."""
    assert cli("load", "s3://bkt/data/", "--url", gateway.endpoint, "--token", TOKEN).exit_code == 0
    stats = gateway.server.config.app.s3.engine.stats
    misses = stats["list_miss"]
    page = client(gateway.endpoint).list_objects_v2(Bucket="bkt", Prefix="data/")
    assert [entry["Key"] for entry in page["Contents"]] == sorted(OBJECTS)
    assert gateway.server.config.app.s3.engine.stats["list_miss"] == misses  # no LIST asked of the origin


def test_the_admin_route_streams_progress_and_ends_with_done(gateway):
    url = f"{gateway.endpoint}/_gateway/load"
    with httpx.stream("POST", url, params={"bucket": "bkt", "prefix": "data/"},
                      headers={"authorization": f"Bearer {TOKEN}"}, timeout=30) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/x-ndjson"
        lines = [json.loads(line) for line in response.iter_lines() if line.strip()]
    last = lines[-1]
    assert last["done"] and last["listed"] and last["failed"] == []
    assert last["objects"] == last["loaded"] == len(OBJECTS)
    assert last["bytes"] == sum(len(body) for body in OBJECTS.values())
    assert httpx.post(url, params={"bucket": "bkt"}, timeout=10).status_code == 401
    assert httpx.post(url, params={"prefix": "x"}, headers={"authorization": f"Bearer {TOKEN}"},
                      timeout=10).status_code == 400


def test_a_load_that_cannot_list_fails_with_one_line_and_status_1(gateway):
    result = cli("load", "no-such-bucket/data/", "--url", gateway.endpoint, "--token", TOKEN)
    assert result.exit_code == 1
    assert "load of no-such-bucket/data/ stopped: NoSuchBucket" in result.output
    bad = cli("load", "s3://", "--url", gateway.endpoint, "--token", TOKEN)
    assert bad.exit_code != 0 and "BUCKET" in bad.output


def test_objects_that_cannot_be_read_are_listed_and_the_exit_status_is_1(gateway, direct):
    # An archived object is listed but cannot be read (InvalidObjectState): the load goes on
    # with the others and names it.
    direct.put_object(Bucket="bkt", Key="data/zz-archived.bin", Body=b"cold", StorageClass="GLACIER")
    result = cli("load", "bkt/data/", "--url", gateway.endpoint, "--token", TOKEN)
    assert result.exit_code == 1
    assert f"loaded {len(OBJECTS)} of {len(OBJECTS) + 1} objects" in result.output
    assert "1 failed:" in result.output and "data/zz-archived.bin: InvalidObjectState" in result.output
