"""Fixtures of the engine tests: moto as the origin, a gateway in front of it with a read/write and a
read-only user, and the engines (Trino) as real servers whose catalogs point at the gateway or, for
comparison, straight at the origin.

These tests are marked `engines` and left out of `make test`; `make test-engines` runs them. Without
Java or Maven Central they skip saying why, except under CI (`CI` set), where they fail instead.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from gateway.config import (AuthSettings, CacheSettings, Grant, ListingSettings, MetadataSettings, OriginSettings,
                            ServerSettings, Settings, User)
from gateway.demo import moto_server
from tests.engines.jvm import EngineUnavailable, TrinoServer, trino_home
from tests.support import REGION, RunningGateway, client

WRITER = ("AKIAENGINEWRITER0001", "engine-writer-secret-00000000000000000001")
READONLY = ("AKIAENGINEREADER0001", "engine-reader-secret-00000000000000000001")
ORIGIN_KEYS = ("origin-key", "origin-secret")
BUCKET = "warehouse"
CACHE_TTL = 600.0  # metadata.ttl and listing.ttl of the engines' gateway: a second round of reads asks nothing
FRESH_TTL = 2.0  # the same of the `fresh` gateway: what changed behind it is seen after this
PART_SIZE = "5MB"  # Trino's s3.streaming.part-size: files past it are written as multipart uploads


def engine_missing(why: str) -> None:
    """Skip (saying why) on a developer's machine; fail under CI, which must run these tests."""
    if os.environ.get("CI"):
        pytest.fail(f"engine tests cannot run: {why}")
    pytest.skip(why)


@pytest.fixture(scope="session")
def engines_origin() -> Iterator[str]:
    """moto's S3 server with the `warehouse` bucket, for the engine tests alone (nothing resets it)."""
    with moto_server() as endpoint:
        client(endpoint, ORIGIN_KEYS).create_bucket(Bucket=BUCKET)
        yield endpoint


class AccessLog(logging.Handler):
    """The gateway's access log lines (`gateway.access`, one JSON object each), kept in memory."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        entry = json.loads(record.getMessage())
        with self._lock:
            self.lines.append(entry)

    @contextmanager
    def recording(self) -> Iterator[list[dict[str, Any]]]:
        """The lines logged inside the block (the list fills as the block runs, complete at its end)."""
        start = len(self.lines)
        taken: list[dict[str, Any]] = []
        yield taken
        with self._lock:
            taken.extend(self.lines[start:])


@pytest.fixture(scope="session")
def access_log() -> Iterator[AccessLog]:
    logger = logging.getLogger("gateway.access")
    handler = AccessLog()
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def engines_settings(origin: str, ttl: float) -> Settings:
    return Settings(
        origin=OriginSettings(endpoint=origin, access_key=ORIGIN_KEYS[0], secret_key=ORIGIN_KEYS[1], region=REGION,
                              read_timeout=30, connect_timeout=2),
        server=ServerSettings(host="127.0.0.1", port=0),
        auth=AuthSettings(users=(
            User(*WRITER, grants=(Grant(BUCKET, "", "readwrite"),)),
            User(*READONLY, grants=(Grant(BUCKET, "", "read"),)),
        )),
        cache=CacheSettings(memory_quota=256 * 1024**2),
        metadata=MetadataSettings(ttl=ttl),
        listing=ListingSettings(ttl=ttl),
    )


@pytest.fixture(scope="session")
def engines_gateway(engines_origin: str, access_log: AccessLog) -> Iterator[RunningGateway]:
    with RunningGateway(engines_settings(engines_origin, CACHE_TTL)) as running:
        yield running


@pytest.fixture(scope="session")
def fresh_gateway(engines_origin: str, access_log: AccessLog) -> Iterator[RunningGateway]:
    """A second gateway on the same origin whose metadata and listings live FRESH_TTL seconds."""
    with RunningGateway(engines_settings(engines_origin, FRESH_TTL)) as running:
        yield running


def origin_requests(gateway: RunningGateway) -> Counter[str]:
    """Requests the gateway sent to the origin so far, by method."""
    return Counter(gateway.server.config.app.s3.engine.origin.requests)


def s3_catalog(endpoint: str, keys: tuple[str, str]) -> dict[str, str]:
    """Trino's native S3 file system properties for a catalog, as docs/clients.md shows them."""
    return {
        "fs.native-s3.enabled": "true",
        "s3.endpoint": endpoint,
        "s3.path-style-access": "true",
        "s3.region": REGION,
        "s3.aws-access-key": keys[0],
        "s3.aws-secret-key": keys[1],
        "s3.streaming.part-size": PART_SIZE,
    }


def hive_catalog(endpoint: str, keys: tuple[str, str]) -> dict[str, str]:
    return {
        "connector.name": "hive",
        "hive.metastore": "file",
        "hive.metastore.catalog.dir": f"s3://{BUCKET}/hive-metastore",
        "hive.non-managed-table-writes-enabled": "true",
        **s3_catalog(endpoint, keys),
    }


def iceberg_catalog(endpoint: str, keys: tuple[str, str]) -> dict[str, str]:
    return {
        "connector.name": "iceberg",
        # Trino's file metastore for Iceberg (no Hive metastore service to run); named "testing" by Trino.
        "iceberg.catalog.type": "testing_file_metastore",
        "hive.metastore.catalog.dir": f"s3://{BUCKET}/iceberg-metastore",
        **s3_catalog(endpoint, keys),
    }


@pytest.fixture(scope="session")
def trino(engines_gateway: RunningGateway, fresh_gateway: RunningGateway, engines_origin: str, tmp_path_factory: pytest.TempPathFactory,
          ) -> Iterator[TrinoServer]:
    """Trino with catalogs `hive`, `iceberg` (the writer through the gateway), `hive_ro` (the read-only
    user through the gateway), `hive_fresh` (the writer through the short-TTL gateway), `hive_origin`,
    `iceberg_origin` (straight to moto) and `tpch`."""
    try:
        home = trino_home()
    except EngineUnavailable as exc:
        engine_missing(str(exc))
    gw = engines_gateway.endpoint
    catalogs = {
        "hive": hive_catalog(gw, WRITER),
        "hive_ro": hive_catalog(gw, READONLY),
        "hive_fresh": hive_catalog(fresh_gateway.endpoint, WRITER),
        "hive_origin": hive_catalog(engines_origin, ORIGIN_KEYS),
        "iceberg": iceberg_catalog(gw, WRITER),
        "iceberg_origin": iceberg_catalog(engines_origin, ORIGIN_KEYS),
        "tpch": {"connector.name": "tpch"},
    }
    server = TrinoServer(home, Path(tmp_path_factory.mktemp("trino")), catalogs)
    try:
        server.start()
    except EngineUnavailable as exc:
        engine_missing(str(exc))
    try:
        yield server
    finally:
        server.stop()
