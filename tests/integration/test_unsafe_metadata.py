"""An object whose metadata holds what a header cannot carry (a control character in a
value, a name that is no header token), written straight to the origin by another client,
is answered completely and alike on every path: the first read (ASGI), later ones (the hit
path, kept answers), and a node of several workers. As S3 does: a user metadata value
comes RFC 2047 encoded; another header no client could be sent is left out. (moto keeps no
metadata name that is no header token: tests/test_object_meta.py covers those.)"""

from __future__ import annotations

import base64
import socket
from collections.abc import Iterator

import httpx
import pytest

from tests.support import GatewayProcess, RunningGateway, client

BUCKET = "odd-meta"
BODY = b"the object's bytes\n" * 50
# Values as the origin stores them (user metadata: as boto3 sends them).
META = {
    "ctl": "one\x01two",
    "tabbed": "a\tb",  # a tab is fine in a header: kept as it is
    "plain": "as is",
}
CONTENT_DISPOSITION = 'attachment; filename="a\x02b.txt"'


def b_encoded(value: str) -> str:
    return "=?UTF-8?B?" + base64.b64encode(value.encode()).decode() + "?="


EXPECTED = {
    "x-amz-meta-ctl": b_encoded("one\x01two"),
    "x-amz-meta-accented-ctl": b_encoded("café\x1fbar\x7f"),
    "x-amz-meta-tabbed": "a\tb",
    "x-amz-meta-plain": "as is",
}


def put_odd_object(origin: str, key: str) -> None:
    direct = client(origin, ("origin-key", "origin-secret"))

    def add_utf8_value(request, **_: object) -> None:  # type: ignore[no-untyped-def]
        # boto3 refuses non-ASCII metadata, which other clients send (moto answers it as UTF-8).
        request.headers["x-amz-meta-accented-ctl"] = "café\x1fbar\x7f"

    direct.meta.events.register("before-sign.s3.PutObject", add_utf8_value)
    direct.put_object(Bucket=BUCKET, Key=key, Body=BODY, Metadata=META, ContentType="text/plain",
                      ContentDisposition=CONTENT_DISPOSITION)


def raw_answer(port: int, method: str, key: str, **params: object) -> tuple[bytes, dict[bytes, bytes], bytes]:
    """The gateway's answer off the socket (no client library to refuse or mend a header):
    its status line, headers and body."""
    request = client("http://127.0.0.1:%d" % port)
    url = request.generate_presigned_url("get_object" if method == "GET" else "head_object",
                                         Params={"Bucket": BUCKET, "Key": key, **params})
    path = url.split(str(port), 1)[1]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data, f"{method} {key}: the connection was closed without an answer"
    head, _, body = data.partition(b"\r\n\r\n")
    status, *lines = head.split(b"\r\n")
    headers: dict[bytes, bytes] = {}
    for line in lines:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip(b" ")
    return status, headers, body


def check_answer(port: int, method: str, key: str, **params: object) -> None:
    status, headers, body = raw_answer(port, method, key, **params)
    assert status.startswith(b"HTTP/1.1 20"), (status, headers)
    for name, value in headers.items():
        assert not any(c < 0x20 and c != 0x09 or c == 0x7F for c in name + value), (name, value)
    got = {name.decode(): value.decode("latin-1") for name, value in headers.items()}
    for expected_name, expected in EXPECTED.items():
        assert got.get(expected_name) == expected, (expected_name, got)
    assert "x-amz-missing-meta" not in got, got  # every entry could be sent (moto keeps no odd names)
    assert "content-disposition" not in got, got  # no header can carry it: left out, not counted
    assert got["content-type"] == "text/plain"
    assert got["content-length"] == str(len(BODY))
    assert body == (BODY if method == "GET" else b"")


@pytest.fixture
def origin(origin_endpoint: str, gateway: RunningGateway) -> str:
    httpx.post(origin_endpoint + "/moto-api/reset", timeout=10).raise_for_status()
    gateway.purge_caches()
    client(origin_endpoint, ("origin-key", "origin-secret")).create_bucket(Bucket=BUCKET)
    return origin_endpoint


def test_every_read_of_it_is_answered_whole(origin: str, gateway: RunningGateway) -> None:
    port = int(gateway.endpoint.rsplit(":", 1)[1])
    put_odd_object(origin, "head-first")
    put_odd_object(origin, "get-first")
    for _ in range(3):  # cold (ASGI), then the hit path and its kept answers
        check_answer(port, "HEAD", "head-first")
        check_answer(port, "GET", "head-first")
    for _ in range(3):
        check_answer(port, "GET", "get-first")
        check_answer(port, "HEAD", "get-first")
    for method in ("GET", "HEAD"):  # a part: the origin's answer, relayed
        check_answer(port, method, "get-first", PartNumber=1)


def test_boto3_reads_the_encoded_metadata(origin: str, gateway: RunningGateway) -> None:
    put_odd_object(origin, "k")
    s3 = client(gateway.endpoint)
    for _ in range(2):
        got = s3.get_object(Bucket=BUCKET, Key="k")
        assert got["Body"].read() == BODY
        assert got["Metadata"]["ctl"] == b_encoded("one\x01two") and got["Metadata"]["plain"] == "as is"
        assert "MissingMeta" not in got
        head = s3.head_object(Bucket=BUCKET, Key="k")
        assert head["Metadata"] == got["Metadata"] and head["ContentLength"] == len(BODY)


@pytest.fixture
def node(origin: str) -> Iterator[GatewayProcess]:
    gateway = GatewayProcess(origin, workers=3).start(timeout=60)
    try:
        yield gateway
    finally:
        gateway.stop()


def test_a_node_of_several_workers_answers_it_alike(origin: str, node: GatewayProcess) -> None:
    put_odd_object(origin, "head-first")
    put_odd_object(origin, "get-first")
    for _ in range(6):  # each on a connection of its own: any worker answers it
        check_answer(node.port, "HEAD", "head-first")
        check_answer(node.port, "GET", "get-first")
        check_answer(node.port, "GET", "head-first")
