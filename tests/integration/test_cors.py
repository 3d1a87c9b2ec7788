"""CORS through the gateway: the origin bucket's rules, applied by the gateway to browser
preflights and to the answers of requests that name an Origin, cache hits included; a change
of the rules through any gateway seen at once by every gateway sharing its Redis."""

from __future__ import annotations

import dataclasses
import time
import xml.etree.ElementTree as ET

import httpx
import pytest

from gateway.config import RedisSettings
from tests.support import base_settings, client

pytestmark = pytest.mark.usefixtures("clean_origin")
APP = "https://app.example.com"
RULES = {"CORSRules": [
    {"AllowedOrigins": ["https://*.example.com"], "AllowedMethods": ["GET", "HEAD"],
     "AllowedHeaders": ["range", "x-amz-*"], "ExposeHeaders": ["ETag"], "MaxAgeSeconds": 600},
    {"AllowedOrigins": ["*"], "AllowedMethods": ["GET"]},
]}


def preflight(endpoint: str, path: str, *, origin: str | None = APP, method: str | None = "GET",
              headers: str | None = None) -> httpx.Response:
    asked = {"origin": origin, "access-control-request-method": method, "access-control-request-headers": headers}
    return httpx.options(endpoint + path, headers={k: v for k, v in asked.items() if v is not None}, timeout=30)


def cors_headers(response: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in response.headers.items() if k.startswith("access-control-") or k == "vary"}


def code(response: httpx.Response) -> str:
    return ET.fromstring(response.content).findtext("Code") or ""


def test_preflights_follow_the_buckets_rules(gateway, s3):
    s3.create_bucket(Bucket="web")
    refused = preflight(gateway.endpoint, "/web/a.parquet")
    assert (refused.status_code, code(refused)) == (403, "AccessForbidden")  # no CORS configuration yet
    s3.put_bucket_cors(Bucket="web", CORSConfiguration=RULES)
    ok = preflight(gateway.endpoint, "/web/a.parquet", headers="Range, X-Amz-Date")
    assert ok.status_code == 200
    assert cors_headers(ok) == {
        "access-control-allow-origin": APP, "access-control-allow-methods": "GET, HEAD",
        "access-control-allow-credentials": "true", "access-control-allow-headers": "range, x-amz-date",
        "access-control-expose-headers": "ETag", "access-control-max-age": "600",
        "vary": "Origin, Access-Control-Request-Headers, Access-Control-Request-Method"}
    # A preflight of a presigned URL carries its query, signature and all: a preflight is never
    # authenticated (the browser sends it for the method and headers, not with them).
    signed = preflight(gateway.endpoint, "/web/a.parquet?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=00"
                                         "&X-Amz-Credential=AKIAX%2F20260101%2Fus-east-1%2Fs3%2Faws4_request")
    assert (signed.status_code, signed.headers["access-control-allow-origin"]) == (200, APP)
    anyone = preflight(gateway.endpoint, "/web", origin="http://elsewhere.org")
    assert (anyone.status_code, anyone.headers["access-control-allow-origin"]) == (200, "*")
    for response, status, error in (
        (preflight(gateway.endpoint, "/web/a", headers="authorization"), 403, "AccessForbidden"),
        (preflight(gateway.endpoint, "/web/a", method="PUT"), 403, "AccessForbidden"),
        (preflight(gateway.endpoint, "/web/a", origin=None), 400, "BadRequest"),
        (preflight(gateway.endpoint, "/web/a", method=None), 400, "BadRequest"),
        (preflight(gateway.endpoint, "/web/a", method="PATCH"), 400, "BadRequest"),
    ):
        assert (response.status_code, code(response)) == (status, error)
        assert "access-control-allow-origin" not in response.headers


def test_answers_carry_the_rule_of_their_origin_hits_too(gateway, s3):
    s3.create_bucket(Bucket="web")
    s3.put_object(Bucket="web", Key="data.csv", Body=b"a,b\n")
    s3.put_bucket_cors(Bucket="web", CORSConfiguration=RULES)
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "web", "Key": "data.csv"})
    seen = []
    for origin in (APP, APP, "http://elsewhere.org", None, None):
        answer = httpx.get(url, headers={"origin": origin} if origin else {}, timeout=30)
        assert (answer.status_code, answer.content) == (200, b"a,b\n")
        seen.append((answer.headers["x-cache"], answer.headers.get("access-control-allow-origin"),
                     answer.headers.get("access-control-expose-headers")))
    assert seen == [("miss", APP, "ETag"), ("hit-mem", APP, "ETag"), ("hit-mem", "*", None),
                    ("hit-mem", None, None), ("hit-mem", None, None)]
    # An error answer too: the browser may show the page why.
    missing = httpx.get(s3.generate_presigned_url("get_object", Params={"Bucket": "web", "Key": "nope"}),
                        headers={"origin": APP}, timeout=30)
    assert (missing.status_code, missing.headers.get("access-control-allow-origin")) == (404, APP)
    # An Origin no rule allows gets no Access-Control-Allow-Origin, so the browser hides the answer.
    head = httpx.head(s3.generate_presigned_url("head_object", Params={"Bucket": "web", "Key": "data.csv"}),
                      headers={"origin": "http://elsewhere.org"}, timeout=30)
    assert head.status_code == 200 and "access-control-allow-origin" not in head.headers
    assert head.headers["vary"].startswith("Origin")


def test_unsigned_requests_never_make_the_gateway_read_rules(gateway, s3, direct):
    """A refused request with an Origin gets the rule's headers only from rules already in memory
    (so the page sees the 403 of an expired URL), and never makes the gateway ask the origin."""
    s3.create_bucket(Bucket="web")
    direct.put_bucket_cors(Bucket="web", CORSConfiguration=RULES)
    stranger = httpx.get(gateway.endpoint + "/web/k", headers={"origin": APP}, timeout=30)
    assert (stranger.status_code, code(stranger)) == (403, "AccessDenied")
    assert not cors_headers(stranger)  # the rules were not in memory, and were not read for it
    assert preflight(gateway.endpoint, "/web/k").status_code == 200  # a preflight reads them
    again = httpx.get(gateway.endpoint + "/web/k", headers={"origin": APP}, timeout=30)
    assert (again.status_code, again.headers.get("access-control-allow-origin")) == (403, APP)


def test_a_bucket_without_rules_adds_nothing_even_if_the_origin_does(gateway, s3, direct):
    """moto answers a bucket with CORS rules with CORS headers of its own, even to the gateway's
    requests: none of them is kept with the object or passed on."""
    s3.create_bucket(Bucket="web")
    s3.put_object(Bucket="web", Key="k", Body=b"x")
    direct.put_bucket_cors(Bucket="web", CORSConfiguration=RULES)  # behind the gateway: seen within metadata.ttl
    for _ in range(2):
        answer = httpx.get(s3.generate_presigned_url("get_object", Params={"Bucket": "web", "Key": "k"}), timeout=30)
        assert not cors_headers(answer), answer.headers
    tags = httpx.get(s3.generate_presigned_url("get_object_tagging", Params={"Bucket": "web", "Key": "k"}), timeout=30)
    assert tags.status_code == 200 and not cors_headers(tags)


def test_a_change_behind_the_gateway_is_seen_within_the_ttl(start_gateway, clean_origin):
    settings = base_settings(clean_origin)
    gw = start_gateway(metadata=dataclasses.replace(settings.metadata, ttl=0.5))
    admin, direct = client(gw.endpoint), client(clean_origin, ("origin-key", "origin-secret"))
    admin.create_bucket(Bucket="web")
    assert preflight(gw.endpoint, "/web/k").status_code == 403
    direct.put_bucket_cors(Bucket="web", CORSConfiguration=RULES)
    assert preflight(gw.endpoint, "/web/k").status_code == 403  # the absence is kept ...
    time.sleep(0.6)
    assert preflight(gw.endpoint, "/web/k").status_code == 200  # ... for the TTL


def test_rules_changed_through_one_gateway_apply_at_once_on_another(start_gateway, clean_origin, clean_redis):
    settings = base_settings(clean_origin)
    shared = {"redis": RedisSettings(url=clean_redis.url, socket_timeout=0.5, retry_interval=0.2),
              "metadata": dataclasses.replace(settings.metadata, ttl=300.0)}
    a, b = start_gateway(**shared), start_gateway(**shared)
    admin_a = client(a.endpoint)
    admin_a.create_bucket(Bucket="web")
    admin_a.put_bucket_cors(Bucket="web", CORSConfiguration=RULES)
    assert preflight(b.endpoint, "/web/k").status_code == 200  # b keeps the rules now (TTL 300 s)
    admin_a.put_bucket_cors(Bucket="web", CORSConfiguration={"CORSRules": [
        {"AllowedOrigins": ["https://only.example.net"], "AllowedMethods": ["GET"]}]})
    assert preflight(b.endpoint, "/web/k").status_code == 403
    assert preflight(b.endpoint, "/web/k", origin="https://only.example.net").status_code == 200
    admin_a.delete_bucket_cors(Bucket="web")
    assert preflight(b.endpoint, "/web/k", origin="https://only.example.net").status_code == 403
