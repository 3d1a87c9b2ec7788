"""A Spark job writing a Delta table through an S3 endpoint (run as its own process by
tests/engines/test_table_load.py: `python delta_job.py SPEC.json`, as tests/engines/spark_job.py runs).

The table, partitioned by `day`, gets five appends, a DELETE of one day's rows and an UPDATE. No
delta-spark is built for Spark 4.3 (pyspark 4.3.0): 4.4.0, built for Spark 4.2, writes commits but fails
writing a checkpoint (NoSuchMethodError on Spark's LogicalRDD), so delta.checkpointInterval is set past
the commits made and the log is JSON commits only (tests/admin/test_table_load.py reads a checkpoint).
The job prints `RESULT {...}` with the table's current files (Spark's own inputFiles) and its version."""

from __future__ import annotations

import json
import sys

from spark_job import s3a_conf  # type: ignore[import-not-found]  # run as a script beside it


def main() -> None:
    from pyspark.sql import SparkSession

    with open(sys.argv[1]) as f:
        spec = json.load(f)
    builder = (SparkSession.builder.master("local[2]").appName("s3gw-delta-test")
               .config("spark.jars", ",".join(spec["jars"]))
               .config("spark.driver.memory", "1g").config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1").config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
               .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
               # S3 has no atomic put-if-absent for Hadoop's rename: one writer, the S3 log store
               .config("spark.delta.logStore.s3a.impl", "io.delta.storage.S3SingleDriverLogStore"))
    for key, value in s3a_conf(spec).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    path = spec["base"]
    try:
        for batch in range(5):
            frame = spark.range(batch * 2000, (batch + 1) * 2000).selectExpr(
                "id", "round(id * 1.5, 2) AS amount", f"date_add(DATE '2026-12-01', cast(id % 4 AS int)) AS day")
            writer = frame.write.format("delta").mode("append").partitionBy("day")
            if batch == 0:
                writer = writer.option("delta.checkpointInterval", "1000")
            writer.save(path)
        spark.sql(f"DELETE FROM delta.`{path}` WHERE day = DATE '2026-12-02'")
        spark.sql(f"UPDATE delta.`{path}` SET amount = 0 WHERE id % 7 = 0")
        files = spark.read.format("delta").load(path).inputFiles()
        version = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").collect()[0]["version"]
    finally:
        spark.stop()
    print("RESULT " + json.dumps({"files": sorted(files), "version": version}), flush=True)


if __name__ == "__main__":
    main()
