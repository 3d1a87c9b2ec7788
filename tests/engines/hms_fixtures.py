"""Fixtures of the Hive metastore tests (imported by tests/engines/conftest.py): two gateway nodes sharing
a Redis (a fleet behind a balancer), the Hive metastore of tests/engines/hms.py writing its folders
through node A, Trino's catalogs on it added to the session's Trino, and Spark jobs with Hive support.

Node A takes the metastore's own S3A traffic, node B the engines' (Trino's and Spark's), as a balancer
would spread them; both cache for CACHE_TTL, so a change seen at once is seen through invalidation, not
expiry."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from gateway.config import RedisSettings
from tests.engines.hms import (WAREHOUSE, HiveMetastore, create_catalog, hms_catalog, hms_home,
                               spark_metastore_jars)
from tests.engines.jvm import EngineUnavailable, TrinoServer
from tests.engines.support import (CACHE_TTL, ORIGIN_KEYS, READONLY, SPARK_JAVA_HOME, WRITER, AccessLog,
                                   engine_missing, engines_settings)
from tests.redis_fixtures import RedisServer
from tests.support import REGION, RunningGateway
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
HMS_JOB = Path(__file__).with_name("hms_job.py")
JOB_TIMEOUT = 900  # seconds for one Spark job


class Fleet(NamedTuple):
    a: RunningGateway  # the metastore's node
    b: RunningGateway  # the engines' node


@pytest.fixture(scope="session")
def hms_fleet(engines_origin: str, access_log: AccessLog) -> Iterator[Fleet]:
    """Two gateway nodes on the engines' origin sharing their own redis-server."""
    redis = RedisServer()
    redis.start()
    try:
        settings = engines_settings(engines_origin, CACHE_TTL)
        settings = dataclasses.replace(settings, redis=RedisSettings(url=redis.url, socket_timeout=2.0))
        with RunningGateway(settings) as a, RunningGateway(settings) as b:
            def listening() -> bool:
                return all(node.server.config.app.s3.engine.shared.invalidation.listening() for node in (a, b))
            wait_for(listening, "both nodes listen for invalidations", within=30)
            yield Fleet(a, b)
    finally:
        redis.remove()


@pytest.fixture(scope="session")
def hive_metastore(hms_fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HiveMetastore]:
    """The metastore, its warehouse at WAREHOUSE through node A as the writer; once per session."""
    try:
        home = hms_home()
        metastore = HiveMetastore(home, tmp_path_factory.mktemp("hms"), hms_fleet.a.endpoint, WRITER, REGION)
        metastore.start()
    except EngineUnavailable as exc:
        engine_missing(str(exc))
        raise
    try:
        yield metastore
    finally:
        metastore.stop()


HMS_CATALOGS = ("hive_hms", "hive_hms_ro", "hive_hms_origin")


@pytest.fixture(scope="session")
def hms_trino(trino: TrinoServer, hive_metastore: HiveMetastore, hms_fleet: Fleet, engines_origin: str,
              ) -> Iterator[TrinoServer]:
    """The session's Trino with catalogs on the metastore: `hive_hms` (the writer through node B),
    `hive_hms_ro` (the read-only user through node B) and `hive_hms_origin` (straight to moto)."""
    uri = hive_metastore.uri
    catalogs = {"hive_hms": hms_catalog(uri, hms_fleet.b.endpoint, WRITER),
                "hive_hms_ro": hms_catalog(uri, hms_fleet.b.endpoint, READONLY),
                "hive_hms_origin": hms_catalog(uri, engines_origin, ORIGIN_KEYS)}
    for name, values in catalogs.items():
        trino.query(create_catalog(name, values))
    try:
        yield trino
    finally:
        for name in catalogs:
            trino.query(f"DROP CATALOG IF EXISTS {name}")


def run_hms_job(tmp_path: Path, jars: list[str], metastore: HiveMetastore, endpoint: str, keys: tuple[str, str],
                action: str, **options: Any) -> dict[str, Any]:
    """One Spark job of tests/engines/hms_job.py as its own process; its RESULT line."""
    if not (SPARK_JAVA_HOME / "bin" / "java").exists():
        engine_missing(f"no Java at {SPARK_JAVA_HOME}")
    spec = {"endpoint": endpoint, "region": REGION, "access_key": keys[0], "secret_key": keys[1], "jars": jars,
            "metastore": metastore.uri, "warehouse": WAREHOUSE, "action": action,
            "metastore_jars": spark_metastore_jars(), **options}
    workdir = tmp_path / f"{action}-{len(list(tmp_path.iterdir()))}"
    workdir.mkdir()
    (workdir / "spec.json").write_text(json.dumps(spec))
    env = dict(os.environ, JAVA_HOME=str(SPARK_JAVA_HOME), PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1",
               PYTHONPATH=str(REPO))
    env = {k: v for k, v in env.items() if not k.startswith("AWS_")}
    try:
        done = subprocess.run([sys.executable, str(HMS_JOB), str(workdir / "spec.json")], env=env, cwd=workdir,
                              capture_output=True, text=True, timeout=JOB_TIMEOUT, check=False)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"spark job {action} did not finish in {JOB_TIMEOUT}s: {str(exc.stderr)[-5000:]}") from None
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise AssertionError(f"spark job {action} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-8000:]}"
                             f"\nmetastore:\n{metastore.log_tail(40)}")
    return json.loads(lines[-1][len("RESULT "):])  # type: ignore[no-any-return]
