"""CORS through the gateway: the origin bucket's rules, applied by the gateway to browser
preflights and to the answers of requests that name an Origin, cache hits included; a change
of the rules through any gateway seen at once by every gateway sharing its Redis."""

from __future__ import annotations

import dataclasses
import time
import xml.etree.ElementTree as ET

import httpx
import pytest

from gateway.config import AuthSettings, RedisSettings
from tests.support import READER, base_settings, client

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


def test_a_change_behind_the_gateway_is_not_seen_within_the_ttl(start_gateway, clean_origin):
    """(Seen past the TTL: tests/engine/test_bucketdocs.py, on an injected clock.)"""
    settings = base_settings(clean_origin)
    gw = start_gateway(metadata=dataclasses.replace(settings.metadata, ttl=600.0))
    admin, direct = client(gw.endpoint), client(clean_origin, ("origin-key", "origin-secret"))
    admin.create_bucket(Bucket="web")
    assert preflight(gw.endpoint, "/web/k").status_code == 403
    direct.put_bucket_cors(Bucket="web", CORSConfiguration=RULES)
    assert preflight(gw.endpoint, "/web/k").status_code == 403  # the absence is kept for the TTL


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


def origin_requests(gateway) -> int:  # type: ignore[no-untyped-def]
    return sum(gateway.server.config.app.s3.engine.origin.requests.values())


def test_preflights_for_made_up_buckets_cost_the_origin_a_bounded_number_of_requests(gateway, direct):
    """Anyone may send a preflight. Here an admin may reach every bucket, so a name no grant
    names is looked up only within a rate limit, and kept apart from the rules of buckets that
    exist; a bucket a grant names ("shared"), or one found to exist ("web"), keeps its answers,
    with no signed request through the gateway first."""
    for bucket in ("shared", "web"):
        direct.create_bucket(Bucket=bucket)
        direct.put_bucket_cors(Bucket=bucket, CORSConfiguration=RULES)
    documents = gateway.server.config.app.s3.engine.bucket_documents
    assert preflight(gateway.endpoint, "/web/k").status_code == 200  # found to exist: looked up freely later
    before, started = origin_requests(gateway), time.monotonic()
    answers: list[int] = []
    real: list[tuple[int, str | None]] = []
    asked = {"origin": APP, "access-control-request-method": "GET"}
    with httpx.Client(timeout=30) as http:
        for i in range(1000):
            answers.append(http.options(f"{gateway.endpoint}/made-up-{i:04d}/k", headers=asked).status_code)
            if i % 100 == 99:
                documents.forget("shared")  # as their TTL passing does: read again, in the middle of the flood
                documents.forget("web")
                for bucket in ("shared", "web"):
                    ok = http.options(f"{gateway.endpoint}/{bucket}/k", headers=asked)
                    real.append((ok.status_code, ok.headers.get("access-control-allow-origin")))
    elapsed = time.monotonic() - started
    sent = origin_requests(gateway) - before - 2 * 10  # the 20 reads of the real buckets' rules
    assert sent <= 20 + 2 * elapsed + 1, (sent, elapsed)  # lookup_burst, then lookups_per_second
    assert set(answers) <= {403, 503} and answers.count(503) >= 1000 - sent
    assert real == [(200, APP)] * 20
    kept, unknown, _ = documents.sizes()
    assert kept == 2 and unknown <= sent  # the made-up names are kept apart, and only those looked up


def test_without_an_admin_a_preflight_for_a_name_no_grant_names_never_asks_the_origin(start_gateway, clean_origin):
    users = tuple(u for u in base_settings(clean_origin).auth.users if not u.admin)
    gw = start_gateway(auth=AuthSettings(users=users, anonymous_read=("public",)))
    direct = client(clean_origin, ("origin-key", "origin-secret"))
    direct.create_bucket(Bucket="shared")
    direct.put_bucket_cors(Bucket="shared", CORSConfiguration=RULES)
    direct.create_bucket(Bucket="unnamed")
    direct.put_bucket_cors(Bucket="unnamed", CORSConfiguration=RULES)
    before = origin_requests(gw)
    with httpx.Client(timeout=30) as http:
        refused = [http.options(f"{gw.endpoint}/{bucket}/k", headers={"origin": APP, "access-control-request-method": "GET"})
                   for bucket in [f"made-up-{i}" for i in range(200)] + ["unnamed"]]
    assert origin_requests(gw) == before
    assert {(r.status_code, code(r)) for r in refused} == {(403, "AccessForbidden")}
    shared = preflight(gw.endpoint, "/shared/k")  # a grant names it: its rules, read for the preflight
    assert (shared.status_code, shared.headers["access-control-allow-origin"]) == (200, APP)
    assert origin_requests(gw) == before + 1


def test_a_signer_refused_on_made_up_buckets_makes_a_bounded_number_of_lookups(gateway, clean_origin):
    """A user's request on a bucket no grant of theirs names is refused; the rules its answer
    would carry are looked up only within the rate limit of names nobody vouches for."""
    reader = client(gateway.endpoint, READER)
    urls = [reader.generate_presigned_url("get_object", Params={"Bucket": f"made-up-{i:03d}", "Key": "k"})
            for i in range(80)]
    before, started = origin_requests(gateway), time.monotonic()
    with httpx.Client(timeout=30) as http:
        statuses = {http.get(url, headers={"origin": APP}).status_code for url in urls}
    elapsed = time.monotonic() - started
    assert statuses == {403}
    assert origin_requests(gateway) - before <= 20 + 2 * elapsed + 1
