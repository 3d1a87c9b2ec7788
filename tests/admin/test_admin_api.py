"""The admin API against running gateways: metrics, stats, readiness, runtime pins, the access log."""

from __future__ import annotations

import dataclasses
import logging
import time

import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.config import AdminSettings, CacheSettings, PrefixRule, RedisSettings
from tests.servers import moto_server
from tests.support import ADMIN, RunningGateway, base_settings, client
from tests.waiting import wait_for

TOKEN = "admin-token-for-tests"
ADMIN_ON = AdminSettings(token=TOKEN)


def admin(gateway: RunningGateway, method: str, route: str, token: str | None = TOKEN) -> httpx.Response:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return httpx.request(method, f"{gateway.endpoint}/_gateway{route}", headers=headers, timeout=10)


def samples(gateway: RunningGateway) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of /metrics as {(name, labels): value}."""
    response = admin(gateway, "GET", "/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return found[(name, frozenset(labels.items()))]


@pytest.fixture
def admin_gateway(start_gateway, clean_origin):  # type: ignore[no-untyped-def]
    gateway = start_gateway(admin=ADMIN_ON)
    client(gateway.endpoint).create_bucket(Bucket="bkt")
    return gateway


def test_metrics_count_requests_hits_bytes_and_tiers(admin_gateway):
    gateway = admin_gateway
    s3 = client(gateway.endpoint)
    s3.put_object(Bucket="bkt", Key="k", Body=b"x" * 1000)
    assert s3.get_object(Bucket="bkt", Key="k")["ResponseMetadata"]["HTTPHeaders"]["x-cache"] == "miss"
    assert s3.get_object(Bucket="bkt", Key="k")["ResponseMetadata"]["HTTPHeaders"]["x-cache"] == "hit-mem"
    s3.get_object(Bucket="bkt", Key="k", Range="bytes=0-99")
    with pytest.raises(s3.exceptions.NoSuchKey):
        s3.get_object(Bucket="bkt", Key="absent")
    assert admin(gateway, "GET", "/metrics", token=None).status_code == 401
    assert admin(gateway, "GET", "/metrics", token="wrong").status_code == 401

    found = samples(gateway)
    assert value(found, "gateway_requests_total", operation="GetObject", status="200") == 2
    assert value(found, "gateway_requests_total", operation="GetObject", status="206") == 1
    assert value(found, "gateway_requests_total", operation="GetObject", status="404") == 1
    assert value(found, "gateway_requests_total", operation="PutObject", status="200") == 1
    assert value(found, "gateway_request_duration_seconds_count", operation="GetObject") == 4
    assert value(found, "gateway_request_duration_seconds_bucket", operation="GetObject", le="+Inf") == 4
    assert value(found, "gateway_served_bytes_total", source="origin") == 1000
    assert value(found, "gateway_served_bytes_total", source="memory") == 1100
    assert value(found, "gateway_served_bytes_total", source="disk") == 0
    assert value(found, "gateway_hit_path_requests_total") == 2  # the memory hits, whole and ranged
    assert value(found, "gateway_served_bytes_total", source="peer") == 0
    assert value(found, "gateway_cache_hits_total", tier="memory") == 2
    assert value(found, "gateway_cache_misses_total") >= 1
    assert value(found, "gateway_cache_tier_used_bytes", tier="memory") == 1000
    assert value(found, "gateway_cache_tier_quota_bytes", tier="memory") == CacheSettings().memory_quota
    assert value(found, "gateway_cache_evictions_total", tier="memory") == 0
    assert value(found, "gateway_cache_bad_blocks_total", tier="memory") == 0
    assert value(found, "gateway_metadata_cache_entries") >= 1
    assert value(found, "gateway_singleflight_waits_total") == 0
    assert value(found, "gateway_engine_events_total", event="origin_block_fetch") == 1  # the one cold block
    assert value(found, "gateway_origin_errors_total") == 0
    assert value(found, "gateway_redis_errors_total") == 0
    assert value(found, "gateway_invalidation_confirmations_total", outcome="confirmed") == 0  # no Redis
    assert value(found, "gateway_replication_actions_total", action="replicate") == 0
    assert value(found, "gateway_fleet_members") == 1  # alone
    assert value(found, "gateway_origin_requests_total", method="GET") >= 1
    assert value(found, "gateway_origin_requests_total", method="PUT") == 2  # CreateBucket, PutObject


def test_each_gateway_has_its_own_metrics(admin_gateway, start_gateway):
    gateway = admin_gateway
    other = start_gateway(admin=ADMIN_ON)
    client(gateway.endpoint).list_objects_v2(Bucket="bkt")
    assert value(samples(gateway), "gateway_requests_total", operation="ListObjectsV2", status="200") == 1
    assert ("gateway_requests_total", frozenset({("operation", "ListObjectsV2"), ("status", "200")})) not in samples(other)


def test_metrics_count_the_invalidation_confirmations_of_writes(start_gateway, clean_origin, clean_redis):
    """Two nodes on one Redis: each write through A waits for both listeners to confirm."""
    redis = RedisSettings(url=clean_redis.url, socket_timeout=0.5)
    a, b = start_gateway(admin=ADMIN_ON, redis=redis), start_gateway(admin=ADMIN_ON, redis=redis)
    for gateway in (a, b):
        shared = gateway.server.config.app.s3.engine.shared
        wait_for(shared.invalidation.listening, "the node listens for invalidations", within=10)
    s3 = client(a.endpoint)
    s3.create_bucket(Bucket="bkt")
    for n in range(3):
        s3.put_object(Bucket="bkt", Key=f"k{n}", Body=b"x")
    found = samples(a)
    assert value(found, "gateway_invalidation_confirmations_total", outcome="confirmed") >= 3
    assert value(found, "gateway_invalidation_confirmations_total", outcome="unsent") == 0
    assert value(samples(b), "gateway_invalidation_confirmations_total", outcome="confirmed") == 0


def test_stats_document(admin_gateway):
    gateway = admin_gateway
    s3 = client(gateway.endpoint)
    for key, reads in (("hot", 3), ("warm", 1)):
        s3.put_object(Bucket="bkt", Key=key, Body=b"y" * 10)
        for _ in range(reads):
            s3.get_object(Bucket="bkt", Key=key)["Body"].read()
    assert admin(gateway, "GET", "/stats", token=None).status_code == 401
    stats = admin(gateway, "GET", "/stats").json()
    assert set(stats) == {"node", "uptime_seconds", "requests", "hits", "misses", "hit_ratio", "served_bytes",
                          "tiers", "hot_objects", "members", "pinned", "shadow", "replication"}
    assert stats["replication"] is None  # no fleet
    assert stats["node"].endswith(f":{gateway.settings.server.port}") and stats["members"] == [stats["node"]]
    assert isinstance(stats["uptime_seconds"], float) and stats["uptime_seconds"] > 0
    assert stats["requests"] == 7  # CreateBucket, 2 PUTs, 4 GETs
    assert stats["hits"] == 2 and stats["misses"] == 2 and stats["hit_ratio"] == 0.5
    assert stats["served_bytes"] == {"memory": 20, "disk": 0, "origin": 20, "peer": 0}
    assert stats["tiers"] == [{"name": "memory", "medium": "memory", "used_bytes": 20,
                               "quota_bytes": CacheSettings().memory_quota, "blocks": 2, "notes_dropped": 0}]
    assert stats["hot_objects"] == [{"bucket": "bkt", "key": "hot", "hits": 3}, {"bucket": "bkt", "key": "warm", "hits": 1}]
    assert stats["pinned"] == []
    # The online estimate (cache.shadow_rate): the same GETs, replayed into 1x, 2x and 4x models.
    shadow = stats["shadow"]
    assert shadow["gets"] == 4 and shadow["live_hit_ratio"] == 0.5 and set(shadow["shadows"]) == {"1x", "2x", "4x"}
    metrics = admin(gateway, "GET", "/metrics").text
    assert 'gateway_shadow_hit_ratio{store="2x"}' in metrics


def test_pins_at_runtime_beside_the_configured_ones(start_gateway, clean_origin):
    cache = dataclasses.replace(CacheSettings(), pinned=(PrefixRule("bkt", "conf/"),))
    gateway = start_gateway(admin=ADMIN_ON, cache=cache)
    store = gateway.server.config.app.s3.engine.store
    assert admin(gateway, "POST", "/pin?bucket=bkt&prefix=hot/", token=None).status_code == 401
    answer = admin(gateway, "POST", "/pin?bucket=bkt&prefix=hot/")
    assert answer.status_code == 200 and answer.json() == {"bucket": "bkt", "prefix": "hot/", "pinned": True, "shared": True}
    assert store.pinned == [("bkt", "conf/"), ("bkt", "hot/")]
    assert admin(gateway, "GET", "/stats").json()["pinned"] == [{"bucket": "bkt", "prefix": "conf/"},
                                                               {"bucket": "bkt", "prefix": "hot/"}]
    assert admin(gateway, "DELETE", "/pin?bucket=bkt&prefix=hot/").status_code == 200
    assert store.pinned == [("bkt", "conf/")]
    assert admin(gateway, "DELETE", "/pin?bucket=bkt&prefix=hot/").status_code == 404
    refused = admin(gateway, "DELETE", "/pin?bucket=bkt&prefix=conf/")
    assert refused.status_code == 409 and "cache.pinned" in refused.json()["error"]
    assert admin(gateway, "POST", "/pin?prefix=x/").status_code == 400


def test_runtime_pins_live_in_redis_for_other_and_restarted_nodes(start_gateway, clean_origin, clean_redis):
    redis = RedisSettings(url=clean_redis.url, socket_timeout=0.3, retry_interval=0.2)
    first = start_gateway(admin=ADMIN_ON, redis=redis)
    assert admin(first, "POST", "/pin?bucket=bkt&prefix=hot/").json()["shared"] is True
    first.__exit__()
    second = start_gateway(admin=ADMIN_ON, redis=redis)  # a new node, or the first one restarted
    assert admin(second, "GET", "/stats").json()["pinned"] == [{"bucket": "bkt", "prefix": "hot/"}]
    assert second.server.config.app.s3.engine.store.pinned == [("bkt", "hot/")]


def test_readyz_names_what_is_down(start_gateway, clean_redis):
    with moto_server() as origin:
        settings = base_settings(origin)
        redis = RedisSettings(url=clean_redis.url, socket_timeout=0.3, retry_interval=0.2)
        gateway = start_gateway(origin=settings.origin, admin=ADMIN_ON, redis=redis)
        ready = admin(gateway, "GET", "/readyz", token=None)
        assert ready.status_code == 200 and ready.json() == {"status": "ok", "checks": {"origin": "ok", "redis": "ok"}}
        clean_redis.stop()
        try:
            down = admin(gateway, "GET", "/readyz", token=None)
            assert down.status_code == 503 and set(down.json()["failed"]) == {"redis"}
        finally:
            clean_redis.start()
        assert admin(gateway, "GET", "/readyz", token=None).status_code == 200
    started = time.monotonic()
    down = admin(gateway, "GET", "/readyz", token=None)  # moto stopped
    assert down.status_code == 503 and set(down.json()["failed"]) == {"origin"}
    assert "unreachable" in down.json()["failed"]["origin"] and time.monotonic() - started < 5
    assert value(samples(gateway), "gateway_origin_errors_total") >= 1
    assert admin(gateway, "GET", "/healthz", token=None).status_code == 200  # alive, just not ready


def test_access_log_line_has_the_request_and_no_secrets(admin_gateway, caplog):
    gateway = admin_gateway
    s3 = client(gateway.endpoint)
    s3.put_object(Bucket="bkt", Key="dir/k", Body=b"z" * 300)
    caplog.set_level(logging.INFO, logger="gateway.access")
    answer = s3.get_object(Bucket="bkt", Key="dir/k", Range="bytes=10-19")
    answer["Body"].read()
    presigned = s3.generate_presigned_url("get_object", Params={"Bucket": "bkt", "Key": "dir/k"})
    assert httpx.get(presigned, timeout=10).status_code == 200

    def get_lines() -> list[dict]:  # type: ignore[type-arg]
        return [line for line in (orjson.loads(r.getMessage()) for r in caplog.records if r.name == "gateway.access")
                if line["operation"] == "GetObject"]

    # A request's line is written as its last bytes go to the server, which the client may not have
    # read yet: wait for the second one.
    lines = wait_for(lambda: len(get_lines()) >= 2 and get_lines(), "both GETs logged")
    request_id = answer["ResponseMetadata"]["HTTPHeaders"]["x-amz-request-id"]
    entry = next(line for line in lines if line["request_id"] == request_id)
    assert entry["user"] == ADMIN[0] and entry["operation"] == "GetObject"
    assert (entry["bucket"], entry["key"], entry["range"]) == ("bkt", "dir/k", "bytes=10-19")
    assert (entry["status"], entry["bytes"], entry["cache"]) == (206, 10, "miss")
    assert isinstance(entry["latency_ms"], float) and entry["latency_ms"] >= 0
    assert len(lines) == 2 and lines[1]["user"] == ADMIN[0] and lines[1]["cache"] == "hit-mem"
    logged = " ".join(r.getMessage() for r in caplog.records)
    for secret in (ADMIN[1], "Signature", "X-Amz-Credential", "Authorization", "authorization"):
        assert secret not in logged
