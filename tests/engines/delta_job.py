"""A Spark job writing a Delta table through an S3 endpoint (run as its own process by
tests/engines/test_tables_engines.py: `python delta_job.py SPEC.json`, as tests/engines/spark_job.py runs).

The table, partitioned by `day`, gets five appends, then one day's partition replaced (its files
removed, one added) if this Spark can: no delta-spark is built for Spark 4.3 (pyspark 4.3.0), and 4.4.0,
built for Spark 4.2, appends on 4.3 but fails (NoSuchMethodError on Spark's LogicalRDD) writing a
checkpoint, running DELETE or UPDATE, overwriting partitions and listing a table's files (inputFiles).
Each way of replacing is tried; what a failed one wrote stays in the table's folder, in no commit. The
log is JSON commits only (delta.checkpointInterval past the commits made). The job prints `RESULT {...}`
with the table's current files (Spark's inputFiles when it can; else the data files the appends wrote,
as S3A lists them), the files no commit names, the version, and what this Spark could not do.
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
    jvm = spark.sparkContext._jvm
    root = jvm.org.apache.hadoop.fs.Path(path)
    fs = root.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())

    def data_files() -> set[str]:  # the table's Parquet files as S3A lists them
        found, listing = set(), fs.listFiles(root, True)
        while listing.hasNext():
            name = listing.next().getPath().toString()
            if name.endswith(".parquet") and "/_delta_log/" not in name:
                found.add(name)
        return found

    try:
        for batch in range(5):
            frame = spark.range(batch * 2000, (batch + 1) * 2000).selectExpr(
                "id", "round(id * 1.5, 2) AS amount", f"date_add(DATE '2026-12-01', cast(id % 4 AS int)) AS day")
            writer = frame.write.format("delta").mode("append").partitionBy("day")
            if batch == 0:
                writer = writer.option("delta.checkpointInterval", "1000")
            writer.save(path)
        appended, version, refused = data_files(), 4, []
        replacement = spark.range(0, 500).selectExpr("id", "round(id * 2.5, 2) AS amount", "DATE '2026-12-02' AS day")
        for how, write in (
                ("dynamic partition overwrite", lambda: replacement.write.format("delta").mode("overwrite")
                 .option("partitionOverwriteMode", "dynamic").save(path)),
                ("replaceWhere", lambda: replacement.write.format("delta").mode("overwrite")
                 .option("replaceWhere", "day = DATE '2026-12-02'").save(path)),
                ("DELETE", lambda: spark.sql(f"DELETE FROM delta.`{path}` WHERE day = DATE '2026-12-02'"))):
            try:
                write()
            except Exception as exc:  # this delta-spark on this Spark: say what failed, go on
                refused.append(f"{how}: {str(exc).splitlines()[0][:300]}")
            else:
                version += 1
                break
        try:
            files = set(spark.read.format("delta").load(path).inputFiles())
        except Exception as exc:
            refused.append(f"inputFiles: {str(exc).splitlines()[0][:300]}")
            if version != 4:
                raise  # a replacement went through: which files are current, only Delta can say
            files = appended
        orphans = data_files() - files
    finally:
        spark.stop()
    print("RESULT " + json.dumps({"files": sorted(files), "orphans": sorted(orphans), "version": version,
                                       "refused": refused}), flush=True)


if __name__ == "__main__":
    main()
