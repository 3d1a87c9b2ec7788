"""The workers of one node answer as one: a write acknowledged by one worker is seen by the
next request on the other (S3's read-after-write), with and without Redis.

Two workers of a node of two (WorkerSet 0 and 1 of one run folder, so one journal), each a
real uvicorn in this process on its own port, over moto; metadata and listing TTLs of a
minute, so only an invalidation explains a fresh answer. The reader first caches the old
state (GET, HEAD, LIST, a 404), then a write goes through the other worker, then the reader
is asked at once: PUT, DELETE, CopyObject, CompleteMultipartUpload, DeleteObjects, an
operator's purge; then any sequence of writes through either worker (hypothesis). Then the
same with presigned GETs and HEADs sent again byte for byte on kept-alive connections, which
each worker answers from its replays (gateway.s3api.replays) while nothing changed. Last,
`gateway serve --workers 2`: clients on connections the kernel gave either worker."""

from __future__ import annotations

import dataclasses
import contextlib
import hashlib
import http.client
import shutil
import tempfile
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
import httpx
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.config import CacheSettings, RedisSettings
from gateway.engine import Engine
from gateway.node.workers import WorkerSet
from tests.support import GatewayProcess, RunningGateway, base_settings, client
from tests.waiting import wait_for

BUCKET = "workers"


def engine(gateway: RunningGateway) -> Engine:
    return gateway.server.config.app.s3.engine


@pytest.fixture(params=["no-redis", "redis"])
def node(request, clean_origin) -> Iterator[tuple[RunningGateway, RunningGateway]]:  # type: ignore[no-untyped-def]
    settings = base_settings(clean_origin)
    settings = dataclasses.replace(
        settings, cache=CacheSettings(block_size=64 * 1024, memory_quota=16 * 1024 * 1024),
        metadata=dataclasses.replace(settings.metadata, ttl=60.0, negative_ttl=60.0),
        listing=dataclasses.replace(settings.listing, ttl=60.0))
    if request.param == "redis":
        redis_url = request.getfixturevalue("clean_redis").url
        settings = dataclasses.replace(settings, redis=RedisSettings(url=redis_url, socket_timeout=0.3,
                                                                     retry_interval=0.2, invalidation_timeout=0.5))
    run_dir = tempfile.mkdtemp(prefix="gw-node-")  # short: it holds the workers' unix sockets
    workers = [WorkerSet(i, 2, run_dir, b"node-secret") for i in range(2)]
    started: list[RunningGateway] = []
    try:
        for worker in workers:
            started.append(RunningGateway(settings, workers=worker).__enter__())
        if request.param == "redis":
            wait_for(lambda: all(engine(g).shared.invalidation.listening() for g in started),  # type: ignore[union-attr]
                     "both workers listen")
        client(started[0].endpoint).create_bucket(Bucket=BUCKET)
        yield started[0], started[1]
    finally:
        for gateway in started:
            gateway.__exit__()
        shutil.rmtree(run_dir, ignore_errors=True)


def state(s3, key: str) -> tuple[bytes | None, str | None, str | None, str | None]:  # type: ignore[no-untyped-def]
    """What one worker shows of `key`: GET's body, HEAD's ETag and LIST's, and GET's ETag
    (None where it is absent)."""
    try:
        got = s3.get_object(Bucket=BUCKET, Key=key)
        body, get_etag = got["Body"].read(), got["ETag"]
    except ClientError as error:
        assert error.response["Error"]["Code"] == "NoSuchKey", error.response
        body = get_etag = None
    try:
        head_etag = s3.head_object(Bucket=BUCKET, Key=key)["ETag"]
    except ClientError as error:
        assert error.response["Error"]["Code"] == "404", error.response
        head_etag = None
    prefix = key.rsplit("/", 1)[0] + "/"
    listed = [item["ETag"] for item in s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
              if item["Key"] == key]
    return body, head_etag, listed[0] if listed else None, get_etag


def expected(body: bytes | None, etag: str | None = None) -> tuple[bytes | None, str | None, str | None, str | None]:
    if body is None:
        return None, None, None, None
    etag = etag or f'"{hashlib.md5(body).hexdigest()}"'
    return body, etag, etag, etag


def multipart_put(s3, key: str, body: bytes) -> str:  # type: ignore[no-untyped-def]
    upload = s3.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
    part = s3.upload_part(Bucket=BUCKET, Key=key, UploadId=upload, PartNumber=1, Body=body)
    done = s3.complete_multipart_upload(Bucket=BUCKET, Key=key, UploadId=upload,
                                        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    return str(done["ETag"])


def test_each_kind_of_write_through_one_worker_is_seen_at_once_through_the_other(node):
    a, b = node
    writer, reader = client(a.endpoint), client(b.endpoint)
    key, other = "dir/clé ключ", "dir/other"
    writer.put_object(Bucket=BUCKET, Key=key, Body=b"old")
    writer.put_object(Bucket=BUCKET, Key=other, Body=b"source!")
    for k in (key, other, "dir/new"):
        state(reader, k)  # the reader caches: metadata, blocks, listing; a 404
    hits = engine(b).stats["meta_hit"]
    assert state(reader, key) == expected(b"old") and engine(b).stats["meta_hit"] >= hits + 2  # from its memory

    def check(k: str, body: bytes | None, etag: str | None = None) -> None:
        assert state(reader, k) == expected(body, etag), k
        state(reader, k)  # cached again, for the next write to change

    writer.put_object(Bucket=BUCKET, Key=key, Body=b"overwritten")
    check(key, b"overwritten")
    writer.put_object(Bucket=BUCKET, Key="dir/new", Body=b"created over a cached 404")
    check("dir/new", b"created over a cached 404")
    writer.copy_object(Bucket=BUCKET, Key=key, CopySource={"Bucket": BUCKET, "Key": other})
    check(key, b"source!")
    etag = multipart_put(writer, key, b"in one part")
    check(key, b"in one part", etag)
    writer.delete_object(Bucket=BUCKET, Key=key)
    check(key, None)
    writer.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": other}, {"Key": "dir/new"}]})
    check(other, None)
    check("dir/new", None)
    # And the other way round.
    reader.put_object(Bucket=BUCKET, Key=key, Body=b"back")
    assert state(writer, key) == expected(b"back")
    assert engine(b).journal is not None and engine(b).journal.stats["journal_applied"] >= 7


def test_an_operators_purge_on_one_worker_empties_the_others(node):
    a, b = node
    s3b = client(b.endpoint)
    client(a.endpoint).put_object(Bucket=BUCKET, Key="p/k", Body=b"x")
    state(s3b, "p/k")

    def not_in_memory() -> int:  # asked of Redis (which a purge leaves as it is) or of the origin
        return engine(b).stats["meta_miss"] + engine(b).stats["meta_l2_hit"]

    before = not_in_memory()
    state(s3b, "p/k")
    assert not_in_memory() == before  # in its memory
    a.purge_caches()  # Engine.purge, what the admin API's purge of everything calls
    state(s3b, "p/k")
    assert not_in_memory() > before
    assert engine(b).journal is not None and engine(b).journal.stats["journal_resyncs"] == 0


writes = st.lists(st.tuples(st.integers(0, 1), st.sampled_from(["put", "delete", "copy", "multipart"]),
                            st.integers(0, 2), st.integers(0, 2), st.binary(min_size=1, max_size=40)),
                  min_size=1, max_size=6)
_examples = iter(range(1_000_000))


@settings(max_examples=8, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=writes)
def test_any_writes_through_either_worker_are_seen_by_both(node, operations):
    """After each write (through either worker), both show every key as the origin holds it."""
    gateways = [client(g.endpoint) for g in node]
    folder = f"h{next(_examples)}/"  # each example its own keys: the workers outlive examples
    keys = [f"{folder}k{i}" for i in range(3)]
    model: dict[str, tuple[bytes, str]] = {}
    for who, operation, index, source, body in operations:
        s3, key = gateways[who], keys[index]
        if operation == "put":
            model[key] = (body, s3.put_object(Bucket=BUCKET, Key=key, Body=body)["ETag"])
        elif operation == "delete":
            s3.delete_object(Bucket=BUCKET, Key=key)
            model.pop(key, None)
        elif operation == "copy" and keys[source] in model and source != index:
            copied = s3.copy_object(Bucket=BUCKET, Key=key, CopySource={"Bucket": BUCKET, "Key": keys[source]})
            model[key] = (model[keys[source]][0], copied["CopyObjectResult"]["ETag"])
        elif operation == "multipart":
            model[key] = (body, multipart_put(s3, key, body))
        for reader in gateways:
            for k in keys:
                known = model.get(k)
                assert state(reader, k) == (expected(*known) if known else expected(None)), (operation, k)


def write(writer, key: str, cycle: int, *, delete: bool) -> bytes | None:  # type: ignore[no-untyped-def]
    """A DELETE of `key`, or a PUT of a body naming the cycle, through `writer`; the body now there."""
    if delete:
        writer.delete_object(Bucket=BUCKET, Key=key)
        return None
    body = f"cycle {cycle}".encode()
    writer.put_object(Bucket=BUCKET, Key=key, Body=body)
    return body


def test_a_served_node_of_two_workers_is_never_stale(origin_endpoint):
    """`gateway serve --workers 2`, and 8 clients, each on its own connection to whichever
    worker accepted it: each write through one client, every client sees it at once."""
    env = {"GATEWAY_METADATA_TTL": "60s", "GATEWAY_METADATA_NEGATIVE_TTL": "60s", "GATEWAY_LISTING_TTL": "60s",
           "GATEWAY_CACHE_MEMORY_QUOTA": "64MiB", "GATEWAY_CACHE_BLOCK_SIZE": "64KiB"}
    client(origin_endpoint, ("origin-key", "origin-secret")).create_bucket(Bucket=BUCKET)
    with GatewayProcess(origin_endpoint, workers=2, **env) as served:
        clients = [client(served.endpoint) for _ in range(8)]
        key = "served/k"
        for cycle in range(12):
            for s3 in clients:
                state(s3, key)  # every worker caches the current state
            body = write(clients[cycle % len(clients)], key, cycle, delete=cycle % 3 == 2)
            for s3 in clients:
                assert state(s3, key) == expected(body), cycle


class SameBytes:
    """One kept-alive connection that sends a presigned GET and HEAD of one key, the same
    bytes each time (http.client writes a request without a body in one send)."""

    def __init__(self, endpoint: str, key: str) -> None:
        signer = client(endpoint)
        self.urls = {method: urlsplit(signer.generate_presigned_url(operation, Params={"Bucket": BUCKET, "Key": key},
                                                                    ExpiresIn=600))
                     for method, operation in (("GET", "get_object"), ("HEAD", "head_object"))}
        self.conn = http.client.HTTPConnection(self.urls["GET"].netloc, timeout=10)

    def __enter__(self) -> SameBytes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.conn.close()

    def send(self, method: str) -> tuple[int, bytes, str | None]:
        url = self.urls[method]
        self.conn.request(method, f"{url.path}?{url.query}", headers={"Accept-Encoding": "identity"})
        answer = self.conn.getresponse()
        return answer.status, answer.read(), answer.getheader("etag")

    def state(self) -> tuple[bytes | None, str | None, str | None]:
        """GET's body and ETag and HEAD's ETag (None where it is absent)."""
        status, body, get_etag = self.send("GET")
        head_status, _, head_etag = self.send("HEAD")
        assert status in (200, 404) and head_status == status, (status, head_status)
        return (body, get_etag, head_etag) if status == 200 else (None, None, None)


def sent_again_expected(body: bytes | None) -> tuple[bytes | None, str | None, str | None]:
    return expected(body)[:3]  # GET's body and ETag, HEAD's ETag: all ETags of a plain PUT are alike


def test_requests_sent_again_see_each_write_through_the_other_worker(node):
    """Presigned GET and HEAD, the same bytes on each worker's connection: answered as kept
    while the object stays, and never an object replaced or deleted through either worker."""
    a, b = node
    key = "again/k"
    with SameBytes(a.endpoint, key) as to_a, SameBytes(b.endpoint, key) as to_b:
        writes_seen_when_sent_again([client(a.endpoint), client(b.endpoint)], [to_a, to_b], key, cycles=8)
    # Six of the eight cycles begin with the object there; in each, on each worker, at least the
    # last two of the three GETs and of the three HEADs are answered as kept (33 seen).
    for gateway in node:
        assert gateway.server.config.app.s3.accounts.stats.replayed >= 6 * 2 * 2


def test_a_served_node_answers_requests_sent_again_never_stale(origin_endpoint):
    """`gateway serve --workers 2`, 8 connections sending the same presigned GET and HEAD:
    each write through boto3 is seen by the next send on every connection."""
    env = {"GATEWAY_METADATA_TTL": "60s", "GATEWAY_METADATA_NEGATIVE_TTL": "60s",
           "GATEWAY_CACHE_MEMORY_QUOTA": "64MiB", "GATEWAY_ADMIN_TOKEN": "node-token"}
    client(origin_endpoint, ("origin-key", "origin-secret")).create_bucket(Bucket=BUCKET)
    with GatewayProcess(origin_endpoint, workers=2, **env) as served, contextlib.ExitStack() as stack:
        key = "served/again"
        connections = [stack.enter_context(SameBytes(served.endpoint, key)) for _ in range(8)]
        writes_seen_when_sent_again([client(served.endpoint)], connections, key, cycles=8)
        metrics = httpx.get(f"{served.endpoint}/_gateway/metrics", headers={"authorization": "Bearer node-token"},
                            timeout=10).text
        replayed = next(float(line.split()[-1]) for line in metrics.splitlines()
                        if line.startswith("gateway_hit_path_replayed_total "))
        assert replayed >= 8 * 2 * 4


def writes_seen_when_sent_again(writers: list, connections: list[SameBytes], key: str, cycles: int) -> None:  # type: ignore[type-arg]
    """Each cycle: every connection sends its GET and HEAD three times (the first may go the
    whole way, the others are answered as kept), then a write (a PUT, every fourth a DELETE)
    through the next writer, then every connection must see it at once."""
    writers[0].put_object(Bucket=BUCKET, Key=key, Body=b"first")
    body: bytes | None = b"first"
    for cycle in range(cycles):
        for connection in connections:
            for _ in range(3):
                assert connection.state() == sent_again_expected(body), cycle
        body = write(writers[cycle % len(writers)], key, cycle, delete=cycle % 4 == 3)
        for connection in connections:
            assert connection.state() == sent_again_expected(body), cycle
