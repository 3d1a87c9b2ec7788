"""Requests sent again byte for byte (gateway.s3api.replays): answered as kept only while
everything their answer depended on still holds, and otherwise the whole way.

One gateway over moto with a memory tier of four 64 KiB blocks, metadata TTL of an hour (so
only an invalidation or an eviction explains a changed answer). Requests are written to a raw
socket, so that the bytes sent again are exactly the bytes sent before.
"""

from __future__ import annotations

import dataclasses
import re
import socket
import time
from collections.abc import Iterator
from typing import Any, BinaryIO

import pytest
from botocore.auth import S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from gateway.config import CacheSettings, MetadataSettings
from tests.support import ADMIN, REGION, TEAM, RunningGateway, base_settings, client, wait_expired

BLOCK = 64 * 1024
BUCKET = "replays"


@pytest.fixture(scope="module")
def gateway(origin_endpoint: str) -> Iterator[RunningGateway]:
    base = base_settings(origin_endpoint)
    settings = dataclasses.replace(base, cache=CacheSettings(block_size=BLOCK, memory_quota=4 * BLOCK),
                                   metadata=MetadataSettings(ttl=3600.0))
    client(origin_endpoint, ("origin-key", "origin-secret")).create_bucket(Bucket=BUCKET)
    with RunningGateway(settings) as running:
        yield running


def stats(gateway: RunningGateway) -> Any:
    return gateway.server.config.app.s3.accounts.stats


def put(gateway: RunningGateway, key: str, body: bytes) -> None:
    client(gateway.endpoint).put_object(Bucket=BUCKET, Key=key, Body=body)


def presigned(gateway: RunningGateway, method: str, key: str, *, expires: int = 300,
              headers: dict[str, str] | None = None, who: tuple[str, str] = ADMIN) -> bytes:
    """The whole request head of a presigned SigV4 `method` of `key`."""
    request = AWSRequest(method=method, url=f"{gateway.endpoint}/{BUCKET}/{key}")
    S3SigV4QueryAuth(Credentials(*who), "s3", REGION, expires=expires).add_auth(request)
    target = request.url.removeprefix(gateway.endpoint)
    lines = [f"{method} {target} HTTP/1.1", f"Host: {gateway.endpoint.removeprefix('http://')}"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def exchange(gateway: RunningGateway, *writes: bytes, answers: int) -> list[tuple[int, dict[str, str], bytes]]:
    """Each of `writes` in one send on one connection, then the `answers` (to GETs) read back."""
    host, port = gateway.endpoint.removeprefix("http://").split(":")
    out = []
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        reader = sock.makefile("rb")
        for payload in writes:
            sock.sendall(payload)
            time.sleep(0.02)  # not synchronisation: writes spaced so that the server reads each on its own
        for _ in range(answers):
            status, headers = read_head(reader)
            out.append((status, headers, reader.read(int(headers.get("content-length", 0)))))
    return out


def read_head(reader: BinaryIO) -> tuple[int, dict[str, str]]:
    """The status and headers (names lowered) of the next answer read from `reader`."""
    status = int(reader.readline().split()[1])
    headers = {}
    while (line := reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers


def head_exchange(gateway: RunningGateway, request: bytes) -> tuple[int, dict[str, str]]:
    """A HEAD's answer: status and headers (no body follows)."""
    host, port = gateway.endpoint.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(request)
        return read_head(sock.makefile("rb"))


def test_the_same_bytes_again_are_answered_as_kept_and_alike(gateway: RunningGateway) -> None:
    put(gateway, "same.txt", b"the same answer\n")
    request = presigned(gateway, "GET", "same.txt")
    exchange(gateway, request, answers=1)  # a miss: the app answers, the cache fills
    for _ in range(5):  # a hit: the hit path answers, and keeps it (on a loaded machine the block may
        first = exchange(gateway, request, answers=1)[0]  # come a moment after the miss's answer)
        if first[1]["x-cache"] == "hit-mem":
            break
    before = stats(gateway).replayed
    again = exchange(gateway, request, request, answers=2)  # kept: on another connection, twice
    assert stats(gateway).replayed == before + 2
    unstable = ("date", "x-amz-request-id")
    for status, headers, body in again:
        assert (status, body) == (200, b"the same answer\n")
        assert {k: v for k, v in headers.items() if k not in unstable} == \
            {k: v for k, v in first[1].items() if k not in unstable}
        assert headers["x-cache"] == "hit-mem"
    ids = {first[1]["x-amz-request-id"], *(headers["x-amz-request-id"] for _, headers, _ in again)}
    assert len(ids) == 3  # every answer its own request id


def test_a_head_sent_again_is_answered_as_kept(gateway: RunningGateway) -> None:
    put(gateway, "head.txt", b"0123456789")
    request = presigned(gateway, "HEAD", "head.txt")
    answers = [head_exchange(gateway, request) for _ in range(3)]
    assert stats(gateway).replayed >= 1
    assert [(status, headers["content-length"], headers["x-cache"]) for status, headers in answers[1:]] == \
        [(200, "10", "hit-mem")] * 2


def test_a_write_is_seen_by_the_next_request_sent_again(gateway: RunningGateway) -> None:
    put(gateway, "changes.txt", b"first")
    request = presigned(gateway, "GET", "changes.txt")
    assert [body for _, _, body in exchange(gateway, request, request, request, answers=3)] == [b"first"] * 3
    put(gateway, "changes.txt", b"second, longer")
    before = stats(gateway).replayed
    status, headers, body = exchange(gateway, request, answers=1)[0]
    assert (status, body) == (200, b"second, longer") and headers["etag"] != ""
    assert stats(gateway).replayed == before  # the metadata changed: answered the whole way
    client(gateway.endpoint).delete_object(Bucket=BUCKET, Key="changes.txt")
    assert exchange(gateway, request, answers=1)[0][0] == 404


def test_an_expired_presigned_url_is_refused_though_it_was_kept(gateway: RunningGateway) -> None:
    put(gateway, "expires.txt", b"for two seconds")
    request = presigned(gateway, "GET", "expires.txt", expires=2)
    assert [status for status, _, _ in exchange(gateway, request, request, request, answers=3)] == [200] * 3
    wait_expired(request.split(b" ")[1].decode())
    before = stats(gateway).replayed
    status, _, body = exchange(gateway, request, answers=1)[0]
    assert status == 403 and b"Request has expired" in body
    assert stats(gateway).replayed == before


def test_an_evicted_block_is_read_again_not_answered_from_the_kept_request(gateway: RunningGateway) -> None:
    put(gateway, "evicted.bin", b"e" * BLOCK)
    request = presigned(gateway, "GET", "evicted.bin")
    exchange(gateway, request, request, answers=2)
    for n in range(8):  # eight other blocks, each read as often, through a memory tier of four
        put(gateway, f"filler-{n}.bin", bytes([n]) * BLOCK)
        filler = presigned(gateway, "GET", f"filler-{n}.bin")
        exchange(gateway, filler, filler, filler, answers=3)
    before = stats(gateway).replayed
    status, headers, body = exchange(gateway, request, answers=1)[0]
    assert (status, body, headers["x-cache"]) == (200, b"e" * BLOCK, "miss")
    assert stats(gateway).replayed == before


def test_pipelined_requests_are_not_kept_as_one(gateway: RunningGateway) -> None:
    """Two requests in one read: each gets its answer, every time, and the pair is not kept
    (answering it as kept would answer only the first)."""
    put(gateway, "one.txt", b"one")
    put(gateway, "two.txt", b"two")
    both = presigned(gateway, "GET", "one.txt") + presigned(gateway, "GET", "two.txt")
    before = stats(gateway).replayed
    for _ in range(3):
        assert [body for _, _, body in exchange(gateway, both, answers=2)] == [b"one", b"two"]
    assert stats(gateway).replayed == before
    assert both not in gateway.server.config.app.hits.replays.kept()


def test_requests_whose_answer_depends_on_the_clock_are_not_kept(gateway: RunningGateway) -> None:
    put(gateway, "clock.txt", b"tick")
    future = "Fri, 01 Jan 2100 00:00:00 GMT"  # ignored while it is in the future, as S3 does
    request = presigned(gateway, "GET", "clock.txt", headers={"If-Modified-Since": future})
    assert [status for status, _, _ in exchange(gateway, request, request, request, answers=3)] == [200] * 3
    assert request not in gateway.server.config.app.hits.replays.kept()


def test_a_request_an_sdk_marked_as_its_own_is_answered_and_not_kept(gateway: RunningGateway) -> None:
    put(gateway, "sdk.txt", b"signed anew each time")
    exchange(gateway, presigned(gateway, "GET", "sdk.txt"), answers=1)  # metadata and block in memory
    request = presigned(gateway, "GET", "sdk.txt", headers={"amz-sdk-invocation-id": "6f1e0b2c-0000-4000-8000-1"})
    before, hits = stats(gateway).replayed, stats(gateway).below_asgi
    answers = exchange(gateway, request, request, answers=2)
    assert [(status, body) for status, _, body in answers] == [(200, b"signed anew each time")] * 2
    assert stats(gateway).below_asgi == hits + 2 and stats(gateway).replayed == before  # hits, none sent again
    assert request not in gateway.server.config.app.hits.replays.kept()


def test_a_refused_request_is_never_kept(gateway: RunningGateway) -> None:
    """A user without a grant on the bucket is refused every time, however often the same
    bytes come (the team's grant is on another bucket)."""
    put(gateway, "private.txt", b"not the team's")
    request = presigned(gateway, "GET", "private.txt", who=TEAM)
    answers = exchange(gateway, request, request, request, answers=3)
    assert [status for status, _, _ in answers] == [403] * 3
    assert all(b"AccessDenied" in body for _, _, body in answers)
    assert request not in gateway.server.config.app.hits.replays.kept()


def test_a_request_that_closes_the_connection_closes_it_again(gateway: RunningGateway) -> None:
    put(gateway, "close.txt", b"bye")
    request = presigned(gateway, "GET", "close.txt", headers={"Connection": "close"})
    for _ in range(3):
        host, port = gateway.endpoint.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(request)
            received = b""
            while chunk := sock.recv(65536):  # ends: the server closed
                received += chunk
        assert re.match(rb"HTTP/1.1 200 OK\r\n", received) and b"\r\nconnection: close\r\n" in received
        assert received.endswith(b"\r\n\r\nbye")
    assert request in gateway.server.config.app.hits.replays.kept()


def test_an_answer_sent_again_is_logged_as_the_hit_path_logged_it(gateway: RunningGateway) -> None:
    """A kept request's access-log entry is made once, when it is kept (server.answered_for):
    each answer again must still hand the observers the entry the hit path made, field for
    field and in the same order, but for its own time, request id and latency."""
    s3 = gateway.server.config.app.s3
    entries: list[dict[str, Any]] = []
    s3.accounts.observers.append(entries.append)
    try:
        put(gateway, "logged.txt", b"logged the same way\n")
        exchange(gateway, presigned(gateway, "GET", "logged.txt"), answers=1)  # metadata and block in memory
        for method in ("GET", "HEAD"):
            request = presigned(gateway, method, "logged.txt", headers={"Range": "bytes=2-9"} if method == "GET" else {})
            entries.clear()
            before = stats(gateway).replayed
            for _ in range(4):  # the hit path answers it twice (keeping it the second time), then as kept twice
                if method == "GET":
                    exchange(gateway, request, answers=1)
                else:
                    head_exchange(gateway, request)
            assert stats(gateway).replayed == before + 2 and len(entries) == 4
            hit, *again = entries
            assert hit["cache"] == "hit-mem" and hit["status"] == (206 if method == "GET" else 200)
            for entry in again:
                assert list(entry) == list(hit)
                assert {k: v for k, v in entry.items() if k not in ("time", "request_id", "latency_ms")} == \
                    {k: v for k, v in hit.items() if k not in ("time", "request_id", "latency_ms")}
                assert entry["request_id"] != hit["request_id"] and entry["time"] >= hit["time"]
    finally:
        s3.accounts.observers.remove(entries.append)


def test_a_connection_answered_again_is_kept_alive_by_its_requests_and_closed_when_idle(origin_endpoint: str) -> None:
    """An answer sent again leaves the keep-alive timer armed (no new one per answer): the
    connection must still stay open while requests keep coming, and close once idle for the
    keep-alive timeout."""
    base = base_settings(origin_endpoint)
    settings = dataclasses.replace(base, cache=CacheSettings(block_size=BLOCK, memory_quota=4 * BLOCK),
                                   metadata=MetadataSettings(ttl=3600.0),
                                   server=dataclasses.replace(base.server, keepalive_timeout=0.6))
    origin = client(origin_endpoint, ("origin-key", "origin-secret"))
    if BUCKET not in [bucket["Name"] for bucket in origin.list_buckets()["Buckets"]]:
        origin.create_bucket(Bucket=BUCKET)
    with RunningGateway(settings, guarded=True) as running:
        put(running, "alive.txt", b"still here")
        request = presigned(running, "GET", "alive.txt")
        host, port = running.endpoint.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            reader = sock.makefile("rb")
            for _ in range(8):  # 2.4 s in all, four keep-alive timeouts
                sock.sendall(request)
                assert reader.readline().startswith(b"HTTP/1.1 200")
                while reader.readline() != b"\r\n":
                    pass
                assert reader.read(len(b"still here")) == b"still here"
                time.sleep(0.3)  # not synchronisation: the idle time between requests is what is tested
            assert stats(running).replayed >= 5
            started = time.monotonic()
            assert reader.read(1) == b""  # closed by the gateway, once idle
            assert 0.1 < time.monotonic() - started < 2.0


def test_a_browsers_request_is_kept_with_the_cors_rules_it_was_answered_with(gateway: RunningGateway,
                                                                           origin_endpoint: str) -> None:
    """A GET with an Origin: the app answers it while the bucket's CORS rules are not in memory,
    then the hit path with the same Access-Control-* headers, then it is answered as kept, until
    the rules change (behind the gateway, read again once their TTL passed): the next answer
    carries the new rules' headers, though the object's metadata did not change."""
    admin = client(gateway.endpoint)
    admin.put_bucket_cors(Bucket=BUCKET, CORSConfiguration={"CORSRules": [
        {"AllowedOrigins": ["https://app.example.com"], "AllowedMethods": ["GET"], "ExposeHeaders": ["ETag"]}]})
    put(gateway, "cors.txt", b"for a page")
    request = presigned(gateway, "GET", "cors.txt", headers={"Origin": "https://app.example.com"})
    s = stats(gateway)
    seen = []
    for _ in range(4):
        below, replayed = s.below_asgi, s.replayed
        status, headers, body = exchange(gateway, request, answers=1)[0]
        assert (status, body) == (200, b"for a page")
        seen.append((headers.get("access-control-allow-origin"), headers.get("access-control-expose-headers"),
                     s.below_asgi - below, s.replayed - replayed))
    # A miss and its rules read by the app; a hit below ASGI; then kept, twice.
    assert seen == [("https://app.example.com", "ETag", 0, 0), ("https://app.example.com", "ETag", 1, 0),
                    ("https://app.example.com", "ETag", 1, 1), ("https://app.example.com", "ETag", 1, 1)]
    client(origin_endpoint, ("origin-key", "origin-secret")).put_bucket_cors(
        Bucket=BUCKET, CORSConfiguration={"CORSRules": [{"AllowedOrigins": ["https://other.example.com"],
                                                         "AllowedMethods": ["GET"]}]})
    gateway.server.config.app.s3.engine.bucket_documents.forget(BUCKET)  # as the rules' TTL passing does
    answers = [exchange(gateway, request, answers=1)[0] for _ in range(3)]
    assert [(status, headers.get("access-control-allow-origin"), headers.get("vary", "")[:6], headers["x-cache"])
            for status, headers, _ in answers] == [(200, None, "Origin", "hit-mem")] * 3
    admin.delete_bucket_cors(Bucket=BUCKET)
