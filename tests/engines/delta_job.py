"""A Spark job writing a Delta table through an S3 endpoint (run as its own process by
tests/engines/test_table_load.py: `python delta_job.py SPEC.json`, as tests/engines/spark_job.py runs).

The table, partitioned by `day`, gets five appends, then one day's partition overwritten (dynamic
partition overwrite: its files removed, one added). No delta-spark is built for Spark 4.3 (pyspark
4.3.0): 4.4.0, built for Spark 4.2, appends and overwrites on 4.3 but fails (NoSuchMethodError on
Spark's LogicalRDD) writing a checkpoint and running DELETE or UPDATE, so the log is JSON commits only,
delta.checkpointInterval past the commits made (tests/admin/test_table_load.py reads a checkpoint).
The job prints `RESULT {...}` with the table's current files (Spark's own inputFiles) and its version.
"""

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
        (spark.range(0, 500).selectExpr("id", "round(id * 2.5, 2) AS amount", "DATE '2026-12-02' AS day")
         .write.format("delta").mode("overwrite").option("partitionOverwriteMode", "dynamic").save(path))
        files = spark.read.format("delta").load(path).inputFiles()
        version = 5  # five appends (0-4), one overwrite
    finally:
        spark.stop()
    print("RESULT " + json.dumps({"files": sorted(files), "version": version}), flush=True)


if __name__ == "__main__":
    main()
