"""bench/fleet.py (issue 4's fleet benchmark): cheap checks only, the benchmark itself takes minutes.

Its generated node configuration loads as a fleet node, its latency merge across wrk
processes is a percentile of all requests, and `--help` runs."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from gateway.config import load

ROOT = Path(__file__).resolve().parent.parent


def fleet_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("bench_fleet", ROOT / "bench" / "fleet.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_fleet"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_a_generated_node_config_is_a_fleet_node(tmp_path: Path) -> None:
    fleet = fleet_module()
    sections = fleet.node_sections("node2", 18082, "http://127.0.0.1:9000", "redis://127.0.0.1:6390/0",
                                   quota=56 * 1024**2, cluster={"passive_cache": False})
    path = tmp_path / "node2.toml"
    path.write_text(fleet.toml_text(sections))
    settings = load(path, environ={})
    assert settings.fleet
    assert settings.cluster.node_id == "node2" and settings.cluster.advertise_url == "http://127.0.0.1:18082"
    assert settings.cache.memory_quota == 56 * 1024**2 and settings.metadata.ttl == 3600
    assert [u.access_key for u in settings.auth.users] == [fleet.cs.USER[0]]


def test_latency_percentiles_merge_over_every_request() -> None:
    fleet = fleet_module()
    # Two wrk runs: 300 requests all at 1 ms, 100 requests all at 9 ms.
    fast = fleet.WrkRun("a", 300, 0, 0, 1.0, [1000.0] * 999)
    slow = fleet.WrkRun("b", 100, 0, 0, 1.0, [9000.0] * 999)
    assert fleet.merged_percentile([fast, slow], 50) == 1.0
    assert fleet.merged_percentile([fast, slow], 74) == 1.0
    assert fleet.merged_percentile([fast, slow], 76) == 9.0
    assert fleet.merged_percentile([fast, slow], 99) == 9.0


def test_help_runs() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "fleet.py"), "--help"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "--quick" in done.stdout
