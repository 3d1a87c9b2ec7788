"""bench/charts.py: charts of benchmark results drawn from JSON results files, and the recorded results
files of docs/img/data that docs/benchmarks.md's charts are drawn from."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import charts

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "docs" / "img" / "data"
PNG = b"\x89PNG\r\n\x1a\n"


def engines_run(commit: str, cold: float) -> dict:  # type: ignore[type-arg]
    rows = [{"workload": "TPC-H Q6 parquet", "cold_ratio": cold, "warm_ratio": 2.5, "requests_ratio": 1.1,
             "bytes_ratio": 1.4},
            {"workload": "whole workload", "cold_ratio": 0.9, "warm_ratio": 1.8, "requests_ratio": 0.95,
             "bytes_ratio": 1.3, "requests_target": 1.05, "bytes_target": 1.2}]
    document = charts.results_document("engines", rows, command="bench/engines.py --only Q6", commit=commit,
                                       machine="test", load="none", targets={"cold_target": 0.95})
    return document


def test_a_chart_is_drawn_from_a_results_file(tmp_path: Path) -> None:
    results = tmp_path / "engines.json"
    charts.write_results(results, engines_run("abc1234", 0.8))
    out = charts.draw(tmp_path / "chart.png", [results])
    assert out.read_bytes()[:8] == PNG and out.stat().st_size > 10_000


def test_runs_of_one_benchmark_are_drawn_side_by_side_and_two_benchmarks_are_refused(tmp_path: Path) -> None:
    paths = []
    for commit, cold in (("abc1234", 0.8), ("def5678", 1.1)):
        paths.append(tmp_path / f"{commit}.json")
        charts.write_results(paths[-1], engines_run(commit, cold))
    assert charts.draw(tmp_path / "two.png", paths).read_bytes()[:8] == PNG
    hits = tmp_path / "hits.json"
    charts.write_results(hits, charts.results_document("cache_serving.hits", [{"row": "SDK-signed 4 KiB"}],
                                                        command="x", commit="c", machine="m", load="l"))
    with pytest.raises(ValueError, match="one benchmark"):
        charts.draw(tmp_path / "mixed.png", [paths[0], hits])


def test_a_file_that_does_not_say_how_it_was_measured_is_refused(tmp_path: Path) -> None:
    document = engines_run("abc1234", 0.8)
    del document["command"]
    path = tmp_path / "bare.json"
    path.write_text(json.dumps(document))
    with pytest.raises(ValueError, match="command"):
        charts.read_results(path)


def test_ratios_and_targets() -> None:
    floor, ceiling = charts.Series("cold", "cold_ratio"), charts.Series("requests", "over", "under", lower=True)
    assert charts.value({"cold_ratio": 0.5}, floor) == 0.5
    assert charts.value({"over": 30, "under": 20}, ceiling) == 1.5
    assert charts.value({"over": 30}, ceiling) != charts.value({"over": 30}, ceiling)  # NaN: no figure, no bar
    assert charts.met({}, floor, 0.96, 0.95) and not charts.met({}, floor, 0.94, 0.95)
    assert charts.met({}, ceiling, 1.0, 1.05) and not charts.met({}, ceiling, 1.1, 1.05)
    assert not charts.met({"met": False}, floor, 0.8, 0.8)  # a ratio recorded rounded onto its target
    document = {"targets": {"target": 2.0}}
    assert charts.target({"target": 0.5}, document, floor) == 0.5 and charts.target({}, document, floor) == 2.0


def test_the_footnote_names_command_commit_date_and_load() -> None:
    note = charts.footnote([engines_run("abc1234", 0.8)])
    assert "bench/engines.py --only Q6" in note and "abc1234" in note and "load: none" in note
    assert "UTC" in note


def test_the_command_line_draws(tmp_path: Path) -> None:
    results = tmp_path / "run.json"
    charts.write_results(results, engines_run("abc1234", 0.8))
    for command in ([sys.executable, str(ROOT / "bench" / "charts.py")], [sys.executable, "-m", "bench.charts"]):
        out = tmp_path / f"{len(command)}.png"
        done = subprocess.run([*command, str(out), str(results)], cwd=ROOT, capture_output=True, text=True,
                              timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        assert out.read_bytes()[:8] == PNG


def test_every_recorded_results_file_says_where_it_comes_from_and_draws(tmp_path: Path) -> None:
    by_bench: dict[str, list[Path]] = {}
    for path in sorted(DATA.glob("*.json")):
        document = charts.read_results(path)
        assert document["bench"] in charts.CHARTS, path
        assert all(document.get(key) for key in ("command", "commit", "date", "load", "machine")), path
        # Written by the bench script that measured it, or copied by hand from a run the notes record.
        assert document["source"] == "written by the script that measured it" \
            or "docs/benchmarks-notes.md" in document["source"], path
        assert document["rows"], path
        by_bench.setdefault(document["bench"], []).append(path)
    assert {"cache_serving.hits", "cache_serving", "engines"} <= set(by_bench)
    for bench, paths in by_bench.items():
        assert charts.draw(tmp_path / f"{bench}.png", paths).read_bytes()[:8] == PNG
