"""bench/cache_serving.py: the requests wrk sends are what the SDKs send, and its --hits mode runs.

The request files are made by botocore itself (a boto3 client's get_object, caught before it is
sent); these check that the bytes are those boto3 puts on a socket, that every request is its
own and dated within S3's clock skew, and a brief run of every kind of row against the gateway
and nginx (skipped without wrk, nginx or taskset); the results files `--json` writes (bench/charts.py)."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import boto3
import pytest
from botocore.config import Config

from bench import charts
from gateway.s3api.auth.shaped import shape_of

ROOT = Path(__file__).resolve().parent.parent


def serving_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("bench_cache_serving", ROOT / "bench" / "cache_serving.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_cache_serving"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _what_boto3_sends(key: str) -> bytes:
    """The bytes of one get_object boto3 sends to a socket (answered with an empty 200)."""
    cs = serving_module()
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.settimeout(30)
        got: list[bytes] = []

        def answer() -> None:
            conn, _ = server.accept()
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                got.append(data)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nETag: \"x\"\r\n\r\n")

        thread = threading.Thread(target=answer)
        thread.start()
        s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{server.getsockname()[1]}", region_name=cs.REGION,
                          aws_access_key_id=cs.USER[0], aws_secret_access_key=cs.USER[1],
                          config=Config(signature_version="s3v4", s3={"addressing_style": "path"},
                                        retries={"max_attempts": 2}))
        s3.get_object(Bucket=cs.BUCKET, Key=key)
        s3.close()
        thread.join(30)
    return got[0]


def _normal(request: bytes) -> bytes:
    """What differs between two requests of one key: the date, the signature, the invocation id, and
    the features boto3's user agent lists (in the order it used them)."""
    request = re.sub(rb"\d{8}T\d{6}Z", b"DATE", request)
    request = re.sub(rb"/\d{8}/", b"/DAY/", request)
    request = re.sub(rb"Signature=[0-9a-f]{64}", b"Signature=SIG", request)
    request = re.sub(rb"amz-sdk-invocation-id: [0-9a-f-]{36}", b"amz-sdk-invocation-id: ID", request)
    return re.sub(rb" m/[A-Za-z0-9,]+ ", b" m/FEATURES ", request)


def test_sdk_requests_are_the_bytes_boto3_sends() -> None:
    cs = serving_module()
    sent = _what_boto3_sends("warm/4KiB/000001")
    port = re.search(rb"host: 127\.0\.0\.1:(\d+)", sent).group(1).decode()  # type: ignore[union-attr]
    made = cs.sdk_requests(f"http://127.0.0.1:{port}", ["warm/4KiB/000001"], 1)[0]
    assert b"amz-sdk-invocation-id" in made and b"Authorization: AWS4-HMAC-SHA256 Credential=" in made
    assert _normal(made) == _normal(sent)


def test_each_request_is_its_own_and_dated_within_the_skew() -> None:
    cs = serving_module()
    start = time.time()
    keys = [f"k/{i}" for i in range(10)]
    requests = cs.sdk_requests("http://127.0.0.1:9", keys, 2000, start=start)
    assert len(set(requests)) == len(requests) == 2000
    ids = {re.search(rb"amz-sdk-invocation-id: (\S+)", r).group(1) for r in requests}  # type: ignore[union-attr]
    assert len(ids) == 2000
    dates = [time.mktime(time.strptime(re.search(rb"X-Amz-Date: (\S+)", r).group(1).decode(),  # type: ignore[union-attr]
                                       "%Y%m%dT%H%M%SZ")) for r in requests]
    steps = {b - a for a, b in zip(dates, dates[1:])}
    assert steps == {0, 1}  # one second at a time
    assert dates[-1] - dates[0] <= cs.DATE_WINDOW
    presigned = cs.presigned_new_requests("http://127.0.0.1:9", keys, 2000, start=start)
    assert len(set(presigned)) == 2000  # made sure of by the function too
    assert len(set(cs.same_bytes_requests("http://127.0.0.1:9", keys))) == len(keys)


def _cell(cs, setup: str, size: int, ok: int, cpu: float | None = None):  # type: ignore[no-untyped-def]
    return cs.Cell(setup, "wrk:sdk", size, ok, 0, 1.0, 1.0, 2.0, server_cpu=cpu)


def test_a_whole_run_gives_its_headline_ratios_with_their_targets() -> None:
    cs = serving_module()
    results = {
        "4KiB": [_cell(cs, "gw-mem", 4096, 1000, 0.05), _cell(cs, "nginx-tmpfs-1w", 4096, 2000),
                 _cell(cs, "gw-mem-2w", 4096, 1500, 0.09), _cell(cs, "nginx-tmpfs", 4096, 3000)],
        "1MiB": [_cell(cs, "gw-mem", 2**20, 100), _cell(cs, "nginx", 2**20, 50), _cell(cs, "gw-disk", 2**20, 80),
                 _cell(cs, "gw-cold/shaped", 2**20, 30), _cell(cs, "shaped-origin", 2**20, 60)],
    }
    rows = {row["row"]: row for row in cs.serving_rows(results, "wrk:sdk", 2, "auto")}
    assert {name: (row["ratio"], row["target"]) for name, row in rows.items()} == {
        "warm 4 KiB req/s, 1 worker vs nginx-tmpfs with 1 worker": (0.5, 0.5),
        "warm 4 KiB req/s, 2 workers vs nginx-tmpfs (auto workers)": (0.5, 0.8),
        "CPU per 4 KiB hit, 2 workers / 1 worker": (1.2, 1.15),
        "warm 1 MiB MB/s, 1 worker vs nginx (disk cache, auto workers)": (2.0, 1.0),
        "disk tier 1 MiB MB/s vs memory tier": (0.8, 0.8),
        "cold 1 MiB MB/s, 1 worker vs the shaped origin directly": (0.5, 0.7),
    }  # no 64 MiB row: not measured
    assert rows["CPU per 4 KiB hit, 2 workers / 1 worker"]["lower"] is True
    assert cs.serving_rows(results, "py", 2, "auto") == []  # no cells of that client


def test_hits_rows_are_named_as_the_docs_name_them() -> None:
    cs = serving_module()
    results = [(f"{signing} {label}", _cell(cs, "gateway", size, 500, 0.1), _cell(cs, "nginx", size, 1000, 0.02))
               for signing, label, size in (("sdk", "4KiB", 4096), ("sdk", "1MiB", 2**20),
                                            ("presigned-new", "4KiB", 4096), ("same-bytes", "4KiB", 4096))]
    rows = cs.hit_rows(results)
    assert [(r["row"], r.get("target")) for r in rows] == [
        ("SDK-signed 4 KiB", 0.5), ("SDK-signed 1 MiB", 1.0), ("each-new presigned 4 KiB", 0.4),
        ("same bytes again 4 KiB (reference)", None)]  # the rows of docs/img/data/hits-232f448.json
    assert rows[0]["gateway_rps"] == 500 and rows[0]["nginx_rps"] == 1000
    assert rows[0]["gateway_cpu_us"] == 200 and rows[0]["nginx_cpu_us"] == 20


def test_the_sdk_ranges_file_has_each_request_its_own_range() -> None:
    """sdk-ranges: no two requests of one pass of the file have the same Range and key, one shape
    per object (auth.shaped cuts the Range out); sdk: one shape per object, each signed anew."""
    cs = serving_module()
    keys = [f"warm/4KiB/{n}" for n in range(5)]
    ranged = [shape_of(request) for request in cs.wrk_requests("sdk-ranges", "http://127.0.0.1:9", keys, 60)]
    plain = [shape_of(request) for request in cs.wrk_requests("sdk", "http://127.0.0.1:9", keys, 60)]
    assert all(ranged) and all(plain)
    assert len({shape[0] for shape in ranged if shape}) == 5
    assert len({(shape[0], shape[6]) for shape in ranged if shape}) == 60
    assert len({shape[0] for shape in plain if shape}) == 5 and len({shape[3] for shape in plain if shape}) == 60


@pytest.mark.skipif(any(shutil.which(tool) is None for tool in ("wrk", "nginx", "taskset")),
                    reason="needs wrk, nginx and taskset (apt)")
def test_hits_mode_runs_every_kind_of_row(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "cache_serving.py"), "--hits", "--seconds", "1", "--requests", "400",
         "--hits-objects", "4KiB=20,1MiB=4", "--retries", "0",
         "--hits-rows", "4KiB:sdk,4KiB:sdk-ranges,1MiB:sdk,4KiB:presigned-new,4KiB:same-bytes",
         "--json", str(tmp_path / "hits.json")],
        capture_output=True, text=True, timeout=100, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:]]
            for line in done.stdout.splitlines() if line.startswith("| ") and "req/s" not in line}
    assert set(rows) == {"sdk 4KiB", "sdk-ranges 4KiB", "sdk 1MiB", "presigned-new 4KiB", "same-bytes 4KiB"}
    for name, cells in rows.items():
        assert cells[9] == "0/0", (name, cells)  # no errors at the gateway or nginx: every signature passed
        assert float(cells[0].replace(",", "")) > 0 and float(cells[2].replace(",", "")) > 0, (name, cells)
    # An SDK's request signed anew is answered by its shape from the shape's second arrival (each
    # of the 20 objects' shapes comes 20 times a pass of the file: 19 of 20 kept).
    for name in ("sdk 4KiB", "sdk-ranges 4KiB"):  # (the latter each for its own Range)
        kept = re.search(r"kept (\d+)% \(by shape\)", rows[name][10])
        assert kept is not None and int(kept[1]) >= 80, rows[name]
    document = json.loads((tmp_path / "hits.json").read_text())
    assert document["bench"] == "cache_serving.hits" and "--hits" in document["command"] and document["load"]
    assert [row["row"] for row in document["rows"]] == [
        "SDK-signed 4 KiB", "SDK-signed, each its own Range 4 KiB", "SDK-signed 1 MiB", "each-new presigned 4 KiB",
        "same bytes again 4 KiB (reference)"]
    assert all(row["gateway_rps"] > 0 and row["nginx_rps"] > 0 for row in document["rows"])
    assert charts.draw(tmp_path / "hits.png", [tmp_path / "hits.json"]).read_bytes()[:4] == b"\x89PNG"


def test_a_gateway_is_measured_once_every_worker_serves(tmp_path: Path) -> None:
    """Gateway.start waits for the node's "gateway listening on" line (past what an earlier start
    logged), not only for the port's first answer: with two workers the first serves before the
    second, and a read measured meanwhile shares the cores with its start and finds it unable to
    answer ("worker 1 did not answer (worker-1: ConnectionError)", seen as 400-600 ms cold reads)."""
    cs = serving_module()
    log = tmp_path / "gw.log"
    log.write_bytes(b"gateway listening on http://127.0.0.1:1 -> origin x\n")  # an earlier start's
    offset = log.stat().st_size
    writer = subprocess.Popen([sys.executable, "-c", "import sys, time; time.sleep(0.5); "
                               "open(sys.argv[1], 'ab').write(b'gateway listening on http://127.0.0.1:2\\n'); "
                               "time.sleep(30)", str(log)])
    try:
        cs._wait_listening(log, offset, writer, "gateway gw")
        assert b"127.0.0.1:2" in log.read_bytes()  # (not the earlier start's line)
    finally:
        writer.kill()
        writer.wait()
    with pytest.raises(SystemExit, match="did not say it serves"):  # it exited first
        cs._wait_listening(log, log.stat().st_size, writer, "gateway gw")
