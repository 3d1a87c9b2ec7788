"""Faults: a gateway killed with SIGKILL in the middle of writes loses nothing it
acknowledged and leaves no partial object; SIGTERM lets in-flight reads finish first.

The gateway runs as a child process (tests/support.py GatewayProcess) in front of the
session's moto; what clients saw and what the origin holds are checked afterwards."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from botocore.exceptions import ClientError

from tests.servers import refuses
from tests.support import GatewayProcess, client
from tests.waiting import wait_for

pytestmark = pytest.mark.usefixtures("clean_origin")
MiB = 1024 * 1024


def start_partial_put(url: str, length: int, sent: int) -> socket.socket:
    """A presigned PUT whose body stops after `sent` of its `length` bytes (the connection stays open)."""
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=10)
    head = (f"PUT {parts.path}?{parts.query} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()
    sock.sendall(head + os.urandom(sent))
    return sock


def spooled(folder: Path) -> int:
    """The bytes of request bodies spooled to `folder` so far."""
    return sum(path.stat().st_size for path in folder.glob("gateway-body-*"))


def test_sigkill_during_writes_loses_nothing_acknowledged(origin_endpoint, direct, tmp_path):
    gateway = GatewayProcess(origin_endpoint, GATEWAY_SERVER_SPOOL_DIR=str(tmp_path),
                             GATEWAY_SERVER_SPOOL_MEMORY="1MiB").start()
    try:
        s3 = client(gateway.endpoint)
        s3.create_bucket(Bucket="faults")
        acknowledged = {f"ack/{i}": os.urandom(1000 + i) for i in range(20)}
        for key, body in acknowledged.items():
            s3.put_object(Bucket="faults", Key=key, Body=body)
        upload = s3.create_multipart_upload(Bucket="faults", Key="multi")["UploadId"]
        s3.upload_part(Bucket="faults", Key="multi", UploadId=upload, PartNumber=1, Body=os.urandom(5 * MiB))
        url = s3.generate_presigned_url("put_object", Params={"Bucket": "faults", "Key": "half"})
        partial = start_partial_put(url, 8 * MiB, 3 * MiB)
        wait_for(lambda: spooled(tmp_path) >= 2 * MiB, "the gateway receives (and spools) that body")
        assert gateway.proc is not None
        gateway.proc.send_signal(signal.SIGKILL)
        gateway.proc.wait(10)
        partial.close()
    finally:
        gateway.stop()
    for key, body in acknowledged.items():
        assert direct.get_object(Bucket="faults", Key=key)["Body"].read() == body
    for key in ("half", "multi"):  # never acknowledged: not an object at the origin
        with pytest.raises(ClientError) as missing:
            direct.head_object(Bucket="faults", Key=key)
        assert missing.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    # A new gateway on the same origin serves what was acknowledged.
    with GatewayProcess(origin_endpoint) as again:
        s3 = client(again.endpoint)
        for key, body in acknowledged.items():
            assert s3.get_object(Bucket="faults", Key=key)["Body"].read() == body


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_lets_in_flight_reads_finish_then_exits(origin_endpoint, direct, workers):
    data = os.urandom(24 * MiB)
    direct.create_bucket(Bucket="drain")
    direct.put_object(Bucket="drain", Key="big", Body=data)
    with GatewayProcess(origin_endpoint, workers=workers) as gateway:
        url = client(gateway.endpoint).generate_presigned_url("get_object", Params={"Bucket": "drain", "Key": "big"})
        digest, received = hashlib.sha256(), 0
        with httpx.stream("GET", url, timeout=30) as response:
            assert response.status_code == 200
            pieces = response.iter_raw(256 * 1024)
            first = next(pieces)
            digest.update(first)
            received += len(first)
            assert gateway.proc is not None
            gateway.proc.send_signal(signal.SIGTERM)
            # No new connections once shutting down; the read in flight (most of its 24 MiB
            # still to come: more than the sockets' buffers hold) goes on to its end.
            wait_for(lambda: refuses(gateway.port), "the gateway refuses new connections", within=10)
            for piece in pieces:
                digest.update(piece)
                received += len(piece)
        assert received == len(data) and digest.hexdigest() == hashlib.sha256(data).hexdigest()
        # Then it exits by itself, the way uvicorn ends a graceful shutdown: by re-raising
        # the signal it got (systemd and Kubernetes count that as a clean stop).
        assert gateway.proc.wait(20) in (0, -signal.SIGTERM)
        assert "Traceback" not in gateway.stop()
