"""Fixtures of the engine tests: moto as the origin, a gateway in front of it with a read/write and a
read-only user, and the engines (Trino, Spark) as real processes whose catalogs point at the gateway
or, for comparison, straight at the origin.

These tests are marked `engines` and left out of `make test`; `make test-engines` runs them. Without
Java or Maven Central they skip saying why, except under CI (`CI` set), where they fail instead.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engines.hms_fixtures import hive_metastore, hms_fleet, hms_trino  # noqa: F401 (fixtures: the Hive metastore's)
from tests.engines.jvm import EngineUnavailable, TrinoServer, maven_artifact, trino_home
from tests.engines.support import (BUCKET, CACHE_TTL, FRESH_TTL, ORIGIN_KEYS, READONLY, S3A_JARS, SPARK_JAVA_HOME,
                                   WRITER, AccessLog, engine_missing, engines_settings, hive_catalog,
                                   iceberg_catalog, record_origin_requests)
from tests.servers import moto_server
from tests.support import RunningGateway, client

@pytest.fixture(scope="session")
def engines_origin() -> Iterator[str]:
    """moto's S3 server with the `warehouse` bucket, for the engine tests alone (nothing resets it)."""
    with moto_server() as endpoint:
        client(endpoint, ORIGIN_KEYS).create_bucket(Bucket=BUCKET)
        yield endpoint


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


@pytest.fixture(scope="session")
def engines_gateway(engines_origin: str, access_log: AccessLog) -> Iterator[RunningGateway]:
    with RunningGateway(engines_settings(engines_origin, CACHE_TTL)) as running:
        record_origin_requests(running)
        yield running


@pytest.fixture(scope="session")
def fresh_gateway(engines_origin: str, access_log: AccessLog) -> Iterator[RunningGateway]:
    """A second gateway on the same origin whose metadata and listings live FRESH_TTL seconds."""
    with RunningGateway(engines_settings(engines_origin, FRESH_TTL)) as running:
        yield running


@pytest.fixture(scope="session")
def trino(engines_gateway: RunningGateway, fresh_gateway: RunningGateway, engines_origin: str,
          tmp_path_factory: pytest.TempPathFactory,
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


@pytest.fixture(scope="session")
def spark_jars() -> list[str]:
    """The S3A jars from Maven Central (cached), for `spark.jars`; skips (fails under CI) without pyspark or Java."""
    if importlib.util.find_spec("pyspark") is None:
        engine_missing("pyspark is not installed: pip install -e '.[engines]'")
    if not (SPARK_JAVA_HOME / "bin" / "java").exists():
        engine_missing(f"no Java at {SPARK_JAVA_HOME} (set SPARK_JAVA_HOME to a JDK 17 or 21)")
    try:
        return [str(maven_artifact(c)) for c in S3A_JARS]
    except EngineUnavailable as exc:
        engine_missing(str(exc))
        raise
