"""A node of 4 workers under `gateway serve --workers 4` (real processes, moto origin) is one
cache: within its quota whatever the connections, one origin GET per block however many
workers miss it at once, and read-after-write on every worker, with and without Redis."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.support import GatewayProcess, client

BUCKET = "node"
BLOCK = 256 * 1024
QUOTA = 4 * 1024 * 1024
TOKEN = "node-token"


@pytest.fixture
def origin(origin_endpoint: str) -> str:
    httpx.post(origin_endpoint + "/moto-api/reset", timeout=10).raise_for_status()
    client(origin_endpoint, ("origin-key", "origin-secret")).create_bucket(Bucket=BUCKET)
    return origin_endpoint


def start_node(origin: str, **env: str) -> GatewayProcess:
    return GatewayProcess(origin, workers=4, GATEWAY_CACHE_MEMORY_QUOTA=str(QUOTA), GATEWAY_CACHE_BLOCK_SIZE=str(BLOCK),
                          GATEWAY_CACHE_READAHEAD_BLOCKS="0", GATEWAY_ADMIN_TOKEN=TOKEN, **env).start(timeout=60)


@pytest.fixture
def node(origin: str) -> Iterator[GatewayProcess]:
    gateway = start_node(origin)
    try:
        yield gateway
    finally:
        gateway.stop()


def fresh(endpoint: str):  # type: ignore[no-untyped-def]
    """A client with a connection of its own (the kernel gives each new connection to any worker)."""
    return client(endpoint, max_pool_connections=1)


def at_once(count: int, work: Callable[[int], object]) -> list[object]:
    results: list[object] = [None] * count
    barrier = threading.Barrier(count)

    def run(i: int) -> None:
        barrier.wait(10)
        try:
            results[i] = work(i)
        except Exception as exc:  # noqa: BLE001 -- reported by the test
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


def origin_gets(node: GatewayProcess) -> int:
    """The node's origin GETs so far, all workers together (the admin API's metrics)."""
    text = httpx.get(f"{node.endpoint}/_gateway/metrics", headers={"authorization": f"Bearer {TOKEN}"}, timeout=10).text
    assert re.search(r"^gateway_workers_answered 4\.0$", text, re.M), text[-2000:]
    match = re.search(r'^gateway_origin_requests_total\{method="GET"\} (\S+)$', text, re.M)
    return int(float(match[1])) if match else 0


def run_folder(node: GatewayProcess) -> Path:
    folders = [p for p in Path("/dev/shm").glob(f"s3gw-{node.port}-*")] or \
        [p for p in Path(os.environ.get("TMPDIR", "/tmp")).glob(f"s3gw-{node.port}-*")]
    assert len(folders) == 1, folders
    return folders[0]


def test_eight_cold_reads_on_different_connections_cost_no_more_origin_gets_than_readers(node: GatewayProcess):
    data = os.urandom(6 * BLOCK + 4321)  # 7 blocks
    fresh(node.endpoint).put_object(Bucket=BUCKET, Key="cold", Body=data)
    before = origin_gets(node)
    bodies = at_once(8, lambda i: fresh(node.endpoint).get_object(Bucket=BUCKET, Key="cold")["Body"].read())
    assert bodies == [data] * 8
    # A cold read is one GET for all its blocks; readers of one worker at the same moment wait for
    # the blocks it brings, those of another worker may make their own: never more GETs than the
    # readers would have sent S3 (it was one per block: 7).
    fetched = origin_gets(node) - before
    assert 1 <= fetched <= 8
    # Every worker now answers every block from memory.
    for got in at_once(8, lambda i: fresh(node.endpoint).get_object(Bucket=BUCKET, Key="cold")):
        assert not isinstance(got, Exception) and got["ResponseMetadata"]["HTTPHeaders"]["x-cache"] == "hit-mem"
    assert origin_gets(node) - before == fetched


def test_writes_past_the_quota_through_many_connections_leave_the_node_within_it(node: GatewayProcess):
    objects = {f"big/{i}": os.urandom(2 * BLOCK + 100) for i in range(24)}  # ~13 MiB through a 4 MiB memory tier

    def write_and_read(i: int) -> bytes:
        key = f"big/{i}"
        s3 = fresh(node.endpoint)
        s3.put_object(Bucket=BUCKET, Key=key, Body=objects[key])
        return s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()

    assert at_once(24, write_and_read) == list(objects.values())
    stats = httpx.get(f"{node.endpoint}/_gateway/stats", headers={"authorization": f"Bearer {TOKEN}"}, timeout=10).json()
    memory = next(t for t in stats["tiers"] if t["medium"] == "memory")
    assert memory["quota_bytes"] == QUOTA and 0 < memory["used_bytes"] <= QUOTA
    files = [p for p in (run_folder(node) / "memory").rglob("*") if p.is_file() and not p.name.startswith(".tmp-")]
    assert sum(p.stat().st_size for p in files) <= QUOTA + 300 * len(files)  # the block files' headers are not counted
    assert len(files) == memory["blocks"]


def test_a_write_is_seen_by_fifty_fresh_connections_at_once(node: GatewayProcess):
    read_after_write(node)


def test_a_write_is_seen_by_fifty_fresh_connections_at_once_with_redis(origin: str, clean_redis):
    gateway = start_node(origin, GATEWAY_REDIS_URL=f"redis://127.0.0.1:{clean_redis.port}/0")
    try:
        read_after_write(gateway)
    finally:
        gateway.stop()


def read_after_write(node: GatewayProcess) -> None:
    """Every worker caches the old version (metadata, blocks, the listing), a write goes through
    one of them, and 50 new connections at once each see only the new version."""
    old, new = os.urandom(BLOCK + 10), os.urandom(BLOCK + 20)
    fresh(node.endpoint).put_object(Bucket=BUCKET, Key="raw/k", Body=old)
    for _ in range(3):
        at_once(12, lambda i: (fresh(node.endpoint).get_object(Bucket=BUCKET, Key="raw/k")["Body"].read(),
                               fresh(node.endpoint).list_objects_v2(Bucket=BUCKET, Prefix="raw/")))
    etag = fresh(node.endpoint).put_object(Bucket=BUCKET, Key="raw/k", Body=new)["ETag"]

    def read(i: int) -> object:
        s3 = fresh(node.endpoint)
        if i % 3 == 0:
            return s3.get_object(Bucket=BUCKET, Key="raw/k")["Body"].read() == new
        if i % 3 == 1:
            head = s3.head_object(Bucket=BUCKET, Key="raw/k")
            return head["ETag"] == etag and head["ContentLength"] == len(new)
        listed = s3.list_objects_v2(Bucket=BUCKET, Prefix="raw/")["Contents"]
        return [(o["Key"], o["Size"], o["ETag"]) for o in listed] == [("raw/k", len(new), etag)]

    assert at_once(50, read) == [True] * 50
    fresh(node.endpoint).delete_object(Bucket=BUCKET, Key="raw/k")

    def gone(i: int) -> object:
        s3 = fresh(node.endpoint)
        if i % 2:
            return s3.list_objects_v2(Bucket=BUCKET, Prefix="raw/").get("KeyCount")
        try:
            s3.head_object(Bucket=BUCKET, Key="raw/k")
        except s3.exceptions.ClientError as exc:
            return exc.response["Error"]["Code"]
        return "found"

    assert at_once(50, gone) == [0 if i % 2 else "404" for i in range(50)]
