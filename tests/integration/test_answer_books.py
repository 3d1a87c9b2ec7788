"""One bookkeeping for every way a read is answered (s3api.accounting.Accounts.record): the same
request answered by the ASGI app, by the hit path below it, by the hit path once its block came
from the node that owns it (a later answer), and as a kept request sent again byte for byte,
leaves the same request counts, bytes served by source, engine counters, object heat and
access-log entry; only the count of the way it took differs. An SDK's request, signed anew each
time, is answered the same ways, the last by its shape. A block request of the peer API
(cluster.peer_api) is counted alike whether the app, `answer_now` or `replay` answers it.

A fleet of three nodes (Redis, moto), each request written to a raw socket so that the bytes
sent again are exactly those sent before; the app's answer is had by taking the hit path away
from the node for one request (GatewayApp.hits None), as tests/integration/test_peer_hits.py does.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from botocore.auth import S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from gateway.cluster.peers import encode_query
from tests.integration.test_fleet import BLOCK, engine, make_fleet  # noqa: F401
from tests.integration.test_peer_hits import presigned, raw_block_request, reader_of
from tests.integration.test_replays import read_head
from tests.integration.test_replays_by_shape import sdk
from tests.support import ADMIN, REGION, RunningGateway
from tests.waiting import wait_for

_VOLATILE = ("time", "request_id", "latency_ms")
Answer = tuple[int, dict[str, str], bytes]


@pytest.fixture
def fleet(make_fleet):  # type: ignore[no-untyped-def]  # noqa: F811
    # No halving of the heat while a test runs (it would show as a difference between two answers).
    return make_fleet(heat_half_life=3600.0)


def _send(node: RunningGateway, request: bytes, *, asgi: bool = False) -> Answer:
    """`request` written in one send on a new connection, its answer read back (no body for a
    HEAD); `asgi`: answered by the app, the hit path taken away from the node meanwhile."""
    app = node.server.config.app
    hits = app.hits
    if asgi:
        app.hits = None
    try:
        host, port = node.endpoint.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(request)
            reader = sock.makefile("rb")
            status, headers = read_head(reader)
            body = b"" if request.startswith(b"HEAD ") else reader.read(int(headers.get("content-length", 0)))
    finally:
        app.hits = hits
    return status, headers, body


def presigned_head(node: RunningGateway, key: str, headers: dict[str, str]) -> bytes:
    """The whole head of a presigned HEAD of bkt/`key` through `node`, with `headers` besides."""
    request = AWSRequest(method="HEAD", url=f"{node.endpoint}/bkt/{key}")
    S3SigV4QueryAuth(Credentials(*ADMIN), "s3", REGION, expires=300).add_auth(request)
    lines = [f"HEAD {request.url.removeprefix(node.endpoint)} HTTP/1.1", f"Host: {node.endpoint.removeprefix('http://')}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _books(node: RunningGateway) -> dict[str, Counter[Any]]:
    """What `node` has counted so far: requests, bytes by source, the engine's counters, heat, ways."""
    stats = node.server.config.app.s3.accounts.stats
    return {"requests": Counter(stats.requests), "served": Counter(stats.served),
            "engine": Counter(engine(node).stats),
            "heat": Counter({(bucket, key): n for bucket, key, n in engine(node).heat.top(10_000)}),
            "ways": Counter(below_asgi=stats.below_asgi, replayed=stats.replayed)}


def _answered(node: RunningGateway, request: bytes, log: list[dict[str, Any]],
              asgi: bool = False) -> tuple[dict[str, Counter[Any]], dict[str, Any], Answer]:
    """(what answering `request` added to each book of `node`, its access-log entry, the answer)."""
    before, logged = _books(node), len(log)
    answer = _send(node, request, asgi=asgi)
    wait_for(lambda: len(log) >= logged + 1, "the answer recorded")  # (a HEAD's by the app once it ended)
    after = _books(node)
    assert len(log) == logged + 1
    entry = {k: v for k, v in log[-1].items() if k not in _VOLATILE}
    return {book: after[book] - before[book] for book in after}, entry, answer


def _every_way(node: RunningGateway, make_request: Callable[[dict[str, str]], bytes], source: str,
               signed_anew: bool = False) -> None:
    """The request `make_request(headers)` gives (with `headers` besides) answered by the app, then
    by the hit path, sent again (kept at its second arrival) and answered as kept: alike in every
    book but the count of the way it took. (A header no signature covers makes each request its
    own bytes: a presigned URL made in the same second is the same.) `signed_anew`: each request
    made anew, as an SDK signs each (kept by its shape, auth.shaped)."""
    log: list[dict[str, Any]] = []
    node.server.config.app.s3.accounts.observers.append(log.append)
    try:
        asgi = _answered(node, make_request({"x-test-request": uuid.uuid4().hex}), log, asgi=True)
        headers = {"x-test-request": uuid.uuid4().hex}
        request = make_request(headers)
        others = [_answered(node, make_request(headers) if signed_anew else request, log) for _ in range(3)]
    finally:
        node.server.config.app.s3.accounts.observers.remove(log.append)
    books, entry, answer = asgi
    assert answer[1]["x-cache"] == source and books.pop("ways") == Counter(), answer[1]
    assert books["requests"] and books["engine"], books  # (not a comparison of nothing)
    for (other, other_entry, other_answer), way in zip(others, [Counter(below_asgi=1), Counter(below_asgi=1),
                                                                 Counter(below_asgi=1, replayed=1)]):
        assert other.pop("ways") == way, other  # which path answered it
        assert (other_answer[0], other_answer[1]["x-cache"], other_answer[2]) == (answer[0], source, answer[2])
        assert other == books, (way, other_entry)
        assert other_entry == entry


def test_a_hit_in_memory_is_counted_alike_by_every_path(fleet, direct):  # type: ignore[no-untyped-def]
    direct.put_object(Bucket="bkt", Key="k", Body=os.urandom(BLOCK - 100))
    _, owner = reader_of(fleet)
    _send(owner, presigned(owner, "k"))  # cold: the owner keeps the block
    for ranged in ({}, {"Range": "bytes=10-99"}):
        _every_way(owner, lambda unsigned: presigned(owner, "k", ranged | unsigned), "hit-mem")
    _every_way(owner, lambda unsigned: presigned_head(owner, "k", unsigned), "hit-mem")
    # One more hit of the object per GET answered, whichever way: 2 x 4 answers, and the cold read.
    assert _books(owner)["heat"][("bkt", "k")] == 9
    for method, ranged in (("GET", {}), ("GET", {"Range": "bytes=10-99"}), ("HEAD", {})):  # SDKs': by shape
        _every_way(owner, lambda headers: sdk(owner, method, "k", headers=ranged | headers, bucket="bkt"), "hit-mem",
                   signed_anew=True)


def test_a_block_another_node_holds_is_counted_alike_by_every_path(fleet, direct):  # type: ignore[no-untyped-def]
    direct.put_object(Bucket="bkt", Key="k", Body=os.urandom(BLOCK - 100))
    reader, _ = reader_of(fleet)
    _send(reader, presigned(reader, "k"))  # cold: the block is kept by its owner
    _every_way(reader, lambda unsigned: presigned(reader, "k", {"Range": "bytes=3-70"} | unsigned), "hit-peer")
    _every_way(reader, lambda headers: sdk(reader, "GET", "k", headers={"Range": "bytes=4-70"} | headers, bucket="bkt"),
               "hit-peer", signed_anew=True)


def _ranges_every_way(node: RunningGateway, source: str) -> None:
    """An SDK's GETs of bkt/k each with its own Range, its shape kept (auth.shaped cuts the Range
    out): each Range answered by the app, then by the shape (s3api.replays), alike in every book
    but the count of the way it took, its access-log entry naming its own Range."""
    log: list[dict[str, Any]] = []
    node.server.config.app.s3.accounts.observers.append(log.append)

    def ranged(value: str) -> bytes:
        return sdk(node, "GET", "k", headers={"Range": value}, bucket="bkt")

    try:
        for value in ("bytes=0-9", "bytes=10-19"):  # a hit, then a hit kept by its shape
            _answered(node, ranged(value), log)
        for value in ("bytes=100-199", "bytes=-50", f"bytes={BLOCK - 200}-", "bytes=0-"):
            books, entry, answer = _answered(node, ranged(value), log, asgi=True)
            other, other_entry, other_answer = _answered(node, ranged(value), log)
            assert books.pop("ways") == Counter() and other.pop("ways") == Counter(below_asgi=1, replayed=1), value
            assert answer[0] == 206 and answer[1]["x-cache"] == source, answer[1]
            assert (other_answer[0], other_answer[1]["x-cache"], other_answer[1]["content-range"], other_answer[2]) \
                == (206, source, answer[1]["content-range"], answer[2])
            assert other == books, value
            assert other_entry == entry and entry["range"] == value
    finally:
        node.server.config.app.s3.accounts.observers.remove(log.append)


def test_ranged_reads_of_a_kept_shape_are_counted_alike_by_every_path(fleet, direct):  # type: ignore[no-untyped-def]
    direct.put_object(Bucket="bkt", Key="k", Body=os.urandom(BLOCK - 100))
    reader, owner = reader_of(fleet)
    _send(owner, presigned(owner, "k"))  # cold: the owner keeps the block
    _ranges_every_way(owner, "hit-mem")
    _ranges_every_way(reader, "hit-peer")  # the block another node's: each answer once it came


def test_a_block_request_of_a_peer_is_counted_alike_by_every_path(fleet, direct):  # type: ignore[no-untyped-def]
    data = os.urandom(BLOCK - 100)
    etag = direct.put_object(Bucket="bkt", Key="k", Body=data)["ETag"]
    reader, owner = reader_of(fleet)
    _send(reader, presigned(reader, "k"))  # cold: the reader's run offers the block to its owner
    wait_for(lambda: engine(owner).store.holds_object("bkt", "k"), "the owner holds the block")
    query = encode_query([("bucket", "bkt"), ("key", "k"), ("etag", etag), ("vid", ""), ("size", str(len(data))),
                          ("index", "0")])
    app = owner.server.config.app
    kept = raw_block_request(owner, query, int(time.time()))
    counted = []
    # The app's answer, the hit path's (kept: a block request is kept at once), the same bytes as kept.
    for asgi, request in [(True, raw_block_request(owner, query, int(time.time()) - 1)), (False, kept), (False, kept)]:
        served, fetched = Counter(app.peer.served), Counter(engine(owner).stats)
        assert _send(owner, request, asgi=asgi)[::2] == (200, data)
        answers = Counter(app.peer.served) - served  # (a take of the block offered may still be counted)
        counted.append((Counter({k: n for k, n in answers.items() if k in ("block", "below_asgi", "replayed")}),
                        Counter(engine(owner).stats) - fetched))
    assert [ways for ways, _ in counted] == [Counter(block=1), Counter(block=1, below_asgi=1),
                                            Counter(block=1, below_asgi=1, replayed=1)]
    assert [fetched for _, fetched in counted] == [Counter(block_hit_mem=1)] * 3
