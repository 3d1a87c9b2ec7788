"""One Spark job with Hive support against the Hive metastore of tests/engines/hms.py, its data through
Hadoop S3A at an S3 endpoint; run as its own process by tests/engines/test_hms.py: `python hms_job.py
SPEC.json`, where the spec names the endpoint, the keys, the S3A jars, the metastore's URI and the
action; the job prints one JSON line `RESULT {...}`.

Actions:
- `write`: a database and a partitioned Hive Parquet table of orders (`CREATE TABLE ... PARTITIONED BY
  ... STORED AS PARQUET`, managed: the metastore makes its folder), four partitions filled by INSERT
  (Spark adds them to the metastore), the fifth written as bare files into the table's folder and
  registered by `MSCK REPAIR TABLE`, and one more by `ALTER TABLE ... ADD PARTITION` over files written
  the same way.
- `read`: the queries of READS over the orders and over the customers table Trino wrote; then, if the
  spec says `try_write`, an INSERT (the read-only user's, which must fail: its error is printed).
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from tests.engines.spark_job import local_builder  # (the runner puts the repository on PYTHONPATH)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DATABASE = "hms_sales"
ORDERS = "orders"  # written by Spark
CUSTOMERS = "customers"  # written by Trino (tests/engines/test_hms.py), read here
PRIORITIES = ["1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW"]


def hive_conf(spec: dict[str, Any]) -> dict[str, str]:
    """The metastore settings of Spark, as docs/clients.md gives them (with the S3A ones of s3a_conf)."""
    return {
        "spark.sql.catalogImplementation": "hive",
        "spark.hadoop.hive.metastore.uris": spec["metastore"],
        "spark.sql.warehouse.dir": spec["warehouse"],
        "spark.hadoop.hive.exec.dynamic.partition.mode": "nonstrict",
        "spark.sql.hive.metastore.version": "4.0.1",
        "spark.sql.hive.metastore.jars": "path",
        "spark.sql.hive.metastore.jars.path": ",".join(spec["metastore_jars"]),
    }


def session(spec: dict[str, Any]) -> SparkSession:
    return local_builder(spec, "s3gw-engine-test-hms", hive_conf(spec)).enableHiveSupport().getOrCreate()


def orders(spark: SparkSession, first: int, count: int, priority: str | None = None) -> Any:
    """`count` orders from `first`, the priority column left out when `priority` names the partition (the
    columns typed as the table's: the bare files are read with its schema)."""
    columns = ["id AS orderkey", "(id * 31) % 1500 + 1 AS custkey", "CAST(((id * 104729) % 50000000) / 100.0 AS DOUBLE) AS totalprice",
               "date_add(DATE '1992-01-01', cast((id * 13) % 2400 AS int)) AS orderdate"]
    if priority is None:
        columns.append(f"element_at(array({', '.join(repr(p) for p in PRIORITIES[:4])}), cast(id % 4 AS int) + 1) "
                       "AS orderpriority")
    return spark.range(first, first + count).selectExpr(*columns)


def write(spark: SparkSession, spec: dict[str, Any]) -> dict[str, Any]:
    spark.sql(f"CREATE DATABASE {DATABASE}")
    spark.sql(f"CREATE TABLE {DATABASE}.{ORDERS} (orderkey BIGINT, custkey BIGINT, totalprice DOUBLE, orderdate DATE) "
              "PARTITIONED BY (orderpriority STRING) STORED AS PARQUET")
    orders(spark, 0, 16000).createOrReplaceTempView("new_orders")
    spark.sql(f"INSERT INTO {DATABASE}.{ORDERS} PARTITION (orderpriority) SELECT * FROM new_orders")
    location = spark.sql(f"DESCRIBE FORMATTED {DATABASE}.{ORDERS}").where("col_name = 'Location'").first()[1]
    # Files dropped into a partition folder by someone else: the metastore learns of them by MSCK ...
    orders(spark, 16000, 4000, "5-LOW").coalesce(2).write.parquet(f"{location}/orderpriority=5-LOW")
    spark.sql(f"MSCK REPAIR TABLE {DATABASE}.{ORDERS}")
    # ... or by ADD PARTITION with the folder named.
    orders(spark, 20000, 2000, "6-LATE").coalesce(1).write.parquet(f"{location}/late")
    spark.sql(f"ALTER TABLE {DATABASE}.{ORDERS} ADD PARTITION (orderpriority = '6-LATE') LOCATION '{location}/late'")
    partitions = [row[0] for row in spark.sql(f"SHOW PARTITIONS {DATABASE}.{ORDERS}").collect()]
    return {"location": location, "partitions": sorted(partitions), "count": spark.table(f"{DATABASE}.{ORDERS}").count()}


READS = {
    "partition filter": f"SELECT count(*), round(sum(totalprice), 2) FROM {DATABASE}.{ORDERS} "
                        "WHERE orderpriority IN ('1-URGENT', '5-LOW', '6-LATE') GROUP BY orderpriority",
    "aggregation": f"SELECT orderpriority, year(orderdate), count(*), round(avg(totalprice), 2) "
                   f"FROM {DATABASE}.{ORDERS} GROUP BY 1, 2",
    "customers": f"SELECT mktsegment, count(*), round(sum(acctbal), 2), max(name) FROM {DATABASE}.{CUSTOMERS} "
                 "GROUP BY mktsegment",
    "join": f"SELECT c.mktsegment, count(*), round(sum(o.totalprice), 2) FROM {DATABASE}.{ORDERS} o "
            f"JOIN {DATABASE}.{CUSTOMERS} c ON o.custkey = c.custkey GROUP BY 1",
    "customer partitions": f"SHOW PARTITIONS {DATABASE}.{CUSTOMERS}",
}


def read(spark: SparkSession, spec: dict[str, Any]) -> dict[str, Any]:
    """The READS; with `try_write` in the spec, then an INSERT into the orders, which the read-only user's
    job must see refused (its error's class and message are returned, not raised)."""
    result: dict[str, Any] = {name: sorted([list(row) for row in spark.sql(sql).collect()], key=repr)
                              for name, sql in READS.items()}
    if spec.get("try_write"):
        try:
            spark.sql(f"INSERT INTO {DATABASE}.{ORDERS} PARTITION (orderpriority = '1-URGENT') "
                      f"SELECT orderkey, custkey, totalprice, orderdate FROM {DATABASE}.{ORDERS} LIMIT 10")
            result["write"] = "done"
        except Exception as exc:  # what the user would see: Spark's error with the S3A cause in it
            result["write"] = f"refused: {type(exc).__name__}: {exc}"[:20000]
    return result


def main() -> None:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    spark = session(spec)
    spark.sparkContext.setLogLevel("WARN")
    try:
        action = {"write": write, "read": read}[spec["action"]]
        result = action(spark, spec)
    finally:
        spark.stop()
    print("RESULT " + json.dumps(result, default=str), flush=True)


if __name__ == "__main__":
    main()
