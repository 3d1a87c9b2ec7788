"""A read through a peer, below ASGI on both nodes: the owner answers a block it holds in the
HTTP protocol (cluster.peer_api.PeerApp.answer_now), and the node asked for a GET of one block
the owner holds answers it once the block came (s3api.hits, a later answer), alike to what the
ASGI app answers, in order with what is pipelined behind it; and, when the block cannot be had,
the app answers (its error, or the object as it is now)."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from types import SimpleNamespace

import httpx
from botocore.auth import S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from gateway.cluster.peers import AUTH_HEADER, BLOCK_PATH, encode_query, sign
from tests.integration.test_fleet import BLOCK, SECRET, engine, fleet, make_fleet, owner_of  # noqa: F401
from tests.integration.test_replays import exchange, read_head
from tests.servers import refuses
from tests.support import ADMIN, REGION, RunningGateway
from tests.waiting import eventually, wait_for

_UNSTABLE = {"date", "x-amz-request-id"}


def presigned(node: RunningGateway, key: str, headers: dict[str, str] | None = None) -> bytes:
    """The whole head of a presigned GET of bkt/`key` through `node`."""
    request = AWSRequest(method="GET", url=f"{node.endpoint}/bkt/{key}")
    S3SigV4QueryAuth(Credentials(*ADMIN), "s3", REGION, expires=300).add_auth(request)
    lines = [f"GET {request.url.removeprefix(node.endpoint)} HTTP/1.1", f"Host: {node.endpoint.removeprefix('http://')}"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def stable(headers: dict[str, str]) -> dict[str, str]:
    return {name: value for name, value in headers.items() if name not in _UNSTABLE}


def below_asgi(node: RunningGateway) -> int:
    return node.server.config.app.s3.accounts.stats.below_asgi


def reader_of(fleet, index: int = 0) -> tuple[RunningGateway, RunningGateway]:  # type: ignore[no-untyped-def]
    """(a node that does not own block `index` of bkt/k, its owner), the reader listening to invalidations."""
    owner = owner_of(index, fleet.nodes)
    reader = next(n for n in fleet.nodes if n is not owner)
    wait_for(lambda: engine(reader).shared.invalidation.listening(), "the reader listens")
    return reader, owner


def second_block_asked(fleet, direct) -> tuple[bytes, RunningGateway, str]:  # type: ignore[no-untyped-def]
    """(an object of two blocks written behind the fleet, the first node, the query of a
    block request for its second block)."""
    data = os.urandom(BLOCK + 10)
    etag = direct.put_object(Bucket="bkt", Key="k", Body=data)["ETag"]
    query = encode_query([("bucket", "bkt"), ("key", "k"), ("etag", etag), ("vid", ""),
                          ("size", str(len(data))), ("index", "1")])
    return data, fleet.nodes[0], query


def test_a_block_a_node_holds_is_answered_to_peers_below_asgi_and_alike(fleet, direct):
    data, node, query = second_block_asked(fleet, direct)
    peer_app = node.server.config.app.peer

    def get(**headers: str) -> httpx.Response:
        signed = {AUTH_HEADER: sign(SECRET.encode(), "GET", BLOCK_PATH, query), **headers}
        return httpx.get(f"{node.endpoint}{BLOCK_PATH}?{query}", headers=signed, timeout=10)

    def without_date(answer: httpx.Response) -> list[tuple[str, str]]:
        return [(name, value) for name, value in answer.headers.multi_items() if name != "date"]

    first = get()  # not held yet: the ASGI app fetches it, keeps it and answers, saying it fetched it
    assert peer_app.served["below_asgi"] == 0
    assert first.headers.get("x-gateway-fetched") == "1"
    first.headers.pop("x-gateway-fetched")  # (the hits below are alike but for that)
    for connection in ("keep-alive", "close"):
        before = peer_app.served["below_asgi"]
        answer = get(connection=connection)
        assert peer_app.served["below_asgi"] == before + 1, connection
        assert (answer.status_code, answer.content) == (200, data[BLOCK:])
        assert without_date(answer) == without_date(first) + ([("connection", "close")] if connection == "close" else [])
    # Anything else is the ASGI app's, which says what is wrong.
    before = peer_app.served["below_asgi"]
    assert httpx.get(f"{node.endpoint}{BLOCK_PATH}?{query}", timeout=10).status_code == 401
    assert httpx.get(f"{node.endpoint}{BLOCK_PATH}?{query}", timeout=10,
                     headers={AUTH_HEADER: sign(b"not-the-secret", "GET", BLOCK_PATH, query)}).status_code == 403
    past_end = query.replace("index=1", "index=2")
    assert httpx.get(f"{node.endpoint}{BLOCK_PATH}?{past_end}", timeout=10,
                     headers={AUTH_HEADER: sign(SECRET.encode(), "GET", BLOCK_PATH, past_end)}).status_code == 400
    assert peer_app.served["below_asgi"] == before


def test_a_block_a_peer_holds_is_answered_below_asgi_once_it_came_and_alike(fleet, direct):
    data = os.urandom(BLOCK - 100)
    direct.put_object(Bucket="bkt", Key="k", Body=data)
    reader, owner = reader_of(fleet)
    exchange(reader, presigned(reader, "k"), answers=1)  # cold: the app opens it (metadata, block at the owner)
    app = reader.server.config.app
    for ranged in ({}, {"Range": "bytes=10-99"}, {"Range": "bytes=-5", "Connection": "close"}):
        hits, app.hits = app.hits, None  # the app's answer, to compare with
        try:
            [asgi] = exchange(reader, presigned(reader, "k", ranged), answers=1)
        finally:
            app.hits = hits
        before, served = below_asgi(reader), owner.server.config.app.peer.served["below_asgi"]
        [later] = exchange(reader, presigned(reader, "k", ranged), answers=1)
        assert below_asgi(reader) == before + 1, ranged
        assert owner.server.config.app.peer.served["below_asgi"] == served + 1  # the owner's answer too
        assert later[1]["x-cache"] == asgi[1]["x-cache"] == "hit-peer"
        assert (later[0], stable(later[1]), later[2]) == (asgi[0], stable(asgi[1]), asgi[2]), ranged
        assert later[2] == (data[10:100] if "Range" in ranged and ranged["Range"] == "bytes=10-99"
                            else data[-5:] if "Range" in ranged else data)


def test_requests_pipelined_behind_a_later_answer_are_answered_in_order(fleet, direct):
    data = os.urandom(BLOCK // 2)
    direct.put_object(Bucket="bkt", Key="k", Body=data)
    reader, _ = reader_of(fleet)
    exchange(reader, presigned(reader, "k"), answers=1)
    ranges = [(0, 9), (100, 199), (5, 5), (0, len(data) - 1)]
    before = below_asgi(reader)
    answers = exchange(reader, b"".join(presigned(reader, "k", {"Range": f"bytes={a}-{b}"}) for a, b in ranges),
                       answers=len(ranges))
    assert [body for _, _, body in answers] == [data[a:b + 1] for a, b in ranges]
    assert below_asgi(reader) == before + len(ranges)


def test_a_client_that_leaves_while_its_block_comes_costs_nothing_else(fleet, direct):
    data = os.urandom(BLOCK)
    direct.put_object(Bucket="bkt", Key="k", Body=data)
    reader, _ = reader_of(fleet)
    exchange(reader, presigned(reader, "k"), answers=1)
    host, port = reader.endpoint.removeprefix("http://").split(":")
    for _ in range(20):
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(presigned(reader, "k"))
    [(status, _, body)] = exchange(reader, presigned(reader, "k"), answers=1)
    assert (status, body) == (200, data)


def test_an_object_gone_behind_the_fleet_is_the_apps_to_answer(fleet, direct):
    direct.put_object(Bucket="bkt", Key="k", Body=os.urandom(2 * BLOCK))
    reader, owner = reader_of(fleet, 1)
    exchange(reader, presigned(reader, "k", {"Range": "bytes=0-9"}), answers=1)  # metadata fresh, block 1 nowhere
    direct.delete_object(Bucket="bkt", Key="k")  # behind the gateway
    before = below_asgi(reader)
    [(status, _, body)] = exchange(reader, presigned(reader, "k", {"Range": f"bytes={BLOCK}-{BLOCK + 9}"}), answers=1)
    assert status == 404 and b"<Code>NoSuchKey</Code>" in body, (status, body[:300])
    assert below_asgi(reader) == before  # the owner's refusal sent the request to the app


def reading(node: RunningGateway, sock: socket.socket) -> bool:
    """Whether `node` holds `sock`'s connection (what was sent on it is then read before any
    shutdown: uvicorn looks at should_exit every 0.1 s)."""
    return any(protocol.client == sock.getsockname() for protocol in list(node.server.server_state.connections))


def replayed(node: RunningGateway) -> int:
    return node.server.config.app.s3.accounts.stats.replayed


def test_a_request_sent_again_whose_block_a_peer_holds_is_answered_as_kept_and_alike(fleet, direct):
    data = os.urandom(BLOCK - 7)
    direct.put_object(Bucket="bkt", Key="k", Body=data)
    reader, owner = reader_of(fleet)
    for ranged in ({}, {"Range": "bytes=3-70"}):
        request = presigned(reader, "k", ranged)
        [first] = exchange(reader, request, answers=1)  # cold, or through the peer: the hit path's
        exchange(reader, request, answers=1)  # its second arrival: kept
        before, served = replayed(reader), owner.server.config.app.peer.served["below_asgi"]
        again = [exchange(reader, request, answers=1)[0] for _ in range(3)]
        assert replayed(reader) == before + 3, ranged  # nothing parsed or verified again
        assert owner.server.config.app.peer.served["below_asgi"] == served + 3  # the block came from its owner each time
        for answer in again:
            assert answer[1]["x-cache"] == "hit-peer"
            assert (answer[0], stable(answer[1]), answer[2]) == (first[0], stable(first[1]) | {"x-cache": "hit-peer"},
                                                                 first[2]), ranged
        assert len({answer[1]["x-amz-request-id"] for answer in again}) == 3
        assert again[0][2] == (data[3:71] if ranged else data)


def test_a_kept_request_whose_block_cannot_be_had_goes_the_whole_way(fleet, direct):
    direct.put_object(Bucket="bkt", Key="k", Body=os.urandom(2 * BLOCK))
    reader, owner = reader_of(fleet, 1)
    # Metadata fresh (a read of another shape: a presigned URL of the same second, its Range aside,
    # is of the same shape, auth.shaped).
    exchange(reader, presigned(reader, "k", {"Range": "bytes=0-9", "X-Other-Shape": "1"}), answers=1)
    request = presigned(reader, "k", {"Range": f"bytes={BLOCK}-{BLOCK + 9}"})
    for _ in range(3):  # answered as kept the third time
        [(status, _, _)] = exchange(reader, request, answers=1)
        assert status == 206
    assert replayed(reader) == 1
    direct.delete_object(Bucket="bkt", Key="k")  # behind the gateway; the reader's metadata stays fresh
    store = owner.server.config.app.s3.engine.store
    asyncio.run_coroutine_threadsafe(store.evict_prefix("bkt", "k"), owner.server.servers[0].get_loop()).result(10)
    before = replayed(reader)
    [(status, _, body)] = exchange(reader, request, answers=1)
    assert status == 404 and b"<Code>NoSuchKey</Code>" in body, (status, body[:300])
    assert replayed(reader) == before


def kept_through_a_peer(fleet, direct, size: int) -> tuple[bytes, RunningGateway, RunningGateway, bytes]:  # type: ignore[no-untyped-def]
    """(an object's bytes, a node that reads its block through a peer, the owner, a presigned GET
    of it that node keeps: sent three times, answered as kept the third)."""
    data = os.urandom(size)
    direct.put_object(Bucket="bkt", Key="k", Body=data)
    reader, owner = reader_of(fleet)
    kept = presigned(reader, "k")
    for _ in range(3):
        exchange(reader, kept, answers=1)
    return data, reader, owner, kept


def test_requests_behind_a_kept_request_that_waits_for_its_block_are_answered_in_order(fleet, direct):
    data, reader, _, kept = kept_through_a_peer(fleet, direct, BLOCK // 3)
    before = replayed(reader)
    behind = presigned(reader, "k", {"Range": "bytes=1-2"})
    answers = exchange(reader, kept, behind, kept, answers=3)  # each its own read on the server
    assert [(status, body) for status, _, body in answers] == [(200, data), (206, data[1:3]), (200, data)]
    assert replayed(reader) == before + 2
    host, port = reader.endpoint.removeprefix("http://").split(":")
    for _ in range(20):  # clients that leave while the block comes
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(kept)
    [(status, _, body)] = exchange(reader, kept, answers=1)
    assert (status, body) == (200, data)


def test_a_kept_request_waiting_for_its_block_at_shutdown_is_answered_then_closed(fleet, direct):
    data, reader, owner, kept = kept_through_a_peer(fleet, direct, BLOCK // 4)
    peer = owner.server.config.app.peer
    serve = peer._serve_block
    host, port = reader.endpoint.removeprefix("http://").split(":")

    async def once_draining(*args: object, **kwargs: object) -> object:
        # The owner answers only once the reader drains (it accepts no connection).
        await eventually(lambda: asyncio.to_thread(refuses, int(port)), "the reader drains", within=10)
        return await serve(*args, **kwargs)

    peer._serve_block_now, peer._serve_block = None, once_draining
    before = replayed(reader)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(kept)
        wait_for(lambda: reading(reader, sock), "the reader has the request")
        reader.server.should_exit = True  # as SIGTERM: the node drains
        answer = sock.makefile("rb")
        status, headers = read_head(answer)
        assert (status, answer.read(int(headers["content-length"]))) == (200, data)
        assert answer.read(1) == b""  # then closed
    assert replayed(reader) == before + 1


def raw_block_request(node: RunningGateway, query: str, when: int) -> bytes:
    header = sign(SECRET.encode(), "GET", BLOCK_PATH, query, when)
    return (f"GET {BLOCK_PATH}?{query} HTTP/1.1\r\nhost: {node.endpoint.removeprefix('http://')}\r\n"
            f"{AUTH_HEADER}: {header}\r\n\r\n").encode()


def test_a_block_request_sent_again_is_answered_as_kept_while_its_signature_holds(fleet, direct, monkeypatch):
    data, node, query = second_block_asked(fleet, direct)
    peer_app = node.server.config.app.peer
    request = raw_block_request(node, query, int(time.time()) - 280)
    [(status, _, _)] = exchange(node, request, answers=1)  # not held yet: the ASGI app fetches and keeps it
    assert status == 200
    answers = [exchange(node, request, answers=1)[0] for _ in range(3)]  # answered below ASGI, then as kept
    assert [(status, body) for status, _, body in answers] == [(200, data[BLOCK:])] * 3
    assert answers[1][1] == answers[2][1] == answers[0][1]  # the same headers (Date aside: within a second)
    assert peer_app.served["replayed"] == 2
    # The block gone: the request is parsed and answered the whole way (the owner fetches it again).
    store = node.server.config.app.s3.engine.store
    asyncio.run_coroutine_threadsafe(store.evict_prefix("bkt", "k"), node.server.servers[0].get_loop()).result(10)
    assert [(status, body) for status, _, body in exchange(node, request, answers=1)] == [(200, data[BLOCK:])]
    assert peer_app.served["replayed"] == 2
    for _ in range(2):  # held again: answered as kept again
        exchange(node, request, answers=1)
    assert peer_app.served["replayed"] == 4
    # Past its signature's time, kept or not, it is refused as any stale signature.
    import gateway.cluster.peer_api as peer_api
    import gateway.cluster.peers as peers
    import gateway.cluster.peersigning as peersigning
    later = SimpleNamespace(time=lambda: time.time() + 30)
    for module in (peer_api, peers, peersigning):
        monkeypatch.setattr(module, "time", later)
    host, port = node.endpoint.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(request)
        assert sock.makefile("rb").readline().split()[1] == b"403"
    assert peer_app.served["replayed"] == 4


def test_a_node_asks_for_a_block_again_with_the_same_bytes_and_its_owner_answers_them_as_kept(fleet, direct):
    data = os.urandom(BLOCK // 2)
    direct.put_object(Bucket="bkt", Key="k", Body=data)
    reader, owner = reader_of(fleet)
    exchange(reader, presigned(reader, "k"), answers=1)  # cold: the owner opens it
    peer_app = owner.server.config.app.peer
    before = peer_app.served["replayed"]
    for _ in range(3):  # signed for the start of the minute: a minute's start falls between at most two
        [(status, headers, body)] = exchange(reader, presigned(reader, "k"), answers=1)
        assert (status, headers["x-cache"], body) == (200, "hit-peer", data)
    assert peer_app.served["replayed"] >= before + 1
