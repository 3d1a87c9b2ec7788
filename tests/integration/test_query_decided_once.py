"""One parsed query: what is authorized is what keys every cache and what the origin receives.

A request may name a parameter twice (`?prefix=pub%2F&prefix=`). S3 takes the first value;
so does the gateway, in one place (gateway.s3api.request.parse_request), and nothing after it
sees the other values. These tests send such requests from a user allowed only `shared/pub/`
after another user warmed the listing caches of two gateways sharing one Redis, and check that
no key outside the grant is ever returned and that no cached page differs from the origin's
answer to the canonical query.
"""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.config import AuthSettings, Grant, RedisSettings, User
from tests.integration.test_wire import request
from tests.support import ADMIN, base_settings, client

NARROW = ("AKIANARROW000000001", "narrow-secret-00000000000000000000000001")
KEYS = ["pub/a", "pub/b/c", "pub/d", "priv/x", "priv/y/z", "top"]
ORIGIN_KEY = ("origin-key", "origin-secret")
NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


def _names(body: bytes) -> tuple[list[str], list[str]]:
    root = ET.fromstring(body)
    keys = [e.text or "" for e in root.iter(NS + "Key")]
    prefixes = [e.text or "" for p in root.iter(NS + "CommonPrefixes") for e in p.iter(NS + "Prefix")]
    return keys, prefixes


@pytest.fixture
def fleet(start_gateway, clean_origin, clean_redis):  # type: ignore[no-untyped-def]
    settings = base_settings(clean_origin)
    sections = {
        "auth": AuthSettings(users=(User(*ADMIN, grants=(), admin=True),
                                    User(*NARROW, grants=(Grant("shared", "pub/", "read"),)))),
        "redis": RedisSettings(url=clean_redis.url, socket_timeout=0.5, retry_interval=0.2),
        "listing": dataclasses.replace(settings.listing, ttl=300.0),
        "metadata": dataclasses.replace(settings.metadata, ttl=300.0),
    }
    a, b = start_gateway(**sections), start_gateway(**sections)
    admin = client(a.endpoint)
    admin.create_bucket(Bucket="shared")
    for key in KEYS:
        admin.put_object(Bucket="shared", Key=key, Body=key.encode())
    return a, b, client(clean_origin, ORIGIN_KEY)


def _warm(gateways, queries) -> None:  # type: ignore[no-untyped-def]
    """The admin lists the bucket's root (and pub/) every way, through both gateways."""
    for gw in gateways:
        for query in queries:
            assert request(gw, "GET", "/shared", query=query).status == 200


WARM = [
    [("list-type", "2")],
    [("list-type", "2"), ("delimiter", "/")],
    [("list-type", "2"), ("prefix", "pub/")],
    [],
    [("delimiter", "/")],
    [("prefix", "pub/"), ("delimiter", "/")],
]
PARAMS = {
    "prefix": ["", "pub/", "priv/", "p", "pub/b/"],
    "delimiter": ["", "/"],
    "list-type": ["2"],
    "max-keys": ["1000", "2"],
    "start-after": ["", "pub/a"],
    "marker": ["", "priv/"],
    "encoding-type": ["url"],
}
# Weighted towards the parameters that choose what is listed, so that short queries repeat them.
NAMES = ["prefix"] * 4 + ["list-type"] * 2 + ["delimiter"] * 2 + ["max-keys", "start-after", "marker", "encoding-type"]
pair = st.sampled_from(NAMES).flatmap(lambda name: st.tuples(st.just(name), st.sampled_from(PARAMS[name])))


def _first_values(query: list[tuple[str, str]]) -> list[tuple[str, str]]:
    canonical: dict[str, str] = {}
    for name, value in query:
        canonical.setdefault(name, value)
    return list(canonical.items())


def _origin_listing(direct, query: list[tuple[str, str]]) -> tuple[list[str], list[str]]:  # type: ignore[no-untyped-def]
    """The origin's own answer to the canonical (first-value) query, read with boto3."""
    params = dict(query)
    kwargs = {"Bucket": "shared", "Prefix": params.get("prefix", ""), "MaxKeys": int(params.get("max-keys", "1000"))}
    if params.get("delimiter"):
        kwargs["Delimiter"] = params["delimiter"]
    if params.get("list-type") == "2":
        if params.get("start-after"):
            kwargs["StartAfter"] = params["start-after"]
        page = direct.list_objects_v2(**kwargs)
    else:
        if params.get("marker"):
            kwargs["Marker"] = params["marker"]
        page = direct.list_objects(**kwargs)
    return ([o["Key"] for o in page.get("Contents", [])], [p["Prefix"] for p in page.get("CommonPrefixes", [])])


def test_repeated_prefix_cannot_read_the_cached_root_listing(fleet):
    """The reported case: the first value (pub/) is authorized, listed and cached; never the root."""
    a, b, direct = fleet
    _warm((a, b), WARM)
    for gw in (a, b):
        for query in ([("list-type", "2"), ("prefix", "pub/"), ("prefix", "")], [("prefix", "pub/"), ("prefix", "")]):
            resp = request(gw, "GET", "/shared", query=query, key=NARROW)
            assert resp.status == 200, resp
            keys, _ = _names(resp.body)
            assert keys == ["pub/a", "pub/b/c", "pub/d"]
        # The other order asks for the root first: the part of it inside the grant, whatever follows.
        resp = request(gw, "GET", "/shared", query=[("list-type", "2"), ("prefix", ""), ("prefix", "pub/")], key=NARROW)
        assert resp.status == 200, resp
        assert _names(resp.body)[0] == ["pub/a", "pub/b/c", "pub/d"]
    # Nobody's root listing lost keys to a pub/-only page stored under its cache key.
    for gw in (a, b):
        for query in WARM:
            keys, prefixes = _names(request(gw, "GET", "/shared", query=query).body)
            assert (keys, prefixes) == _origin_listing(direct, query), query


@settings(max_examples=100, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=st.lists(pair, min_size=1, max_size=4), via_b=st.booleans(), data=st.data())
def test_no_key_outside_the_grant_and_no_poisoned_page(fleet, query, via_b, data):
    a, b, direct = fleet
    _warm((a,), WARM)
    gw = b if via_b else a
    query = data.draw(st.permutations(query))
    resp = request(gw, "GET", "/shared", query=query, key=NARROW)
    assert resp.status in (200, 400, 403), resp
    if resp.status == 200:
        keys, prefixes = _names(resp.body)
        assert all(k.startswith("pub/") for k in keys + prefixes), (query, keys, prefixes)
    # The admin's answer to the canonical query, through both gateways (their caches now hold
    # whatever the narrow request stored), is the origin's.
    canonical = _first_values(query)
    if dict(canonical).get("encoding-type") is None and dict(canonical).get("max-keys", "1000") == "1000":
        for other in (a, b):
            resp = request(other, "GET", "/shared", query=canonical)
            assert resp.status == 200, resp
            assert _names(resp.body) == _origin_listing(direct, canonical), canonical


def test_repeated_parameters_reach_the_origin_once(fleet):
    """A pass-through sub-resource and a listing: only the first value is sent on.

    The gateway's answer to `?tagging=A&tagging=B` is the origin's own answer to `?tagging=A`,
    in both orders (moto 5.2.6 answers `?tagging=x` with an empty body, `?tagging=` with the tags).
    """
    a, _, direct = fleet
    direct.put_object_tagging(Bucket="shared", Key="pub/a", Tagging={"TagSet": [{"Key": "k", "Value": "v"}]})
    origin = SimpleNamespace(endpoint=direct.meta.endpoint_url)
    for first, second in (("", "x"), ("x", "")):
        resp = request(a, "GET", "/shared/pub/a", query=[("tagging", first), ("tagging", second)])
        assert resp.status == 200, resp
        own = request(origin, "GET", "/shared/pub/a", query=[("tagging", first)], key=ORIGIN_KEY)
        assert (resp.status, resp.body) == (own.status, own.body), (first, second)
        if first == "":
            assert b"<Key>k</Key>" in resp.body
    # ListObjectVersions and ListMultipartUploads are authorized by the prefix they send on.
    for sub in ("versions", "uploads"):
        resp = request(a, "GET", "/shared", query=[(sub, ""), ("prefix", "pub/"), ("prefix", "")], key=NARROW)
        assert resp.status == 200, resp
        assert b"priv/" not in resp.body and b"<Key>top</Key>" not in resp.body
        resp = request(a, "GET", "/shared", query=[(sub, ""), ("prefix", "priv/"), ("prefix", "pub/")], key=NARROW)
        assert resp.status == 403
