"""The block cache on the read path: exact bytes, one origin fetch per block, tiers, restarts."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path

import httpx
import pytest
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.config import CacheSettings, DiskTierSettings
from tests.servers import moto_server
from tests.support import RunningGateway, base_settings, client, concurrent_gets
from tests.waiting import wait_for

KiB = 1024
BLOCK = 64 * KiB


def engine(gateway: RunningGateway):  # type: ignore[no-untyped-def]
    return gateway.server.config.app.s3.engine


def x_cache(response: dict) -> str:  # type: ignore[type-arg]
    return response["ResponseMetadata"]["HTTPHeaders"]["x-cache"]


@pytest.fixture
def small_blocks(start_gateway, clean_origin):
    """A gateway with 64 KiB blocks and a 1 MiB memory tier, on an empty origin."""
    gateway = start_gateway(cache=CacheSettings(block_size=BLOCK, memory_quota=1024 * KiB, readahead_blocks=2))
    s3 = client(gateway.endpoint)
    s3.create_bucket(Bucket="bkt")
    return gateway, s3


DATA = os.urandom(5 * BLOCK + 1234)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(min_value=0, max_value=len(DATA) - 1), st.integers(min_value=0, max_value=len(DATA) + 100))
def test_ranged_reads_are_byte_exact_across_blocks(small_blocks, a, b):
    gateway, s3 = small_blocks
    s3.put_object(Bucket="bkt", Key="k", Body=DATA)  # same bytes, same ETag: the blocks stay valid
    start, end = min(a, b), max(a, b)
    got = s3.get_object(Bucket="bkt", Key="k", Range=f"bytes={start}-{end}")
    assert got["Body"].read() == DATA[start:end + 1]
    assert got["ContentRange"] == f"bytes {start}-{min(end, len(DATA) - 1)}/{len(DATA)}"


def test_x_cache_miss_then_hit_and_partial(small_blocks):
    gateway, s3 = small_blocks
    s3.put_object(Bucket="bkt", Key="k", Body=DATA)
    first = s3.get_object(Bucket="bkt", Key="k", Range=f"bytes=0-{BLOCK - 1}")
    assert x_cache(first) == "miss" and first["Body"].read() == DATA[:BLOCK]
    whole = s3.get_object(Bucket="bkt", Key="k")
    assert x_cache(whole) == "partial" and whole["Body"].read() == DATA
    again = s3.get_object(Bucket="bkt", Key="k")
    assert x_cache(again) == "hit-mem" and again["Body"].read() == DATA
    assert x_cache(s3.head_object(Bucket="bkt", Key="k")) == "hit-mem"


def test_a_read_mid_object_fetches_only_its_blocks(small_blocks):
    gateway, s3 = small_blocks
    s3.put_object(Bucket="bkt", Key="k", Body=DATA)
    before = engine(gateway).stats.get("origin_block_fetch", 0)
    start = 3 * BLOCK + 10
    assert s3.get_object(Bucket="bkt", Key="k", Range=f"bytes={start}-{start + 100}")["Body"].read() == DATA[start:start + 101]
    assert engine(gateway).stats["origin_block_fetch"] - before == 1


def test_concurrent_cold_reads_fetch_each_block_once(small_blocks):
    gateway, s3 = small_blocks
    s3.put_object(Bucket="bkt", Key="k", Body=DATA)
    before = engine(gateway).stats.get("origin_block_fetch", 0)
    assert concurrent_gets(gateway.endpoint, 8, Bucket="bkt", Key="k") == [DATA] * 8
    assert engine(gateway).stats["origin_block_fetch"] - before == 6  # 5 full blocks + the tail, once each


def test_reads_share_a_bounded_buffer_and_give_it_back(start_gateway, clean_origin):
    # A read buffer of one block: 8 concurrent readers of a 6-block object queue for it
    # (readahead is skipped), get exact bytes, and leave nothing held; so does a client
    # that hangs up half-way through a body.
    gateway = start_gateway(cache=CacheSettings(block_size=BLOCK, memory_quota=2 * BLOCK, readahead_blocks=4,
                                                read_buffer=BLOCK))
    budget = engine(gateway).budget
    s3 = client(gateway.endpoint)
    s3.create_bucket(Bucket="bkt")
    s3.put_object(Bucket="bkt", Key="k", Body=DATA)
    assert concurrent_gets(gateway.endpoint, 8, Bucket="bkt", Key="k") == [DATA] * 8
    assert budget.waits > 0 and budget.overdrawn == 0

    url = s3.generate_presigned_url("get_object", Params={"Bucket": "bkt", "Key": "k"})
    with httpx.stream("GET", url, timeout=10) as response:
        next(response.iter_raw(1024))  # then hang up mid-body
    wait_for(lambda: budget.used == 0, "the read buffer given back after the hang-up", within=10)

    # One-block objects are answered as a body in hand; the buffer is held until each is sent.
    small = {f"small-{i}": os.urandom(BLOCK - i) for i in range(6)}  # 6 blocks for a 2-block memory tier
    for key, body in small.items():
        s3.put_object(Bucket="bkt", Key=key, Body=body)
    waits = budget.waits
    for key, body in small.items():
        assert concurrent_gets(gateway.endpoint, 4, Bucket="bkt", Key=key) == [body] * 4
    # Given back once the answer's last bytes went to the transport, which a client may read first.
    wait_for(lambda: budget.used == 0, "the read buffer given back", within=10)
    assert budget.overdrawn == 0 and budget.waits > waits


def test_overwrite_through_the_gateway_never_meets_old_blocks(small_blocks):
    gateway, s3 = small_blocks
    s3.put_object(Bucket="bkt", Key="k", Body=b"a" * (2 * BLOCK))
    assert s3.get_object(Bucket="bkt", Key="k")["Body"].read() == b"a" * (2 * BLOCK)
    s3.put_object(Bucket="bkt", Key="k", Body=b"b" * (2 * BLOCK))
    assert s3.get_object(Bucket="bkt", Key="k")["Body"].read() == b"b" * (2 * BLOCK)


def test_tiers_stay_within_quota_under_a_larger_load(start_gateway, clean_origin, tmp_path):
    cache = CacheSettings(block_size=BLOCK, memory_quota=4 * BLOCK, readahead_blocks=1,
                          disk=(DiskTierSettings(str(tmp_path / "d0"), 8 * BLOCK),))
    gateway = start_gateway(cache=cache)
    s3 = client(gateway.endpoint)
    s3.create_bucket(Bucket="bkt")
    blobs = {f"obj{i}": os.urandom(3 * BLOCK) for i in range(8)}  # 24 blocks for 12 blocks of cache
    for key, body in blobs.items():
        s3.put_object(Bucket="bkt", Key=key, Body=body)
    for _ in range(2):
        for key, body in blobs.items():
            assert s3.get_object(Bucket="bkt", Key=key)["Body"].read() == body
            for tier in engine(gateway).store.stats()["tiers"].values():
                assert tier["used"] <= tier["quota"]
    stats = engine(gateway).store.stats()
    assert stats["tiers"]["mem"]["used"] > 0 and stats["tiers"]["disk0"]["used"] > 0
    assert stats["demotions"] > 0


def disk_only(tmp_path: Path) -> CacheSettings:
    return CacheSettings(block_size=BLOCK, memory_quota=0, disk=(DiskTierSettings(str(tmp_path / "cache"), 64 * BLOCK),))


def test_restart_keeps_the_disk_cache(origin_endpoint, clean_origin, tmp_path):
    settings = dataclasses.replace(base_settings(origin_endpoint), cache=disk_only(tmp_path))
    with RunningGateway(settings) as gateway:
        s3 = client(gateway.endpoint)
        s3.create_bucket(Bucket="bkt")
        s3.put_object(Bucket="bkt", Key="k", Body=DATA)
        first = s3.get_object(Bucket="bkt", Key="k")
        assert x_cache(first) == "miss" and first["Body"].read() == DATA
        second = s3.get_object(Bucket="bkt", Key="k")
        assert x_cache(second) == "hit-disk" and second["Body"].read() == DATA
    with RunningGateway(settings) as restarted:
        got = client(restarted.endpoint).get_object(Bucket="bkt", Key="k")
        assert x_cache(got) == "hit-disk" and got["Body"].read() == DATA
        assert engine(restarted).stats.get("origin_block_fetch", 0) == 0


def test_a_corrupted_block_file_is_dropped_and_fetched_again(start_gateway, clean_origin, tmp_path):
    gateway = start_gateway(cache=disk_only(tmp_path))
    s3 = client(gateway.endpoint)
    s3.create_bucket(Bucket="bkt")
    s3.put_object(Bucket="bkt", Key="k", Body=DATA)
    s3.get_object(Bucket="bkt", Key="k")["Body"].read()
    files = sorted(p for p in (tmp_path / "cache").rglob("*") if p.is_file())
    assert len(files) == 6
    victim = files[0]
    raw = bytearray(victim.read_bytes())
    raw[-1] ^= 0xFF
    victim.write_bytes(bytes(raw))
    got = s3.get_object(Bucket="bkt", Key="k")["Body"].read()
    assert hashlib.sha256(got).digest() == hashlib.sha256(DATA).digest()
    assert engine(gateway).store.stats()["tiers"]["disk0"]["bad_blocks"] == 1


def test_cached_objects_survive_an_origin_outage(start_gateway):
    with moto_server() as endpoint:
        settings = base_settings(endpoint)
        gateway = start_gateway(
            origin=dataclasses.replace(settings.origin, endpoint=endpoint, retries=0, connect_timeout=1, read_timeout=2),
            cache=CacheSettings(block_size=BLOCK, memory_quota=1024 * KiB),
        )
        s3 = client(gateway.endpoint)
        s3.create_bucket(Bucket="bkt")
        s3.put_object(Bucket="bkt", Key="cached", Body=DATA)
        s3.put_object(Bucket="bkt", Key="never-read", Body=b"x")
        assert s3.get_object(Bucket="bkt", Key="cached")["Body"].read() == DATA
    got = s3.get_object(Bucket="bkt", Key="cached")  # origin gone: metadata stale-if-error, blocks cached
    assert got["Body"].read() == DATA and x_cache(got) == "hit-mem"
    with pytest.raises(ClientError) as exc:
        s3.get_object(Bucket="bkt", Key="never-read")
    assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    assert exc.value.response["Error"]["Code"] == "ServiceUnavailable"


def test_cache_through_makes_a_read_after_a_write_a_hit(start_gateway, clean_origin):
    gateway = start_gateway(cache=CacheSettings(block_size=BLOCK, memory_quota=1024 * KiB, cache_through=True))
    s3 = client(gateway.endpoint)
    s3.create_bucket(Bucket="bkt")
    s3.put_object(Bucket="bkt", Key="k", Body=DATA)
    got = s3.get_object(Bucket="bkt", Key="k")
    assert x_cache(got) == "hit-mem" and got["Body"].read() == DATA
    assert engine(gateway).stats.get("origin_block_fetch", 0) == 0


def test_without_cache_through_a_write_does_not_fill_the_cache(small_blocks):
    gateway, s3 = small_blocks
    s3.put_object(Bucket="bkt", Key="k", Body=DATA)
    assert x_cache(s3.get_object(Bucket="bkt", Key="k")) == "miss"


def wait_for_fetches(gateway: RunningGateway, count: int) -> None:
    """Wait (bounded) until the gateway made `count` block fetches from the origin in all."""
    wait_for(lambda: engine(gateway).stats.get("origin_block_fetch", 0) >= count, f"{count} block fetches")


def test_consecutive_ranges_are_read_ahead(small_blocks):
    gateway, s3 = small_blocks
    s3.put_object(Bucket="bkt", Key="seq", Body=DATA)
    assert s3.get_object(Bucket="bkt", Key="seq", Range=f"bytes=0-{BLOCK - 1}")["Body"].read() == DATA[:BLOCK]
    second = s3.get_object(Bucket="bkt", Key="seq", Range=f"bytes={BLOCK}-{2 * BLOCK - 1}")
    assert x_cache(second) == "miss" and second["Body"].read() == DATA[BLOCK:2 * BLOCK]
    # The second read continued the first: the next 2 blocks (the readahead) are fetched
    # for it without being asked for.
    wait_for_fetches(gateway, 4)
    third = s3.get_object(Bucket="bkt", Key="seq", Range=f"bytes={2 * BLOCK}-{4 * BLOCK - 1}")
    assert x_cache(third) == "hit-mem" and third["Body"].read() == DATA[2 * BLOCK:4 * BLOCK]


def test_a_jump_is_not_read_ahead(small_blocks):
    gateway, s3 = small_blocks
    s3.put_object(Bucket="bkt", Key="jump", Body=DATA)
    s3.get_object(Bucket="bkt", Key="jump", Range="bytes=0-9")["Body"].read()
    s3.get_object(Bucket="bkt", Key="jump", Range=f"bytes={3 * BLOCK}-{3 * BLOCK + 9}")["Body"].read()
    # A readahead starts with the read that asks for it: once nothing is fetched in the
    # background, one would have been fetched (and counted) by now.
    wait_for(lambda: not engine(gateway).fetch.background, "no fetch left in the background")
    assert engine(gateway).stats["origin_block_fetch"] == 2


def test_parquet_footer_block_is_fetched_with_the_first_read(small_blocks):
    gateway, s3 = small_blocks
    s3.put_object(Bucket="bkt", Key="t.parquet", Body=DATA)
    s3.get_object(Bucket="bkt", Key="t.parquet", Range="bytes=0-10")["Body"].read()
    wait_for_fetches(gateway, 2)  # the first block, and the last one unasked
    tail = s3.get_object(Bucket="bkt", Key="t.parquet", Range="bytes=-100")
    assert x_cache(tail) == "hit-mem" and tail["Body"].read() == DATA[-100:]
