"""rangeclient: block GETs whose bodies land in one buffer, against raw HTTP/1.1 servers that
send their answers in awkward pieces, chunked, too long, cut off, stalled or over TLS; on
asyncio's own loop and on uvloop (the one the gateway runs on)."""

from __future__ import annotations

import asyncio
import ctypes
import mmap
import os
import shutil
import ssl
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import uvloop
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.config import OriginSettings
from gateway.errors import S3Error
from gateway.origin import Origin
from gateway.rangeclient import MalformedAnswer, RangeClient
from gateway.rangeclient.connection import ARRIVAL, FIRST_ARRIVAL
from gateway.rangeclient.fresh import PAGE, SMALLEST, all_in_memory, fresh_bytes
from gateway.rangeclient.wire import ChunkedDecoder, body_framing, parse_head
from tests.test_tls import make_certificate
from tests.waiting import eventually

KiB = 1024


@pytest.fixture(params=["asyncio", "uvloop"])
def event_loop_policy(request):  # type: ignore[no-untyped-def]
    return asyncio.DefaultEventLoopPolicy() if request.param == "asyncio" else uvloop.EventLoopPolicy()


Answer = Callable[[bytes], list[bytes]]
"""What the server writes for one request (its head, as read): the pieces, written one at a time."""


class RawServer:
    """A raw HTTP/1.1 server on this loop: each request is answered with `answer(request)`'s
    pieces, written one at a time with a pause between them (the client receives them in
    several reads); the connection then stays open unless `close_after` answers were sent.
    On a unix socket when `unix` names one. `written`: the pieces written so far."""

    def __init__(self, answer: Answer, *, close_after: int | None = None, pause: float = 0.003,
                 tls: ssl.SSLContext | None = None, unix: Path | None = None) -> None:
        self.answer, self.close_after, self.pause, self.tls, self.unix = answer, close_after, pause, tls, unix
        self.connections = 0
        self.written = 0
        self.requests: list[bytes] = []
        self._writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> RawServer:
        if self.unix is not None:
            self._server = await asyncio.start_unix_server(self._connection, str(self.unix))
            self.host = "unix"
        else:
            self._server = await asyncio.start_server(self._connection, "127.0.0.1", 0, ssl=self.tls)
            self.host = f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        for writer in self._writers:
            writer.close()
        await self._server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.append(writer)
        answered = 0
        try:
            while True:
                request = await reader.readuntil(b"\r\n\r\n")
                self.requests.append(request)
                for piece in self.answer(request):
                    writer.write(piece)
                    await writer.drain()
                    self.written += 1
                    await asyncio.sleep(self.pause)  # not synchronisation: a peer that answers in pieces
                answered += 1
                if self.close_after is not None and answered >= self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def client(**options: object) -> RangeClient:
    return RangeClient("https" if "ssl_context" in options else "http", connect_timeout=5,
                       read_timeout=float(options.pop("read_timeout", 10)),  # type: ignore[arg-type]
                       max_connections=int(options.pop("max_connections", 8)), **options)  # type: ignore[arg-type]


def pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


def length_head(length: int, extra: str = "") -> bytes:
    return f"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-{length - 1}/9999999\r\n" \
           f"Content-Length: {length}\r\n{extra}\r\n".encode()


async def get(rc: RangeClient, server: RawServer, limit: int = 4 * 1024 * KiB) -> tuple[int, dict[str, str], bytes]:
    response = await rc.get(server.host, "/b/k", {"host": server.host, "range": "bytes=0-"})
    return response.status, response.headers, await response.read_at_most(limit)


async def test_the_loops_are_the_ones_named(event_loop_policy):
    loop = asyncio.get_running_loop()
    assert isinstance(loop, uvloop.Loop) == isinstance(event_loop_policy, uvloop.EventLoopPolicy)


async def test_a_body_in_pieces_lands_whole_and_the_connection_is_used_again():
    body = os.urandom(300 * KiB + 7)
    async with RawServer(lambda _: [length_head(len(body)), *pieces(body, 50 * KiB)]) as server:
        rc = client()
        for _ in range(3):
            status, headers, data = await get(rc, server)
            assert (status, data, headers["content-length"]) == (206, body, str(len(body)))
        await rc.aclose()
    assert server.connections == 1
    assert server.requests[0].startswith(b"GET /b/k HTTP/1.1\r\nhost: 127.0.0.1:")


async def test_the_head_one_byte_at_a_time_and_the_body_with_it():
    body = os.urandom(3 * KiB)
    wire = length_head(len(body), "X-Amz-Meta-A: one\r\nx-amz-meta-a:  two \r\n") + body
    async with RawServer(lambda _: pieces(wire, 1), pause=0) as server:
        rc = client()
        status, headers, data = await get(rc, server)
        assert data == body and headers["x-amz-meta-a"] == "one,two"
        await rc.aclose()


async def test_a_body_that_arrives_before_it_is_asked_for_beyond_the_scratch_buffer():
    body = os.urandom(1024 * KiB)
    async with RawServer(lambda _: [length_head(len(body)) + body], pause=0) as server:
        rc = client()
        response = await rc.get(server.host, "/b/k", {"host": server.host})
        await eventually(lambda: response._connection._paused,  # type: ignore[union-attr]
                         "the body arrives unasked until the client stops reading, its 64 KiB buffer full")
        assert await response.read_at_most(len(body)) == body
        assert (await get(rc, server))[2] == body  # and the connection is whole
        await rc.aclose()
    assert server.connections == 1


async def test_a_chunked_body_and_an_interim_answer_before_it():
    chunks = [os.urandom(n) for n in (10 * KiB, 1, 70 * KiB)]
    wire = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + \
        b"".join(f"{len(c):x};ext=1\r\n".encode() + c + b"\r\n" for c in chunks) + b"0\r\nTrailer: x\r\n\r\n"
    async with RawServer(lambda _: pieces(wire, 999)) as server:
        rc = client()
        for _ in range(2):
            assert await get(rc, server) == (200, {"transfer-encoding": "chunked"}, b"".join(chunks))
        await rc.aclose()
    assert server.connections == 1


async def test_a_body_that_ends_with_the_connection():
    body = os.urandom(100 * KiB)
    async with RawServer(lambda _: [b"HTTP/1.1 200 OK\r\n\r\n", *pieces(body, 30 * KiB)], close_after=1) as server:
        rc = client()
        assert (await get(rc, server))[2] == body
        assert (await get(rc, server))[2] == body  # not pooled: a second connection
        await rc.aclose()
    assert server.connections == 2


@pytest.mark.parametrize("limit", [10 * KiB, 100 * KiB])  # the first bytes in a bytearray, then in fresh bytes
async def test_past_the_limit_the_first_bytes_and_the_connection_dropped(limit):
    body = os.urandom(200 * KiB)
    async with RawServer(lambda _: [length_head(len(body)), *pieces(body, 64 * KiB)]) as server:
        rc = client()
        data = (await get(rc, server, limit=limit))[2]
        assert len(data) == limit + 1 and body.startswith(data) and type(data) is bytes
        assert (await get(rc, server))[2] == body
        await rc.aclose()
    assert server.connections == 2


async def test_a_body_cut_off_is_a_connection_error():
    body = os.urandom(100 * KiB)
    async with RawServer(lambda _: [length_head(len(body)), body[:30 * KiB]], close_after=1) as server:
        rc = client()
        response = await rc.get(server.host, "/b/k", {"host": server.host})
        with pytest.raises(ConnectionError):
            await response.read_at_most(len(body))
        await rc.aclose()


async def test_a_stalled_answer_is_a_timeout_after_read_timeout():
    body = os.urandom(10 * KiB)
    async with RawServer(lambda _: [length_head(len(body)), body[:KiB]], pause=30) as server:
        rc = client(read_timeout=0.3)
        response = await rc.get(server.host, "/b/k", {"host": server.host})
        started = asyncio.get_running_loop().time()
        with pytest.raises(TimeoutError):
            await response.read_at_most(len(body))
        assert 0.25 < asyncio.get_running_loop().time() - started < 5
        await rc.aclose()


@pytest.mark.parametrize("close_seen", [False, True], ids=["close-in-flight", "close-seen"])
async def test_a_pooled_connection_the_server_closed_is_replaced_without_an_error(close_seen):
    body = b"x" * 100
    async with RawServer(lambda _: [length_head(len(body)) + body], close_after=1) as server:
        rc = client()
        for _ in range(3):
            assert (await get(rc, server))[2] == body
            if close_seen:  # else the next request is sent before the server's close arrives
                await eventually(lambda: not any(c.reusable() for c, _ in rc._idle.get(server.host, ())),
                                 "the client sees the server's close")
        await rc.aclose()
    assert server.connections == 3 and len(server.requests) == 3


async def test_a_head_answer_ends_with_its_head_whatever_its_content_length_and_the_connection_is_used_again():
    body = b"0123456789"

    def answer(request: bytes) -> list[bytes]:
        head = length_head(4 * 1024 * KiB)  # a HEAD's Content-Length is the object's: no body follows
        return [head] if request.startswith(b"HEAD ") else [length_head(len(body)) + body]

    async with RawServer(answer) as server:
        rc = client()
        for _ in range(2):
            response = await rc.get(server.host, "/b/k", {"host": server.host}, method="HEAD")
            assert (response.status, response.headers["content-length"]) == (206, str(4 * 1024 * KiB))
            assert await response.read_at_most(1024) == b""
        assert (await get(rc, server))[2] == body  # after the HEADs, on the same connection
        closed = await rc.get(server.host, "/b/k", {"host": server.host}, method="HEAD")
        await closed.aclose()  # closed unread: nothing of a body is left, the connection is pooled
        assert (await get(rc, server))[2] == body
        with pytest.raises(ValueError):
            await rc.get(server.host, "/b/k", {"host": server.host}, method="PUT")
        await rc.aclose()
    assert server.connections == 1
    assert [r.split(b" ", 1)[0] for r in server.requests] == [b"HEAD", b"HEAD", b"GET", b"HEAD", b"GET"]


async def test_a_body_read_in_parts_lands_part_by_part_and_the_connection_is_used_again():
    body = os.urandom(300 * KiB + 7)
    async with RawServer(lambda _: [length_head(len(body)), *pieces(body, 50 * KiB)]) as server:
        rc = client()
        for sizes in ([100 * KiB, 100 * KiB, 100 * KiB + 7], [7, 200 * KiB, 0, 100 * KiB], [len(body)]):
            response = await rc.get(server.host, "/b/k", {"host": server.host})
            parts = [await response.read_part(size) for size in sizes]
            assert [len(part) for part in parts] == sizes and b"".join(parts) == body
            assert all(isinstance(part, bytes) for part in parts)
        too_far = await rc.get(server.host, "/b/k", {"host": server.host})
        assert len(await too_far.read_part(300 * KiB)) == 300 * KiB
        with pytest.raises(ConnectionError):  # 7 bytes are left
            await too_far.read_part(8)
        with pytest.raises(RuntimeError):  # dropped with its connection
            await too_far.read_part(1)
        assert server.connections == 1  # the three answers read to their ends left it pooled
        assert (await get(rc, server))[2] == body  # on a new one: the one left mid-body was dropped
        await rc.aclose()
    assert server.connections == 2


async def test_a_part_read_as_it_arrives_is_told_in_stretches_that_are_the_part_s_bytes():
    body = os.urandom(900 * KiB + 5)
    async with RawServer(lambda _: [length_head(len(body)), *pieces(body, 40 * KiB)]) as server:
        rc = client()
        response = await rc.get(server.host, "/b/k", {"host": server.host})
        told: list[bytes] = []
        first = await response.read_part(700 * KiB, lambda view: told.append(bytes(view)))
        assert first == body[:700 * KiB] and b"".join(told) == first[:sum(map(len, told))]
        assert len(told) >= 2 and len(told[0]) >= FIRST_ARRIVAL  # (the rest came with the part)
        assert all(len(stretch) >= ARRIVAL for stretch in told[1:])
        assert await response.read_part(200 * KiB + 5, told.append) == body[700 * KiB:]
        assert (await get(rc, server))[2] == body  # the connection was pooled, whole
        await rc.aclose()
    assert server.connections == 1


async def test_a_part_complete_with_the_rest_filling_the_scratch_buffer_leaves_reading_paused():
    # The answer's rest arrives before the next part is asked for and fills the scratch buffer;
    # telling what arrived must not resume reading into a full buffer (uvloop: a fatal error).
    body = os.urandom(600 * KiB)

    def slow_reader(view: memoryview) -> None:
        time.sleep(0.05)  # the rest of the answer waits at the socket meanwhile, then comes at once

    async with RawServer(lambda _: [length_head(len(body)), body[:100 * KiB], body[100 * KiB:]]) as server:
        rc = client()
        response = await rc.get(server.host, "/b/k", {"host": server.host})
        parts = []
        for size in (300 * KiB, 300 * KiB):
            parts.append(await response.read_part(size, slow_reader))
            await asyncio.sleep(0.01)  # (as a run's pump keeps the part before it reads the next)
        assert b"".join(parts) == body
        assert (await get(rc, server))[2] == body
        await rc.aclose()
    assert server.connections == 1


async def test_a_chunked_body_is_read_whole_then_handed_out_in_parts():
    wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    async with RawServer(lambda _: pieces(wire, 7)) as server:
        rc = client()
        for _ in range(2):
            response = await rc.get(server.host, "/b/k", {"host": server.host})
            assert [await response.read_part(n) for n in (5, 0, 6)] == [b"hello", b"", b" world"]
            with pytest.raises(ConnectionError):  # nothing is left
                await response.read_part(1)
        await rc.aclose()
    assert server.connections == 1  # read to its end: pooled again


async def test_connection_close_and_http_1_0_answers_are_not_pooled():
    heads = iter([length_head(3, "Connection: close\r\n"), b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\n",
                  length_head(3)])
    async with RawServer(lambda _: [next(heads) + b"abc"]) as server:
        rc = client()
        for _ in range(3):
            assert (await get(rc, server))[2] == b"abc"
        await rc.aclose()
    assert server.connections == 3


@pytest.mark.parametrize("head", [
    b"HTTP/1.1 20 OK\r\n\r\n",
    b"HTTP/2 200 OK\r\n\r\n",
    b"ICY 200 OK\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nName : spaced\r\n\r\n",
    b"HTTP/1.1 200 OK\r\n folded: line\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
    b"HTTP/1.1 200 OK\r\nContent-Length: -3\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"HTTP/1.1 200 OK\r\nX: " + b"y" * 70 * KiB + b"\r\n\r\n",
])
async def test_a_malformed_answer_is_a_connection_error_and_the_connection_is_dropped(head):
    async with RawServer(lambda _: [head]) as server:
        rc = client()
        with pytest.raises(MalformedAnswer):
            await get(rc, server)
        await rc.aclose()


async def test_a_reader_cancelled_mid_body_gives_its_connection_slot_back():
    body = os.urandom(100 * KiB)
    async with RawServer(lambda _: [length_head(len(body)), body[:KiB], body[KiB:]], pause=0.5) as server:
        rc = client(max_connections=1)
        response = await rc.get(server.host, "/b/k", {"host": server.host})
        reading = asyncio.ensure_future(response.read_at_most(len(body)))
        await eventually(lambda: server.written >= 2, "the body's first piece sent; the rest comes 0.5 s later")
        reading.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reading
        # The one slot is free again, and the next answer comes on a new connection.
        assert (await asyncio.wait_for(get(rc, server), 10))[2] == body
        await rc.aclose()
    assert server.connections == 2


async def test_an_answer_not_read_and_forgotten_frees_its_slot():
    async with RawServer(lambda _: [length_head(5) + b"hello"]) as server:
        rc = client(max_connections=1)
        response = await rc.get(server.host, "/b/k", {"host": server.host})
        del response  # its reader was cancelled before it read anything
        assert (await asyncio.wait_for(get(rc, server), 10))[2] == b"hello"
        await rc.aclose()


async def test_over_tls(tmp_path: Path):
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make test certificates: apt-get install openssl")
    cert, key = make_certificate(tmp_path, "origin")
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert, key)
    trusted = ssl.create_default_context(cafile=str(cert))
    body = os.urandom(500 * KiB)
    async with RawServer(lambda _: [length_head(len(body)), *pieces(body, 100 * KiB)], tls=served) as server:
        rc = client(ssl_context=trusted)
        for _ in range(2):
            assert (await get(rc, server))[2] == body
        await rc.aclose()
    assert server.connections == 1


async def test_over_a_unix_socket_whatever_the_host(tmp_path: Path):
    body = os.urandom(200 * KiB)
    async with RawServer(lambda _: [length_head(len(body)), body], unix=tmp_path / "s") as server:
        rc = RangeClient("http", connect_timeout=5, read_timeout=5, max_connections=2, unix_socket=str(tmp_path / "s"))
        for _ in range(2):
            response = await rc.get("worker", "/_peer/v1/block?x=1", {"host": "worker"})
            assert await response.read_at_most(len(body)) == body
        await rc.aclose()
    assert server.requests == [b"GET /_peer/v1/block?x=1 HTTP/1.1\r\nhost: worker\r\n\r\n"] * 2
    assert server.connections == 1


async def test_a_request_may_wait_longer_than_the_client_s_read_timeout():
    async with RawServer(lambda _: [b"", length_head(5) + b"hello"], pause=0.6) as server:
        rc = client(read_timeout=0.2)
        with pytest.raises(TimeoutError):
            await get(rc, server)
        response = await rc.get(server.host, "/b/k", {"host": server.host}, read_timeout=5)
        assert await response.read_at_most(5) == b"hello"
        await rc.aclose()


async def test_header_values_that_would_split_the_request_are_refused():
    rc = client()
    with pytest.raises(ValueError):
        await rc.get("127.0.0.1:9", "/b/k", {"host": "127.0.0.1:9", "if-match": "x\r\nevil: 1"})
    await rc.aclose()


async def test_nothing_listening_is_a_connection_error():
    rc = client()
    with pytest.raises(ConnectionError):
        await rc.get("127.0.0.1:1", "/b/k", {"host": "127.0.0.1:1"})
    await rc.aclose()


async def test_the_origin_retries_a_500_and_maps_a_cut_off_block_to_service_unavailable():
    body = os.urandom(20 * KiB)
    answers = iter([[b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 5\r\n\r\noops!"],
                    [length_head(len(body)), body[:KiB]]])
    async with RawServer(lambda _: next(answers), close_after=1) as server:
        origin = Origin(OriginSettings(endpoint=f"http://{server.host}", access_key="a", secret_key="s",
                                       retries=1))
        response = await origin.get_block("b", "k", headers={"range": f"bytes=0-{len(body) - 1}"})
        assert response.status == 206
        with pytest.raises(S3Error) as cut:
            await response.read_at_most(len(body))
        assert cut.value.code == "ServiceUnavailable"
        await origin.aclose()
    assert origin.requests["GET"] == 2
    assert b"authorization: AWS4-HMAC-SHA256 Credential=a/" in server.requests[1]


# --- the parsers, by property ---------------------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=8), st.data())
def test_a_chunked_body_decodes_whatever_the_reads_it_comes_in(chunks, data):
    chunks = [c for c in chunks if c]
    wire = b"".join(f"{len(c):X}\r\n".encode() + c + b"\r\n" for c in chunks) + b"0\r\n\r\nafter"
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=10)))
    decoder, used = ChunkedDecoder(), 0
    for start, end in zip([0, *cuts], [*cuts, len(wire)]):
        if not decoder.done:
            used += decoder.feed(wire[start:end])
    assert decoder.done and bytes(decoder.body) == b"".join(chunks)
    assert wire[used:] == b"after"  # the bytes after the body are not taken


@given(st.binary(max_size=200))
def test_the_head_parser_never_raises_anything_but_malformed_answer(head):
    try:
        status, items, _ = parse_head(head)
        body_framing(status, items)
    except MalformedAnswer:
        pass


@given(st.dictionaries(st.from_regex(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,20}", fullmatch=True),
                       st.from_regex(r"[ -~]{0,40}", fullmatch=True).map(str.strip), max_size=6),
       st.integers(100, 599))
def test_a_head_parses_back_to_its_headers(headers, status):
    head = f"HTTP/1.1 {status} Whatever it says\r\n".encode() + \
        b"\r\n".join(f"{name}: {value}".encode() for name, value in headers.items())
    parsed_status, items, http10 = parse_head(head.rstrip(b"\r\n") if not headers else head)
    assert (parsed_status, http10) == (status, False)
    assert items == [(name.lower(), value) for name, value in headers.items()]


@pytest.mark.parametrize("size", [SMALLEST - 1, SMALLEST, SMALLEST + 1, 1024 * KiB + 3])
async def test_a_body_returned_is_never_changed_by_the_next_ones(size):
    bodies = [os.urandom(size) for _ in range(3)]
    sent = iter(bodies)
    async with RawServer(lambda _: [length_head(size), *pieces(next(sent), 40 * KiB)], pause=0) as server:
        rc = client()
        got = [(await get(rc, server))[2] for _ in bodies]
        await rc.aclose()
    assert all(type(data) is bytes for data in got)
    assert got == bodies  # each compared after all three were read
    assert server.connections == 1


@settings(max_examples=40, deadline=None)
@given(st.integers(SMALLEST, 3 * SMALLEST + 4097), st.binary(min_size=1, max_size=64))
def test_a_fresh_bytes_object_holds_what_was_written_through_its_view(size, pattern):
    data, view = fresh_bytes(size)
    content = (pattern * (size // len(pattern) + 1))[:size]
    view[:] = content
    view.release()
    assert type(data) is bytes and len(data) == size and data == content and hash(data) == hash(content)


def test_pages_are_known_to_be_in_memory_once_written_and_not_before():
    pages = 16
    area = mmap.mmap(-1, pages * PAGE)  # anonymous: no page in memory until written
    anchor = ctypes.c_char.from_buffer(area)
    start = ctypes.addressof(anchor)
    assert not all_in_memory(start, start + pages * PAGE)
    for page in range(pages - 1):
        area[page * PAGE] = 1
    assert not all_in_memory(start, start + pages * PAGE)
    area[(pages - 1) * PAGE] = 1
    assert all_in_memory(start, start + pages * PAGE)
    del anchor
    area.close()


def test_a_fresh_bytes_object_is_for_bodies_of_more_than_a_few_pages():
    with pytest.raises(ValueError):
        fresh_bytes(SMALLEST - 1)
