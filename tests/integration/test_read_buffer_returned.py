"""Every share of `cache.read_buffer` taken by a read is given back, whatever becomes of the answer.

The reads here come from a disk tier (no memory tier), where every block read holds its share
of the buffer until the answer was sent. Requests fail in every way a reader can make them
fail, before and after the bytes were taken; afterwards the buffer is back at zero and a
normal cold read does not wait for it.
"""

from __future__ import annotations

import os
import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest

from gateway.config import CacheSettings, DiskTierSettings
from tests.support import client
from tests.waiting import wait_for

KiB = 1024
BLOCK = 64 * KiB
SMALL = os.urandom(3 * KiB)
LARGE = os.urandom(6 * BLOCK + 77)


def reads(gateway):  # type: ignore[no-untyped-def]
    return gateway.server.config.app.s3.engine


@pytest.fixture
def disk_gateway(start_gateway, clean_origin, tmp_path):  # type: ignore[no-untyped-def]
    gateway = start_gateway(cache=CacheSettings(
        block_size=BLOCK, memory_quota=0, readahead_blocks=2, read_buffer=5 * BLOCK,
        disk=(DiskTierSettings(path=str(tmp_path / "disk"), quota=64 * 1024 * KiB),)))
    s3 = client(gateway.endpoint)
    s3.create_bucket(Bucket="bkt")
    s3.put_object(Bucket="bkt", Key="small", Body=SMALL)
    s3.put_object(Bucket="bkt", Key="large", Body=LARGE)
    assert s3.get_object(Bucket="bkt", Key="small")["Body"].read() == SMALL  # now on disk
    assert s3.get_object(Bucket="bkt", Key="large")["Body"].read() == LARGE
    return gateway, s3


def _presigned(s3, key: str, **params: str) -> str:  # type: ignore[no-untyped-def]
    return s3.generate_presigned_url("get_object", Params={"Bucket": "bkt", "Key": key, **params}, ExpiresIn=300)


def _raw_get_and_hang_up(gateway, url: str, read: int) -> None:  # type: ignore[no-untyped-def]
    """Send a GET, read `read` bytes of the answer, close the connection."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(f"GET {parts.path}?{parts.query} HTTP/1.1\r\nHost: {parts.netloc}\r\n\r\n".encode())
        got = b""
        while len(got) < read:
            piece = sock.recv(65536)
            if not piece:
                break
            got += piece


BAD_OVERRIDES = [
    ("ResponseContentType", "\u20ac"),               # not ISO-8859-1
    ("ResponseContentDisposition", 'attachment; filename="\u6587.pdf"'),
    ("ResponseContentType", "text/plain\r\nx-evil: 1"),  # CR LF
    ("ResponseCacheControl", "no-cache\nx"),
    ("ResponseContentLanguage", "en\x00"),
    ("ResponseContentEncoding", "gzip\x7f"),
]


def test_a_thousand_failing_reads_leave_the_buffer_at_zero(disk_gateway):
    gateway, s3 = disk_gateway
    budget = reads(gateway).budget
    failing = []
    for key in ("small", "large"):
        for param, value in BAD_OVERRIDES:
            failing.append((_presigned(s3, key, **{param: value}), {}, 400))
        failing.append((_presigned(s3, key), {"Range": "bytes=99999999-"}, 416))
        failing.append((_presigned(s3, key), {"If-None-Match": "*"}, 304))
        failing.append((_presigned(s3, key), {"If-Match": '"nope"'}, 412))
        failing.append((_presigned(s3, key, PartNumber=0), {}, 400))
    with httpx.Client(timeout=10) as http:
        for n in range(1000):
            url, headers, status = failing[n % len(failing)]
            response = http.get(url, headers=headers)
            assert response.status_code == status, (url, response.text)
            if status == 400:
                assert "<Code>InvalidArgument</Code>" in response.text
    # Readers that hang up in the middle of the answer, after the blocks were taken.
    for n in range(40):
        large = n % 2 == 1
        _raw_get_and_hang_up(gateway, _presigned(s3, "large" if large else "small"),
                             read=70_000 if large and n % 4 == 1 else 200)
    wait_for(lambda: budget.used == 0, "the read buffer is all given back", within=10)
    overdrawn = budget.overdrawn
    started = time.monotonic()
    assert s3.get_object(Bucket="bkt", Key="large")["Body"].read() == LARGE
    assert s3.get_object(Bucket="bkt", Key="small", Range="bytes=5-9")["Body"].read() == SMALL[5:10]
    assert time.monotonic() - started < 4  # well short of the budget's 5 s max_wait
    assert budget.overdrawn == overdrawn and budget.used == 0


def test_a_latin_1_override_is_sent_as_latin_1(disk_gateway):
    """S3 accepts an ISO-8859-1 override and sends it as such; the buffer share goes back too."""
    gateway, s3 = disk_gateway
    url = _presigned(s3, "small", ResponseContentDisposition='attachment; filename="r\u00e9sum\u00e9.pdf"')
    response = httpx.get(url)
    assert response.status_code == 200 and response.content == SMALL
    assert response.headers.raw[[k.lower() for k, _ in response.headers.raw].index(b"content-disposition")][1] == \
        'attachment; filename="r\u00e9sum\u00e9.pdf"'.encode("latin-1")
    # The share goes back when the server finishes the request, just after the client has the answer.
    wait_for(lambda: reads(gateway).budget.used == 0, "the buffer share given back")


def test_a_control_character_override_is_an_error_in_the_access_log(disk_gateway, caplog):
    gateway, s3 = disk_gateway
    # The app logs a request as its last bytes go to the server: wait for the entry at the level that keeps it.
    with caplog.at_level("INFO", logger="gateway.access"):
        response = httpx.get(_presigned(s3, "small", ResponseContentType="a\r\nb: c"))
        request_id = response.headers["x-amz-request-id"]

        def logged() -> list[str]:
            return [r.getMessage() for r in caplog.records if request_id in r.getMessage()]
        wait_for(logged, "the request logged")
    assert response.status_code == 400 and "control characters" in response.text
    assert "a\\r\\nb: c" in response.text  # what was sent, escaped
    assert len(logged()) == 1 and '"status":400' in logged()[0]
