"""`gateway advise`: help, one-line errors, a CSV and an access-log run, the chart and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from gateway.advisor.synth import write_csv, zipf_reads
from gateway.cli import main
from gateway.node.cores import usable_cores


@pytest.fixture(scope="module")
def csv_trace(tmp_path_factory) -> str:  # type: ignore[no-untyped-def]
    path = tmp_path_factory.mktemp("trace") / "trace.csv"
    write_csv(zipf_reads(1500, 300, object_size=(64 * 1024, 2 * 1024**2), ranged=0.3, seed=2), str(path))
    return str(path)


def run(*args: str) -> object:
    return CliRunner().invoke(main, ["advise", *args], catch_exceptions=False)


def test_help() -> None:
    result = run("--help")
    assert result.exit_code == 0 and "--budget" in result.output and "--sample-rate" in result.output


@pytest.mark.parametrize("content, message", [
    (None, "No such file or directory"),
    ("hello\nworld\n", "no gateway access log lines found in 2 lines"),
    ('{"status": 200, "bucket": "b", "key": "k", "operation": "HeadObject", "method": "HEAD"}\n',
     "no successful GetObject"),
])
def test_missing_or_garbled_log_is_one_line(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "access.log"
    if content is not None:
        path.write_text(content)
    result = run("--log", str(path))
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and message in lines[0]


def test_bad_options_are_usage_errors(csv_trace: str) -> None:
    assert run("--log", csv_trace, "--csv", "--prices", "dram=3").exit_code == 2
    assert run("--log", csv_trace, "--csv", "--budget", "lots").exit_code == 2
    assert run("--log", csv_trace, "--csv", "--budget", "0").exit_code == 2
    assert run("--log", csv_trace, "--csv", "--policies", "arc").exit_code == 2


def test_csv_run_with_chart_and_json(csv_trace: str, tmp_path: Path) -> None:
    chart = tmp_path / "advice.png"
    result = run("--log", csv_trace, "--csv", "--budget", "128MiB", "--memory-shares", "0,1/8,1/2",
                 "--prices", "mem=3,ssd=0.1,node=40", "--chart", str(chart), "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert len(document["outcomes"]) == 6
    assert document["recommended"] in document["outcomes"]
    assert set(document["curves"]) == {"lru", "s3fifo"}
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = run("--log", csv_trace, "--csv", "--budget", "128MiB", "--memory-shares", "0,1/8", "--policies", "lru")
    assert "recommended: cache.policy = \"lru\"" in text.output


def test_access_log_run_with_sampling(tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    lines = []
    for i, read in enumerate(zipf_reads(2000, 300, object_size=300_000, seed=4)):
        lines.append(orjson.dumps({"request_id": str(i), "operation": "GetObject", "method": "GET",
                                   "bucket": read.bucket, "key": read.key, "range": None, "status": 200,
                                   "bytes": read.size, "cache": "miss", "latency_ms": 1}).decode())
    log.write_text("\n".join(lines) + "\n")
    result = run("--log", str(log), "--budget", "16MiB", "--sample-rate", "0.5", "--memory-shares", "0,1/4")
    assert result.exit_code == 0, result.output
    assert "sampled at 0.5" in result.output and "2000 GETs" in result.output


def test_config_hdd_and_origin_prices(csv_trace: str, tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text('[cache]\nblock_size = "256KiB"\npolicy = "lru"\npromote = false\nreadahead_blocks = 0\n')
    result = run("--log", csv_trace, "--csv", "--config", str(config), "--budget", "64MiB", "--hdd", "256MiB",
                 "--memory-shares", "0,1/4", "--policies", "lru", "--prices", "get=0.4,gb=0.02", "--period", "1h",
                 "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    settings = document["settings"]
    assert (settings["block_size"], settings["readahead"], settings["promote"], settings["hdd"]) == (
        256 * 1024, 0, False, 256 * 1024**2)
    assert all(o["hdd_bytes"] == 256 * 1024**2 and o["origin_cost"] > 0 for o in document["outcomes"])
    assert run("--log", csv_trace, "--csv", "--period", "soon").exit_code == 2


def test_workers_from_the_option_or_as_the_config_s_node_runs(csv_trace: str, tmp_path: Path) -> None:
    def document(*args: str) -> dict:  # type: ignore[type-arg]
        result = run("--log", csv_trace, "--csv", "--budget", "32MiB", "--memory-shares", "0,1/4",
                     "--policies", "s3fifo", "--json", *args)
        assert result.exit_code == 0, result.output
        return json.loads(result.output)  # type: ignore[no-any-return]

    one, three = document("--workers", "1"), document("--workers", "3")
    assert (one["settings"]["workers"], three["settings"]["workers"]) == (1, 3)
    assert one["outcomes"] != three["outcomes"]  # three stores of a third of each quota
    assert document()["outcomes"] == one["outcomes"] and document()["settings"]["workers"] == 1
    config = tmp_path / "node.toml"
    config.write_text("[server]\nworkers = 3\n")
    assert document("--config", str(config))["outcomes"] == three["outcomes"]
    assert document("--config", str(config), "--workers", "1")["outcomes"] == one["outcomes"]
    config.write_text("[server]\nworkers = 0\n")  # as `gateway serve` runs it: one worker per usable core
    assert document("--config", str(config))["settings"]["workers"] == usable_cores()
    assert run("--log", csv_trace, "--csv", "--workers", "0").exit_code == 2
    text = run("--log", csv_trace, "--csv", "--budget", "32MiB", "--memory-shares", "0", "--workers", "2").output
    assert "a node of 2 workers" in text
