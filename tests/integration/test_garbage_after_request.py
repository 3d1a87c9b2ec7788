"""A whole request followed, in the same send, by bytes that are not HTTP (gateway/httpserver.py).

HTTP/1.1 (RFC 9112) answers the requests of a connection in order, and a message it cannot parse
with 400 and a close: so the GET before the garbage gets its whole answer, then comes a 400, then
the connection is closed. That must hold whoever answers the GET: the hit path below ASGI (a
cached object), or the app (an object of several blocks, or one not cached yet), and for a
GET pipelined before it. Requests are written to a raw socket, each in one send.
"""

from __future__ import annotations

import dataclasses
import itertools
import socket
from collections.abc import Iterator
from typing import BinaryIO

import pytest
from botocore.auth import S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from gateway.config import CacheSettings, MetadataSettings
from tests.support import ADMIN, REGION, RunningGateway, base_settings, client

BLOCK = 64 * 1024
BUCKET = "garbage"
SMALL = b"a cached object, answered below ASGI\n" * 3
BIG = bytes(range(251)) * (2 * BLOCK // 251 + 3)  # more than one block: the app answers it
GARBAGE = {"nul": b"\x00", "junk": b"junk\r\n\r\n", "space": b" ", "tls": b"\x16\x03\x01\x00\xa5\x01"}
_fresh = itertools.count()


@pytest.fixture(scope="module")
def gateway(origin_endpoint: str) -> Iterator[RunningGateway]:
    settings = dataclasses.replace(base_settings(origin_endpoint),
                                   cache=CacheSettings(block_size=BLOCK, memory_quota=64 * BLOCK),
                                   metadata=MetadataSettings(ttl=3600.0, negative_ttl=3600.0))
    direct = client(origin_endpoint, ("origin-key", "origin-secret"))
    direct.create_bucket(Bucket=BUCKET)
    direct.put_object(Bucket=BUCKET, Key="small.txt", Body=SMALL)
    direct.put_object(Bucket=BUCKET, Key="big.bin", Body=BIG)
    with RunningGateway(settings) as running:
        s3 = client(running.endpoint)
        for key in ("small.txt", "big.bin"):  # warmed: metadata and blocks in memory
            s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        yield running


def get(gateway: RunningGateway, key: str) -> bytes:
    """The whole head of a presigned GET of `key`."""
    request = AWSRequest(method="GET", url=f"{gateway.endpoint}/{BUCKET}/{key}")
    S3SigV4QueryAuth(Credentials(*ADMIN), "s3", REGION, expires=300).add_auth(request)
    target = request.url.removeprefix(gateway.endpoint)
    return f"GET {target} HTTP/1.1\r\nHost: {gateway.endpoint.removeprefix('http://')}\r\n\r\n".encode()


def target(gateway: RunningGateway, origin_endpoint: str, kind: str) -> tuple[str, bytes]:
    """(key, body) of an object the hit path answers ("hit") or the app does ("big", "miss")."""
    if kind == "hit":
        return "small.txt", SMALL
    if kind == "big":
        return "big.bin", BIG
    key, body = f"miss-{next(_fresh)}.txt", b"not cached yet %d\n" % next(_fresh)
    client(origin_endpoint, ("origin-key", "origin-secret")).put_object(Bucket=BUCKET, Key=key, Body=body)
    return key, body


def read_answer(reader: BinaryIO) -> tuple[int, dict[str, str], bytes]:
    """The next whole answer: status, headers (names lowered), body (by content-length)."""
    line = reader.readline()
    assert line.startswith(b"HTTP/1.1 "), line
    status = int(line.split()[1])
    headers = {}
    while (line := reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    body = reader.read(int(headers.get("content-length", 0)))
    return status, headers, body


Answer = tuple[int, dict[str, str], bytes]


def send(gateway: RunningGateway, payload: bytes, answers: int) -> tuple[list[Answer], bytes]:
    """`payload` in one send on a new connection: the `answers` read back, then what followed
    them until the gateway closed (b"" if it did at once; at most a second waited)."""
    host, port = gateway.endpoint.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock, sock.makefile("rb") as reader:
        sock.sendall(payload)
        out = [read_answer(reader) for _ in range(answers)]
        sock.settimeout(1.0)
        try:
            rest = reader.read()
        except TimeoutError:
            rest = b"<still open>"
    return out, rest


@pytest.mark.parametrize("garbage", GARBAGE.values(), ids=GARBAGE.keys())
@pytest.mark.parametrize("kind", ["hit", "big", "miss"])
def test_the_get_is_answered_then_400_then_closed(gateway: RunningGateway, origin_endpoint: str,
                                                  kind: str, garbage: bytes) -> None:
    key, body = target(gateway, origin_endpoint, kind)
    for _ in range(2):  # twice: the first answer is not kept as the answer to these bytes
        (ok, bad), rest = send(gateway, get(gateway, key) + garbage, answers=2)
        assert (ok[0], ok[2]) == (200, body)
        if kind == "hit":
            assert ok[1]["x-cache"] == "hit-mem"
        assert "close" not in ok[1].get("connection", "")
        assert bad[0] == 400 and bad[1]["connection"] == "close"
        assert rest == b""


@pytest.mark.parametrize("garbage", [b"", *GARBAGE.values()], ids=["none", *GARBAGE.keys()])
def test_pipelined_gets_are_answered_in_order(gateway: RunningGateway, origin_endpoint: str, garbage: bytes) -> None:
    objects = [target(gateway, origin_endpoint, kind) for kind in ("hit", "big", "miss", "hit")]
    payload = b"".join(get(gateway, key) for key, _ in objects) + garbage
    answers, rest = send(gateway, payload, answers=len(objects) + (1 if garbage else 0))
    assert [(status, got) for status, _, got in answers[:len(objects)]] == [(200, body) for _, body in objects]
    if garbage:
        assert answers[-1][0] == 400 and rest == b""
    else:
        assert rest == b"<still open>"  # keep-alive: the connection waits for the next request


def test_the_400_is_the_same_on_both_paths(gateway: RunningGateway, origin_endpoint: str) -> None:
    bad = []
    for kind in ("hit", "big"):
        key, _ = target(gateway, origin_endpoint, kind)
        (_, (status, headers, body)), _ = send(gateway, get(gateway, key) + b"junk\r\n\r\n", answers=2)
        bad.append((status, headers, body))
    assert bad[0] == bad[1]
