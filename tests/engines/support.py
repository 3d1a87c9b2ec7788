"""What the engine tests share: the gateway's users and settings, the engines' catalogs (docs/clients.md
shows the same blocks), the gateway's access log kept in memory and the requests it sent to the origin.
(Kept out of conftest.py, which pytest imports under another module name than the tests would.)"""

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
from tests.support import REGION, RunningGateway

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
        # negative_ttl too: S3A and Trino probe keys that are folders (HEAD 404) on every query
        metadata=MetadataSettings(ttl=ttl, negative_ttl=ttl),
        listing=ListingSettings(ttl=ttl),
    )


def origin_requests(gateway: RunningGateway) -> Counter[str]:
    """Requests the gateway sent to the origin so far, by method."""
    return Counter(gateway.server.config.app.s3.engine.origin.requests)


ORIGIN_LOG: list[tuple[str, str | None, tuple[tuple[str, str], ...]]] = []  # (method, key, query) sent to the origin


def record_origin_requests(gateway: RunningGateway) -> None:
    """Keep (method, key, query) of every request this gateway sends to the origin in ORIGIN_LOG, to say in a
    failing assertion what the origin was asked (the gateway counts them by method only)."""
    origin = gateway.server.config.app.s3.engine.origin
    cls = type(origin)
    send = cls.send

    async def recorded(self: Any, method: str, bucket: str | None = None, key: str | None = None, **kwargs: Any) -> Any:
        if self is origin:
            ORIGIN_LOG.append((method, key, tuple(kwargs.get("query") or ())))
        return await send(self, method, bucket, key, **kwargs)

    cls.send = recorded


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


SPARK_JAVA_HOME = Path(os.environ.get("SPARK_JAVA_HOME", "/usr/lib/jvm/java-17-openjdk-amd64"))
# Hadoop S3A for the Hadoop that pyspark 4.3.0 ships (hadoop-client-api 3.5.0), and what hadoop-aws 3.5.0
# depends on at run time (versions from its parent pom, hadoop-project 3.5.0).
S3A_JARS = ("org.apache.hadoop:hadoop-aws:3.5.0", "software.amazon.awssdk:bundle:2.35.4",
            "software.amazon.s3.analyticsaccelerator:analyticsaccelerator-s3:1.3.1")
