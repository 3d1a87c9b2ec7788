"""One Spark job (pyspark, local[2], Hadoop S3A) against an S3 endpoint, run as its own process by
tests/engines/test_spark.py: `python spark_job.py SPEC.json`, where the spec names the endpoint, the
keys, the S3A jars, the base path and the action; the job prints one JSON line `RESULT {...}`.

Actions:
- `write`: a partitioned Parquet table of orders, an ORC table of customers (both `CREATE TABLE ...
  USING ... PARTITIONED BY ... LOCATION 's3a://...'` in Spark's in-memory catalog, filled by INSERT),
  and one wide Parquet file past fs.s3a.multipart.size (a multipart upload, then S3A's rename: copy).
- `read`: the tables declared again over the same locations, their partitions recovered, then the
  read queries (partition filter, predicate filter, aggregation, join, SHOW PARTITIONS, input files).
- `write-denied`: an INSERT that must fail; prints the error's class and message instead of failing.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

S3A_MULTIPART = "5M"  # fs.s3a.multipart.size (its minimum): the wide file is uploaded in parts
WIDE_ROWS = 200_000


def s3a_conf(spec: dict[str, Any]) -> dict[str, str]:
    """The S3A settings, as docs/clients.md gives them (with the `spark.hadoop.` prefix)."""
    return {
        "spark.hadoop.fs.s3a.endpoint": spec["endpoint"],
        "spark.hadoop.fs.s3a.endpoint.region": spec["region"],
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "spark.hadoop.fs.s3a.access.key": spec["access_key"],
        "spark.hadoop.fs.s3a.secret.key": spec["secret_key"],
        "spark.hadoop.fs.s3a.multipart.size": S3A_MULTIPART,
    }


def local_builder(spec: dict[str, Any], app: str, conf: dict[str, str]) -> SparkSession.Builder:
    """A local Spark of two threads with the tests' settings, the spec's jars and S3A, and `conf` on top."""
    from pyspark.sql import SparkSession  # here: the module's settings are read without pyspark installed

    settings = {
        "spark.jars": ",".join(spec["jars"]), "spark.driver.memory": "1g", "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1", "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4",
        # the S3A task retry of a refused write is not what the read-only tests wait for
        "spark.task.maxFailures": "1", "spark.hadoop.fs.s3a.attempts.maximum": "2",
        "spark.hadoop.fs.s3a.retry.limit": "2", **s3a_conf(spec), **conf,
    }
    builder = SparkSession.builder.master("local[2]").appName(app)
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder


def session(spec: dict[str, Any]) -> SparkSession:
    return local_builder(spec, "s3gw-engine-test", {"spark.sql.catalogImplementation": "in-memory"}).getOrCreate()


def declare(spark: SparkSession, base: str) -> None:
    spark.sql(f"CREATE TABLE orders (orderkey BIGINT, custkey BIGINT, totalprice DOUBLE, orderdate DATE, "
              f"orderpriority STRING) USING parquet PARTITIONED BY (orderpriority) LOCATION '{base}/orders'")
    spark.sql(f"CREATE TABLE customers (custkey BIGINT, name STRING, acctbal DOUBLE, mktsegment STRING) "
              f"USING orc PARTITIONED BY (mktsegment) LOCATION '{base}/customers'")


PRIORITIES = ["1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW"]
SEGMENTS = ["AUTOMOBILE", "BUILDING", "FURNITURE", "HOUSEHOLD", "MACHINERY"]


def write(spark: SparkSession, base: str) -> dict[str, Any]:
    declare(spark, base)
    spark.range(0, 1500).selectExpr(
        "id AS custkey", "concat('Customer#', lpad(cast(id AS string), 9, '0')) AS name",
        "round(((id * 7919) % 1100000) / 100.0 - 1000, 2) AS acctbal",
        f"element_at(array({', '.join(repr(s) for s in SEGMENTS)}), cast(id % 5 AS int) + 1) AS mktsegment",
    ).createOrReplaceTempView("new_customers")
    spark.sql("INSERT INTO customers SELECT * FROM new_customers")
    for batch in range(2):  # two INSERTs: two sets of files in every partition
        spark.range(batch * 15000, (batch + 1) * 15000).selectExpr(
            "id AS orderkey", "(id * 31) % 1500 AS custkey", "round(((id * 104729) % 50000000) / 100.0, 2) AS totalprice",
            "date_add(DATE '1992-01-01', cast((id * 13) % 2400 AS int)) AS orderdate",
            f"element_at(array({', '.join(repr(p) for p in PRIORITIES)}), cast(id % 5 AS int) + 1) AS orderpriority",
        ).createOrReplaceTempView("new_orders")
        spark.sql("INSERT INTO orders SELECT * FROM new_orders")
    (spark.range(0, WIDE_ROWS).selectExpr("id", "sha2(cast(id AS string), 256) AS payload").coalesce(1)
     .write.mode("overwrite").parquet(f"{base}/wide"))
    return {"orders": spark.table("orders").count(), "customers": spark.table("customers").count()}


READS = {
    "partition filter": "SELECT count(*), round(sum(totalprice), 2) FROM orders WHERE orderpriority = '1-URGENT'",
    "predicate filter": "SELECT orderkey, custkey, totalprice FROM orders WHERE totalprice > 499000 "
                        "AND orderdate >= DATE '1995-01-01'",
    "aggregation": "SELECT orderpriority, year(orderdate), count(*), round(avg(totalprice), 2) FROM orders "
                   "GROUP BY 1, 2",
    "join": "SELECT c.mktsegment, count(*), round(sum(o.totalprice), 2) FROM orders o JOIN customers c "
            "ON o.custkey = c.custkey WHERE c.mktsegment IN ('BUILDING', 'MACHINERY') GROUP BY 1",
    "orc predicate": "SELECT custkey, name FROM customers WHERE acctbal > 9900 AND mktsegment = 'AUTOMOBILE'",
    "partitions": "SHOW PARTITIONS orders",
    "files": "SELECT count(DISTINCT _metadata.file_path), sum(DISTINCT _metadata.file_size) > 0 FROM orders",
}


def read(spark: SparkSession, base: str) -> dict[str, Any]:
    declare(spark, base)
    spark.sql("ALTER TABLE orders RECOVER PARTITIONS")
    spark.sql("ALTER TABLE customers RECOVER PARTITIONS")
    spark.read.parquet(f"{base}/wide").createOrReplaceTempView("wide")
    queries = dict(READS, wide="SELECT count(*), count(DISTINCT id), min(id), max(id) FROM wide")
    return {name: sorted([list(row) for row in spark.sql(sql).collect()], key=repr) for name, sql in queries.items()}


def write_denied(spark: SparkSession, base: str) -> dict[str, Any]:
    declare(spark, base)
    spark.sql("ALTER TABLE orders RECOVER PARTITIONS")
    count = spark.table("orders").count()
    try:
        spark.sql("INSERT INTO orders SELECT orderkey, custkey, totalprice, orderdate, orderpriority "
                  "FROM orders LIMIT 10")
    except Exception as exc:  # what the user would see: Spark's error with the S3A cause in it
        return {"count": count, "refused": True, "error": f"{type(exc).__name__}: {exc}"[:20000]}
    return {"count": count, "refused": False}


def main() -> None:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    spark = session(spec)
    spark.sparkContext.setLogLevel("WARN")
    try:
        action = {"write": write, "read": read, "write-denied": write_denied}[spec["action"]]
        result = action(spark, spec["base"])
    finally:
        spark.stop()
    print("RESULT " + json.dumps(result, default=str), flush=True)


if __name__ == "__main__":
    main()
