"""Spark (pyspark 4.3.0 from PyPI, local mode) through Hadoop S3A 3.5.0 (hadoop-aws and the AWS SDK v2
bundle from Maven Central) against the gateway in front of moto: the client Hive and older Presto
deployments use. Each job is its own Spark process (tests/engines/spark_job.py), because S3A keeps one
endpoint per bucket in a JVM: one writes through the gateway, others read through it (cold, then warm),
straight from the origin, and as the read-only user."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.engines.support import (BUCKET, ORIGIN_KEYS, READONLY, SPARK_JAVA_HOME, WRITER, AccessLog,
                                    ORIGIN_LOG, origin_requests)
from tests.support import REGION, RunningGateway, client

pytestmark = [pytest.mark.engines, pytest.mark.timeout(1800)]

JOB = Path(__file__).with_name("spark_job.py")
BASE = f"s3a://{BUCKET}/spark"
JOB_TIMEOUT = 900  # seconds for one Spark job (each took 20-60 s here)


def run_job(tmp_path: Path, jars: list[str], endpoint: str, keys: tuple[str, str], action: str) -> dict[str, Any]:
    spec = {"endpoint": endpoint, "region": REGION, "access_key": keys[0], "secret_key": keys[1], "jars": jars,
            "base": BASE, "action": action}
    path = tmp_path / f"spec-{action}-{len(list(tmp_path.iterdir()))}.json"
    path.write_text(json.dumps(spec))
    env = dict(os.environ, JAVA_HOME=str(SPARK_JAVA_HOME), PYSPARK_PYTHON=sys.executable,
               SPARK_LOCAL_IP="127.0.0.1")
    env = {k: v for k, v in env.items() if not k.startswith("AWS_")}
    try:
        done = subprocess.run([sys.executable, str(JOB), str(path)], env=env, capture_output=True, text=True,
                              timeout=JOB_TIMEOUT, check=False)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"spark job {action} did not finish in {JOB_TIMEOUT}s: {str(exc.stderr)[-5000:]}") from None
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise AssertionError(f"spark job {action} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-8000:]}")
    return json.loads(lines[-1][len("RESULT "):])  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def spark_written(spark_jars, engines_gateway: RunningGateway, access_log: AccessLog, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("spark")
    with access_log.recording() as lines:
        result = run_job(tmp, spark_jars, engines_gateway.endpoint, WRITER, "write")
    return result, lines, tmp


def test_spark_writes_through_the_gateway(spark_written, engines_origin: str) -> None:
    result, lines, _ = spark_written
    assert result == {"orders": 30000, "customers": 1500}
    seen = Counter((line["operation"], line["status"]) for line in lines)
    failed = {op: n for op, n in seen.items() if not (200 <= int(op[1]) < 300)
              and op not in (("HeadObject", 404), ("GetObject", 404))}  # 404s: S3A probing for what is not there yet
    assert not failed, f"requests the gateway refused: {failed}"
    assert seen[("PutObject", 200)] > 0 and seen[("CopyObject", 200)] > 0  # the committer renames: copy + delete
    assert seen[("CreateMultipartUpload", 200)] >= 1 and seen[("UploadPart", 200)] >= 2
    origin = client(engines_origin, ORIGIN_KEYS)
    keys = [o["Key"] for page in origin.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="spark/")
            for o in page.get("Contents", [])]
    assert {k.split("/")[2] for k in keys if k.startswith("spark/orders/") and "=" in k} == {
        f"orderpriority={p}" for p in ("1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW")}
    assert any(k.startswith("spark/customers/mktsegment=") and k.endswith(".orc") for k in keys)
    assert not [k for k in keys if "_temporary" in k]  # the job committed


def test_spark_reads_match_the_origin_and_repeat_from_the_cache(spark_written, spark_jars, engines_origin: str,
                                                               engines_gateway: RunningGateway,
                                                               access_log: AccessLog) -> None:
    _, _, tmp = spark_written
    direct = run_job(tmp, spark_jars, engines_origin, ORIGIN_KEYS, "read")
    engines_gateway.purge_caches()
    rounds = []
    for _ in range(2):
        before, asked = origin_requests(engines_gateway), len(ORIGIN_LOG)
        with access_log.recording() as lines:
            result = run_job(tmp, spark_jars, engines_gateway.endpoint, WRITER, "read")
        rounds.append((result, origin_requests(engines_gateway) - before, lines))
        sent = ORIGIN_LOG[asked:]
    (cold, cold_origin, cold_lines), (warm, warm_origin, warm_lines) = rounds
    assert cold == direct and warm == direct
    assert direct["wide"] == [[200_000, 200_000, 0, 199_999]]
    assert direct["partition filter"][0][0] == 6000
    assert len(direct["partitions"]) == 5
    warm_gets = [line for line in warm_lines if line["operation"] == "GetObject"]
    assert warm_gets and any(line["cache"] in ("miss", "partial") for line in cold_lines if line["operation"] == "GetObject")
    warm_cache = Counter(line["cache"] for line in warm_gets)
    assert set(warm_cache) <= {"hit-mem", "hit-disk"}, f"warm GETs not served from the cache: {warm_cache}"
    assert cold_origin["GET"] > 0 and warm_origin["GET"] == 0, (cold_origin, warm_origin, [" ".join(map(str, s)) for s in sent[:40]])
    assert sum(warm_origin.values()) < sum(cold_origin.values())


def test_spark_read_only_user_reads_and_is_refused_on_insert(spark_written, spark_jars,
                                                             engines_gateway: RunningGateway) -> None:
    _, _, tmp = spark_written
    result = run_job(tmp, spark_jars, engines_gateway.endpoint, READONLY, "write-denied")
    assert result["count"] == 30000
    assert result["refused"], result
    print("read-only INSERT refused:", result["error"][:1500])
    assert "AccessDenied" in result["error"] or "Access Denied" in result["error"], result["error"][:3000]
