"""Trino (the server from Maven Central, single node) against the gateway in front of moto: the Hive
connector with a file metastore kept in the bucket and the native S3 file system (AWS SDK for Java v2),
then the Iceberg connector the same way.

The writes go through the gateway (CREATE TABLE AS and INSERT into partitioned Parquet and ORC tables,
files past `s3.streaming.part-size` as multipart uploads), the reads are compared with the same queries
through catalogs that point straight at moto, and a second round of the reads is answered from the
cache. A read-only user can SELECT and gets Trino's error, not a hang, on INSERT."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from tests.engines.support import BUCKET, FRESH_TTL, ORIGIN_KEYS, ORIGIN_LOG, AccessLog, origin_requests
from tests.engines.jvm import QueryError, TrinoServer, sorted_rows
from tests.support import RunningGateway, client
from tests.waiting import wait_for

pytestmark = [pytest.mark.engines, pytest.mark.timeout(1800)]

SCHEMA = "sales"
HIVE_ROOT = f"hive-metastore/{SCHEMA}"  # the schema's folder: the file metastore keeps its tables under its own folder
ORDERS = "orders_parquet"  # tpch.tiny.orders twice (CTAS, then INSERT), partitioned by orderpriority
CUSTOMERS = "customer_orc"  # tpch.tiny.customer, ORC, partitioned by mktsegment
WIDE = "wide_parquet"  # ~12 MB of hard-to-compress strings in one file: a multipart upload through the gateway
WIDE_ROWS = 200_000

# The read queries: a partition filter, a predicate filter, an aggregation, a join, metadata.
READS = {
    "partition filter": f"SELECT count(*), sum(totalprice) FROM {ORDERS} WHERE orderpriority = '1-URGENT'",
    "predicate filter": f"SELECT orderkey, custkey, totalprice FROM {ORDERS} "
                        f"WHERE totalprice > 450000 AND orderdate >= DATE '1995-01-01'",
    "aggregation": f"SELECT orderpriority, orderstatus, count(*), round(avg(totalprice), 2) FROM {ORDERS} "
                   f"GROUP BY orderpriority, orderstatus",
    "join": f"SELECT c.mktsegment, count(*), round(sum(o.totalprice), 2) FROM {ORDERS} o "
            f"JOIN {CUSTOMERS} c ON o.custkey = c.custkey WHERE c.mktsegment IN ('BUILDING', 'MACHINERY') "
            f"GROUP BY c.mktsegment",
    "orc predicate": f"SELECT custkey, name FROM {CUSTOMERS} WHERE acctbal > 9900 AND mktsegment = 'AUTOMOBILE'",
    "wide scan": f"SELECT count(*), count(DISTINCT substr(payload, 1, 3)), max(id) FROM {WIDE}",
    "partitions": f'SELECT orderpriority FROM "{ORDERS}$partitions"',
    "files": f'SELECT count(DISTINCT "$path") FROM {ORDERS}',
}


def ops(lines: list[dict[str, object]]) -> Counter[tuple[object, object]]:
    return Counter((line["operation"], line["status"]) for line in lines)


@pytest.fixture(scope="module")
def hive_tables(trino: TrinoServer, access_log: AccessLog) -> list[dict[str, object]]:
    """The schema and tables, written through the gateway by the writer; returns the access log of it."""
    with access_log.recording() as lines:
        trino.query(f"CREATE SCHEMA hive.{SCHEMA}")  # in the file metastore's folder: {HIVE_ROOT}
        trino.query(f"CREATE TABLE hive.{SCHEMA}.{ORDERS} WITH (format = 'PARQUET', partitioned_by = ARRAY['orderpriority']) "
                    "AS SELECT orderkey, custkey, orderstatus, totalprice, orderdate, orderpriority FROM tpch.tiny.orders")
        trino.query(f"INSERT INTO hive.{SCHEMA}.{ORDERS} "
                    "SELECT orderkey, custkey, orderstatus, totalprice, orderdate, orderpriority FROM tpch.tiny.orders")
        trino.query(f"CREATE TABLE hive.{SCHEMA}.{CUSTOMERS} WITH (format = 'ORC', partitioned_by = ARRAY['mktsegment']) "
                    "AS SELECT custkey, name, nationkey, acctbal, mktsegment FROM tpch.tiny.customer")
        trino.query(f"CREATE TABLE hive.{SCHEMA}.{WIDE} WITH (format = 'PARQUET') AS "
                    "SELECT x * 10000 + y AS id, to_hex(sha256(to_utf8(CAST(x * 10000 + y AS varchar)))) AS payload "
                    f"FROM UNNEST(sequence(0, {WIDE_ROWS // 10000 - 1})) AS a(x) CROSS JOIN UNNEST(sequence(0, 9999)) AS b(y)")
    return lines


def test_tables_are_written_through_the_gateway(hive_tables, engines_origin: str) -> None:
    seen = ops(hive_tables)
    # 404s are the metastore looking for files it has not written yet.
    failed = {op: n for op, n in seen.items() if not (200 <= int(op[1]) < 300) and op not in (("HeadObject", 404), ("GetObject", 404))}
    assert not failed, f"write-side requests the gateway refused: {failed}"
    assert seen[("PutObject", 200)] > 0
    # The wide table's file is past s3.streaming.part-size: one multipart upload.
    assert seen[("CreateMultipartUpload", 200)] >= 1 and seen[("CompleteMultipartUpload", 200)] >= 1
    assert seen[("UploadPart", 200)] >= 2
    origin = client(engines_origin, ORIGIN_KEYS)
    keys = [o["Key"] for page in origin.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{HIVE_ROOT}/")
            for o in page.get("Contents", [])]
    partitions = {k.split("/")[3] for k in keys if k.startswith(f"{HIVE_ROOT}/{ORDERS}/") and "=" in k}
    assert partitions == {f"orderpriority={p}" for p in ("1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW")}
    assert {k.split("/")[3] for k in keys if k.startswith(f"{HIVE_ROOT}/{CUSTOMERS}/") and "=" in k} == {
        f"mktsegment={s}" for s in ("AUTOMOBILE", "BUILDING", "FURNITURE", "HOUSEHOLD", "MACHINERY")}
    wide = [o for o in origin.list_objects_v2(Bucket=BUCKET, Prefix=f"{HIVE_ROOT}/{WIDE}/").get("Contents", [])
            if not o["Key"].rsplit("/", 1)[-1].startswith(".")]
    assert sum(o["Size"] for o in wide) > 5 * 1024**2  # past the part size
    assert any("-" in o["ETag"] for o in wide)  # a multipart upload's ETag


def test_the_tables_hold_what_was_written(trino: TrinoServer, hive_tables) -> None:
    source = trino.scalar("SELECT count(*) FROM tpch.tiny.orders")
    assert trino.scalar(f"SELECT count(*) FROM {ORDERS}", catalog="hive", schema=SCHEMA) == 2 * source
    assert sorted_rows(trino.query(f"SELECT orderpriority, count(*) FROM {ORDERS} GROUP BY 1", catalog="hive",
                                   schema=SCHEMA)) == sorted_rows(
        [[p, 2 * n] for p, n in trino.query("SELECT orderpriority, count(*) FROM tpch.tiny.orders GROUP BY 1")])
    assert sorted_rows(trino.query(f"SELECT custkey, acctbal FROM {CUSTOMERS}", catalog="hive", schema=SCHEMA)) == \
        sorted_rows(trino.query("SELECT custkey, acctbal FROM tpch.tiny.customer"))
    assert trino.query(f"SELECT count(*), count(DISTINCT id), min(id), max(id) FROM {WIDE}", catalog="hive",
                       schema=SCHEMA) == [[WIDE_ROWS, WIDE_ROWS, 0, WIDE_ROWS - 1]]


def test_metadata_queries(trino: TrinoServer, hive_tables) -> None:
    tables = {r[0] for r in trino.query(f"SHOW TABLES FROM hive.{SCHEMA}")}
    assert {ORDERS, CUSTOMERS, WIDE} <= tables
    partitions = trino.query(f'SELECT mktsegment FROM hive.{SCHEMA}."{CUSTOMERS}$partitions"')
    assert sorted(r[0] for r in partitions) == ["AUTOMOBILE", "BUILDING", "FURNITURE", "HOUSEHOLD", "MACHINERY"]
    columns = [r[0] for r in trino.query(f"DESCRIBE hive.{SCHEMA}.{ORDERS}")]
    assert columns == ["orderkey", "custkey", "orderstatus", "totalprice", "orderdate", "orderpriority"]
    ddl = trino.scalar(f"SHOW CREATE TABLE hive.{SCHEMA}.{ORDERS}")
    assert "format = 'PARQUET'" in ddl and "partitioned_by = ARRAY['orderpriority']" in ddl
    files = trino.query(f'SELECT DISTINCT "$path", "$file_size" FROM hive.{SCHEMA}.{CUSTOMERS}')
    assert len(files) >= 5 and all(path.startswith(f"s3://{BUCKET}/{HIVE_ROOT}/{CUSTOMERS}/mktsegment=")
                                   and size > 0 for path, size in files)


@pytest.mark.parametrize("name", list(READS))
def test_reads_match_the_origin(trino: TrinoServer, hive_tables, name: str) -> None:
    through = trino.query(READS[name], catalog="hive", schema=SCHEMA)
    direct = trino.query(READS[name], catalog="hive_origin", schema=SCHEMA)
    assert through, f"{name}: no rows"
    assert sorted_rows(through) == sorted_rows(direct)


def test_repeated_reads_are_served_from_the_cache(trino: TrinoServer, hive_tables, engines_gateway: RunningGateway,
                                                  access_log: AccessLog) -> None:
    engines_gateway.purge_caches()
    engines_gateway.evict_blocks(BUCKET)  # the reads before this test left blocks that would serve it
    rounds = []
    for _ in range(2):
        before, asked = origin_requests(engines_gateway), len(ORIGIN_LOG)
        with access_log.recording() as lines:
            results = {name: sorted_rows(trino.query(sql, catalog="hive", schema=SCHEMA)) for name, sql in READS.items()}
        rounds.append((results, origin_requests(engines_gateway) - before, lines))
        sent = ORIGIN_LOG[asked:]
    (cold_results, cold_origin, cold_lines), (warm_results, warm_origin, warm_lines) = rounds
    assert warm_results == cold_results
    cold_gets = [line for line in cold_lines if line["operation"] == "GetObject"]
    warm_gets = [line for line in warm_lines if line["operation"] == "GetObject"]
    assert cold_gets and warm_gets
    assert any(line["cache"] in ("miss", "partial") for line in cold_gets)
    warm_cache = Counter(line["cache"] for line in warm_gets)
    assert set(warm_cache) <= {"hit-mem", "hit-disk"}, f"warm GETs not served from the cache: {warm_cache}"
    print(f"origin requests: cold round {dict(cold_origin)}, warm round {dict(warm_origin)}")
    assert cold_origin["GET"] > 0 and warm_origin["GET"] == 0, (cold_origin, warm_origin, [" ".join(map(str, s)) for s in sent[:40]])
    assert sum(warm_origin.values()) < sum(cold_origin.values())


def test_a_read_only_user_can_select_and_is_refused_on_insert(trino: TrinoServer, hive_tables) -> None:
    assert trino.scalar(f"SELECT count(*) FROM {ORDERS} WHERE orderpriority = '5-LOW'", catalog="hive_ro",
                        schema=SCHEMA) > 0
    began = time.monotonic()
    with pytest.raises(QueryError) as refused:
        trino.query(f"INSERT INTO {ORDERS} SELECT orderkey, custkey, orderstatus, totalprice, orderdate, orderpriority "
                    "FROM tpch.tiny.orders LIMIT 10", catalog="hive_ro", schema=SCHEMA)
    assert refused.value.mentions("Access Denied"), refused.value
    assert time.monotonic() - began < 120  # refused, not retried into a hang
    with pytest.raises(QueryError) as refused_ctas:
        trino.query("CREATE TABLE refused AS SELECT 1 AS x", catalog="hive_ro", schema=SCHEMA)
    assert refused_ctas.value.mentions("Access Denied"), refused_ctas.value
    # Nothing changed: the writer still sees the rows it wrote.
    assert trino.scalar(f"SELECT count(*) FROM {ORDERS}", catalog="hive", schema=SCHEMA) == \
        2 * trino.scalar("SELECT count(*) FROM tpch.tiny.orders")


def test_an_object_overwritten_behind_the_gateway_is_seen_after_the_ttl(trino: TrinoServer, hive_tables,
                                                                       engines_origin: str) -> None:
    origin = client(engines_origin, ORIGIN_KEYS)
    key = f"external/{SCHEMA}/events/data.csv"
    origin.put_object(Bucket=BUCKET, Key=key, Body=b"1,one\n2,two\n")
    trino.query(f"CREATE TABLE hive.{SCHEMA}.external_events (id varchar, name varchar) "
                f"WITH (format = 'CSV', external_location = 's3://{BUCKET}/external/{SCHEMA}/events/')")
    query = f"SELECT id, name FROM hive_fresh.{SCHEMA}.external_events"  # through the short-TTL gateway
    assert sorted_rows(trino.query(query)) == [("1", "one"), ("2", "two")]
    origin.put_object(Bucket=BUCKET, Key=key, Body=b"1,uno\n2,dos\n3,tres\n")  # behind the gateway's back
    # (the TTL itself is checked on an injected clock in tests/engine/test_metadata.py)
    wait_for(lambda: sorted_rows(trino.query(query)) == [("1", "uno"), ("2", "dos"), ("3", "tres")],
             "the new rows seen through the gateway", within=FRESH_TTL + 30, interval=1)


# -- Iceberg ------------------------------------------------------------------------------------------------

ICE = "ice"


@pytest.fixture(scope="module")
def iceberg_tables(trino: TrinoServer) -> None:
    trino.query(f"CREATE SCHEMA iceberg.{ICE}")
    trino.query(f"CREATE TABLE iceberg.{ICE}.orders WITH (format = 'PARQUET', partitioning = ARRAY['orderpriority']) "
                "AS SELECT orderkey, custkey, orderstatus, totalprice, orderdate, orderpriority FROM tpch.tiny.orders")
    trino.query(f"INSERT INTO iceberg.{ICE}.orders SELECT orderkey, custkey, orderstatus, totalprice, orderdate, "
                "orderpriority FROM tpch.tiny.orders WHERE orderstatus = 'F'")
    trino.query(f"CREATE TABLE iceberg.{ICE}.customer WITH (format = 'ORC', partitioning = ARRAY['mktsegment']) "
                "AS SELECT custkey, name, acctbal, mktsegment FROM tpch.tiny.customer")


ICEBERG_READS = {
    "partition filter": "SELECT count(*), round(sum(totalprice), 2) FROM orders WHERE orderpriority = '2-HIGH'",
    "aggregation": "SELECT orderstatus, count(*) FROM orders GROUP BY 1",
    "join": "SELECT c.mktsegment, count(*) FROM orders o JOIN customer c ON o.custkey = c.custkey GROUP BY 1",
    "files": 'SELECT count(*), sum(record_count) FROM "orders$files"',
    "partitions": 'SELECT partition.orderpriority, record_count FROM "orders$partitions"',
    "snapshots": 'SELECT count(*) FROM "orders$snapshots"',
}


@pytest.mark.parametrize("name", list(ICEBERG_READS))
def test_iceberg_reads_match_the_origin(trino: TrinoServer, iceberg_tables, name: str) -> None:
    through = trino.query(ICEBERG_READS[name], catalog="iceberg", schema=ICE)
    direct = trino.query(ICEBERG_READS[name], catalog="iceberg_origin", schema=ICE)
    assert through
    assert sorted_rows(through) == sorted_rows(direct)


def test_iceberg_tables_hold_what_was_written(trino: TrinoServer, iceberg_tables) -> None:
    expected = trino.scalar("SELECT count(*) FROM tpch.tiny.orders") + \
        trino.scalar("SELECT count(*) FROM tpch.tiny.orders WHERE orderstatus = 'F'")
    assert trino.scalar("SELECT count(*) FROM orders", catalog="iceberg", schema=ICE) == expected
    assert trino.scalar('SELECT sum(record_count) FROM "orders$files"', catalog="iceberg", schema=ICE) == expected
    assert trino.scalar('SELECT count(*) FROM "orders$snapshots"', catalog="iceberg", schema=ICE) == 2
    assert trino.scalar("SELECT count(*) FROM customer", catalog="iceberg", schema=ICE) == \
        trino.scalar("SELECT count(*) FROM tpch.tiny.customer")


def test_iceberg_row_level_changes_through_the_gateway(trino: TrinoServer, iceberg_tables) -> None:
    """DELETE (of a whole partition, then of rows) and UPDATE: Iceberg writes position delete files and new
    snapshots through the gateway, and the origin's catalog reads the same table state."""
    trino.query("CREATE TABLE iceberg.ice.changes WITH (format = 'PARQUET', partitioning = ARRAY['orderstatus']) "
                "AS SELECT orderkey, orderstatus, totalprice FROM tpch.tiny.orders")
    trino.query("DELETE FROM iceberg.ice.changes WHERE orderstatus = 'P'")  # a whole partition: metadata only
    trino.query("DELETE FROM iceberg.ice.changes WHERE orderkey % 7 = 0")  # row-level: position delete files
    trino.query("UPDATE iceberg.ice.changes SET totalprice = 0 WHERE orderkey % 11 = 0")
    expected = trino.query("SELECT orderstatus, count(*), round(sum(IF(orderkey % 11 = 0, 0, totalprice)), 2) "
                           "FROM tpch.tiny.orders WHERE orderstatus <> 'P' AND orderkey % 7 <> 0 GROUP BY 1")
    query = "SELECT orderstatus, count(*), round(sum(totalprice), 2) FROM changes GROUP BY 1"
    assert sorted_rows(trino.query(query, catalog="iceberg", schema=ICE)) == sorted_rows(expected)
    assert sorted_rows(trino.query(query, catalog="iceberg_origin", schema=ICE)) == sorted_rows(expected)
    contents = {r[0] for r in trino.query('SELECT DISTINCT content FROM "changes$files"', catalog="iceberg", schema=ICE)}
    assert 1 in contents  # position deletes were written (content 1), besides data files (0)


def test_drop_table_deletes_its_files_through_the_gateway(trino: TrinoServer, hive_tables, engines_origin: str) -> None:
    trino.query(f"CREATE TABLE hive.{SCHEMA}.scratch WITH (format = 'ORC') AS SELECT * FROM tpch.tiny.nation")
    origin = client(engines_origin, ORIGIN_KEYS)
    prefix = f"{HIVE_ROOT}/scratch/"
    assert origin.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("KeyCount", 0) > 0
    assert trino.scalar(f"SELECT count(*) FROM hive.{SCHEMA}.scratch") == 25
    trino.query(f"DROP TABLE hive.{SCHEMA}.scratch")
    assert origin.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("KeyCount", 0) == 0
    with pytest.raises(QueryError) as gone:
        trino.query(f"SELECT count(*) FROM hive.{SCHEMA}.scratch")
    assert gone.value.name == "TABLE_NOT_FOUND"
