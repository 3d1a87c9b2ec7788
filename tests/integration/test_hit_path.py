"""The hit path below ASGI (gateway.s3api.hits) answers exactly as the ASGI path does.

Two gateways on one origin, alike but for server.hit_path, are warmed the same way (their
blocks in the memory tier; again, with only a disk tier, whose blocks the page cache holds); then
the same request (every way of signing it: SDK-signed anew, presigned each its own, skewed,
expired, tampered; anonymous, users without the grant, ranges,
conditionals, response overrides, HEAD, checksums) goes to both, three times (an SDK's signed
anew each time, and a ranged one sometimes with its own Range each time; the third time, a hit is
answered as kept: s3api.replays, by its bytes or, an SDK's, by its shape, for its own Range).
Status, headers (but Date and the request id) and
body must be byte for byte the same, and so must what each gateway counted and logged.
"""

from __future__ import annotations

import dataclasses
import re
import socket
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from botocore.auth import HmacV1Auth, HmacV1QueryAuth, S3SigV4Auth, S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.config import CacheSettings, DiskTierSettings, MetadataSettings
from gateway.errors import S3Error
from gateway.s3api.ranges import parse_range
from tests.s3api.test_auth_fastpath import _clock
from tests.support import ADMIN, READER, REGION, TEAM, RunningGateway, base_settings, client
from tests.waiting import wait_for

KiB = 1024
BLOCK = 64 * KiB
OBJECTS = {
    ("shared", "team/small.txt"): b"small object\n" * 7,
    ("shared", "team/block.bin"): bytes(range(256)) * (BLOCK // 256),
    ("shared", "team/big.bin"): bytes(range(251)) * (2 * BLOCK // 251 + 3),  # more than one block: ASGI
    ("shared", "other/small.txt"): b"not the team's\n",
    ("public", "small.txt"): b"anyone may read this\n",
}
TARGETS = [*OBJECTS, ("shared", "team/missing.txt"), ("nobucket", "k")]
USERS = {"admin": ADMIN, "reader": READER, "team": TEAM}
SIGNINGS = ("v4-header", "v4-sdk", "v4-skewed", "v4-query", "v4-query-expired", "v4-query-tampered", "v2-header",
            "v2-query", "v4-tampered")
# Besides Date and the request id: moto's own request id, which each gateway's metadata
# keeps from the answer it had (the two warmed with different origin requests).
_UNSTABLE = {"date", "x-amz-request-id", "x-amzn-requestid"}


@dataclasses.dataclass
class Pair:
    fast: RunningGateway
    asgi: RunningGateway
    etags: dict[tuple[str, str], str]
    logs: dict[str, list[dict[str, Any]]]
    hit: bytes  # the x-cache of a hit: hit-mem or hit-disk


@pytest.fixture(scope="module", params=["memory", "disk"])
def pair(origin_endpoint: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Pair]:
    httpx.post(origin_endpoint + "/moto-api/reset", timeout=10).raise_for_status()
    if request.param == "memory":
        cache = CacheSettings(block_size=BLOCK, memory_quota=4 * 1024 * KiB)
    else:
        folder = tmp_path_factory.mktemp("disk-tier")
        cache = CacheSettings(block_size=BLOCK, memory_quota=0,
                              disk=(DiskTierSettings(path=str(folder / "fast"), quota=4 * 1024 * KiB),))
    # No entry expires during the module, 404s included: an expiry between the request to one
    # gateway and the same request to the other made them answer and count it differently.
    base = dataclasses.replace(base_settings(origin_endpoint), cache=cache,
                               metadata=MetadataSettings(ttl=3600.0, negative_ttl=3600.0))
    direct = client(origin_endpoint, ("origin-key", "origin-secret"))
    etags = {}
    for bucket in ("shared", "public"):
        direct.create_bucket(Bucket=bucket)
    for (bucket, key), data in OBJECTS.items():
        etags[(bucket, key)] = direct.put_object(Bucket=bucket, Key=key, Body=data)["ETag"]
    fast_settings = base
    asgi_settings = dataclasses.replace(base, server=dataclasses.replace(base.server, hit_path=False))
    if request.param == "disk":  # each gateway its own folder
        asgi_settings = dataclasses.replace(asgi_settings, cache=dataclasses.replace(
            cache, disk=(DiskTierSettings(path=str(folder / "asgi"), quota=4 * 1024 * KiB),)))
    with RunningGateway(fast_settings) as fast, RunningGateway(asgi_settings) as asgi:
        logs: dict[str, list[dict[str, Any]]] = {"fast": [], "asgi": []}
        for name, gateway in (("fast", fast), ("asgi", asgi)):
            s3 = client(gateway.endpoint)
            gateway.server.config.app.s3.accounts.observers.append(logs[name].append)
            for bucket, key in OBJECTS:  # warm: metadata and every block in memory
                s3.get_object(Bucket=bucket, Key=key)["Body"].read()
            # The app logs a request as its answer's last bytes go out.
            wait_for(lambda: len(logs[name]) >= len(OBJECTS), f"the {name} gateway logs every warming read")
            logs[name].clear()
        assert fast.server.config.app.hits is not None and asgi.server.config.app.hits is None
        yield Pair(fast, asgi, etags, logs, b"hit-mem" if request.param == "memory" else b"hit-disk")


def _request(endpoint: str, method: str, bucket: str, key: str, query: list[tuple[str, str]],
             headers: dict[str, str], who: str | None, signing: str) -> httpx.Request:
    url = f"{endpoint}/{bucket}/{key}" + (f"?{urlencode(query)}" if query else "")
    if signing == "v4-sdk":  # as boto3 sends it: each request its own invocation id
        headers = {**headers, "amz-sdk-invocation-id": str(uuid.uuid4()), "amz-sdk-request": "attempt=1; max=3"}
    request = AWSRequest(method=method, url=url, headers=dict(headers))
    if who is not None:
        credentials = Credentials(*USERS[who])
        if signing in ("v4-header", "v4-sdk"):
            S3SigV4Auth(credentials, "s3", REGION).add_auth(request)
        elif signing == "v4-skewed":  # signed by a clock 20 minutes behind: RequestTimeTooSkewed
            with _clock(datetime.now(timezone.utc) - timedelta(minutes=20)):
                S3SigV4Auth(credentials, "s3", REGION).add_auth(request)
        elif signing.startswith("v4-query"):
            expired = signing == "v4-query-expired"  # signed 10 s ago, valid for 5
            with _clock(datetime.now(timezone.utc) - timedelta(seconds=10 if expired else 0)):
                S3SigV4QueryAuth(credentials, "s3", REGION, expires=5 if expired else 300).add_auth(request)
            if signing == "v4-query-tampered":
                request.url = request.url[:-1] + ("0" if request.url[-1] != "0" else "1")
        elif signing == "v2-header":
            HmacV1Auth(credentials).add_auth(request)
        elif signing == "v2-query":
            HmacV1QueryAuth(credentials, expires=300).add_auth(request)
        else:  # a SigV4 header signature with one character changed
            S3SigV4Auth(credentials, "s3", REGION).add_auth(request)
            auth = request.headers["Authorization"]
            request.headers.replace_header("Authorization", auth[:-1] + ("0" if auth[-1] != "0" else "1"))
    return httpx.Request(method, request.url, headers=list(request.headers.items()))


def _answer(http: httpx.Client, request: httpx.Request) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    response = http.send(request)
    headers = [(k.lower(), v) for k, v in response.headers.raw if k.lower().decode() not in _UNSTABLE]
    body = re.sub(rb"<RequestId>[0-9A-F]+</RequestId>", b"<RequestId/>", response.content)
    # Clock readings of a skewed or expired request's error: each gateway's own second, and each
    # request signed in its own (the two requests of a pair are made one after the other).
    body = re.sub(rb"<(ServerTime|RequestTime|Expires|X-Amz-Date)>[^<]*</", rb"<\1></", body)
    return response.status_code, headers, body


def _counted(gateway: RunningGateway) -> tuple[Counter[Any], Counter[Any], Counter[str]]:
    """What each gateway counted (the hit path's own counter aside: it is what differs)."""
    app = gateway.server.config.app
    return app.s3.accounts.stats.requests, app.s3.accounts.stats.served, app.s3.engine.stats


def _logged(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in entry.items() if k not in ("time", "request_id", "latency_ms")} for entry in entries]


DATES = ["Mon, 01 Jan 2001 00:00:00 GMT", "Fri, 01 Jan 2100 00:00:00 GMT", "not a date"]
some_range = st.one_of(
    st.tuples(st.integers(0, 3 * BLOCK), st.integers(0, 3 * BLOCK)).map(lambda ab: f"bytes={min(ab)}-{max(ab)}"),
    st.integers(0, 3 * BLOCK).map(lambda n: f"bytes=-{n}"),
    st.integers(0, 3 * BLOCK).map(lambda n: f"bytes={n}-"),
    st.sampled_from(["bytes=0-1,3-4", "bytes=x-y", "items=0-1", "bytes=5-2"]),
)
ranges = st.one_of(st.none(), some_range)
# The Ranges of an SDK's later reads of the same object (an engine's row groups and column chunks):
# kept by its shape, each answered for its own Range.
later_ranges = st.one_of(
    some_range,
    st.tuples(st.integers(0, 20), st.integers(0, 60)).map(lambda ab: f"bytes={ab[0]}-{ab[0] + ab[1]}"),
    st.integers(1, 120).map(lambda n: f"bytes=-{n}"),
    st.integers(0, 20).map(lambda n: f"bytes={n}-"),
)
overrides = st.dictionaries(
    st.sampled_from(["response-content-type", "response-cache-control", "response-content-disposition",
                     "response-expires", "response-content-language", "response-content-encoding"]),
    st.sampled_from(["text/plain", "no-cache", 'attachment; filename="r\u00e9sum\u00e9.pdf"', "a\u0100b", "x\ny"]),
    max_size=2,
)


@st.composite
def requests(draw: st.DrawFn, etags: dict[tuple[str, str], str]) -> dict[str, Any]:
    bucket, key = draw(st.sampled_from(TARGETS))
    etag = etags.get((bucket, key), '"0"')
    headers: dict[str, str] = {}
    byte_range = draw(ranges)
    if byte_range is not None:
        headers["range"] = byte_range
    for name, values in (("if-match", [etag, '"other"', "*"]), ("if-none-match", [etag, '"other"', "*"]),
                         ("if-modified-since", DATES), ("if-unmodified-since", DATES),
                         ("if-range", [etag, '"other"', *DATES])):
        if draw(st.integers(0, 5)) == 0:
            headers[name] = draw(st.sampled_from(values))
    if draw(st.booleans()):
        headers["x-amz-checksum-mode"] = "ENABLED"
    query = list(draw(overrides).items())
    if draw(st.integers(0, 6)) == 0:
        query.append(("versionId", draw(st.sampled_from(["null", "v1"]))))
    spec = {"method": draw(st.sampled_from(["GET", "GET", "HEAD"])), "bucket": bucket, "key": key,
            "query": query, "headers": headers, "who": draw(st.sampled_from([*USERS, None])),
            "signing": draw(st.sampled_from(SIGNINGS))}
    if spec["signing"] == "v4-sdk" and byte_range is not None and draw(st.integers(0, 3)) > 0:
        headers["range"] = draw(later_ranges)  # (of the same kind as the later ones)
        spec["later_ranges"] = [draw(later_ranges), draw(later_ranges)]
    return spec


def test_a_plain_hit_is_answered_below_asgi_and_alike(pair: Pair) -> None:
    stats = pair.fast.server.config.app.s3.accounts.stats
    with httpx.Client() as http:
        for method, who, signing, headers in [("GET", "team", "v4-header", {}), ("HEAD", "reader", "v2-query", {}),
                                              ("GET", "admin", "v4-query", {"range": "bytes=3-40"})]:
            before = stats.below_asgi
            answers = [_answer(http, _request(g.endpoint, method, "shared", "team/small.txt", [], headers, who, signing))
                       for g in (pair.fast, pair.asgi)]
            assert stats.below_asgi == before + 1, (method, who, signing)
            assert answers[0] == answers[1]
            _settled(pair)
            assert _counted(pair.fast) == _counted(pair.asgi)
            assert _logged(pair.logs["fast"]) == _logged(pair.logs["asgi"])
            hit = pair.hit if method == "GET" else b"hit-mem"  # a HEAD's metadata came from memory
            assert answers[0][0] in (200, 206) and (b"x-cache", hit) in answers[0][1]


def test_an_sdks_request_signed_anew_is_answered_by_its_shape_and_alike(pair: Pair) -> None:
    replays = pair.fast.server.config.app.hits.replays
    with httpx.Client() as http:
        for method, who, headers, later in [("GET", "team", {}, None), ("GET", "admin", {"range": "bytes=3-40"}, None),
                                            ("GET", "team", {"range": "bytes=3-40"}, ["bytes=-5", "bytes=50-"]),
                                            ("HEAD", "reader", {"range": "bytes=0-0"}, ["bytes=1-1", "bytes=-2"]),
                                            ("HEAD", "reader", {}, None)]:
            spec = {"method": method, "bucket": "shared", "key": "team/small.txt", "query": [], "headers": headers,
                    "who": who, "signing": "v4-sdk", **({"later_ranges": later} if later else {})}
            before = replays.by_shape
            fast = [_answer(http, to_fast) for to_fast in _three(pair.fast.endpoint, spec)]
            assert replays.by_shape == before + 1, spec  # the third, kept at the second's arrival
            assert fast == [_answer(http, to_asgi) for to_asgi in _three(pair.asgi.endpoint, spec)]
            _settled(pair)
            assert _counted(pair.fast) == _counted(pair.asgi)
            assert _logged(pair.logs["fast"]) == _logged(pair.logs["asgi"])


@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_an_sdks_reads_each_with_its_own_range_are_answered_by_their_shape_and_alike(pair: Pair, method: str) -> None:
    """An engine's reads of a warm file, each its own Range: answered by the kept shape when the
    Range is a 206 within one block, else the whole way; alike either way."""
    replays = pair.fast.server.config.app.hits.replays
    key = "team/big.bin"
    size = len(OBJECTS[("shared", key)])
    spec = {"method": method, "bucket": "shared", "key": key, "query": [], "who": "admin", "signing": "v4-sdk"}
    values = ["bytes=100-199", "bytes=-10", f"bytes={BLOCK}-", f"bytes={2 * BLOCK}-", f"bytes={BLOCK - 5}-{BLOCK + 5}",
              f"bytes={size}-", "bytes=-0", "bytes=0-1,3-4", "bytes=x-y", "bytes=5-2", f"bytes=-{size}", "bytes=0-0",
              f"bytes={BLOCK - 1}-{BLOCK - 1}"]
    shaped = 0
    with httpx.Client() as http:
        for value in ["bytes=0-9", "bytes=10-19", *values]:  # the first two keep the shape
            headers = {"range": value, "x-test-run": pair.hit.decode()}
            before = replays.by_shape
            fast = _answer(http, _request(pair.fast.endpoint, **spec, headers=headers))
            asgi = _answer(http, _request(pair.asgi.endpoint, **spec, headers=headers))
            assert fast == asgi, value
            if value in values:  # (a HEAD reads no block: any 206)
                by_shape = fast[0] == 206 and (method == "HEAD" or _in_one_block(value, size))
                assert replays.by_shape == before + by_shape, (value, fast[0])
                shaped += by_shape
            _settled(pair)
            assert _counted(pair.fast) == _counted(pair.asgi)
            assert _logged(pair.logs["fast"]) == _logged(pair.logs["asgi"])
    assert shaped >= 5


def _in_one_block(value: str, size: int) -> bool:
    """Whether a Range is answered 206 with bytes that one block holds (what a kept shape answers)."""
    try:
        byte_range = parse_range(value, size)
    except S3Error:
        return False
    return byte_range is not None and byte_range.start // BLOCK == byte_range.end // BLOCK


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_both_paths_answer_every_read_alike(pair: Pair, data: st.DataObject) -> None:
    spec = data.draw(requests(pair.etags))
    with httpx.Client() as http:
        # Each request sent three times, byte for byte (an SDK's signed anew each time): a hit the
        # hit path answered is kept from its second arrival (an SDK's by its shape) and answered
        # the third time as kept (s3api.replays), which must still be the ASGI path's answer.
        fast = [_answer(http, to_fast) for to_fast in _three(pair.fast.endpoint, spec)]
        asgi = [_answer(http, to_asgi) for to_asgi in _three(pair.asgi.endpoint, spec)]
    assert fast == asgi
    _settled(pair)
    assert _counted(pair.fast) == _counted(pair.asgi)
    assert _logged(pair.logs["fast"]) == _logged(pair.logs["asgi"])


def _three(endpoint: str, spec: dict[str, Any]) -> list[httpx.Request]:
    """A request three times: the same bytes, or an SDK's signed anew each time (with `later_ranges`,
    the second and third each with its own Range)."""
    spec = dict(spec)
    later = spec.pop("later_ranges", None)
    if later is not None:
        first = spec["headers"]["range"]
        return [_request(endpoint, **{**spec, "headers": {**spec["headers"], "range": value}})
                for value in (first, *later)]
    if spec["signing"] == "v4-sdk":
        return [_request(endpoint, **spec) for _ in range(3)]
    return [_request(endpoint, **spec)] * 3


def _settled(pair: Pair) -> None:
    """The ASGI path counts and logs a request as its answer's last bytes go out, and either path
    may have started readahead that is still fetching: wait for both (on a loaded machine the one
    gateway's prefetch can still be under way when the other's is done, and count otherwise)."""
    def settled() -> bool:
        return len(pair.logs["fast"]) == len(pair.logs["asgi"]) and not any(
            g.server.config.app.s3.engine.fetch.background for g in (pair.fast, pair.asgi))

    wait_for(settled, "both gateways logged as many requests, and fetch nothing in the background")


def test_the_requests_above_took_the_hit_path_often(pair: Pair) -> None:
    """Not a vacuous comparison: many of the generated requests were hits answered below ASGI."""
    assert pair.fast.server.config.app.s3.accounts.stats.below_asgi >= 30
    # (requests an SDK marked as its own, skewed, expired or tampered are never kept: 4 of the 9 signings are)
    assert pair.fast.server.config.app.s3.accounts.stats.replayed >= 8
    assert pair.asgi.server.config.app.s3.accounts.stats.below_asgi == 0


def _raw(endpoint: str, payload: bytes) -> bytes:
    """Send `payload` in one write and read until the server closes or goes quiet."""
    host, port = endpoint.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(payload)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except TimeoutError:
            pass
    return received


def test_pipelined_hits_and_a_miss_are_answered_in_order(pair: Pair) -> None:
    """Hits answered in the protocol callback keep HTTP/1.1's order with the app's answers
    around them; the last request asks to close, and the connection then closes."""
    hit = b"GET /public/small.txt HTTP/1.1\r\nHost: gw\r\n\r\n"
    miss = b"GET /public/absent.txt HTTP/1.1\r\nHost: gw\r\n\r\n"
    last = b"HEAD /public/small.txt HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n"
    before = pair.fast.server.config.app.s3.accounts.stats.below_asgi
    received = _raw(pair.fast.endpoint, hit + miss + hit + last)
    statuses = re.findall(rb"HTTP/1.1 (\d{3}) ", received)
    assert statuses == [b"200", b"404", b"200", b"200"]
    assert received.count(OBJECTS[("public", "small.txt")]) == 2 and b"<Code>NoSuchKey</Code>" in received
    assert pair.fast.server.config.app.s3.accounts.stats.below_asgi == before + 3


def test_a_connection_is_logged_in_the_order_it_was_answered(pair: Pair) -> None:
    """A streamed answer (more than one block, the app's) and a hit pipelined behind it: the
    hit is answered the moment the stream's last bytes go out, while the app's task still
    closes what its answer held, and must be logged after the stream (the advisor replays the
    access log in its order)."""
    for gateway in (pair.fast, pair.asgi):
        big = _request(gateway.endpoint, "GET", "shared", "team/big.bin", [], {}, "admin", "v4-query")
        first = b"GET " + big.url.raw_path + b" HTTP/1.1\r\nHost: " + big.url.netloc + b"\r\n\r\n"
        hit = b"GET /public/small.txt HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n"
        logs = pair.logs["fast" if gateway is pair.fast else "asgi"]
        before = len(logs)
        received = _raw(gateway.endpoint, first + hit)
        assert re.findall(rb"HTTP/1.1 (\d{3}) ", received) == [b"200", b"200"]
        # (a line written late then fails as an order, not as a count)
        wait_for(lambda: len(logs) >= before + 2, "both requests logged")
        assert [entry["key"] for entry in logs[before:]] == ["team/big.bin", "small.txt"]


def test_an_http_1_0_hit_closes_the_connection(pair: Pair) -> None:
    received = _raw(pair.fast.endpoint, b"GET /public/small.txt HTTP/1.0\r\nHost: gw\r\n\r\n")
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and b"\r\nconnection: close" in head.lower()
    assert body == OBJECTS[("public", "small.txt")]
