"""The engine catalog blocks of docs/clients.md (`<!-- engine: NAME -->`) are the catalogs the engine
tests start their engines with, the endpoint and keys being the doc's; so are the Hive metastore's
configuration files (XML) and the jar lists it and Spark's Hive client run with. No engine runs here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.engines.hms import HADOOP_JARS, SPARK_METASTORE_JARS, WAREHOUSE, core_site, hms_catalog, metastore_site
from tests.engines.hms_job import hive_conf
from tests.engines.spark_job import s3a_conf
from tests.engines.support import REGION, hive_catalog, iceberg_catalog

DOC = Path(__file__).resolve().parents[2] / "docs" / "clients.md"
ENDPOINT = "http://gateway.internal:8080"
KEYS = ("AKIAANALYTICS0000001", "analytics-secret-change-me")
METASTORE = "thrift://metastore.internal:9083"
SPARK_HIVE_JARS = "/opt/spark/hive-4.0.1"  # where the doc keeps the jars of SPARK_METASTORE_JARS

EXPECTED = {
    "trino-hive": hive_catalog(ENDPOINT, KEYS),
    "trino-iceberg": iceberg_catalog(ENDPOINT, KEYS),
    "spark-s3a": s3a_conf({"endpoint": ENDPOINT, "region": REGION, "access_key": KEYS[0], "secret_key": KEYS[1]}),
    "hms-jars": {c: "" for c in HADOOP_JARS},
    "hms-metastore-site": metastore_site(9083, "/var/lib/hive/metastore_db", host="0.0.0.0"),
    "hms-core-site": core_site(ENDPOINT, KEYS, REGION),
    "trino-hive-hms": hms_catalog(METASTORE, ENDPOINT, KEYS),
    "spark-hms": hive_conf({"metastore": METASTORE, "warehouse": WAREHOUSE, "metastore_jars": [
        f"{SPARK_HIVE_JARS}/{c.split(':')[1]}-{c.split(':')[2]}.jar" for c in SPARK_METASTORE_JARS]}),
}


def blocks() -> dict[str, str]:
    found = re.findall(r"<!-- engine: ([\w-]+) -->\n```\w+\n(.*?)\n```", DOC.read_text(), re.DOTALL)
    return dict(found)


def parse_xml(text: str) -> dict[str, str]:
    """A Hadoop configuration file's `<property>` elements (values as written: a blank is a value)."""
    return dict(re.findall(r"<name>(.*?)</name>\s*<value>(.*?)</value>", text, re.DOTALL))


def parse_block(text: str) -> dict[str, str]:
    if text.lstrip().startswith("<"):
        return parse_xml(text)
    if "=" not in text:  # a list, one item a line
        return {line.strip(): "" for line in text.splitlines() if line.strip()}
    return parse_properties(text)


def parse_properties(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#"))
    return {k.strip(): v.strip() for k, v in pairs}


def test_every_engine_block_is_checked() -> None:
    assert set(blocks()) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_doc_block_is_the_tested_catalog(name: str) -> None:
    assert parse_block(blocks()[name]) == EXPECTED[name]
