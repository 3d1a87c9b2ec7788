"""bench/engines.py (Trino against the origin directly and through the gateway): cheap checks only,
the benchmark itself takes Trino and a quarter of an hour. Its results rows, the whole workload's
sums, the printed table and the results file `--json` writes (drawn by bench/charts.py)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from bench import charts

ROOT = Path(__file__).resolve().parent.parent


def engines_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("bench_engines", ROOT / "bench" / "engines.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_engines"] = module
    spec.loader.exec_module(module)
    return module


def counts(engines, get: int, head: int, size: int):  # type: ignore[no-untyped-def]
    return engines.Counts({"requests": {"GET": get, "HEAD": head, "LIST": 0, "other": 0},
                           "bytes": {"GET": size, "HEAD": 0, "LIST": 0, "other": 0}, "logged": 0})


def test_rows_hold_the_figures_and_the_ratios_of_the_table(tmp_path: Path) -> None:
    engines = engines_module()
    q6 = engines.counted_row("TPC-H Q6 parquet", {"direct": 1.25, "cold": 1.43, "warm": 0.48},
                             {"direct": counts(engines, 36, 2, 43_200_000), "cold": counts(engines, 40, 4, 59_600_000),
                              "warm": counts(engines, 0, 1, 0)})
    small = engines.counted_row("small files", {"direct": 10.0, "cold": 12.5, "warm": 5.0},
                                {"direct": counts(engines, 480, 3, 400_000), "cold": counts(engines, 481, 1, 404_000),
                                 "warm": counts(engines, 0, 85, 0)})
    assert q6["cold_requests"] == 44 and q6["direct_requests"] == 38 and q6["cold_by_kind"]["HEAD"] == 4
    assert (q6["cold_ratio"], q6["requests_ratio"], q6["bytes_ratio"]) == (0.8741, 1.1579, 1.3796)
    whole = engines.whole_row([q6, small])
    assert whole["direct_s"] == 11.25 and whole["cold_requests"] == 526 and whole["cold_bytes"] == 60_004_000
    assert whole["requests_ratio"] == round(526 / 521, 4) and whole["requests_target"] == 1.05
    assert engines.table_row(q6) == ("TPC-H Q6 parquet", 1.25, 1.43, 0.48, "0.87x", "2.60x", "44 / 38 (1.16x)",
                                     "59.6 / 43.2 MB (1.38x)")
    assert engines.table_row(whole)[0] == "**whole workload**"
    results = tmp_path / "engines.json"
    charts.write_results(results, charts.results_document("engines", [q6, small, whole], command="bench/engines.py",
                                                          commit="abc1234", machine="test", load="none",
                                                          targets=engines.TARGETS))
    assert charts.draw(tmp_path / "engines.png", [results]).read_bytes()[:4] == b"\x89PNG"


def test_help_runs_and_offers_json() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "engines.py"), "--help"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "--json" in done.stdout
