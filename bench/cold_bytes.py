"""What a cold query asks of the origin, through the gateway and directly: requests and bytes.

The dataset of bench/scans.py (--files files of --rows rows, Parquet row groups of 131,072 rows,
ORC stripes of 8 MiB) is uploaded to moto behind bench/shaped_proxy.py, which counts every request
it relays and the bytes of each answer's body. Each query (PyArrow's dataset over its
S3FileSystem, Parquet and ORC, a selective filter and a two-column scan; DuckDB's read_parquet
over httpfs, both) runs once straight against the proxy, then once through a gateway started
fresh (an empty cache) in front of the same proxy; the counters' differences are what each cost
the origin. Only requests and bytes are compared, so the proxy adds no latency by default.

    .venv/bin/python bench/cold_bytes.py                          # ~2 minutes
    .venv/bin/python bench/cold_bytes.py --workers 1 --files 4 --rows 1000000

Needs pyarrow, duckdb and duckdb-extension-httpfs (installed with the test extras).
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scans
import workloads as wl

cs = wl.cs


@contextlib.contextmanager
def counted_moto(workdir: Path, latency: str, rate: str) -> Iterator[tuple[str, str, Path]]:
    """moto behind bench/shaped_proxy.py, which logs every request it relays; yields (moto, proxy, log)."""
    with wl.moto_process(workdir) as moto:
        port, requests = cs.free_port(), workdir / "requests.tsv"
        with open(workdir / "shaped-proxy.log", "wb") as fh:
            proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve().parent / "shaped_proxy.py"),
                                     "--upstream", moto.removeprefix("http://"), "--port", str(port),
                                     "--latency", latency, "--rate", rate, "--log", str(requests)],
                                    stdout=fh, stderr=subprocess.STDOUT)
        proxy = f"http://127.0.0.1:{port}"
        try:
            cs._wait_http(proxy + "/moto-api/", proc, "shaped proxy", workdir / "shaped-proxy.log")
            yield moto, proxy, requests
        finally:
            cs._stop(proc)


def counters(proxy: str) -> tuple[int, int]:
    """(requests of objects: GETs and HEADs, bytes of the GETs' answers) the proxy relayed so far."""
    got = httpx.get(proxy + "/_shaped_proxy/counters", timeout=10).json()
    return got["requests"]["GET"] + got["requests"]["HEAD"], got["bytes"]["GET"]


def costs(run: Callable[[str], object], endpoint: str, proxy: str) -> tuple[object, int, int]:
    """(the query's answer, origin requests, origin bytes) of one run of the query."""
    before = counters(proxy)
    answer = run(endpoint)
    after = counters(proxy)
    return answer, after[0] - before[0], after[1] - before[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows per file")
    parser.add_argument("--workers", default="", help="the gateway's server.workers (default: its default)")
    parser.add_argument("--latency", default="0", help="origin: added before every answer's first byte")
    parser.add_argument("--rate", default="0", help="origin: bytes/s per connection each way (0: no cap)")
    parser.add_argument("--requests-log", default="", help="a TSV of every origin request (query, setup, Range, bytes)")
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="gateway-cold-bytes-"))
    paths = scans.write_dataset(tmp / "data", args.files, args.rows)
    sizes = {fmt: sum(p.stat().st_size for p in ps) for fmt, ps in paths.items()}
    wl.header("bench/cold_bytes.py: origin requests and bytes of cold queries, gateway against direct",
              args.latency, args.rate,
              f"dataset: {args.files} files x {args.rows:,} rows, Parquet {sizes['parquet'] / 1e6:.0f} MB, "
              f"ORC {sizes['orc'] / 1e6:.0f} MB; gateway server.workers {args.workers or 'default'}")
    code = wl.snapshot_code(tmp)
    day = f"2026-11-{1 + scans.DAYS // 2:02d}"
    cases = [(f"{engine} {fmt} {which}", run) for which in ("selective", "scan") for engine, fmt, run in (
        ("pyarrow", "parquet", scans.pyarrow_query("parquet", which, day)),
        ("pyarrow", "orc", scans.pyarrow_query("orc", which, day)),
        ("duckdb", "parquet", scans.duckdb_query(which, day)))]
    rows: list[tuple[object, ...]] = []
    total = [0, 0, 0, 0]
    with ExitStack() as stack:
        moto, proxy, log = stack.enter_context(counted_moto(tmp, args.latency, args.rate))
        s3 = wl.client(moto, cs.ORIGIN_CREDENTIALS, attempts=5)
        s3.create_bucket(Bucket=wl.BUCKET)
        for fmt, ps in paths.items():
            for p in ps:
                s3.upload_file(str(p), wl.BUCKET, f"{fmt}/{p.name}")
        gw = wl.gateway("gw-cold-bytes", proxy, tmp, code,
                        {"GATEWAY_SERVER_WORKERS": args.workers} if args.workers else None)
        stack.callback(gw.stop)
        marks: list[tuple[str, int]] = []
        for name, run in cases:
            marks.append((f"{name}\tdirect", len(log.read_text().splitlines())))
            direct = costs(run, proxy, proxy)
            gw.restart() if gw.proc else gw.start()  # an empty cache for this query
            marks.append((f"{name}\tcold", len(log.read_text().splitlines())))
            cold = costs(run, gw.endpoint, proxy)
            if cold[0] != direct[0]:
                raise SystemExit(f"{name}: answers differ: {cold[0]} against {direct[0]}")
            rows.append((name, f"{cold[1]} / {direct[1]} ({cold[1] / direct[1]:.2f}x)",
                         f"{cold[2] / 1e6:.1f} / {direct[2] / 1e6:.1f} MB ({cold[2] / direct[2]:.2f}x)"))
            total = [total[0] + cold[1], total[1] + direct[1], total[2] + cold[2], total[3] + direct[2]]
            print(f"   {name:<26} requests {rows[-1][1]:>18}  bytes {rows[-1][2]}", flush=True)
        if args.requests_log:
            lines = log.read_text().splitlines()
            with open(args.requests_log, "w") as out:
                for (what, at), end in zip(marks, [m[1] for m in marks[1:]] + [len(lines)]):
                    out.writelines(f"{what}\t{line}\n" for line in lines[at:end])
    rows.append(("**all**", f"{total[0]} / {total[1]} ({total[0] / total[1]:.2f}x)",
                 f"{total[2] / 1e6:.1f} / {total[3] / 1e6:.1f} MB ({total[2] / total[3]:.2f}x)"))
    print("\n" + wl.markdown(["query", "origin requests, cold / direct", "origin bytes, cold / direct"], rows))
    print(f"\nAt the end: {wl.loadavg()}; {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
    wl.tidy(tmp)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
