"""`gateway load --table` on tables the engines wrote through the gateway: an Iceberg table from Trino
after a DELETE of a partition, an UPDATE and expire_snapshots, a Hive table from Trino filtered by
partition, an ORC table of many stripes from Trino (its stripe footers found), a Delta table from
Spark. The load runs on a gateway of its own on the same origin, whose origin requests are recorded
key by key: they show exactly the table's current files read, no other."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow.orc as orc
import pytest
from click.testing import CliRunner, Result

from gateway.cli import main
from gateway.config import AdminSettings, CacheSettings
from tests.engines.jvm import EngineUnavailable, TrinoServer, maven_artifact
from tests.engines.support import (BUCKET, CACHE_TTL, ORIGIN_KEYS, SPARK_JAVA_HOME, WRITER, engine_missing,
                                   engines_settings)
from gateway.admin.load import kept_apart
from gateway.engine.runs import GRANULE
from gateway.tables.footers import TAIL, footer_ranges
from tests.support import REGION, RunningGateway, client
from tests.tables.orcfile import assert_stripe_footers

pytestmark = [pytest.mark.engines, pytest.mark.timeout(1800)]

TOKEN = "engine-table-load-token"
LOADER_BLOCK = 256 * 1024
SCHEMA = "loads"


class Loader:
    """A gateway with an admin API on the engines' origin, and the keys it asked the origin for."""

    def __init__(self, gateway: RunningGateway) -> None:
        self.gateway = gateway
        self.gets: list[str] = []
        origin = gateway.server.config.app.s3.engine.origin
        # Every request goes through one of the two: aiohttp's (`send`), or the range client's
        # (`_buffered`: blocks, runs, HEADs and listing pages).
        send, buffered = origin.send, origin._buffered

        async def sent(method: str, bucket: str | None = None, key: str | None = None, **kwargs: Any) -> Any:
            if method == "GET" and key:
                self.gets.append(key)
            return await send(method, bucket, key, **kwargs)

        async def sent_buffered(method: str, bucket: str, key: str | None, query: Any, headers: dict[str, str]) -> Any:
            if method == "GET" and key:
                self.gets.append(key)
            return await buffered(method, bucket, key, query, headers)

        origin.send, origin._buffered = sent, sent_buffered  # type: ignore[method-assign]

    def load(self, location: str, *args: str) -> Result:
        self.gets.clear()
        return CliRunner().invoke(main, ["load", location, *args, "--url", self.gateway.endpoint, "--token", TOKEN],
                                  env={"GATEWAY_ADMIN_TOKEN": None})  # type: ignore[dict-item]

    def read(self, under: str) -> set[str]:
        return {key for key in self.gets if key.startswith(under)}

    def forget(self, prefix: str) -> None:
        """Forget what it cached under `prefix` (the engines wrote through the other gateway)."""
        httpx.post(f"{self.gateway.endpoint}/_gateway/purge", params={"bucket": BUCKET, "prefix": prefix},
                   headers={"authorization": f"Bearer {TOKEN}"}, timeout=30).raise_for_status()


@pytest.fixture(scope="module")
def loader(engines_origin: str) -> Iterator[Loader]:
    settings = dataclasses.replace(engines_settings(engines_origin, CACHE_TTL), admin=AdminSettings(token=TOKEN),
                                   cache=CacheSettings(memory_quota=256 * 1024**2, block_size=LOADER_BLOCK))
    with RunningGateway(settings) as running:
        yield Loader(running)


def planned(result: Result) -> set[str]:
    assert result.exit_code == 0, result.output
    return {line.split()[1].removeprefix(f"s3://{BUCKET}/") for line in result.output.splitlines() if "  s3://" in line}


def keys_of(rows: list[list[Any]]) -> set[str]:
    return {str(row[0]).split(f"s3://{BUCKET}/", 1)[1] for row in rows}


@pytest.fixture(scope="module")
def schemas(trino: TrinoServer) -> None:
    trino.query(f"CREATE SCHEMA iceberg.{SCHEMA}")
    trino.query(f"CREATE SCHEMA hive.{SCHEMA}")


def test_an_iceberg_table_after_delete_update_and_expire_loads_its_current_snapshot(
        trino: TrinoServer, schemas: None, loader: Loader, engines_origin: str) -> None:
    table = f"iceberg.{SCHEMA}.orders"
    trino.query(f"CREATE TABLE {table} WITH (format = 'PARQUET', partitioning = ARRAY['orderpriority']) AS "
                "SELECT orderkey, custkey, orderstatus, totalprice, orderdate, orderpriority FROM tpch.tiny.orders")
    trino.query(f"INSERT INTO {table} SELECT orderkey, custkey, orderstatus, totalprice, orderdate, orderpriority "
                "FROM tpch.tiny.orders WHERE orderstatus = 'F'")
    trino.query(f"DELETE FROM {table} WHERE orderpriority = '5-LOW'")  # files out of the snapshot, still stored
    trino.query(f"UPDATE {table} SET totalprice = 0 WHERE orderkey % 11 = 0")  # position deletes and new files
    current = keys_of(trino.query(f'SELECT file_path FROM {SCHEMA}."orders$files"', catalog="iceberg"))
    root = next(iter(current)).split("/data/")[0]
    stored = {o["Key"] for page in client(engines_origin, ORIGIN_KEYS).get_paginator("list_objects_v2").paginate(
        Bucket=BUCKET, Prefix=root + "/data/") for o in page.get("Contents", ())}
    assert current < stored  # the deleted partition's and the updated rows' old files are still there

    result = loader.load(f"s3://{BUCKET}/{root}", "--table", "iceberg")
    assert result.exit_code == 0, result.output
    assert f"loaded {len(current)} of {len(current)} files" in result.output
    assert loader.read(root + "/data/") == current  # an origin counter: no other file read
    urgent = planned(loader.load(f"s3://{BUCKET}/{root}", "--table", "iceberg", "--plan",
                                 "--partitions", "orderpriority=1-URGENT"))
    assert urgent == {key for key in current if "/orderpriority=1-URGENT/" in key} and urgent
    assert loader.read(root + "/data/") == set()  # a plan reads no data file

    trino.query(f"ALTER TABLE {table} EXECUTE expire_snapshots(retention_threshold => '0s')",
                session={"iceberg.expire_snapshots_min_retention": "0s"})
    assert trino.scalar(f'SELECT count(*) FROM {SCHEMA}."orders$snapshots"', catalog="iceberg") == 1
    loader.forget(root + "/metadata/")
    assert planned(loader.load(f"s3://{BUCKET}/{root}", "--table", "iceberg", "--plan")) == current


def test_a_hive_table_loads_exactly_the_partitions_a_filter_keeps(trino: TrinoServer, schemas: None,
                                                                  loader: Loader) -> None:
    trino.query(f"CREATE TABLE hive.{SCHEMA}.orders_hive WITH (format = 'ORC', partitioned_by = ARRAY['orderpriority']) "
                "AS SELECT orderkey, custkey, totalprice, orderdate, orderpriority FROM tpch.tiny.orders")
    files = keys_of(trino.query(f'SELECT DISTINCT "$path" FROM hive.{SCHEMA}.orders_hive'))
    root = next(iter(files)).split("/orderpriority=")[0]
    wanted = {key for key in files if "/orderpriority=1-URGENT/" in key or "/orderpriority=2-HIGH/" in key}
    result = loader.load(f"s3://{BUCKET}/{root}/", "--partitions", "orderpriority in (1-URGENT, 2-HIGH)")
    assert result.exit_code == 0, result.output
    # A prefix is loaded whole within the partitions kept: the data files and the metastore's own
    # files in their folders (.trinoSchema, which Trino's file metastore reads too); nothing else.
    read = loader.read(root + "/")
    assert {key for key in read if "/." not in key} == wanted and 0 < len(wanted) < len(files)
    assert all("/orderpriority=1-URGENT/" in key or "/orderpriority=2-HIGH/" in key for key in read)
    footers = loader.load(f"s3://{BUCKET}/{root}/", "--partitions", "orderpriority>=3", "--footers")
    assert footers.exit_code == 0, footers.output
    assert {key for key in loader.read(root + "/") if "/." not in key} == files - wanted


def test_a_trino_orc_file_has_every_stripe_footer_found_and_loaded(trino: TrinoServer, schemas: None, loader: Loader,
                                                                   engines_origin: str) -> None:
    trino.query(f"CREATE TABLE hive.{SCHEMA}.orders_stripes WITH (format = 'ORC') AS SELECT * FROM tpch.tiny.orders",
                session={"hive.orc_optimized_writer_max_stripe_rows": "1000"})
    files = keys_of(trino.query(f'SELECT DISTINCT "$path" FROM hive.{SCHEMA}.orders_stripes'))
    origin = client(engines_origin, ORIGIN_KEYS)
    read = 0  # of the ranges before the tails, those a load reads: one to a block (gateway.admin.load)
    for key in files:
        data = origin.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        footer, tail = footer_ranges(data, len(data)), len(data) - TAIL
        assert footer.format == "orc" and orc.ORCFile(io.BytesIO(data)).nstripes > 1, key
        assert_stripe_footers(data, footer.ranges, columns=10)  # the root struct and orders' 9 columns
        before = [(start, min(end, tail)) for start, end in footer.ranges if start < tail]
        read += len(kept_apart(before, tail, len(data), LOADER_BLOCK, GRANULE))
    root = next(iter(files)).rsplit("/", 1)[0]
    result = loader.load(f"s3://{BUCKET}/{root}/", "--footers")
    assert result.exit_code == 0, result.output
    assert f"(footers), {read} ranges read before the tails" in result.output


# Delta for Spark: no delta-spark is built for Spark 4.3 (pyspark 4.3.0); 4.4.0 is built for Spark 4.2 and
# writes commits on 4.3, not checkpoints (see delta_job.py).
DELTA_JARS = ("io.delta:delta-spark_2.13:4.4.0", "io.delta:delta-storage:4.4.0")
DELTA_JOB = Path(__file__).with_name("delta_job.py")


def test_a_delta_table_from_spark_loads_its_current_version(spark_jars: list[str], engines_gateway: RunningGateway,
                                                            loader: Loader, tmp_path: Path) -> None:
    try:
        jars = [*spark_jars, *(str(maven_artifact(c)) for c in DELTA_JARS)]
    except EngineUnavailable as exc:
        engine_missing(str(exc))
    root = "delta/events"
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"endpoint": engines_gateway.endpoint, "region": REGION, "access_key": WRITER[0],
                                "secret_key": WRITER[1], "jars": jars, "base": f"s3a://{BUCKET}/{root}"}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(JAVA_HOME=str(SPARK_JAVA_HOME), PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    done = subprocess.run([sys.executable, str(DELTA_JOB), str(spec)], env=env, capture_output=True, text=True,
                          timeout=900, check=False, cwd=DELTA_JOB.parent)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    causes = [line for line in done.stderr.splitlines() if "Exception" in line or "Error" in line][:40]
    assert done.returncode == 0 and lines, "\n".join([done.stdout[-3000:], *causes, done.stderr[-3000:]])
    written = json.loads(lines[-1][len("RESULT "):])
    print("what this delta-spark could not do on this Spark:", written["refused"])
    current = {url.split(f"{BUCKET}/", 1)[1] for url in written["files"]}
    orphans = {url.split(f"{BUCKET}/", 1)[1] for url in written["orphans"]}  # what a failed replacement wrote
    assert not orphans & current
    log = {o["Key"].rsplit("/", 1)[1] for o in client(engines_gateway.endpoint, WRITER).list_objects_v2(
        Bucket=BUCKET, Prefix=f"{root}/_delta_log/")["Contents"]}
    assert f"{written['version']:020d}.json" in log

    result = loader.load(f"s3://{BUCKET}/{root}", "--table", "delta")
    assert result.exit_code == 0, result.output
    assert f"loaded {len(current)} of {len(current)} files" in result.output
    assert {key for key in loader.read(root + "/") if "/_delta_log/" not in key} == current  # no orphan
    read_log = {key.rsplit("/", 1)[1] for key in loader.read(f"{root}/_delta_log/")}
    assert read_log == {f"{v:020d}.json" for v in range(written["version"] + 1)}  # the commits, nothing else
    later = planned(loader.load(f"s3://{BUCKET}/{root}", "--table", "delta", "--plan", "--partitions",
                                "day>=2026-12-03"))
    assert later == {key for key in current if "/day=2026-12-03/" in key or "/day=2026-12-04/" in key} and later
