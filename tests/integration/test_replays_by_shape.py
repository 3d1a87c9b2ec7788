"""SDK-signed requests kept by their shape (gateway.s3api.replays, auth.shaped): the same GET signed
anew each time (its own x-amz-date, signature, amz-sdk-invocation-id) is answered as kept from the
shape's second arrival, and alike to what the app answers; whatever its signature or what its answer
depended on does not hold any more gets exactly the full path's answer.

One gateway over moto, metadata TTL of an hour; each request written to a raw socket in one send,
as an SDK writes it (botocore's header signer).
"""

from __future__ import annotations

import dataclasses
import random
import re
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any
from unittest import mock

import botocore.auth
import pytest
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from gateway.config import CacheSettings, MetadataSettings
from gateway.errors import S3Error
from gateway.s3api.ranges import parse_range
from tests.integration.test_replays import exchange, head_exchange
from tests.s3api.test_auth_fastpath import _clock
from tests.support import ADMIN, REGION, TEAM, RunningGateway, base_settings, client

BUCKET = "shapes"
UNSTABLE = ("date", "x-amz-request-id")
FROM_WHERE = ("x-cache", "x-amzn-requestid")  # a miss and a hit differ in these alone


@pytest.fixture(scope="module")
def gateway(origin_endpoint: str) -> Iterator[RunningGateway]:
    base = base_settings(origin_endpoint)
    settings = dataclasses.replace(base, cache=CacheSettings(block_size=64 * 1024, memory_quota=16 * 64 * 1024),
                                   metadata=MetadataSettings(ttl=3600.0))
    client(origin_endpoint, ("origin-key", "origin-secret")).create_bucket(Bucket=BUCKET)
    with RunningGateway(settings) as running:
        yield running


def sdk(gateway: RunningGateway, method: str, key: str, *, headers: dict[str, str] | None = None,
        who: tuple[str, str] = ADMIN, at: datetime | None = None, bucket: str = BUCKET) -> bytes:
    """The whole head of `method` of `key` as an SDK writes it: signed in its headers by botocore
    (at `at`, else now), with a new amz-sdk-invocation-id."""
    sdk_headers = {"amz-sdk-invocation-id": str(uuid.uuid4()), "amz-sdk-request": "attempt=1; max=3",
                   "User-Agent": "Boto3/1.35.0 md/Botocore#1.35.0", **(headers or {})}
    request = AWSRequest(method=method, url=f"{gateway.endpoint}/{bucket}/{key}", headers=sdk_headers)
    with _clock(at or datetime.now(timezone.utc)):
        botocore.auth.S3SigV4Auth(Credentials(*who), "s3", REGION).add_auth(request)
    prepared = request.prepare()
    lines = [f"{method} {prepared.url.removeprefix(gateway.endpoint)} HTTP/1.1",
             f"Host: {gateway.endpoint.removeprefix('http://')}"]
    lines += [f"{name}: {value.decode() if isinstance(value, bytes) else value}"
              for name, value in prepared.headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def replays(gateway: RunningGateway) -> Any:
    return gateway.server.config.app.hits.replays


def answer(gateway: RunningGateway, request: bytes, *, app: bool = False) -> tuple[int, dict[str, str], bytes]:
    """The answer to `request`; `app`: the app's, the hit path (and the kept requests) taken away."""
    gateway_app = gateway.server.config.app
    hits = gateway_app.hits
    if app:
        gateway_app.hits = None
    try:
        if request.startswith(b"HEAD "):
            return (*head_exchange(gateway, request), b"")
        return exchange(gateway, request, answers=1)[0]
    finally:
        gateway_app.hits = hits


def stable(headers: dict[str, str], besides: tuple[str, ...] = ()) -> dict[str, str]:
    return {name: value for name, value in headers.items() if name not in UNSTABLE + besides}


def kept_shape(gateway: RunningGateway, key: str, body: bytes, **kw: Any) -> None:
    """`key` written with `body`, read (a miss), then again (a hit, kept by its shape)."""
    client(gateway.endpoint).put_object(Bucket=BUCKET, Key=key, Body=body)
    before = len(replays(gateway).shapes())
    for _ in range(2):
        assert answer(gateway, sdk(gateway, "GET", key, **kw))[0] in (200, 206)
    assert len(replays(gateway).shapes()) == before + 1


def as_the_app(gateway: RunningGateway, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """`request`'s answer, not by its shape, and the same as the app's answer to it."""
    by_shape = replays(gateway).by_shape
    status, headers, body = answer(gateway, request)
    assert replays(gateway).by_shape == by_shape
    app_status, app_headers, app_body = answer(gateway, request, app=True)
    assert (status, stable(headers, FROM_WHERE)) == (app_status, stable(app_headers, FROM_WHERE))
    assert _unclocked(body) == _unclocked(app_body)
    return status, headers, body


def _unclocked(body: bytes) -> bytes:
    """An answer's body without what differs between two answers a second apart: its request id,
    and the server's time an error about the clock (an expired URL, a skewed date) tells."""
    return re.sub(rb"<(RequestId|ServerTime)>[^<]*</(RequestId|ServerTime)>", b"", body)


def test_a_get_signed_anew_each_time_is_answered_by_its_shape_as_the_app_answers_it(gateway: RunningGateway) -> None:
    client(gateway.endpoint).put_object(Bucket=BUCKET, Key="sdk.bin", Body=b"s" * 4096)
    before, replayed = replays(gateway).by_shape, gateway.server.config.app.s3.accounts.stats.replayed
    answers = [answer(gateway, sdk(gateway, "GET", "sdk.bin")) for _ in range(5)]
    # A miss (the app), a hit (kept by its shape: its second arrival), then three by shape.
    assert replays(gateway).by_shape == before + 3
    assert gateway.server.config.app.s3.accounts.stats.replayed == replayed + 3
    app = answer(gateway, sdk(gateway, "GET", "sdk.bin"), app=True)
    for status, headers, body in answers[1:]:
        assert (status, body) == (200, b"s" * 4096)
        assert stable(headers) == {**stable(app[1]), "x-cache": "hit-mem"}
    assert len({headers["x-amz-request-id"] for _, headers, _ in answers}) == 5


def test_a_head_signed_anew_is_answered_by_its_shape(gateway: RunningGateway) -> None:
    client(gateway.endpoint).put_object(Bucket=BUCKET, Key="head.bin", Body=b"0123456789")
    before = replays(gateway).by_shape
    answers = [answer(gateway, sdk(gateway, "HEAD", "head.bin")) for _ in range(4)]
    assert replays(gateway).by_shape >= before + 2
    assert {(status, headers["content-length"]) for status, headers, _ in answers} == {(200, "10")}


@pytest.mark.parametrize("change", ["signature", "other secret", "long ago", "credential date", "other key"])
def test_a_request_of_a_kept_shape_not_signed_as_it_must_be_gets_the_full_paths_answer(
        gateway: RunningGateway, change: str) -> None:
    key = "signed-" + change.replace(" ", "-") + ".txt"
    kept_shape(gateway, key, b"only for the admin")
    if change == "signature":
        request = sdk(gateway, "GET", key)
        request = re.sub(rb"Signature=([0-9a-f]{63})([0-9a-f])",
                         lambda m: b"Signature=" + m[1] + (b"0" if m[2] != b"0" else b"1"), request)
    elif change == "other secret":
        request = sdk(gateway, "GET", key, who=(ADMIN[0], "not-the-admin-secret"))
    elif change == "long ago":
        request = sdk(gateway, "GET", key, at=datetime.now(timezone.utc) - timedelta(minutes=20))
    elif change == "credential date":
        yesterday = (datetime.now(timezone.utc) - timedelta(days=1)).strftime("%Y%m%d").encode()
        request = re.sub(rb"(Credential=[^/]+/)\d{8}/", rb"\g<1>" + yesterday + b"/", sdk(gateway, "GET", key))
    else:
        request = sdk(gateway, "GET", key, who=TEAM)  # a key with no grant on this bucket
    status, _, body = as_the_app(gateway, request)
    assert status == (400 if change == "credential date" else 403), body  # AuthorizationHeaderMalformed


def test_a_secret_rotated_after_keeping_is_asked_again(gateway: RunningGateway) -> None:
    kept_shape(gateway, "rotated.txt", b"rotate")
    request = sdk(gateway, "GET", "rotated.txt")  # signed with the secret it was kept with
    policy = gateway.server.config.app.s3.services.policy
    users = policy._users
    policy._users = {**users, ADMIN[0]: dataclasses.replace(users[ADMIN[0]], secret_key="rotated-secret")}
    try:
        status, _, _ = as_the_app(gateway, request)
    finally:
        policy._users = users
    assert status == 403


BLOCK = 64 * 1024
RANGED = bytes(range(251)) * (2 * BLOCK // 251 + 40)  # two blocks and some of a third


def _answers_by_shape(value: str | None, size: int) -> bool:
    """Whether a GET of a kept ranged shape, its blocks in memory, is answered by its shape: its
    Range answered 206 (ranges.parse_range), the bytes within one block."""
    try:
        byte_range = parse_range(value, size)
    except S3Error:
        return False  # 416
    return byte_range is not None and byte_range.start // BLOCK == byte_range.end // BLOCK


def alike(gateway: RunningGateway, request: bytes) -> tuple[tuple[int, dict[str, str], bytes], bool]:
    """(`request`'s answer, whether it was answered by its shape), the app's answer to it the same."""
    by_shape = replays(gateway).by_shape
    status, headers, body = answer(gateway, request)
    shaped = replays(gateway).by_shape == by_shape + 1
    app_status, app_headers, app_body = answer(gateway, request, app=True)
    assert (status, stable(headers, FROM_WHERE)) == (app_status, stable(app_headers, FROM_WHERE)), request
    assert _unclocked(body) == _unclocked(app_body)
    return (status, headers, body), shaped


def test_ranged_reads_of_a_kept_shape_are_answered_by_it_each_for_its_own_range(gateway: RunningGateway) -> None:
    """An engine's reads of a warm file, each its own Range (bytes=a-b, a-, -n; and what S3 answers
    otherwise: 416, several ranges, malformed): each answered as the app answers it, by the shape
    when it is a 206 within one block."""
    client(gateway.endpoint).put_object(Bucket=BUCKET, Key="table.parquet", Body=RANGED)
    client(gateway.endpoint).get_object(Bucket=BUCKET, Key="table.parquet")["Body"].read()  # every block in memory
    for value in ("bytes=0-9", "bytes=10-19"):  # a hit, then a hit kept by its shape
        assert answer(gateway, sdk(gateway, "GET", "table.parquet", headers={"Range": value}))[0] == 206
    size, rng = len(RANGED), random.Random(32)
    values = [f"bytes={a}-{a + rng.randrange(0, 9000)}" for a in rng.sample(range(size), 40)]
    values += [f"bytes=-{rng.randrange(1, 3 * BLOCK)}" for _ in range(8)] + [f"bytes={rng.randrange(size)}-"
                                                                             for _ in range(8)]
    values += ["bytes=0-0", f"bytes={size - 1}-", "bytes=-1", f"bytes={BLOCK - 1}-{BLOCK}", f"bytes={BLOCK}-{BLOCK}",
               f"bytes={2 * BLOCK}-", f"bytes={size}-", f"bytes={size + 10}-{size + 20}", "bytes=-0", "bytes=5-2",
               "bytes=0-1,3-4", "bytes=x-y", "items=0-1", "bytes=-", f"bytes=-{size + 5}", "BYTES=3-7"]
    shaped = 0
    for value in values:
        (status, headers, body), by_shape = alike(gateway, sdk(gateway, "GET", "table.parquet", headers={"Range": value}))
        assert by_shape == _answers_by_shape(value, size), (value, status)
        shaped += by_shape
        byte_range = parse_range(value, size) if status != 416 else None
        if status == 206 and byte_range is not None:
            assert body == RANGED[byte_range.start:byte_range.end + 1]
            assert headers["content-range"] == f"bytes {byte_range.start}-{byte_range.end}/{size}"
            assert headers["content-length"] == str(len(body)) and headers["x-cache"] == "hit-mem"
    assert shaped >= 30


def test_a_head_of_a_kept_ranged_shape_is_answered_for_its_own_range(gateway: RunningGateway) -> None:
    client(gateway.endpoint).put_object(Bucket=BUCKET, Key="head-ranged.bin", Body=b"h" * 5000)
    for value in ("bytes=0-9", "bytes=10-19"):
        answer(gateway, sdk(gateway, "HEAD", "head-ranged.bin", headers={"Range": value}))
    for value, by_shape in (("bytes=100-2099", True), ("bytes=-7", True), ("bytes=4990-", True),
                            ("bytes=5000-", False), ("bytes=0-1,3-4", False)):
        (status, headers, _), shaped = alike(gateway, sdk(gateway, "HEAD", "head-ranged.bin",
                                                          headers={"Range": value}))
        assert shaped == by_shape, (value, status, headers)
    assert headers["content-length"] == "5000"  # (the last: several ranges, the whole object)


def test_a_range_changed_after_signing_is_refused(gateway: RunningGateway) -> None:
    kept_shape(gateway, "signed-range.txt", b"0123456789" * 10, headers={"Range": "bytes=0-3"})
    request = sdk(gateway, "GET", "signed-range.txt", headers={"Range": "bytes=4-7"})
    assert alike(gateway, request)[0][2] == b"4567"
    status, _, body = as_the_app(gateway, request.replace(b"Range: bytes=4-7", b"Range: bytes=0-9"))
    assert status == 403 and b"SignatureDoesNotMatch" in body
    request = sdk(gateway, "GET", "signed-range.txt", headers={"Range": "bytes=-5"})
    status, _, body = as_the_app(gateway, re.sub(rb"Signature=([0-9a-f]{63})([0-9a-f])", lambda m: b"Signature=" + m[1]
                                                 + (b"0" if m[2] != b"0" else b"1"), request))
    assert status == 403 and b"SignatureDoesNotMatch" in body


def test_a_kept_ranged_shape_is_not_answered_for_another_object(gateway: RunningGateway) -> None:
    kept_shape(gateway, "ranged.txt", b"0123456789", headers={"Range": "bytes=0-3"})
    client(gateway.endpoint).put_object(Bucket=BUCKET, Key="ranged2.txt", Body=b"abcdefghij")
    answer(gateway, sdk(gateway, "GET", "ranged2.txt", headers={"Range": "bytes=0-3"}))  # its miss
    assert as_the_app(gateway, sdk(gateway, "GET", "ranged2.txt", headers={"Range": "bytes=4-7"}))[2] == b"efgh"


@pytest.mark.parametrize("where", ["through the gateway", "at the origin"])
def test_a_ranged_object_changed_after_keeping_is_never_served_stale(gateway: RunningGateway, origin_endpoint: str,
                                                                     where: str) -> None:
    key = "changed-" + where.replace(" ", "-") + ".txt"
    kept_shape(gateway, key, b"a" * 100, headers={"Range": "bytes=0-3"})
    assert alike(gateway, sdk(gateway, "GET", key, headers={"Range": "bytes=-5"})) == \
        ((206, mock.ANY, b"aaaaa"), True)
    if where == "through the gateway":
        client(gateway.endpoint).put_object(Bucket=BUCKET, Key=key, Body=b"b" * 50)
    else:  # and the gateway told (an S3 event, or the metadata's TTL passing)
        client(origin_endpoint, ("origin-key", "origin-secret")).put_object(Bucket=BUCKET, Key=key, Body=b"b" * 50)
        gateway.server.config.app.s3.engine.writes.invalidate_local(BUCKET, key)
    request = sdk(gateway, "GET", key, headers={"Range": "bytes=-5"})
    assert as_the_app(gateway, request)[:3:2] == (206, b"bbbbb")
    request = sdk(gateway, "GET", key, headers={"Range": "bytes=60-"})
    assert as_the_app(gateway, request)[0] == 416  # past the new end: kept anew by now, or not, never stale


def test_an_object_overwritten_or_deleted_after_keeping_is_read_as_it_is(gateway: RunningGateway) -> None:
    kept_shape(gateway, "changing.txt", b"first")
    client(gateway.endpoint).put_object(Bucket=BUCKET, Key="changing.txt", Body=b"second")
    client(gateway.endpoint).head_object(Bucket=BUCKET, Key="changing.txt")  # the new metadata in memory
    assert as_the_app(gateway, sdk(gateway, "GET", "changing.txt"))[2] == b"second"
    kept_shape(gateway, "changing.txt", b"third")
    client(gateway.endpoint).delete_object(Bucket=BUCKET, Key="changing.txt")
    assert as_the_app(gateway, sdk(gateway, "GET", "changing.txt"))[0] == 404


def test_cors_rules_changed_after_keeping_are_answered_anew(gateway: RunningGateway, origin_endpoint: str) -> None:
    admin = client(gateway.endpoint)
    admin.put_bucket_cors(Bucket=BUCKET, CORSConfiguration={"CORSRules": [
        {"AllowedOrigins": ["https://app.example.com"], "AllowedMethods": ["GET"], "ExposeHeaders": ["ETag"]}]})
    origin = {"Origin": "https://app.example.com"}
    client(gateway.endpoint).put_object(Bucket=BUCKET, Key="cors.txt", Body=b"for a page")
    for _ in range(3):  # a miss, the rules read; a hit, kept by its shape
        answer(gateway, sdk(gateway, "GET", "cors.txt", headers=origin))
    before = replays(gateway).by_shape
    assert answer(gateway, sdk(gateway, "GET", "cors.txt", headers=origin))[1]["access-control-allow-origin"] == \
        "https://app.example.com"
    assert replays(gateway).by_shape == before + 1
    client(origin_endpoint, ("origin-key", "origin-secret")).put_bucket_cors(
        Bucket=BUCKET, CORSConfiguration={"CORSRules": [{"AllowedOrigins": ["https://other.example.com"],
                                                         "AllowedMethods": ["GET"]}]})
    gateway.server.config.app.s3.engine.bucket_documents.forget(BUCKET)  # as the rules' TTL passing does
    status, headers, _ = answer(gateway, sdk(gateway, "GET", "cors.txt", headers=origin))
    assert (status, headers.get("access-control-allow-origin")) == (200, None)
    admin.delete_bucket_cors(Bucket=BUCKET)


def presigned_new(gateway: RunningGateway, key: str, *, at: datetime, expires: int = 300,
                  who: tuple[str, str] = ADMIN) -> bytes:
    """The whole head of a presigned GET of `key` made at `at` (each second its own URL)."""
    request = AWSRequest(method="GET", url=f"{gateway.endpoint}/{BUCKET}/{key}")
    with _clock(at):
        botocore.auth.S3SigV4QueryAuth(Credentials(*who), "s3", REGION, expires=expires).add_auth(request)
    target = request.url.removeprefix(gateway.endpoint)
    return f"GET {target} HTTP/1.1\r\nHost: {gateway.endpoint.removeprefix('http://')}\r\n\r\n".encode()


def test_presigned_urls_each_new_are_answered_by_their_shape(gateway: RunningGateway) -> None:
    client(gateway.endpoint).put_object(Bucket=BUCKET, Key="page.png", Body=b"p" * 1000)
    now = datetime.now(timezone.utc)
    before = replays(gateway).by_shape
    answers = [answer(gateway, presigned_new(gateway, "page.png", at=now - timedelta(seconds=n))) for n in range(5)]
    assert replays(gateway).by_shape == before + 3  # a miss, a hit kept by its shape, three by shape
    assert {(status, body) for status, _, body in answers} == {(200, b"p" * 1000)}
    expired = presigned_new(gateway, "page.png", at=now - timedelta(minutes=10), expires=300)
    assert as_the_app(gateway, expired)[0] == 403
    tampered = re.sub(rb"X-Amz-Signature=[0-9a-f]{64}", b"X-Amz-Signature=" + b"0" * 64,
                      presigned_new(gateway, "page.png", at=now - timedelta(seconds=7)))
    assert as_the_app(gateway, tampered)[0] == 403
    other = presigned_new(gateway, "page.png", at=now - timedelta(seconds=8), who=(ADMIN[0], "not-the-secret"))
    assert as_the_app(gateway, other)[0] == 403
