"""Streaming under failure: client disconnects, origins that die, stall, hang or are gone.

A small fault-injecting origin (raw asyncio HTTP/1.1 in a thread, below) plays the real
bucket. What it does depends on the key asked for:

  endless               HEAD: 200 with a 1 TiB Content-Length; GET: 64 KiB pieces as fast as taken, forever
  dies-after-<n>        HEAD: 200, 8 MiB; GET: the headers and <n> body bytes, then it closes
  stalls-after-<n>      HEAD: 200, 8 MiB; GET: the headers and <n> body bytes, then silence
  hangs                 reads any request and never answers
  hangs-get             HEAD: 200, 8 MiB; GET: reads it and never answers
  small-after-<n>       HEAD and GET: 200 with all <n> bytes, whatever Range asked for
  flaky-after-<n>       like small, but the first GET of it is cut off after half the bytes

It records every request and when the gateway closed each connection. Time bounds in
these tests are liveness bounds (something happens at all), not performance claims.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import io
import random
import threading
import time
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

import httpx
import pytest
from boto3.s3.transfer import TransferConfig
from defusedxml import ElementTree

from gateway.config import CacheSettings, OriginSettings
from tests.servers import free_port
from tests.support import RunningGateway, base_settings, client

KiB = 1024
MiB = 1024 * KiB
ENDLESS_SIZE = 1 << 40
DECLARED_SIZE = 8 * MiB
STREAM_PIECE = bytes(range(256)) * (64 * KiB // 256)
LAST_MODIFIED = "Wed, 01 Jan 2025 00:00:00 GMT"
ETAG = '"0123456789abcdef0123456789abcdef"'


# --- the fault-injecting origin -------------------------------------------------------------------


class FakeOrigin:
    """A misbehaving S3 origin on a free loopback port, served by an event loop in a thread."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="fake-origin", daemon=True)
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed: dict[str, threading.Event] = {}
        self._server: asyncio.Server | None = None
        self.requests: list[tuple[str, str]] = []  # (method, key), in arrival order
        self.sent: dict[str, int] = {}  # key -> body bytes written by the last GET of it
        self.port = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def closed(self, method: str, key: str) -> threading.Event:
        """Set when the gateway has closed the connection that carried `method key`."""
        with self._lock:
            return self._closed.setdefault(f"{method} {key}", threading.Event())

    def __enter__(self) -> FakeOrigin:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fake origin did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        async def shutdown() -> None:
            assert self._server is not None
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._connection, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)  # type: ignore[arg-type]
        try:
            while True:  # keep-alive: the gateway's pool reuses connections after a HEAD
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
                if int(headers.get("content-length") or 0):
                    await reader.readexactly(int(headers["content-length"]))
                key = urlsplit(target).path.rsplit("/", 1)[-1]
                with self._lock:
                    self.requests.append((method, key))
                try:
                    keep_alive = await self._answer(method, key, reader, writer)
                except ConnectionError:
                    keep_alive = False
                if not keep_alive:
                    self.closed(method, key).set()
                    return
        except asyncio.CancelledError:
            pass
        finally:
            writer.close()
            self._tasks.discard(task)  # type: ignore[arg-type]

    async def _answer(self, method: str, key: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection is over (and the gateway has let go of it)."""
        behaviour, _, after = key.partition("-after-")
        if behaviour == "hangs" or (behaviour == "hangs-get" and method == "GET"):
            await _until_peer_closes(reader)
            return False
        small = behaviour in ("small", "flaky")
        size = ENDLESS_SIZE if behaviour == "endless" else int(after) if small else DECLARED_SIZE
        if method == "HEAD":
            writer.write(_head(200, size))
            await writer.drain()
            return True
        if method != "GET":
            writer.write(_head(405, 0))
            await writer.drain()
            return True
        writer.write(_head(200, size))
        sent = 0
        if behaviour == "endless":
            while not reader.at_eof():  # the gateway's FIN arrives as EOF on our side
                writer.write(STREAM_PIECE)
                await writer.drain()  # paced by the gateway's reading; raises ConnectionError once it is gone
                sent += len(STREAM_PIECE)
                self.sent[key] = sent
            return False
        body = (STREAM_PIECE * (int(after) // len(STREAM_PIECE) + 1))[: int(after)]
        cut = behaviour == "flaky" and self.requests.count(("GET", key)) == 1
        if cut:
            body = body[: len(body) // 2]
        writer.write(body)
        await writer.drain()
        self.sent[key] = len(body)
        if cut:
            return False  # closed: EOF before Content-Length
        if small:
            return True
        if behaviour == "dies":
            return False  # the caller closes the socket: EOF long before Content-Length
        if behaviour == "stalls":
            await _until_peer_closes(reader)
            return False
        raise AssertionError(f"fake origin: unknown key {key!r}")


def _head(status: int, length: int) -> bytes:
    reason = {200: "OK", 405: "Method Not Allowed"}[status]
    return (
        f"HTTP/1.1 {status} {reason}\r\n"
        f"Content-Length: {length}\r\n"
        f"Content-Type: application/octet-stream\r\n"
        f"ETag: {ETAG}\r\n"
        f"Last-Modified: {LAST_MODIFIED}\r\n"
        f"x-amz-request-id: FAKEORIGIN000001\r\n"
        f"\r\n"
    ).encode("latin-1")


async def _until_peer_closes(reader: asyncio.StreamReader) -> None:
    try:
        while await reader.read(64 * KiB):
            pass
    except ConnectionError:
        pass


# --- fixtures and helpers --------------------------------------------------------------------------


@pytest.fixture
def fake_origin() -> Iterator[FakeOrigin]:
    with FakeOrigin() as origin:
        yield origin


# These tests are about the pass-through path (a read the cache does not keep streams
# straight from the origin); tests/integration/test_block_cache.py covers the block path.
NO_CACHE = CacheSettings(memory_quota=0)


def origin_settings(endpoint: str, **changes: object) -> OriginSettings:
    return dataclasses.replace(base_settings(endpoint).origin, endpoint=endpoint, **changes)  # type: ignore[arg-type]


def presigned_get(gateway: RunningGateway, key: str, bucket: str = "bkt") -> str:
    return client(gateway.endpoint).generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key})


def error_code(body: bytes) -> str:
    return ElementTree.fromstring(body).findtext("Code") or ""


# --- 1. a client that goes away cancels the origin request ----------------------------------------


def test_client_disconnect_mid_get_cancels_origin_request(
    fake_origin: FakeOrigin, start_gateway: Callable[..., RunningGateway]
) -> None:
    gw = start_gateway(origin=origin_settings(fake_origin.endpoint, retries=0), cache=NO_CACHE)
    received = 0
    with httpx.Client(timeout=10) as http:
        with http.stream("GET", presigned_get(gw, "endless")) as response:
            assert response.status_code == 200
            assert response.headers["content-length"] == str(ENDLESS_SIZE)
            for chunk in response.iter_raw():
                received += len(chunk)
                if received >= 384 * KiB:
                    break
        # Leaving both blocks closes the client's socket with the body unread.
    assert received >= 384 * KiB
    assert ("GET", "endless") in fake_origin.requests
    closed = fake_origin.closed("GET", "endless")
    assert closed.wait(5), (
        "the gateway kept reading from the origin after its client disconnected "
        f"({fake_origin.sent.get('endless', 0)} bytes sent by the origin so far)"
    )
    # `closed` is set once the origin's sending loop ended, the gateway gone: nothing keeps
    # pulling the stream.


# --- 2. an origin that fails mid-body never yields a complete-looking response --------------------


@pytest.mark.parametrize("key", ["dies-after-1048576", "dies-after-0", "stalls-after-1048576"])
def test_origin_failing_mid_body_aborts_the_client_connection(
    key: str, fake_origin: FakeOrigin, start_gateway: Callable[..., RunningGateway]
) -> None:
    gw = start_gateway(origin=origin_settings(fake_origin.endpoint, retries=0, read_timeout=1.0), cache=NO_CACHE)
    received = 0
    with httpx.Client(timeout=15) as http:
        with http.stream("GET", presigned_get(gw, key)) as response:
            assert response.status_code == 200
            assert response.headers["content-length"] == str(DECLARED_SIZE)
            with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
                for chunk in response.iter_raw():
                    received += len(chunk)
    assert received == int(key.rsplit("-", 1)[1]) < DECLARED_SIZE


@pytest.mark.parametrize("head_first", [False, True], ids=["cold-open", "block-fetch"])
def test_a_block_cut_off_mid_body_is_fetched_again(
    head_first: bool, fake_origin: FakeOrigin, start_gateway: Callable[..., RunningGateway]
) -> None:
    # Cached reads hold a block whole before sending it: a cut-off answer is asked for again
    # (the cold open falls back to HEAD + block GET), and the client never notices.
    gw = start_gateway(origin=origin_settings(fake_origin.endpoint, read_timeout=2.0), cache=CacheSettings())
    key = "flaky-after-100000"
    if head_first:  # the metadata is known: the block comes from a plain block fetch
        client(gw.endpoint).head_object(Bucket="bkt", Key=key)
    got = httpx.get(presigned_get(gw, key), timeout=30)  # one attempt (boto3 would retry a 503)
    assert got.status_code == 200 and got.content == (STREAM_PIECE * 2)[:100_000]
    assert fake_origin.requests.count(("GET", key)) == 2


# --- 3. an origin that is gone or never answers: 503 ----------------------------------------------


def test_unreachable_origin_is_service_unavailable(start_gateway: Callable[..., RunningGateway]) -> None:
    closed_port_endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    gw = start_gateway(origin=origin_settings(closed_port_endpoint, retries=0, connect_timeout=1.0, read_timeout=1.0), cache=NO_CACHE)
    started = time.monotonic()
    response = httpx.get(presigned_get(gw, "any-key"), timeout=30)
    elapsed = time.monotonic() - started
    assert response.status_code == 503
    assert error_code(response.content) == "ServiceUnavailable"
    assert response.headers["x-amz-request-id"]
    assert elapsed < 10, f"503 took {elapsed:.1f}s for a refused connection"


@pytest.mark.parametrize("key", ["hangs", "hangs-get"])
def test_origin_that_never_answers_is_service_unavailable_after_read_timeout(
    key: str, fake_origin: FakeOrigin, start_gateway: Callable[..., RunningGateway]
) -> None:
    gw = start_gateway(origin=origin_settings(fake_origin.endpoint, retries=0, read_timeout=1.0), cache=NO_CACHE)
    started = time.monotonic()
    response = httpx.get(presigned_get(gw, key), timeout=30)
    elapsed = time.monotonic() - started
    assert response.status_code == 503
    assert error_code(response.content) == "ServiceUnavailable"
    assert elapsed < 10, f"503 took {elapsed:.1f}s with a 1s origin read timeout"
    # The gateway gave up on the silent connection rather than leaving it open.
    method = "HEAD" if key == "hangs" else "GET"
    assert fake_origin.closed(method, key).wait(5)


# --- 4. a moderately large object round-trips through real moto -----------------------------------


def _pseudo_random(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


@pytest.mark.usefixtures("clean_origin")
def test_large_object_multipart_round_trip(gateway: RunningGateway, direct) -> None:  # type: ignore[no-untyped-def]
    # SDK response checksum validation off: this test is about the bytes (sha256 below);
    # the next test is about the checksum headers.
    s3 = client(gateway.endpoint, response_checksum_validation="when_required")
    s3.create_bucket(Bucket="bkt")
    data = _pseudo_random(64 * MiB, 64)
    config = TransferConfig(multipart_threshold=8 * MiB, multipart_chunksize=8 * MiB, max_concurrency=4)
    s3.upload_fileobj(io.BytesIO(data), "bkt", "large.bin", Config=config)
    assert direct.head_object(Bucket="bkt", Key="large.bin")["ETag"].endswith('-8"')
    body = s3.get_object(Bucket="bkt", Key="large.bin")["Body"]
    digest, total = hashlib.sha256(), 0
    while chunk := body.read(MiB):
        digest.update(chunk)
        total += len(chunk)
    assert total == len(data)
    assert digest.hexdigest() == hashlib.sha256(data).hexdigest()


@pytest.mark.usefixtures("clean_origin")
def test_multipart_object_get_passes_sdk_checksum_validation(gateway: RunningGateway, direct) -> None:  # type: ignore[no-untyped-def]
    """A default boto3 client validates response checksums; through the gateway as directly."""
    s3 = client(gateway.endpoint)  # botocore's default: response_checksum_validation="when_supported"
    s3.create_bucket(Bucket="bkt")
    data = _pseudo_random(15 * MiB, 15)
    config = TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB, max_concurrency=3)
    s3.upload_fileobj(io.BytesIO(data), "bkt", "parts.bin", Config=config)  # CRC32 per part, by default
    assert direct.get_object(Bucket="bkt", Key="parts.bin")["Body"].read() == data
    assert s3.get_object(Bucket="bkt", Key="parts.bin")["Body"].read() == data


def test_an_origin_that_ignores_ranges_still_serves_a_small_object_from_one_request(fake_origin):
    # The cold read asks for the first block with a Range; an answer of 200 with the whole
    # (small) object serves as both the metadata and the block.
    settings = dataclasses.replace(base_settings(fake_origin.endpoint), cache=CacheSettings())
    with RunningGateway(settings) as gw:
        expected = STREAM_PIECE[:1000]
        for _ in range(2):
            response = httpx.get(presigned_get(gw, "small-after-1000"), timeout=30)
            assert response.status_code == 200 and response.content == expected
        assert fake_origin.requests == [("GET", "small-after-1000")]
