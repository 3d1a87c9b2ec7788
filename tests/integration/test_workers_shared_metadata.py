"""Without Redis, the workers of a node share object metadata and listing pages: a
HEAD or a LIST that one worker misses asks the worker owning the object (its first block's
owner) or the listing, which answers from its cache or asks the origin once; what a worker's
own origin answered (a cold GET) is told to the owner. Read-after-write still holds whichever
worker answers, and a worker whose owner does not answer asks the origin itself.

Two workers of a node of two (WorkerSet 0 and 1 of one run folder), each a real uvicorn in
this process on its own port, over moto behind bench/shaped_proxy.py (100 ms before each
answer, so that misses at once overlap), which counts the origin's HEADs, GETs and LISTs.
Writes and set-up go to moto directly unless a test writes through a worker."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import tempfile
import threading
from collections.abc import Iterator

import pytest
from botocore.exceptions import ClientError

from gateway.config import RedisSettings
from gateway.engine import Engine
from gateway.node.workers import WorkerSet, placement
from gateway.objects import ObjectMeta, encode_meta, meta_from_headers
from tests.servers import CountingProxy
from tests.support import RunningGateway, base_settings, client
from tests.waiting import wait_for

BUCKET = "shared-meta"


@pytest.fixture(scope="module")
def counted(origin_endpoint: str) -> Iterator[CountingProxy]:
    proxy = CountingProxy(origin_endpoint, latency="100ms", kinds=("GET", "HEAD", "LIST"))
    yield proxy
    proxy.close()


def engine(gateway: RunningGateway) -> Engine:
    return gateway.server.config.app.s3.engine  # type: ignore[no-any-return]


@pytest.fixture(params=["no-redis"])
def node(request, clean_origin, counted) -> Iterator[tuple[RunningGateway, RunningGateway]]:  # type: ignore[no-untyped-def]
    settings = base_settings(counted.endpoint)
    settings = dataclasses.replace(settings, metadata=dataclasses.replace(settings.metadata, ttl=60.0, negative_ttl=60.0),
                                   listing=dataclasses.replace(settings.listing, ttl=60.0))
    if request.param == "redis":
        settings = dataclasses.replace(settings, redis=RedisSettings(url=request.getfixturevalue("clean_redis").url))
    run_dir = tempfile.mkdtemp(prefix="gw-meta-")  # short: it holds the workers' unix sockets
    started: list[RunningGateway] = []
    try:
        for i in range(2):
            started.append(RunningGateway(settings, workers=WorkerSet(i, 2, run_dir, b"node-secret")).__enter__())
        if request.param == "redis":  # (until then, answers are not trusted: the origin is asked)
            wait_for(lambda: all(engine(g).shared.invalidation.listening() for g in started),  # type: ignore[union-attr]
                     "both workers listen")
        client(clean_origin, ("origin-key", "origin-secret")).create_bucket(Bucket=BUCKET)
        yield started[0], started[1]
    finally:
        for gateway in started:
            gateway.__exit__()
        shutil.rmtree(run_dir, ignore_errors=True)


@pytest.fixture
def origin(clean_origin):  # type: ignore[no-untyped-def]
    """moto itself (nothing counted)."""
    return client(clean_origin, ("origin-key", "origin-secret"))


def owned_by(worker: int, stem: str) -> str:
    """A key whose first block worker `worker` of two owns."""
    return next(f"{stem}-{n}" for n in range(100) if placement(BUCKET, f"{stem}-{n}", 0) % 2 == worker)


def etag(s3, key: str) -> str:  # type: ignore[no-untyped-def]
    return s3.head_object(Bucket=BUCKET, Key=key)["ETag"]  # type: ignore[no-any-return]


def listed(s3, prefix: str) -> list[str]:  # type: ignore[no-untyped-def]
    return [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])]


def missing(s3, key: str) -> bool:  # type: ignore[no-untyped-def]
    try:
        s3.head_object(Bucket=BUCKET, Key=key)
    except ClientError as error:
        return error.response["Error"]["Code"] == "404"
    return False


@pytest.mark.parametrize("owner", [0, 1])
def test_a_head_through_one_worker_answers_a_head_through_the_other(node, origin, counted, owner):
    s3 = [client(gateway.endpoint) for gateway in node]
    key = owned_by(owner, "head")
    origin.put_object(Bucket=BUCKET, Key=key, Body=b"x" * 100)
    counted.mark()
    first = etag(s3[0], key)
    assert etag(s3[1], key) == first
    assert counted.since() == {"GET": 1}  # (a cold HEAD is a GET of the object's tail: engine.tails)
    asker = node[1 - owner]
    assert engine(asker).metadata.stats["meta_from_worker"] == 1
    counted.mark()
    assert etag(s3[0], key) == etag(s3[1], key) == first  # both keep it now
    assert counted.since() == {}


def test_a_404_through_one_worker_answers_the_other(node, counted):
    s3 = [client(gateway.endpoint) for gateway in node]
    for owner in (0, 1):
        key = owned_by(owner, "absent")
        counted.mark()
        assert missing(s3[0], key) and missing(s3[1], key)
        assert counted.since() == {"GET": 1}, owner  # (of the tail: its 404 says NoSuchKey, not NoSuchBucket)


def test_a_listing_through_one_worker_answers_the_other(node, origin, counted):
    s3 = [client(gateway.endpoint) for gateway in node]
    for n in range(4):  # pages owned by either worker, listed through either first
        prefix = f"day={n}/"
        origin.put_object(Bucket=BUCKET, Key=f"{prefix}part-0.parquet", Body=b"p")
        counted.mark()
        first, second = (s3[0], s3[1]) if n % 2 else (s3[1], s3[0])
        assert listed(first, prefix) == listed(second, prefix) == [f"{prefix}part-0.parquet"]
        assert counted.since() == {"LIST": 1}, n
    assert sum(engine(g).listings.stats["list_from_worker"] for g in node) == 4


@pytest.mark.parametrize("owner", [0, 1])
def test_a_get_through_one_worker_answers_a_head_through_the_other(node, origin, counted, owner):
    s3 = [client(gateway.endpoint) for gateway in node]
    key = owned_by(owner, "get")
    origin.put_object(Bucket=BUCKET, Key=key, Body=b"y" * 1000)
    counted.mark()
    got = s3[0].get_object(Bucket=BUCKET, Key=key)
    assert got["Body"].read() == b"y" * 1000
    if owner == 1:  # worker 0 opened it with its origin: it tells the owner (in a task, after the answer)
        wait_for(lambda: engine(node[1]).metadata.stats["meta_told"] == 1, "the owner is told the metadata")
    assert etag(s3[1], key) == got["ETag"]
    assert counted.since() == {"GET": 1}


@pytest.mark.parametrize("owner", [0, 1])
def test_a_footer_read_through_one_worker_answers_the_same_read_through_the_other(node, origin, counted, owner):
    # A suffix read (a Parquet footer) that knows nothing of the object opens it with one GET; the
    # other worker's, which does not know its first block either, asks the owner what it knows.
    s3 = [client(gateway.endpoint) for gateway in node]
    key = owned_by(owner, "footer")
    body = bytes(range(256)) * 40
    origin.put_object(Bucket=BUCKET, Key=key, Body=body)
    counted.mark()
    assert s3[0].get_object(Bucket=BUCKET, Key=key, Range="bytes=-1000")["Body"].read() == body[-1000:]
    if owner == 1:
        wait_for(lambda: engine(node[1]).metadata.stats["meta_told"] == 1, "the owner is told the metadata")
    assert counted.since() == {"GET": 1}
    assert s3[1].get_object(Bucket=BUCKET, Key=key, Range="bytes=-1000")["Body"].read() == body[-1000:]
    assert counted.since() == {"GET": 1}


@pytest.mark.parametrize("read", ["whole", "bytes=-1000", "bytes=0-99"])
def test_a_cold_read_through_another_worker_asks_the_owner_once(node, origin, counted, read):
    # The owner, told nothing of the object, says so once; the read's one GET brings the rest.
    s3 = client(node[0].endpoint)
    key = owned_by(1, f"once-{read}")
    body = bytes(range(256)) * 40
    origin.put_object(Bucket=BUCKET, Key=key, Body=body)
    asked: list[str] = []
    owner = engine(node[0]).siblings._clients[1]  # type: ignore[union-attr]
    for name in ("meta", "open_or_file"):
        def asking(real, name=name):  # type: ignore[no-untyped-def]
            async def ask(*args, **kwargs):  # type: ignore[no-untyped-def]
                asked.append(name)
                return await real(*args, **kwargs)
            return ask
        setattr(owner, name, asking(getattr(owner, name)))
    counted.mark()
    got = s3.get_object(Bucket=BUCKET, Key=key, **({} if read == "whole" else {"Range": read}))["Body"].read()
    assert got == {"whole": body, "bytes=-1000": body[-1000:], "bytes=0-99": body[:100]}[read]
    assert asked == ["meta"]
    assert counted.since() == {"GET": 1}


def test_workers_missing_one_object_at_once_ask_the_origin_once(node, origin, counted):
    s3 = [client(gateway.endpoint) for gateway in node]
    keys = [owned_by(0, "together"), owned_by(1, "together")]
    for key in keys:
        origin.put_object(Bucket=BUCKET, Key=key, Body=b"z")
    counted.mark()
    answers: list[str] = []
    start = threading.Barrier(4)

    def head(s3_: object, key: str) -> None:
        start.wait()
        answers.append(etag(s3_, key))

    threads = [threading.Thread(target=head, args=(s3[i], key)) for key in keys for i in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(answers) == 4
    assert counted.since() == {"GET": 2}  # one a key (of its tail), though each was missed by both workers at once
    assert sum(engine(g).metadata.stats["meta_miss_shared"] for g in node) == 2  # the asker joined the owner's


def test_workers_missing_one_listing_at_once_ask_the_origin_once(node, origin, counted):
    s3 = [client(gateway.endpoint) for gateway in node]
    prefixes = [f"at-once/{n}/" for n in range(4)]
    for prefix in prefixes:
        origin.put_object(Bucket=BUCKET, Key=f"{prefix}x", Body=b"x")
    counted.mark()
    answers: list[list[str]] = []
    start = threading.Barrier(2 * len(prefixes))

    def list_(s3_: object, prefix: str) -> None:
        start.wait()
        answers.append(listed(s3_, prefix))

    threads = [threading.Thread(target=list_, args=(s3[i], prefix)) for prefix in prefixes for i in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(answers) == sorted([f"{prefix}x"] for prefix in prefixes for _ in (0, 1))
    assert counted.since() == {"LIST": len(prefixes)}


@pytest.mark.parametrize("owner", [0, 1])
def test_a_write_through_either_worker_is_seen_through_both(node, counted, owner):
    s3 = [client(gateway.endpoint) for gateway in node]
    key = owned_by(owner, "written")
    s3[0].put_object(Bucket=BUCKET, Key=key, Body=b"old")
    old = etag(s3[0], key)
    assert etag(s3[1], key) == old
    s3[1].put_object(Bucket=BUCKET, Key=key, Body=b"new")
    new = etag(s3[0], key)
    assert new != old and etag(s3[1], key) == new
    s3[1].delete_object(Bucket=BUCKET, Key=key)
    assert missing(s3[0], key) and missing(s3[1], key)
    s3[0].put_object(Bucket=BUCKET, Key=key, Body=b"again")
    assert etag(s3[1], key) == etag(s3[0], key) not in (old, new)


def test_a_key_written_through_either_worker_is_listed_through_both(node, counted):
    s3 = [client(gateway.endpoint) for gateway in node]
    for n in range(4):
        prefix = f"table/day={n}/"
        s3[0].put_object(Bucket=BUCKET, Key=f"{prefix}a", Body=b"a")
        assert listed(s3[0], prefix) == listed(s3[1], prefix) == [f"{prefix}a"]
        s3[n % 2].put_object(Bucket=BUCKET, Key=f"{prefix}b", Body=b"b")
        assert listed(s3[0], prefix) == listed(s3[1], prefix) == [f"{prefix}a", f"{prefix}b"], n


def test_metadata_told_after_a_write_is_not_kept(node, origin, counted):
    # A worker that opened an object with its origin tells the owner in a task: a write published
    # in the node's journal meanwhile means the told answer may predate it, and the owner drops it.
    s3 = [client(gateway.endpoint) for gateway in node]
    owner = engine(node[1])
    key, kept = owned_by(1, "told"), owned_by(1, "kept")
    for name in (key, kept):
        origin.put_object(Bucket=BUCKET, Key=name, Body=b"old")
    stale = _origin_meta(origin, key)
    published = owner.journal.published  # type: ignore[union-attr]
    s3[0].put_object(Bucket=BUCKET, Key=key, Body=b"new")  # through the other worker: published
    _tell(node[1], key, stale, published)
    assert owner.metadata.stats["meta_told_not_kept"] == 1
    assert etag(s3[1], key) == etag(s3[0], key) != stale.etag
    # Told with nothing written since, the owner keeps it: no origin request to answer it.
    _tell(node[1], kept, _origin_meta(origin, kept), owner.journal.published)  # type: ignore[union-attr]
    counted.mark()
    assert etag(s3[1], kept) == etag(s3[0], kept)
    assert counted.since() == {}


def _origin_meta(origin, key: str) -> ObjectMeta:  # type: ignore[no-untyped-def]
    headers = origin.head_object(Bucket=BUCKET, Key=key)["ResponseMetadata"]["HTTPHeaders"]
    return meta_from_headers(list(headers.items()))


def _tell(gateway: RunningGateway, key: str, meta: ObjectMeta, published: int) -> None:
    """What PeerClient.tell_meta makes the owner do, on its loop."""
    async def tell() -> None:
        engine(gateway).metadata.told(BUCKET, key, "", encode_meta(meta), published)

    asyncio.run_coroutine_threadsafe(tell(), gateway.server.servers[0].get_loop()).result(5)


def test_an_owner_that_does_not_answer_leaves_the_asker_to_the_origin(node, origin, counted):
    s3 = [client(gateway.endpoint) for gateway in node]
    key = owned_by(1, "orphan")
    origin.put_object(Bucket=BUCKET, Key=key, Body=b"o")
    origin.put_object(Bucket=BUCKET, Key="orphans/a", Body=b"a")
    node[1].__exit__()  # the owner of the key (and maybe of the listing) stops
    counted.mark()
    assert etag(s3[0], key) == origin.head_object(Bucket=BUCKET, Key=key)["ETag"]
    assert listed(s3[0], "orphans/") == ["orphans/a"]
    assert counted.since() == {"GET": 1, "LIST": 1}
    assert engine(node[0]).siblings.stats["worker_failure"] >= 1  # type: ignore[union-attr]


@pytest.mark.parametrize("node", ["redis"], indirect=True)
def test_with_redis_the_workers_share_through_it_not_through_each_other(node, origin, counted):
    s3 = [client(gateway.endpoint) for gateway in node]
    key = owned_by(0, "redis")
    origin.put_object(Bucket=BUCKET, Key=key, Body=b"r")
    origin.put_object(Bucket=BUCKET, Key="redis/a", Body=b"a")
    counted.mark()
    assert etag(s3[0], key) == etag(s3[1], key)
    assert listed(s3[1], "redis/") == listed(s3[0], "redis/") == ["redis/a"]
    assert counted.since() == {"GET": 1, "LIST": 1}
    for gateway in node:
        assert engine(gateway).metadata.stats["meta_from_worker"] == 0
        assert engine(gateway).listings.stats["list_from_worker"] == 0
    assert engine(node[1]).metadata.stats["meta_l2_hit"] == engine(node[0]).listings.stats["list_l2_hit"] == 1
