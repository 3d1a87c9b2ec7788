"""An acknowledged write is seen by the next request on any node (issue 17).

Two and three `gateway serve` processes on one redis-server and moto, as one fleet, with
metadata and listing TTLs of a minute so that only invalidations can explain a fresh answer.
Each cycle first has every other node cache the object's old state (GET, which also caches
its blocks, and LIST), then writes through one node (a different one each cycle) and reads
at once through each of the others, a request per node in turn: GET, HEAD, ranged GET and
LIST must all show the write. Writes: overwrite, create over a cached 404, delete,
DeleteObjects, copy onto a cached key, CompleteMultipartUpload onto a cached key.

Then, in-process gateways (real uvicorn): a node whose invalidation listener is held back
makes the write wait the deadline and answers from the origin, never stale; and a node
SIGKILLed while writes go on costs them the deadline at most.

GATEWAY_RAW_CYCLES=<n> runs more cycles per scenario (the test's default, 24, keeps it under
a minute; for more, lift pytest-timeout's 120 s too):

    GATEWAY_RAW_CYCLES=100 .venv/bin/pytest tests/integration/test_read_after_write.py -k every -s --timeout 1200
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import redis
from botocore.exceptions import ClientError

from gateway.config import CacheSettings, ClusterSettings, RedisSettings
from gateway.engine import Engine
from tests.support import GatewayProcess, RunningGateway, base_settings, client
from tests.waiting import wait_for

BUCKET = "raw"
SECRET = "read-after-write-secret"
CYCLES = int(os.environ.get("GATEWAY_RAW_CYCLES", "24"))  # per scenario and fleet size
DEADLINE = 0.5  # redis.invalidation_timeout in these tests


def node_env(redis_url: str) -> dict[str, str]:
    return {
        "GATEWAY_REDIS_URL": redis_url, "GATEWAY_CLUSTER_SECRET": SECRET,
        "GATEWAY_CLUSTER_HEARTBEAT_INTERVAL": "0.5", "GATEWAY_CLUSTER_MEMBER_TTL": "1.5",
        "GATEWAY_CLUSTER_HOT_REPLICATION": "false",
        "GATEWAY_CACHE_BLOCK_SIZE": "64KiB", "GATEWAY_CACHE_MEMORY_QUOTA": "64MiB",
        "GATEWAY_METADATA_TTL": "60s", "GATEWAY_METADATA_NEGATIVE_TTL": "60s", "GATEWAY_LISTING_TTL": "60s",
        "GATEWAY_REDIS_INVALIDATION_TIMEOUT": str(DEADLINE),
    }



WORKERS = 2  # each node served by 2 worker processes, each listening on the channel on its own


def subscribers(redis_url: str) -> int:
    return int(redis.Redis.from_url(redis_url, socket_timeout=2).pubsub_numsub("gw:invalidate")[0][1])


@pytest.fixture(params=[2, 3], ids=["2-nodes", "3-nodes"])
def processes(request, origin_endpoint, clean_redis) -> Iterator[list[GatewayProcess]]:  # type: ignore[no-untyped-def]
    nodes = [GatewayProcess(origin_endpoint, workers=WORKERS, **node_env(clean_redis.url)) for _ in range(request.param)]
    try:
        for node in nodes:
            node.start()
        wait_for(lambda: subscribers(clean_redis.url) == WORKERS * len(nodes), "every worker of every node listens",
                 within=20, ignoring=(OSError, redis.RedisError))
        direct = client(origin_endpoint, ("origin-key", "origin-secret"))
        try:
            direct.create_bucket(Bucket=BUCKET)
        except ClientError:
            pass
        yield nodes
    finally:
        for node in nodes:
            node.stop()


@dataclass
class Tally:
    """What the readers saw: every stale answer, described."""

    reads: int = 0
    writes: int = 0
    stale: list[str] = field(default_factory=list)

    def check(self, ok: bool, what: str) -> None:
        self.reads += 1
        if not ok:
            self.stale.append(what)


def _state(s3, key: str) -> tuple[bytes | None, str | None]:  # type: ignore[no-untyped-def]
    """(body, ETag) through one node, (None, None) when it answers NoSuchKey."""
    try:
        answer = s3.get_object(Bucket=BUCKET, Key=key)
    except ClientError as exc:
        if exc.response["Error"]["Code"] == "NoSuchKey":
            return None, None
        raise
    return answer["Body"].read(), answer["ETag"]


def _listed(s3, key: str) -> str | None:  # type: ignore[no-untyped-def]
    """The ETag LIST shows for `key` under its prefix, None when absent."""
    prefix = key.rsplit("/", 1)[0] + "/"
    for item in s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", []):
        if item["Key"] == key:
            return str(item["ETag"])
    return None


def _prime(readers, key: str) -> None:  # type: ignore[no-untyped-def]
    """Every reader caches the key's current state: metadata (or its 404), blocks, listing."""
    for s3 in readers:
        _state(s3, key)
        _listed(s3, key)


def _expect(readers, key: str, body: bytes | None, tally: Tally, what: str) -> None:  # type: ignore[no-untyped-def]
    """Right after the write was acknowledged: each other node, in turn, shows `body`."""
    etag = None if body is None else f'"{hashlib.md5(body).hexdigest()}"'
    for s3 in readers:
        got, got_etag = _state(s3, key)
        tally.check(got == body, f"{what}: GET {key} gave {None if got is None else got[:20]!r}")
        try:
            head = s3.head_object(Bucket=BUCKET, Key=key)
            found = (head["ContentLength"], head["ETag"])
        except ClientError as exc:
            found = None if exc.response["Error"]["Code"] in ("404", "NoSuchKey") else exc.response
        tally.check(found == (None if body is None else (len(body), etag)), f"{what}: HEAD {key} gave {found}")
        try:
            part = s3.get_object(Bucket=BUCKET, Key=key, Range="bytes=2-9")["Body"].read()
        except ClientError as exc:
            part = None if exc.response["Error"]["Code"] == "NoSuchKey" else exc.response  # type: ignore[assignment]
        tally.check(part == (None if body is None else body[2:10]), f"{what}: ranged GET {key} gave {part!r}")
        tally.check(_listed(s3, key) == etag, f"{what}: LIST did not show {key} as written")
        tally.check(got_etag == etag, f"{what}: GET {key} had ETag {got_etag}")


def _body(tag: str, cycle: int) -> bytes:
    return f"{tag}-{cycle}-".encode() * (3 + cycle % 5)


def _cycles(clients, scenario: str, worker: int, tally: Tally) -> None:  # type: ignore[no-untyped-def]
    """CYCLES write-then-read cycles of one scenario; the writing node turns each cycle."""
    n = len(clients)
    for cycle in range(CYCLES):
        writer, readers = clients[cycle % n], [clients[(cycle + i) % n] for i in range(1, n)]
        key = f"{scenario}/w{worker}/k{cycle % 3}"
        if scenario == "create":
            key = f"{scenario}/w{worker}/new-{cycle}"
            _prime(readers, key)  # a remembered 404 on every reader
            body: bytes | None = _body("created", cycle)
            writer.put_object(Bucket=BUCKET, Key=key, Body=body)
        else:
            old = _body("old", cycle)
            writer.put_object(Bucket=BUCKET, Key=key, Body=old)
            _prime(readers, key)
            body = _body("new", cycle)
            if scenario == "overwrite":
                writer.put_object(Bucket=BUCKET, Key=key, Body=body)
            elif scenario == "delete":
                writer.delete_object(Bucket=BUCKET, Key=key)
                body = None
            elif scenario == "delete-objects":
                writer.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": key}]})
                body = None
            elif scenario == "copy":
                source = f"{scenario}/w{worker}/source"
                writer.put_object(Bucket=BUCKET, Key=source, Body=body)
                writer.copy_object(Bucket=BUCKET, Key=key, CopySource={"Bucket": BUCKET, "Key": source})
            elif scenario == "multipart":
                upload = writer.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
                part = writer.upload_part(Bucket=BUCKET, Key=key, UploadId=upload, PartNumber=1, Body=body)
                writer.complete_multipart_upload(Bucket=BUCKET, Key=key, UploadId=upload, MultipartUpload={
                    "Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
            else:
                raise AssertionError(scenario)
        tally.writes += 1
        if scenario == "multipart":
            _expect_multipart(readers, key, body, tally)
        else:
            _expect(readers, key, body, tally, scenario)


def _expect_multipart(readers, key: str, body: bytes | None, tally: Tally) -> None:  # type: ignore[no-untyped-def]
    """As _expect, but a multipart ETag is not the MD5 of the body: compare bodies and sizes."""
    assert body is not None
    for s3 in readers:
        got, _ = _state(s3, key)
        tally.check(got == body, f"multipart: GET {key} gave {None if got is None else got[:20]!r}")
        size = s3.head_object(Bucket=BUCKET, Key=key)["ContentLength"]
        tally.check(size == len(body), f"multipart: HEAD {key} gave {size} bytes")
        part = s3.get_object(Bucket=BUCKET, Key=key, Range="bytes=2-9")["Body"].read()
        tally.check(part == body[2:10], f"multipart: ranged GET {key} gave {part!r}")
        listed = [o for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=key).get("Contents", []) if o["Key"] == key]
        tally.check(len(listed) == 1 and listed[0]["Size"] == len(body) and "-" in listed[0]["ETag"],
                    f"multipart: LIST showed {listed}")


SCENARIOS = ["overwrite", "create", "delete", "delete-objects", "copy", "multipart"]


def test_every_write_is_seen_at_once_through_every_other_node(processes):
    """Two workers at a time (each on its own keys), every scenario, the writer turning."""
    tally = Tally()
    failures: list[BaseException] = []

    def work(scenario: str, worker: int) -> None:
        clients = [client(node.endpoint) for node in processes]
        try:
            _cycles(clients, scenario, worker, tally)
        except BaseException as exc:  # reported below
            failures.append(exc)

    started = time.monotonic()
    for scenario in SCENARIOS:
        threads = [threading.Thread(target=work, args=(scenario, w)) for w in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    elapsed = time.monotonic() - started
    print(f"{len(processes)} nodes: {tally.writes} writes, {tally.reads} checked reads in {elapsed:.1f} s, "
          f"{len(tally.stale)} stale")
    assert not failures, failures[0]
    assert tally.writes == len(SCENARIOS) * 2 * CYCLES
    assert tally.stale == [], tally.stale[:20]


# --- in-process gateways: a held-back listener, a node killed during writes -------------------

def engine(gateway: RunningGateway) -> Engine:
    return gateway.server.config.app.s3.engine


@pytest.fixture
def pair(start_gateway, clean_origin, clean_redis):  # type: ignore[no-untyped-def]
    settings = base_settings(clean_origin)
    sections = {
        "redis": RedisSettings(url=clean_redis.url, socket_timeout=0.3, retry_interval=0.2,
                               invalidation_timeout=DEADLINE),
        "cluster": ClusterSettings(secret=SECRET, heartbeat_interval=0.2, member_ttl=1.0, hot_replication=False),
        "cache": CacheSettings(block_size=64 * 1024, memory_quota=16 * 1024 * 1024),
        "metadata": dataclasses.replace(settings.metadata, ttl=60.0, negative_ttl=60.0),
        "listing": dataclasses.replace(settings.listing, ttl=60.0),
    }
    a, b = start_gateway(**sections), start_gateway(**sections)
    wait_for(lambda: engine(a).shared.invalidation.listening() and engine(b).shared.invalidation.listening(),
             "both listen")
    s3a, s3b = client(a.endpoint), client(b.endpoint)
    s3a.create_bucket(Bucket=BUCKET)
    return a, b, s3a, s3b


def test_a_held_back_listener_makes_the_write_wait_the_deadline_and_its_node_ask_the_origin(pair):
    a, b, s3a, s3b = pair
    s3a.put_object(Bucket=BUCKET, Key="dir/k", Body=b"old")
    _prime([s3b], "dir/k")
    _prime([s3b], "dir/new")
    hits = engine(b).stats["meta_hit"]
    assert _state(s3b, "dir/k")[0] == b"old" and engine(b).stats["meta_hit"] == hits + 1  # B answers from memory

    engine(b).shared.invalidation.hold_listener_until = time.monotonic() + 3 * DEADLINE  # B hears nothing for 1.5 s
    started = time.monotonic()
    s3a.put_object(Bucket=BUCKET, Key="dir/k", Body=b"new!")
    waited = time.monotonic() - started
    s3a.put_object(Bucket=BUCKET, Key="dir/new", Body=b"created")
    # The write waited for B's confirmation, which did not come, until the deadline ...
    assert DEADLINE * 0.9 <= waited < DEADLINE + 1.0, waited
    assert engine(a).shared.invalidation.confirmations["unconfirmed"] >= 1
    # ... by which time B knew it might have missed something: it asks the origin.
    assert not engine(b).shared.invalidation.listening()
    tally = Tally()
    _expect([s3b], "dir/k", b"new!", tally, "held back")
    _expect([s3b], "dir/new", b"created", tally, "held back")
    assert tally.stale == []
    assert engine(b).stats["meta_revalidate"] + engine(b).stats["meta_miss"] > 0

    # Released, B applies what it missed, confirms, and trusts its caches again.
    engine(b).shared.invalidation.hold_listener_until = 0.0
    wait_for(lambda: engine(b).shared.invalidation.listening(), "B listens again")
    started = time.monotonic()
    s3a.put_object(Bucket=BUCKET, Key="dir/k", Body=b"newer")
    assert time.monotonic() - started < DEADLINE, "confirmed, not waited for"
    _expect([s3b], "dir/k", b"newer", tally, "released")
    hits = engine(b).stats["meta_hit"]
    assert _state(s3b, "dir/k")[0] == b"newer"
    assert engine(b).stats["meta_hit"] == hits + 1
    assert tally.stale == []


def test_a_node_killed_during_writes_costs_them_the_deadline_at_most(origin_endpoint, clean_redis):
    nodes = [GatewayProcess(origin_endpoint, workers=WORKERS, **node_env(clean_redis.url)) for _ in range(3)]
    try:
        for node in nodes:
            node.start()
        wait_for(lambda: subscribers(clean_redis.url) == WORKERS * 3, "every worker of every node listens",
                 within=20, ignoring=(OSError, redis.RedisError))
        s3a, s3c = client(nodes[0].endpoint), client(nodes[2].endpoint)
        try:
            s3a.create_bucket(Bucket=BUCKET)
        except ClientError:
            pass
        s3a.put_object(Bucket=BUCKET, Key="k", Body=b"first")
        latencies: list[tuple[float, float]] = []  # (started, seconds) of each acknowledged PUT
        stop = threading.Event()
        stale: list[str] = []

        def write() -> None:
            i = 0
            while not stop.is_set():
                body = f"version {i}".encode()
                started = time.monotonic()
                s3a.put_object(Bucket=BUCKET, Key="k", Body=body)
                latencies.append((started, time.monotonic() - started))
                got = s3c.get_object(Bucket=BUCKET, Key="k")["Body"].read()
                if got != body:
                    stale.append(f"{body!r} read back as {got!r}")
                i += 1

        writer = threading.Thread(target=write)
        writer.start()
        try:
            wait_for(lambda: len(latencies) >= 30, "writes under way", within=30)
            killed_at = time.monotonic()
            nodes[1].kill()
            wait_for(lambda: sum(s >= killed_at + 1 for s, _ in latencies) >= 20, "writes after the kill", within=30)
        finally:
            stop.set()
            writer.join(30)
        around = [seconds for started, seconds in latencies if started >= killed_at - 1]
        print(f"{len(latencies)} writes; around the kill: slowest {max(around):.3f} s, "
              f"{sum(s > DEADLINE / 2 for s in around)} slower than {DEADLINE / 2} s")
        assert stale == []
        # A write the killed node was counted for waits the deadline at most (plus the
        # origin's own time, generous on a shared machine).
        assert max(around) < DEADLINE + 1.0, around
        later = [seconds for started, seconds in latencies if started >= killed_at + 1]
        assert sorted(later)[len(later) // 2] < DEADLINE / 2, "the dead node is no longer waited for"
    finally:
        for node in nodes:
            node.stop()
