"""The engine catalog blocks of docs/clients.md (`<!-- engine: NAME -->`) are the catalogs the engine
tests start their engines with, the endpoint and keys being the doc's. No engine runs here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.engines.spark_job import s3a_conf
from tests.engines.support import REGION, hive_catalog, iceberg_catalog

DOC = Path(__file__).resolve().parents[2] / "docs" / "clients.md"
ENDPOINT = "http://gateway.internal:8080"
KEYS = ("AKIAANALYTICS0000001", "analytics-secret-change-me")

EXPECTED = {
    "trino-hive": hive_catalog(ENDPOINT, KEYS),
    "trino-iceberg": iceberg_catalog(ENDPOINT, KEYS),
    "spark-s3a": s3a_conf({"endpoint": ENDPOINT, "region": REGION, "access_key": KEYS[0], "secret_key": KEYS[1]}),
}


def blocks() -> dict[str, str]:
    found = re.findall(r"<!-- engine: ([\w-]+) -->\n```\w+\n(.*?)\n```", DOC.read_text(), re.DOTALL)
    return dict(found)


def parse_properties(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#"))
    return {k.strip(): v.strip() for k, v in pairs}


def test_every_engine_block_is_checked() -> None:
    assert set(blocks()) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_doc_block_is_the_tested_catalog(name: str) -> None:
    assert parse_properties(blocks()[name]) == EXPECTED[name]
