"""bench/cache_serving.py: the requests wrk sends are what the SDKs send, and its --hits mode runs.

The request files are made by botocore itself (a boto3 client's get_object, caught before it is
sent); these check that the bytes are those boto3 puts on a socket, that every request is its
own and dated within S3's clock skew, and a brief run of every kind of row against the gateway
and nginx (skipped without wrk, nginx or taskset)."""

from __future__ import annotations

import importlib.util
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import boto3
import pytest
from botocore.config import Config

ROOT = Path(__file__).resolve().parent.parent


def serving_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("bench_cache_serving", ROOT / "bench" / "cache_serving.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_cache_serving"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _what_boto3_sends(key: str) -> bytes:
    """The bytes of one get_object boto3 sends to a socket (answered with an empty 200)."""
    cs = serving_module()
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.settimeout(30)
        got: list[bytes] = []

        def answer() -> None:
            conn, _ = server.accept()
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                got.append(data)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nETag: \"x\"\r\n\r\n")

        thread = threading.Thread(target=answer)
        thread.start()
        s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{server.getsockname()[1]}", region_name=cs.REGION,
                          aws_access_key_id=cs.USER[0], aws_secret_access_key=cs.USER[1],
                          config=Config(signature_version="s3v4", s3={"addressing_style": "path"},
                                        retries={"max_attempts": 2}))
        s3.get_object(Bucket=cs.BUCKET, Key=key)
        s3.close()
        thread.join(30)
    return got[0]


def _normal(request: bytes) -> bytes:
    """What differs between two requests of one key: the date, the signature, the invocation id, and
    the features boto3's user agent lists (in the order it used them)."""
    request = re.sub(rb"\d{8}T\d{6}Z", b"DATE", request)
    request = re.sub(rb"/\d{8}/", b"/DAY/", request)
    request = re.sub(rb"Signature=[0-9a-f]{64}", b"Signature=SIG", request)
    request = re.sub(rb"amz-sdk-invocation-id: [0-9a-f-]{36}", b"amz-sdk-invocation-id: ID", request)
    return re.sub(rb" m/[A-Za-z0-9,]+ ", b" m/FEATURES ", request)


def test_sdk_requests_are_the_bytes_boto3_sends() -> None:
    cs = serving_module()
    sent = _what_boto3_sends("warm/4KiB/000001")
    port = re.search(rb"host: 127\.0\.0\.1:(\d+)", sent).group(1).decode()  # type: ignore[union-attr]
    made = cs.sdk_requests(f"http://127.0.0.1:{port}", ["warm/4KiB/000001"], 1)[0]
    assert b"amz-sdk-invocation-id" in made and b"Authorization: AWS4-HMAC-SHA256 Credential=" in made
    assert _normal(made) == _normal(sent)


def test_each_request_is_its_own_and_dated_within_the_skew() -> None:
    cs = serving_module()
    start = time.time()
    keys = [f"k/{i}" for i in range(10)]
    requests = cs.sdk_requests("http://127.0.0.1:9", keys, 2000, start=start)
    assert len(set(requests)) == len(requests) == 2000
    ids = {re.search(rb"amz-sdk-invocation-id: (\S+)", r).group(1) for r in requests}  # type: ignore[union-attr]
    assert len(ids) == 2000
    dates = [time.mktime(time.strptime(re.search(rb"X-Amz-Date: (\S+)", r).group(1).decode(),  # type: ignore[union-attr]
                                       "%Y%m%dT%H%M%SZ")) for r in requests]
    steps = {b - a for a, b in zip(dates, dates[1:])}
    assert steps == {0, 1}  # one second at a time
    assert dates[-1] - dates[0] <= cs.DATE_WINDOW
    presigned = cs.presigned_new_requests("http://127.0.0.1:9", keys, 2000, start=start)
    assert len(set(presigned)) == 2000  # made sure of by the function too
    assert len(set(cs.same_bytes_requests("http://127.0.0.1:9", keys))) == len(keys)


@pytest.mark.skipif(any(shutil.which(tool) is None for tool in ("wrk", "nginx", "taskset")),
                    reason="needs wrk, nginx and taskset (apt)")
def test_hits_mode_runs_every_kind_of_row(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "cache_serving.py"), "--hits", "--seconds", "1", "--requests", "400",
         "--hits-objects", "4KiB=20,1MiB=4", "--retries", "0",
         "--hits-rows", "4KiB:sdk,1MiB:sdk,4KiB:presigned-new,4KiB:same-bytes"],
        capture_output=True, text=True, timeout=100, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:]]
            for line in done.stdout.splitlines() if line.startswith("| ") and "req/s" not in line}
    assert set(rows) == {"sdk 4KiB", "sdk 1MiB", "presigned-new 4KiB", "same-bytes 4KiB"}
    for name, cells in rows.items():
        assert cells[9] == "0/0", (name, cells)  # no errors at the gateway or nginx: every signature passed
        assert float(cells[0].replace(",", "")) > 0 and float(cells[2].replace(",", "")) > 0, (name, cells)
    assert "kept 0%" in rows["sdk 4KiB"][10]  # a request signed anew is never answered as kept
