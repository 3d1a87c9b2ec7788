"""loadtests/: the content checks, and short headless Locust runs through a real gateway (one clean, one
against an object changed behind the gateway, which must show up as "wrong bytes")."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from loadtests import prepare
from loadtests.content import CHUNK, Body, SizeSpec, Zipf, mismatch, parse_size
from tests.support import ADMIN, RunningGateway, client, client_env, need_module

ROOT = Path(__file__).resolve().parent.parent
BUCKET = "loadtest"


# --- the content checks (pure) ---------------------------------------------------------------------


def test_bodies_are_a_function_of_seed_name_and_size() -> None:
    body = Body("7", "loadtest/objects/000001", 3 * CHUNK + 123)
    data = body.bytes()
    assert len(data) == body.size
    assert Body("7", "loadtest/objects/000001", body.size).bytes() == data
    assert Body("8", "loadtest/objects/000001", body.size).bytes() != data
    assert Body("7", "loadtest/objects/000002", body.size).bytes() != data
    chunks = {data[i:i + CHUNK] for i in range(0, 3 * CHUNK, CHUNK)}
    assert len(chunks) == 3  # no chunk repeats another: a block from the wrong offset is caught
    assert body.bytes(CHUNK - 5, 2 * CHUNK + 9) == data[CHUNK - 5:2 * CHUNK + 9]
    reader = body.reader()
    assert b"".join(iter(lambda: reader.read(10_000), b"")) == data


def test_mismatch_finds_any_changed_missing_or_extra_byte() -> None:
    body = Body("0", "k", 2 * CHUNK + 1)
    data = body.bytes()
    assert mismatch(body, [data[:100], data[100:]]) is None
    assert mismatch(body, [data[:-1]]) == f"{body.size - 1} bytes instead of {body.size}"
    assert mismatch(body, [data + b"x"]) is not None
    rng = random.Random(1)
    for _ in range(20):
        i = rng.randrange(body.size)
        assert mismatch(body, [data[:i] + bytes([data[i] ^ 1]) + data[i + 1:]]) is not None
    assert mismatch(body, [data[10:CHUNK + 20]], 10, CHUNK + 20) is None
    assert mismatch(body, [data[11:CHUNK + 21]], 10, CHUNK + 20) == "byte 10 differs"
    other = Body("0", "other", body.size)
    assert mismatch(body, [other.bytes()]) is not None


def test_sizes_and_zipf() -> None:
    assert parse_size("4KiB") == 4096 and parse_size("1MB") == 10**6 and parse_size("17") == 17
    with pytest.raises(ValueError):
        parse_size("4 parsecs")
    spec = SizeSpec.parse("1KiB-1MiB")
    rng = random.Random(0)
    sizes = [spec.pick(rng) for _ in range(2000)]
    assert min(sizes) >= 1024 and max(sizes) <= 1024 * 1024
    assert sum(s < 32 * 1024 for s in sizes) > 700  # log-uniform: half the range's orders of magnitude
    zipf = Zipf(50, 1.2)
    counts = [0] * 50
    for _ in range(20_000):
        counts[zipf.sample(rng)] += 1
    assert counts[0] > counts[1] > counts[5] > counts[40]
    uniform = Zipf(4, 0)
    assert all(n > 0 for n in [sum(uniform.sample(rng) == k for _ in range(400)) for k in range(4)])


# --- headless runs through a gateway ---------------------------------------------------------------


def _locust(endpoint: str, seconds: int, users: int, *classes: str,
            **env: str) -> tuple[subprocess.CompletedProcess[str], dict[tuple[str, str], tuple[int, int]]]:
    """Run loadtests/locustfile.py headless; its exit and its final stats, (type, name) -> (requests, failures).

    The stats come from --json (written at the end; --csv files are rewritten every second and may miss
    the last one); the exit code is 1 when anything failed."""
    args = [sys.executable, "-m", "locust", "-f", str(ROOT / "loadtests" / "locustfile.py"), "--headless",
            "-u", str(users), "-r", str(users), "-t", f"{seconds}s", "--stop-timeout", "5", "--host", endpoint,
            "--json", "--only-summary", "--loglevel", "WARNING", *classes]
    environment = client_env(AWS_ACCESS_KEY_ID=ADMIN[0], AWS_SECRET_ACCESS_KEY=ADMIN[1], AWS_DEFAULT_REGION="us-east-1",
                             LOADTEST_BUCKET=BUCKET, LOADTEST_PREFIX="lt", **env)
    done = subprocess.run(args, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=seconds + 40,
                          check=False)
    try:
        entries = json.loads(done.stdout)
    except ValueError:
        raise AssertionError(f"locust printed no stats (exit {done.returncode}):\n{done.stderr[-4000:]}") from None
    stats = {(e["method"], e["name"]): (e["num_requests"], e["num_failures"]) for e in entries}
    return done, stats


def _prepare(endpoint: str, monkeypatch: pytest.MonkeyPatch, *args: str) -> None:
    for name, value in client_env(AWS_ACCESS_KEY_ID=ADMIN[0], AWS_SECRET_ACCESS_KEY=ADMIN[1],
                                  AWS_DEFAULT_REGION="us-east-1").items():
        monkeypatch.setenv(name, value)
    assert prepare.main(["--endpoint", endpoint, "--bucket", BUCKET, "--prefix", "lt", "--create-bucket",
                         "--workers", "4", *args]) == 0


@pytest.fixture
def prepared(gateway: RunningGateway, clean_origin: str, monkeypatch: pytest.MonkeyPatch) -> RunningGateway:
    need_module("locust", "pip install locust (or pip install -e '.[test]')")
    _prepare(gateway.endpoint, monkeypatch, "--objects", "40", "--size", "1KiB-300KiB", "--dirs", "3", "--files", "6",
             "--file-size", "1KiB-8KiB")
    return gateway


def test_every_scenario_runs_clean_through_the_gateway(prepared: RunningGateway) -> None:
    done, stats = _locust(prepared.endpoint, 6, 4,
                                    LOADTEST_RANGE_FRACTION="0.3", LOADTEST_META_OBJECTS="5", LOADTEST_RW_KEYS="3",
                                    LOADTEST_WRITE_PERCENT="30", LOADTEST_READBACK_PERCENT="40")
    assert all(failed == 0 for _, failed in stats.values()), (stats, done.stderr[-4000:])
    assert done.returncode == 0, done.stderr[-4000:]
    counts = {entry: requests for entry, (requests, _) in stats.items()}
    # One user per scenario (4 users, 4 classes of equal weight), each past its start (the shared machine
    # may be slow: only what a few requests surely include is required).
    def done_by(name: str, kinds: tuple[str, ...]) -> int:
        return sum(n for (kind, entry), n in counts.items() if entry.startswith(name) and kind in kinds)

    assert done_by("zipf", ("GET", "GET range")) > 0, counts
    assert counts.get(("REFRESH", "dashboard"), 0) > 0, counts  # a listing and a GET of each of its 6 files
    assert counts.get(("PUT", "metadata"), 0) >= 5, counts  # its start
    assert done_by("metadata", ("DELETE", "RENAME", "HEAD", "GET", "LIST")) > 0, counts
    assert counts.get(("PUT", "readwrite"), 0) >= 3, counts  # its start
    assert done_by("readwrite", ("GET", "GET range")) > 0, counts
    assert sum(counts.values()) > 20


def test_a_changed_object_is_reported_as_wrong_bytes(prepared: RunningGateway, clean_origin: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # The same key and size, other bytes, written straight to the origin (behind the gateway, which has not
    # read it yet): the gateway serves what the origin holds, and that is not what the manifest promises.
    origin = client(clean_origin, ("origin-key", "origin-secret"))
    victim = "lt/objects/000000"
    size = origin.head_object(Bucket=BUCKET, Key=victim)["ContentLength"]
    origin.put_object(Bucket=BUCKET, Key=victim, Body=Body("other seed", victim, size).bytes())
    _prepare(prepared.endpoint, monkeypatch, "--objects", "1", "--size", "1KiB-300KiB", "--dirs", "0")
    # the read set is now that one object (prepare skipped it: same seed, key and size)

    done, stats = _locust(prepared.endpoint, 3, 2, LOADTEST_SCENARIOS="zipf")
    assert done.returncode == 1
    assert list(stats) == [("GET", "zipf")]
    requests, failed = stats[("GET", "zipf")]
    assert requests == failed > 0  # every read of it failed, none counted as a success
    errors = done.stderr.split("Error report", 1)[1]  # locust's table: occurrences, "<type> <name>: <error>"
    assert re.search(rf"^{failed}\s+GET zipf: wrong bytes\s*$", errors, re.MULTILINE), errors
    assert "wrong bytes: s3://loadtest/lt/objects/000000 [0, " in done.stderr  # the log line naming the object


# --- bench/locust_compare.py: how it reads Locust's results (its runs take minutes) --------------------


def test_locust_compare_reads_percentiles_and_the_error_report() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_locust_compare", ROOT / "bench" / "locust_compare.py")
    assert spec is not None and spec.loader is not None
    compare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(compare)

    histogram = {"10": 50, "20": 45, "300": 4, "1000": 1}  # as in Locust's --json: rounded ms -> count
    assert compare.percentile(histogram, 50) == 10 and compare.percentile(histogram, 95) == 20
    assert compare.percentile(histogram, 99) == 300 and compare.percentile(histogram, 100) == 1000
    stderr = ("[2026-11-30 22:00:00,000] host/ERROR/loadtests: wrong bytes: s3://b/k [0, 9): byte 3 differs\n"
              "Error report\n# occurrences      Error\n------------------|------\n"
              "3                  GET zipf: wrong bytes\n1                  LIST dashboard: wrong listing\n"
              "1                  REFRESH dashboard: a request of the refresh failed\n"
              "2                  PUT metadata: SlowDown (503)\n------------------|------\n\n")
    errors = compare.error_report(stderr)
    assert errors == {"GET zipf: wrong bytes": 3, "LIST dashboard: wrong listing": 1,
                      "REFRESH dashboard: a request of the refresh failed": 1, "PUT metadata: SlowDown (503)": 2}
    entry = {"start_time": 100.0, "last_request_timestamp": 110.0, "total_content_length": 5_000_000}
    entries = [{**entry, "method": "GET", "name": "zipf", "num_requests": 90, "num_failures": 3,
                "response_times": {"10": 90}},
               {**entry, "method": "LIST", "name": "dashboard", "num_requests": 10, "num_failures": 1,
                "response_times": {"50": 10}},
               {**entry, "method": "REFRESH", "name": "dashboard", "num_requests": 10, "num_failures": 1,
                "response_times": {"900": 10}}]
    row = compare.summarise(entries, errors)
    assert row["requests"] == 100 and row["rps"] == 10.0 and row["failures"] == 4  # REFRESH left out
    assert row["p50"] == 10 and row["p99"] == 50
    assert row["wrong bytes"] == 3 and row["wrong other"] == 1


# --- loadtests/hostile_memory.py: a short run (the 100,000-request one takes minutes) -----------------------


def test_hostile_memory_runs_and_reports_the_rss_series() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "loadtests" / "hostile_memory.py"), "--requests", "1020",
                           "--every", "340", "--bound-mb", "1000", "--max-seconds", "60"],
                          cwd=ROOT, env=client_env(), capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]  # 2: a 5xx, or the gateway died
    out = done.stdout
    assert re.search(r"^1020 hostile requests in ", out, re.MULTILINE), out
    series = re.findall(r"^\s+(\d+)\s+([\d.]+)\s+[+-]?[\d.]*$", out.split("requests    RSS MB", 1)[1], re.MULTILINE)
    assert [int(n) for n, _ in series] == [0, 340, 680, 1020], out
    assert all(float(rss) > 10 for _, rss in series), out
    kinds = re.findall(r"^  (\w+)\s+(.+)$", out.split("kinds;", 1)[1].split("\n\n", 1)[0], re.MULTILINE)
    assert len(kinds) == 19 and all(answers for _, answers in kinds), out  # every kind was sent
    assert "levelled off (bound 1000 MB)" in out, out
