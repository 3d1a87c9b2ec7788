"""Slow and hostile clients cannot block others (gateway/httpserver.py, the server.* limits).

Each case holds raw sockets open the way a hostile or broken client does (a request head
one byte at a time that never ends, connections that send nothing, a head without end,
readers that stop reading a 64 MiB answer, a body announced and not sent, more
connections than the cap) and checks, while they hang on, that a normal boto3 client is
served promptly, then that each one was closed once its limit ran out and what it held
(the read buffer, cache.read_buffer) was given back.

The gateways run in this process with the limits of `gateway serve` (RunningGateway
guarded=True), so the engine's budget is read directly; the last case runs `gateway
serve` itself, to check that it is wired in and that SIGTERM is bounded too.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

import pytest
from botocore.exceptions import ClientError

from gateway.bytebudget import ByteBudget
from gateway.config import CacheSettings
from gateway.httpserver import GuardedProtocol
from tests.support import GatewayProcess, RunningGateway, base_settings, client
from tests.waiting import wait_for

MiB = 1024 * 1024
BUCKET = "hostile"
PROMPT = 5.0  # seconds a normal GET may take while the hostile clients hang on (it takes ~0.05 s)



@pytest.fixture
def guarded(origin_endpoint: str) -> Iterator[Callable[..., RunningGateway]]:
    """guarded(**server settings): a gateway with those server.* limits, and a bucket on it."""
    started: list[RunningGateway] = []

    def start(**server: object) -> RunningGateway:
        settings = base_settings(origin_endpoint)
        settings = dataclasses.replace(
            settings, server=dataclasses.replace(settings.server, **server),  # type: ignore[arg-type]
            cache=CacheSettings(block_size=MiB, readahead_blocks=4, read_buffer=16 * MiB))
        gateway = RunningGateway(settings, guarded=True).__enter__()
        started.append(gateway)
        s3 = client(gateway.endpoint)
        try:
            s3.create_bucket(Bucket=BUCKET)
        except ClientError as exc:  # made by an earlier test of the session
            assert exc.response["Error"]["Code"] in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists")
        return gateway

    yield start
    for gateway in started:
        gateway.__exit__()


def budget(gateway: RunningGateway) -> ByteBudget:
    return gateway.server.config.app.s3.engine.budget


def raw(gateway: RunningGateway, *, rcvbuf: int | None = None) -> socket.socket:
    sock = socket.socket()
    if rcvbuf is not None:  # a small window: the answer piles up at the gateway, not in this kernel
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(10)
    sock.connect(("127.0.0.1", urlsplit(gateway.endpoint).port))
    return sock


def get_head(url: str) -> bytes:
    parts = urlsplit(url)
    return f"GET {parts.path}?{parts.query} HTTP/1.1\r\nHost: {parts.netloc}\r\n\r\n".encode()


def answer(sock: socket.socket, within: float = 10.0) -> bytes:
    """What the gateway sent until it closed the connection (b'' if it only closed it)."""
    sock.settimeout(within)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data


def timed_get(s3, key: str, expected: bytes) -> float:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    body = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    assert hashlib.sha256(body).digest() == hashlib.sha256(expected).digest()
    return time.monotonic() - started


def test_slow_loris_idle_and_endless_heads_are_closed_while_others_are_served(guarded):
    gateway = guarded(head_timeout=1.5, max_head_size=16 * 1024)
    s3 = client(gateway.endpoint)
    s3.put_object(Bucket=BUCKET, Key="small", Body=b"small object")
    before = GuardedProtocol.head_timeouts, GuardedProtocol.heads_too_large
    loris = [raw(gateway) for _ in range(30)]
    idle = [raw(gateway) for _ in range(30)]
    endless = raw(gateway)
    head = b"GET /hostile/small HTTP/1.1\r\nHost: x\r\n"
    stop = threading.Event()

    def trickle() -> None:  # one byte of each loris head at a time, never its end
        for i in range(len(head)):
            for sock in loris:
                try:
                    sock.sendall(head[i:i + 1])
                except OSError:
                    pass
            if stop.wait(0.2):
                return

    trickler = threading.Thread(target=trickle, daemon=True)
    trickler.start()
    try:
        endless.sendall(head)
        with pytest.raises(OSError):  # headers without end: answered and closed past max_head_size
            for _ in range(64 * 1024):  # (64 MiB, if nothing stopped it)
                endless.sendall(b"X-Pad: " + b"a" * 1000 + b"\r\n")
        assert timed_get(s3, "small", b"small object") < PROMPT
        assert b"<Code>RequestHeaderSectionTooLarge</Code>" in answer(endless)
        # Past head_timeout: each loris got 400 RequestTimeout, each idle connection was closed.
        for sock in loris:
            assert b"<Code>RequestTimeout</Code>" in answer(sock)
        for sock in idle:
            assert answer(sock) == b""
        assert GuardedProtocol.head_timeouts - before[0] == len(loris)
        assert GuardedProtocol.heads_too_large - before[1] == 1
        assert timed_get(s3, "small", b"small object") < PROMPT
    finally:
        stop.set()
        trickler.join()
        for sock in [*loris, *idle, endless]:
            sock.close()


def test_stalled_readers_are_cut_off_and_give_back_the_read_buffer(guarded, origin_endpoint):
    gateway = guarded(stall_timeout=2.0)
    s3 = client(gateway.endpoint)
    direct = client(origin_endpoint, ("origin-key", "origin-secret"))  # (faster than through the gateway)
    direct.put_object(Bucket=BUCKET, Key="big", Body=os.urandom(64 * MiB))
    others = {f"other-{i}": os.urandom(3 * MiB) for i in range(2)}
    for key, body in others.items():
        direct.put_object(Bucket=BUCKET, Key=key, Body=body)
    url = s3.generate_presigned_url("get_object", Params={"Bucket": BUCKET, "Key": "big"})
    reads = budget(gateway)
    stalls = GuardedProtocol.stalls
    stalled = [raw(gateway, rcvbuf=4096) for _ in range(4)]
    try:
        for sock in stalled:
            sock.sendall(get_head(url))
            assert sock.recv(12) == b"HTTP/1.1 200"  # ... and not another byte is read
        # Four readers of 64 MiB blocks with readahead hold the whole read buffer (16 MiB) ...
        wait_for(lambda: reads.used >= reads.limit - 4 * MiB, "the stalled readers hold the budget", within=10)
        # ... and others are still served: their blocks wait for the budget at most until the stall is cut off.
        assert timed_get(s3, "other-0", others["other-0"]) < PROMPT
        # Past stall_timeout every stalled reader was disconnected, well before its 64 MiB were sent,
        # and the read buffer its blocks held is back.
        wait_for(lambda: GuardedProtocol.stalls - stalls == len(stalled), "the stalled readers cut off", within=20)
        for sock in stalled:
            assert len(answer(sock)) < 16 * MiB
        wait_for(lambda: reads.used == 0, "the read buffer is given back", within=10)
        waits = reads.waits
        assert timed_get(s3, "other-1", others["other-1"]) < PROMPT
        assert reads.waits == waits  # nothing waited for the budget any more
    finally:
        for sock in stalled:
            sock.close()


def test_a_body_announced_and_not_sent_is_cut_off(guarded):
    gateway = guarded(stall_timeout=1.0)
    s3 = client(gateway.endpoint)
    url = s3.generate_presigned_url("put_object", Params={"Bucket": BUCKET, "Key": "never"})
    parts = urlsplit(url)
    stalls = GuardedProtocol.stalls
    with raw(gateway) as sock:
        sock.sendall(f"PUT {parts.path}?{parts.query} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
                     f"Content-Length: {4 * MiB}\r\n\r\n".encode() + b"x" * 1000)
        started = time.monotonic()
        assert b"200 OK" not in answer(sock)
        assert time.monotonic() - started < 10
    assert GuardedProtocol.stalls - stalls == 1
    with pytest.raises(ClientError):
        s3.head_object(Bucket=BUCKET, Key="never")


def test_connections_past_the_cap_get_slow_down(guarded):
    gateway = guarded(max_connections=20)
    s3 = client(gateway.endpoint)
    s3.put_object(Bucket=BUCKET, Key="capped", Body=b"within the cap")
    s3.close()  # its pooled connection no longer counts
    held = [raw(gateway) for _ in range(20)]
    try:
        wait_for(lambda: len(gateway.server.server_state.connections) >= 20, "20 connections open", within=5)
        with raw(gateway) as extra:
            extra.sendall(b"GET /hostile/capped HTTP/1.1\r\nHost: x\r\n\r\n")
            refused = answer(extra)
        assert refused.startswith(b"HTTP/1.1 503") and b"<Code>SlowDown</Code>" in refused
        assert re.search(rb"(?i)connection: close", refused)
        with pytest.raises(ClientError) as slow:
            client(gateway.endpoint).get_object(Bucket=BUCKET, Key="capped")
        assert slow.value.response["Error"]["Code"] == "SlowDown"
    finally:
        for sock in held:
            sock.close()
    wait_for(lambda: len(gateway.server.server_state.connections) < 20, "the held connections closed", within=5)
    assert client(gateway.endpoint).get_object(Bucket=BUCKET, Key="capped")["Body"].read() == b"within the cap"


def test_gateway_serve_applies_the_limits_and_sigterm_is_bounded(origin_endpoint):
    with GatewayProcess(origin_endpoint, GATEWAY_SERVER_HEAD_TIMEOUT="500ms", GATEWAY_SERVER_STALL_TIMEOUT="60s",
                        GATEWAY_SERVER_SHUTDOWN_TIMEOUT="1s") as gateway:
        s3 = client(gateway.endpoint)
        s3.create_bucket(Bucket="hostile-serve")
        s3.put_object(Bucket="hostile-serve", Key="big", Body=os.urandom(16 * MiB))
        url = s3.generate_presigned_url("get_object", Params={"Bucket": "hostile-serve", "Key": "big"})
        with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as loris:
            loris.sendall(b"GET /hostile-serve/big HTTP/1.1\r\n")
            started = time.monotonic()
            assert b"<Code>RequestTimeout</Code>" in answer(loris)
            assert time.monotonic() - started < 5
        stalled = socket.socket()
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.connect(("127.0.0.1", gateway.port))
        stalled.sendall(get_head(url))
        assert stalled.recv(12) == b"HTTP/1.1 200"
        assert gateway.proc is not None
        gateway.proc.send_signal(signal.SIGTERM)  # the stalled reader would hold it for 60 s
        started = time.monotonic()
        gateway.proc.wait(15)
        assert time.monotonic() - started < 10
        stalled.close()
