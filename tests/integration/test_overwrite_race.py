"""A read racing overwrites of its object is answered from one version of it, whole: S3 answers
a GET from one version, and so does the gateway, whether it knew the object's metadata or not.
(Before, a multi-block cold read took its first block from one origin answer and the rest from
others, pinned by If-Match: an overwrite in between cut the answer off after its headers.)"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import httpx
import pytest

from gateway.config import CacheSettings
from tests.support import GatewayProcess, RunningGateway, client

KiB = 1024
BLOCK = 64 * KiB
OLD = os.urandom(24 * BLOCK)
NEW = os.urandom(20 * BLOCK + 77)  # another length: a mix of the two could not pass for either


@pytest.fixture
def racing(start_gateway, clean_origin, direct) -> Iterator[tuple[RunningGateway, object, threading.Event]]:
    gateway = start_gateway(cache=CacheSettings(block_size=BLOCK, memory_quota=8 * 1024 * KiB, readahead_blocks=2))
    direct.create_bucket(Bucket="bkt")
    yield gateway, direct, threading.Event()


def overwriting(direct, key: str, stop: threading.Event) -> threading.Thread:  # type: ignore[no-untyped-def]
    """Another client putting the two versions in turn, straight to the origin, until `stop`."""
    def run() -> None:
        turn = 0
        while not stop.is_set():
            direct.put_object(Bucket="bkt", Key=key, Body=(OLD, NEW)[turn % 2])
            turn += 1
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def read_whole(gateway: RunningGateway | GatewayProcess, key: str) -> bytes:
    url = client(gateway.endpoint).generate_presigned_url("get_object", Params={"Bucket": "bkt", "Key": key})
    with httpx.stream("GET", url, timeout=30) as response:  # a cut body raises here
        assert response.status_code == 200
        body = response.read()
        assert len(body) == int(response.headers["content-length"])
    return body


def test_cold_reads_racing_overwrites_get_one_version_whole(racing):
    gateway, direct, stop = racing
    for i in range(12):  # a key the gateway never saw each time: its metadata and bytes from one GET
        key = f"cold-{i}"
        direct.put_object(Bucket="bkt", Key=key, Body=OLD)
        writer = overwriting(direct, key, stop)
        try:
            got = read_whole(gateway, key)
        finally:
            stop.set()
            writer.join()
            stop.clear()
        assert got in (OLD, NEW)


def test_reads_of_known_metadata_racing_overwrites_get_one_version_whole(racing):
    gateway, direct, stop = racing
    direct.put_object(Bucket="bkt", Key="k", Body=OLD)
    writer = overwriting(direct, "k", stop)
    try:
        for _ in range(12):
            # The metadata is forgotten each time, the blocks of the versions read are not: the read
            # asks for the metadata alone, then for the blocks it misses, pinned to that version.
            gateway.purge_caches()
            assert read_whole(gateway, "k") in (OLD, NEW)
    finally:
        stop.set()
        writer.join()


def test_reads_through_a_node_of_three_workers_racing_overwrites_get_one_version_whole(clean_origin, direct):
    # Each read on a connection of its own, so any worker answers it; the blocks of a read belong
    # to all three, and the worker reading fetches them in one origin answer (lending the others').
    direct.create_bucket(Bucket="bkt")
    stop = threading.Event()
    with GatewayProcess(clean_origin, workers=3, GATEWAY_CACHE_BLOCK_SIZE="64KiB") as node:
        for i in range(6):
            key = f"node-{i}"
            direct.put_object(Bucket="bkt", Key=key, Body=OLD)
            writer = overwriting(direct, key, stop)
            try:
                got = [read_whole(node, key) for _ in range(3)]  # the first cold, the others not
            finally:
                stop.set()
                writer.join()
                stop.clear()
            assert all(body in (OLD, NEW) for body in got)
