"""Hive as its users run it: a Hive metastore service (Apache Hive's standalone metastore, embedded Derby)
shared by Trino (Hive connector on `hive.metastore.uri`) and Spark (`enableHiveSupport`,
`hive.metastore.uris`), the data and the metastore's own folders on the bucket through a fleet of two
gateway nodes sharing Redis (tests/engines/hms_fixtures.py): the metastore on node A, the engines on B.

Spark creates a partitioned table and fills it, partitions being added through the metastore (by INSERT,
`MSCK REPAIR TABLE` and `ALTER TABLE ADD PARTITION`); Trino reads it through the gateway as it reads it
straight from the origin. Trino writes a table that Spark reads the same way. The read-only user's
writes are refused with the gateway's Access Denied in both engines. The metastore's own folder
operations (create, rename, drop a table) go through node A and both nodes' listings show them at once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.engines.hms import WAREHOUSE, HiveMetastore
from tests.engines.hms_fixtures import Fleet, run_hms_job
from tests.engines.jvm import QueryError, TrinoServer, sorted_rows
from tests.engines.support import BUCKET, ORIGIN_KEYS, READONLY, WRITER, AccessLog, origin_requests
from tests.support import client

pytestmark = [pytest.mark.engines, pytest.mark.timeout(1800)]

SCHEMA = "hms_sales"  # hms_job.DATABASE
FOLDER = f"warehouse/{SCHEMA}.db/"  # the database's folder in the bucket
PRIORITIES = ["1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW", "6-LATE"]

TRINO_READS = {
    "by partition": "SELECT orderpriority, count(*), round(sum(totalprice), 2) FROM orders GROUP BY 1",
    "partition filter": "SELECT orderkey, totalprice FROM orders WHERE orderpriority = '6-LATE' AND totalprice > 490000",
    "predicate filter": "SELECT year(orderdate), count(*) FROM orders WHERE totalprice > 250000 GROUP BY 1",
    "partitions": 'SELECT orderpriority FROM "orders$partitions"',
    "files": 'SELECT count(DISTINCT "$path") FROM orders',
}


def keys_under(endpoint: str, credentials: tuple[str, str], prefix: str) -> list[str]:
    s3 = client(endpoint, credentials)
    return [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
            for o in page.get("Contents", [])]


def folders(endpoint: str, prefix: str = FOLDER) -> set[str]:
    """The folders under `prefix` as a delimited listing through `endpoint` (the writer) shows them."""
    answer = client(endpoint, WRITER).list_objects_v2(Bucket=BUCKET, Prefix=prefix, Delimiter="/")
    return {p["Prefix"][len(prefix):] for p in answer.get("CommonPrefixes", [])}


@pytest.fixture(scope="module")
def spark_orders(spark_jars: list[str], hive_metastore: HiveMetastore, hms_fleet: Fleet, access_log: AccessLog,
                 tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, object], list[dict[str, object]], Path]:
    """The orders table, created and filled by Spark (the writer, through node B)."""
    tmp = tmp_path_factory.mktemp("hms-spark")
    with access_log.recording() as lines:
        result = run_hms_job(tmp, spark_jars, hive_metastore, hms_fleet.b.endpoint, WRITER, "write")
    return result, lines, tmp


def test_spark_creates_and_partitions_a_table_through_the_metastore(spark_orders, engines_origin: str) -> None:
    result, lines, _ = spark_orders
    assert result["location"] == f"{WAREHOUSE}/{SCHEMA}.db/orders"
    assert result["partitions"] == [f"orderpriority={p}" for p in PRIORITIES]
    assert result["count"] == 22000
    seen = Counter((line["operation"], line["status"]) for line in lines)
    failed = {op: n for op, n in seen.items() if not (200 <= int(op[1]) < 300)
              and op not in (("HeadObject", 404), ("GetObject", 404))}  # 404s: S3A probing for what is not there yet
    assert not failed, f"requests the gateway refused: {failed}"
    keys = keys_under(engines_origin, ORIGIN_KEYS, f"{FOLDER}orders/")
    assert {k.split("/")[3] for k in keys if k.endswith(".parquet")} == {
        *(f"orderpriority={p}" for p in PRIORITIES[:5]), "late"}
    assert not [k for k in keys if "_temporary" in k or ".hive-staging" in k]  # the jobs committed


def test_trino_reads_what_spark_wrote_as_from_the_origin(hms_trino: TrinoServer, spark_orders) -> None:
    for name, sql in TRINO_READS.items():
        through = sorted_rows(hms_trino.query(sql, catalog="hive_hms", schema=SCHEMA))
        direct = sorted_rows(hms_trino.query(sql, catalog="hive_hms_origin", schema=SCHEMA))
        assert through == direct, name
    counts = {row[0]: row[1] for row in hms_trino.query(TRINO_READS["by partition"], catalog="hive_hms", schema=SCHEMA)}
    assert counts == {**{p: 4000 for p in PRIORITIES[:5]}, "6-LATE": 2000}


@pytest.fixture(scope="module")
def trino_customers(hms_trino: TrinoServer, spark_orders) -> int:
    """The customers table, written by Trino (the writer, through node B) into Spark's database."""
    hms_trino.query(f"CREATE TABLE hive_hms.{SCHEMA}.customers WITH (format = 'ORC', partitioned_by = ARRAY['mktsegment']) "
                    "AS SELECT custkey, name, acctbal, mktsegment FROM tpch.tiny.customer")
    return int(hms_trino.scalar("SELECT count(*) FROM tpch.tiny.customer"))


@pytest.fixture(scope="module")
def spark_reads(trino_customers: int, spark_orders, spark_jars: list[str], hive_metastore: HiveMetastore,
                hms_fleet: Fleet, engines_origin: str) -> tuple[dict[str, object], dict[str, object]]:
    """Spark's reads of both tables through node B as the read-only user (who then tries an INSERT), and
    the same reads straight from the origin."""
    _, _, tmp = spark_orders
    through = run_hms_job(tmp, spark_jars, hive_metastore, hms_fleet.b.endpoint, READONLY, "read", try_write=True)
    direct = run_hms_job(tmp, spark_jars, hive_metastore, engines_origin, ORIGIN_KEYS, "read")
    return through, direct


def test_spark_reads_what_trino_wrote_as_from_the_origin(spark_reads, trino_customers: int) -> None:
    through, direct = spark_reads
    assert {k: v for k, v in through.items() if k != "write"} == direct
    assert sum(row[1] for row in through["customers"]) == trino_customers
    assert len(through["customer partitions"]) == 5
    assert sum(row[1] for row in through["join"]) == 22000  # every order's customer is one Trino wrote


def test_the_read_only_users_writes_are_refused_in_both_engines(hms_trino: TrinoServer, spark_reads) -> None:
    assert hms_trino.scalar("SELECT count(*) FROM orders", catalog="hive_hms_ro", schema=SCHEMA) == 22000
    with pytest.raises(QueryError) as refused:
        hms_trino.query("INSERT INTO orders SELECT orderkey, custkey, totalprice, orderdate, orderpriority FROM orders "
                        "WHERE orderpriority = '6-LATE' LIMIT 10", catalog="hive_hms_ro", schema=SCHEMA)
    assert refused.value.mentions("Access Denied"), refused.value
    through, _ = spark_reads
    error = str(through["write"])
    assert error.startswith("refused: "), error
    assert "AccessDenied" in error or "Access Denied" in error, error[:3000]
    assert hms_trino.scalar("SELECT count(*) FROM orders", catalog="hive_hms", schema=SCHEMA) == 22000


def test_the_metastores_folder_operations_go_through_the_gateway_and_every_node_sees_them(
        hms_trino: TrinoServer, spark_orders, hms_fleet: Fleet, access_log: AccessLog, engines_origin: str) -> None:
    nodes = (hms_fleet.a.endpoint, hms_fleet.b.endpoint)
    for node in nodes:  # each node has listed the folder: the listing is in its cache (and in Redis)
        assert "orders/" in folders(node) and "moved/" not in folders(node)
    before = origin_requests(hms_fleet.a)
    with access_log.recording() as created:
        hms_trino.query(f"CREATE TABLE hive_hms.{SCHEMA}.made (x bigint)")  # the metastore makes its folder
    assert [line for line in created if line["operation"] == "PutObject" and line["key"] == f"{FOLDER}made/"]
    for node in nodes:
        assert "made/" in folders(node), node
    hms_trino.query(f"INSERT INTO hive_hms.{SCHEMA}.made VALUES 1, 2, 3")
    hms_trino.query(f"ALTER TABLE hive_hms.{SCHEMA}.made RENAME TO moved")  # the metastore moves the folder
    for node in nodes:
        assert {"made/", "moved/"} & folders(node) == {"moved/"}, node
    assert hms_trino.scalar(f"SELECT sum(x) FROM hive_hms.{SCHEMA}.moved") == 6
    hms_trino.query(f"DROP TABLE hive_hms.{SCHEMA}.moved")  # the metastore deletes the folder
    for node in nodes:
        assert not {"made/", "moved/"} & folders(node), node
    assert not keys_under(engines_origin, ORIGIN_KEYS, f"{FOLDER}made/")
    assert not keys_under(engines_origin, ORIGIN_KEYS, f"{FOLDER}moved/")
    sent = origin_requests(hms_fleet.a) - before  # node A carries the metastore's requests alone
    assert sent["PUT"] >= 2 and (sent["DELETE"] + sent["POST"]) >= 1, sent
