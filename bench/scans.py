"""Filtered scans of Parquet and ORC through PyArrow's S3FileSystem and DuckDB's httpfs: origin vs gateway.

A dataset written with PyArrow (--files files of --rows rows each, sorted by `day`, so a
`day` filter lets a reader skip Parquet row groups by their statistics) in both formats is
uploaded to moto behind bench/shaped_proxy.py (first-byte latency and a per-connection
rate: a remote-like store). Two queries, each run by each engine:

  selective  SELECT category, sum(value), count(*) WHERE day = <one of 30 days>
  scan       SELECT category, sum(value) WHERE value > 0.9 (reads two columns of every file)

  pyarrow    pyarrow.dataset over pyarrow.fs.S3FileSystem (AWS SDK for C++, SigV4), the
             filter pushed down to the dataset scanner; Parquet and ORC
  duckdb     read_parquet('s3://.../*.parquet') with the httpfs extension (SigV4; loaded
             from the duckdb-extension-httpfs wheel, nothing downloaded); a new connection
             per query and its external file cache off, so DuckDB caches nothing across
             queries. DuckDB has no ORC reader, so Parquet only.

against: the origin directly (best of 2), the gateway cold (a freshly started gateway,
empty cache, first query) and warm (best of the next 2). It prints seconds per query and
the speedup over the origin, and writes a PNG chart.

    .venv/bin/python bench/scans.py                     # ~3 minutes
    .venv/bin/python bench/scans.py --files 8 --rows 2000000 --chart docs/img/scans.png

Needs pyarrow, duckdb, duckdb-extension-httpfs (installed) and matplotlib
(.venv/bin/pip install matplotlib). Results: docs/benchmarks-notes.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from pyarrow import fs as pafs
from pyarrow import orc

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workloads as wl

cs = wl.cs
DAYS = 30
CATEGORIES = [f"cat{i:02d}" for i in range(50)]


def write_dataset(folder: Path, files: int, rows: int) -> dict[str, list[Path]]:
    """The same rows as Parquet (row groups of 128k rows) and ORC files; sorted by day across files."""
    rng = np.random.default_rng(6)
    total = files * rows
    out: dict[str, list[Path]] = {"parquet": [], "orc": []}
    for f in range(files):
        ids = np.arange(f * rows, (f + 1) * rows, dtype=np.int64)
        table = pa.table({
            "id": ids,
            "day": pa.array([f"2026-11-{1 + d:02d}" for d in (ids * DAYS // total)]).dictionary_encode(),
            "category": pa.DictionaryArray.from_arrays(rng.integers(0, len(CATEGORIES), rows).astype(np.int32),
                                                       pa.array(CATEGORIES)),
            "value": rng.random(rows),
            "qty": rng.integers(0, 1000, rows).astype(np.int32),
        })
        for fmt, written in out.items():
            path = folder / fmt / f"part-{f:03d}.{fmt}"
            path.parent.mkdir(parents=True, exist_ok=True)
            if fmt == "parquet":
                pq.write_table(table, path, row_group_size=128 * 1024)
            else:
                orc.write_table(table.cast(table.schema.set(1, pa.field("day", pa.string())).set(
                    2, pa.field("category", pa.string()))), path, stripe_size=8 * 1024 * 1024)
            written.append(path)
    return out


def pyarrow_query(fmt: str, which: str, day: str) -> Callable[[str], object]:
    def run(endpoint: str) -> object:
        filesystem = pafs.S3FileSystem(access_key=cs.USER[0], secret_key=cs.USER[1], region=cs.REGION,
                                       endpoint_override=endpoint.removeprefix("http://"), scheme="http")
        dataset = ds.dataset(f"{wl.BUCKET}/{fmt}/", filesystem=filesystem, format=fmt)
        condition = pc.field("day") == day if which == "selective" else pc.field("value") > 0.9
        table = dataset.to_table(columns=["category", "value"], filter=condition)
        return table.group_by("category").aggregate([("value", "sum")]).num_rows
    return run


def duckdb_query(which: str, day: str) -> Callable[[str], object]:
    spec = importlib.util.find_spec("duckdb_extension_httpfs")
    ext = Path(next(iter(spec.submodule_search_locations or []))) / "extensions" / f"v{duckdb.__version__}"  # type: ignore[union-attr]
    where = f"day = '{day}'" if which == "selective" else "value > 0.9"

    def run(endpoint: str) -> object:
        con = duckdb.connect(config={"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"})
        try:
            con.execute(f"LOAD '{ext / 'httpfs.duckdb_extension'}'")
            for setting in (f"s3_endpoint='{endpoint.removeprefix('http://')}'", "s3_url_style='path'",
                            "s3_use_ssl=false", f"s3_region='{cs.REGION}'", f"s3_access_key_id='{cs.USER[0]}'",
                            f"s3_secret_access_key='{cs.USER[1]}'", "http_retries=0",
                            "enable_external_file_cache=false"):
                con.execute(f"SET {setting}")
            return len(con.execute(f"SELECT category, sum(value), count(*) FROM "
                                   f"read_parquet('s3://{wl.BUCKET}/parquet/*.parquet') WHERE {where} "
                                   f"GROUP BY category").fetchall())
        finally:
            con.close()
    return run


def timed(run: Callable[[str], object], endpoint: str) -> tuple[float, object]:
    t0 = time.perf_counter()
    answer = run(endpoint)
    return time.perf_counter() - t0, answer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows per file")
    parser.add_argument("--latency", default="25ms")
    parser.add_argument("--rate", default="80MB")
    parser.add_argument("--chart", default="", help="PNG path (default: scans.png in a temp folder)")
    args = parser.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="gateway-scans-"))
    chart = Path(args.chart) if args.chart else tmp / "scans.png"
    t0 = time.monotonic()
    paths = write_dataset(tmp / "data", args.files, args.rows)
    sizes = {fmt: sum(p.stat().st_size for p in ps) for fmt, ps in paths.items()}
    version = wl.header("bench/scans.py: filtered Parquet/ORC scans (PyArrow S3FileSystem, DuckDB httpfs)", args.latency,
              args.rate,
              f"dataset: {args.files} files x {args.rows:,} rows (id, day, category, value, qty; sorted by day), "
              f"Parquet {sizes['parquet'] / 1e6:.0f} MB (row groups of 131,072 rows), ORC {sizes['orc'] / 1e6:.0f} MB"
              f" (8 MiB stripes); pyarrow {pa.__version__}, duckdb {duckdb.__version__}; gateway default settings "
              f"(written in {time.monotonic() - t0:.0f}s)")
    code = wl.snapshot_code(tmp)
    day = f"2026-11-{1 + DAYS // 2:02d}"
    cases = [(f"{engine} {fmt} {which}", run) for which in ("selective", "scan") for engine, fmt, run in (
        ("pyarrow", "parquet", pyarrow_query("parquet", which, day)),
        ("pyarrow", "orc", pyarrow_query("orc", which, day)),
        ("duckdb", "parquet", duckdb_query(which, day)))]
    rows = []
    with ExitStack() as stack:
        moto, origin = stack.enter_context(wl.shaped_moto(tmp, args.latency, args.rate))
        moto_s3 = wl.client(moto, cs.ORIGIN_CREDENTIALS, attempts=5)  # setup only: moto may drop a connection
        moto_s3.create_bucket(Bucket=wl.BUCKET)
        for fmt, ps in paths.items():
            for p in ps:
                moto_s3.upload_file(str(p), wl.BUCKET, f"{fmt}/{p.name}")
        gw = wl.gateway("gw-scans", origin, tmp, code)
        stack.callback(gw.stop)
        for name, run in cases:
            with wl.Cpu() as c_origin:
                direct_times = [timed(run, origin) for _ in range(2)]
            gw.restart() if gw.proc else gw.start()  # an empty cache for this query's cold run
            with wl.Cpu(gw) as c_cold:
                cold = timed(run, gw.endpoint)
            with wl.Cpu(gw) as c_warm:
                warm_times = [timed(run, gw.endpoint) for _ in range(2)]
            answers = {a for _, a in direct_times + [cold] + warm_times}
            if len(answers) != 1:
                raise SystemExit(f"{name}: answers differ: {answers}")
            direct = min(t for t, _ in direct_times)
            warm = min(t for t, _ in warm_times)
            other = max(c.other for c in (c_origin, c_cold, c_warm))
            rows.append((name, direct, cold[0], warm, direct / cold[0], direct / warm, c_cold.gateway,
                         c_warm.gateway / 2, other))
            print(f"   {name:<28} origin {direct:6.2f} s  gw cold {cold[0]:6.2f} s ({direct / cold[0]:4.2f}x)  "
                  f"gw warm {warm:6.2f} s ({direct / warm:4.2f}x)  (gateway CPU cold {c_cold.gateway:.2f} s, "
                  f"warm {c_warm.gateway / 2:.2f} s; other load up to {other:.2f})", flush=True)

    print("\n" + wl.markdown(["query", "origin s", "gw cold s", "gw warm s", "cold speedup", "warm speedup",
                              "gw CPU s cold", "gw CPU s warm", "other load"], rows))
    wl.bar_chart(chart, "Filtered scans: seconds per query (lower is better)", [r[0].replace(" ", "\n", 1) for r in rows],
                 {"origin": [r[1] for r in rows], "gw cold": [r[2] for r in rows], "gw warm": [r[3] for r in rows]},
                 "seconds",
                 note=f"origin: moto + shaped_proxy (+{args.latency} first byte, {args.rate}/s per connection); "
                      f"{args.files}x{args.rows:,} rows; {version}; {time.strftime('%Y-%m-%d')}")
    wl.tidy(tmp, chart)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
