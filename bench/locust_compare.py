"""The loadtests/ Locust scenarios, headless, against the gateway vs the origin directly vs nginx, in one run.

Starts moto behind bench/shaped_proxy.py (the issue-6 origin: first-byte latency and a
per-connection rate), prepares the scenarios' objects there (python -m loadtests.prepare,
straight at moto), then starts

  origin    the shaped origin itself (moto behind the proxy), no cache
  gateway   a fresh gateway process (default settings) in front of it
  nginx     apt nginx with `proxy_cache` (on disk) in front of it, as bench/cache_serving.py
            sets it up, but keyed by $request_uri (listings of different prefixes are
            different entries)

and runs loadtests/locustfile.py headless against each one in turn with the same users,
spawn rate and duration: the read-only scenarios (--read-scenarios, default zipf,dashboard)
against all three, the scenarios that write (--write-scenarios, default
metadata,readwrite) against the origin and the gateway only (nginx does not see writes: it
would serve stale listings and old bytes, which the scenarios report as failures). Before
each measured run, a --warmup run (not counted) against the same target fills its cache.

It prints, per scenario group and target: requests, req/s, p50/p95/p99 (ms, over every
request; the dashboard's REFRESH, a whole refresh, is left out of these and shown in the
per-request table), failures, and the failures that are wrong bytes (checksum) or other
wrong answers (metadata, listings), with the CPU the gateway and all of this benchmark's
processes used and the other load on the machine; and a chart of req/s.

    .venv/bin/python bench/locust_compare.py                              # ~8 minutes
    .venv/bin/python bench/locust_compare.py --seconds 60 --users 16 --chart docs/img/locust_compare.png
    .venv/bin/python bench/locust_compare.py --seconds 5 --warmup 0 --objects 50 --dirs 3   # a quick look

Needs: apt-get install -y nginx; locust (pip install -e '.[test]'). Results: docs/benchmarks-notes.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workloads as wl

cs = wl.cs
ROOT = cs.ROOT
PREFIX = "lt"
WRONG = ("wrong bytes", "wrong metadata", "wrong listing")


# --- Locust's results --------------------------------------------------------------------------------


def percentile(histogram: dict[str, int] | dict[int, int], q: float) -> float:
    """The q-th percentile (0-100) of a Locust response_times histogram ({rounded ms: count})."""
    points = sorted((float(ms), n) for ms, n in histogram.items())
    total = sum(n for _, n in points)
    if not total:
        return math.nan
    rank = math.ceil(total * q / 100)
    seen = 0
    for ms, n in points:
        seen += n
        if seen >= rank:
            return ms
    return points[-1][0]


def merge(entries: Sequence[dict]) -> dict[str, int]:  # type: ignore[type-arg]
    merged: dict[str, int] = {}
    for e in entries:
        for ms, n in e["response_times"].items():
            merged[str(ms)] = merged.get(str(ms), 0) + n
    return merged


def error_report(stderr: str) -> dict[str, int]:
    """Locust's error report (printed at the end): "<type> <name>: <error>" -> occurrences."""
    if "Error report" not in stderr:
        return {}
    table = stderr.rsplit("Error report", 1)[1]
    return {m.group(2).strip(): int(m.group(1))
            for m in re.finditer(r"^\s*(\d+)\s+(\S.*?:\s.*?)\s*$", table, re.MULTILINE)}


def summarise(entries: Sequence[dict], errors: dict[str, int]) -> dict[str, float]:  # type: ignore[type-arg]
    """One row for a run: every request, the whole-refresh entries (REFRESH) left out."""
    requests = [e for e in entries if e["method"] != "REFRESH"]
    count = sum(e["num_requests"] for e in requests)
    starts = [e["start_time"] for e in requests if e["num_requests"]]
    ends = [e["last_request_timestamp"] for e in requests if e["last_request_timestamp"]]
    span = (max(ends) - min(starts)) if starts and ends else math.nan
    hist = merge(requests)
    not_refresh = {k: v for k, v in errors.items() if not k.startswith("REFRESH ")}
    return {
        "requests": count,
        "rps": count / span if span and span > 0 else math.nan,
        "mbps": sum(e["total_content_length"] for e in requests) / span / 1e6 if span and span > 0 else math.nan,
        "p50": percentile(hist, 50), "p95": percentile(hist, 95), "p99": percentile(hist, 99),
        "failures": sum(e["num_failures"] for e in requests),
        "wrong bytes": sum(n for k, n in not_refresh.items() if k.endswith(": wrong bytes")),
        "wrong other": sum(n for k, n in not_refresh.items() if k.endswith((": wrong metadata", ": wrong listing"))),
        "seconds": span,
    }


# --- targets -------------------------------------------------------------------------------------------


@contextmanager
def nginx(origin: str, workdir: Path, workers: str) -> Iterator[str]:
    """bench/cache_serving.py's nginx proxy_cache, keyed by $request_uri (its $uri would make one entry of
    every listing of a bucket, whatever the prefix); yields the endpoint."""
    if shutil.which("nginx") is None:
        raise SystemExit("nginx not found: apt-get install -y nginx")
    root = workdir / "nginx"
    root.mkdir()
    port = cs.free_port()
    conf = root / "nginx.conf"
    user = "user root;\n" if os.geteuid() == 0 else ""
    text = cs.NGINX_CONF.replace("proxy_cache_key $uri;", "proxy_cache_key $request_uri;")
    assert "$request_uri" in text
    # {cache} and {sendfile}: newer versions of NGINX_CONF place the cache and choose sendfile with them
    conf.write_text(text.format(user=user, workers=workers, dir=root, port=port, cache=root / "cache",
                                origin=urlsplit(origin).netloc, sendfile="on"))
    proc = subprocess.Popen(["nginx", "-c", str(conf), "-p", str(root), "-e", str(root / "error.log")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        cs._wait_http(endpoint + "/", proc, "nginx", root / "error.log")
        yield endpoint
    finally:
        cs._stop(proc)  # TERM: nginx's fast shutdown of master and workers


def locust(host: str, scenarios: str, users: int, spawn_rate: float, seconds: float,
           env: dict[str, str]) -> tuple[list[dict], dict[str, int], int, str]:  # type: ignore[type-arg]
    """One headless Locust run; (stats entries, error report, exit code, stderr)."""
    args = [sys.executable, "-m", "locust", "-f", str(ROOT / "loadtests" / "locustfile.py"), "--headless",
            "-u", str(users), "-r", str(spawn_rate), "-t", f"{seconds:g}s", "--stop-timeout", "10", "--host", host,
            "--json", "--only-summary", "--loglevel", "WARNING"]
    done = subprocess.run(args, cwd=ROOT, env={**os.environ, **env, "LOADTEST_SCENARIOS": scenarios},
                          capture_output=True, text=True, timeout=seconds + 180, check=False)
    try:
        entries = json.loads(done.stdout)
    except ValueError:
        raise SystemExit(f"locust printed no stats (exit {done.returncode}):\n{done.stderr[-4000:]}") from None
    return entries, error_report(done.stderr), done.returncode, done.stderr


# --- main ----------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=16, help="Locust users (-u), the same for every target")
    parser.add_argument("--spawn-rate", type=float, default=8, help="Locust spawn rate (-r)")
    parser.add_argument("--seconds", type=float, default=60, help="measured run per scenario group and target")
    parser.add_argument("--warmup", type=float, default=20, help="an uncounted run before each measured one (0: none)")
    parser.add_argument("--read-scenarios", default="zipf,dashboard", help="run against origin, gateway and nginx")
    parser.add_argument("--write-scenarios", default="metadata,readwrite", help="run against origin and gateway only")
    parser.add_argument("--targets", default="origin,gateway,nginx")
    parser.add_argument("--objects", type=int, default=1000, help="read set (zipf, readwrite): objects")
    parser.add_argument("--size", default="64KiB", help="read set: object size or range")
    parser.add_argument("--dirs", type=int, default=20, help="dashboard folders")
    parser.add_argument("--files", type=int, default=100, help="small files per folder")
    parser.add_argument("--file-size", default="1KiB-16KiB")
    parser.add_argument("--latency", default="25ms", help="origin: added before every answer's first byte")
    parser.add_argument("--rate", default="80MB", help="origin: bytes/s per connection each way")
    parser.add_argument("--nginx-workers", default="auto")
    parser.add_argument("--chart", default="", help="PNG path (default: locust_compare.png in a temp folder)")
    args = parser.parse_args(argv)
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    if unknown := set(targets) - {"origin", "gateway", "nginx"}:
        parser.error(f"--targets: unknown {', '.join(sorted(unknown))}")
    groups = [(g, "all") for g in [args.read_scenarios] if g] + [(g, "write") for g in [args.write_scenarios] if g]
    if importlib_missing("locust"):
        raise SystemExit("locust is not installed: .venv/bin/pip install -e '.[test]'")

    tmp = Path(tempfile.mkdtemp(prefix="gateway-locust-"))
    chart = Path(args.chart) if args.chart else tmp / "locust_compare.png"
    version = wl.header(
        "bench/locust_compare.py: loadtests/ Locust scenarios, headless, gateway vs origin vs nginx proxy_cache",
        args.latency, args.rate,
        f"locust -u {args.users} -r {args.spawn_rate:g} -t {args.seconds:g}s per scenario group and target"
        f" (after an uncounted {args.warmup:g}s warm-up run); read set {args.objects} x {args.size}, dashboard "
        f"{args.dirs} folders x {args.files} files of {args.file_size}; gateway: default settings (cache.memory_quota"
        f" 1 GiB, metadata.ttl 60s, listing.ttl 30s); nginx: proxy_cache on disk, key $request_uri,"
        f" {args.nginx_workers} workers")
    code = wl.snapshot_code(tmp)
    env = {"AWS_ACCESS_KEY_ID": cs.USER[0], "AWS_SECRET_ACCESS_KEY": cs.USER[1], "AWS_DEFAULT_REGION": cs.REGION,
           "LOADTEST_BUCKET": wl.BUCKET, "LOADTEST_PREFIX": PREFIX}
    rows: list[tuple[object, ...]] = []
    detail: list[tuple[object, ...]] = []
    rps: dict[str, dict[str, float]] = {}
    failed_runs = 0
    with ExitStack() as stack:
        moto, origin = stack.enter_context(wl.shaped_moto(tmp, args.latency, args.rate))
        t0 = time.monotonic()
        prepared = subprocess.run(
            [sys.executable, "-m", "loadtests.prepare", "--endpoint", moto, "--bucket", wl.BUCKET, "--prefix", PREFIX,
             "--create-bucket", "--objects", str(args.objects), "--size", args.size, "--dirs", str(args.dirs),
             "--files", str(args.files), "--file-size", args.file_size, "--workers", "8"],
            cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, check=False)
        if prepared.returncode:
            raise SystemExit(f"prepare failed:\n{prepared.stdout}{prepared.stderr[-3000:]}")
        print(f"prepared at moto in {time.monotonic() - t0:.0f}s: {prepared.stdout.strip()}\n", flush=True)
        gw = wl.gateway("gw-locust", origin, tmp, code)
        endpoints = {"origin": origin}
        if "gateway" in targets:
            gw.start()
            stack.callback(gw.stop)
            endpoints["gateway"] = gw.endpoint
        if "nginx" in targets:
            endpoints["nginx"] = stack.enter_context(nginx(origin, tmp, args.nginx_workers))
        for scenarios, where in groups:
            for target in targets:
                if where == "write" and target == "nginx":
                    continue
                host = endpoints[target]
                if args.warmup > 0:
                    _, warm_errors, _, _ = locust(host, scenarios, args.users, args.spawn_rate, args.warmup, env)
                    if warm_errors:
                        print(f"   (warm-up against {target}: errors {warm_errors})", flush=True)
                with wl.Cpu(gw if target == "gateway" else None) as cpu:
                    entries, errors, exit_code, stderr = locust(host, scenarios, args.users, args.spawn_rate,
                                                                args.seconds, env)
                s = summarise(entries, errors)
                failed_runs += exit_code != 0
                rps.setdefault(scenarios, {})[target] = s["rps"]
                rows.append((scenarios, target, int(s["requests"]), f"{s['rps']:,.1f}", f"{s['mbps']:.2f}",
                             f"{s['p50']:g}", f"{s['p95']:g}", f"{s['p99']:g}", int(s["failures"]),
                             int(s["wrong bytes"]), int(s["wrong other"]),
                             f"{cpu.gateway:.1f}" if target == "gateway" else "-", f"{cpu.own:.1f}",
                             f"{cpu.other:.2f}", f"{os.getloadavg()[0]:.1f}"))
                print(f"   {scenarios:<20} {target:<8} {s['requests']:>7,} requests  {s['rps']:8,.1f} req/s"
                      f"  p50 {s['p50']:g} p95 {s['p95']:g} p99 {s['p99']:g} ms  failures {s['failures']}"
                      f" (wrong bytes {s['wrong bytes']}, other wrong {s['wrong other']}), exit {exit_code}"
                      f"  (CPU: gateway {cpu.gateway:.1f} s, ours {cpu.own:.1f} s, other load {cpu.other:.2f};"
                      f" {wl.loadavg()})", flush=True)
                if errors:
                    print("      errors: " + "; ".join(f"{n} x {k}" for k, n in errors.items()), flush=True)
                if exit_code not in (0, 1):
                    print(f"      locust exited {exit_code}:\n{stderr[-2000:]}", flush=True)
                for e in sorted(entries, key=lambda e: (e["name"], e["method"])):
                    span = (e["last_request_timestamp"] or e["start_time"]) - e["start_time"]
                    detail.append((scenarios, target, f"{e['method']} {e['name']}", e["num_requests"],
                                   f"{e['num_requests'] / span:,.1f}" if span > 0 else "-",
                                   f"{percentile(e['response_times'], 50):g}",
                                   f"{percentile(e['response_times'], 99):g}", e["num_failures"]))

    print("\n" + wl.markdown(["scenarios", "target", "requests", "req/s", "MB/s", "p50 ms", "p95 ms", "p99 ms",
                              "failures", "wrong bytes", "other wrong answers", "gateway CPU s", "all our CPU s",
                              "other load", "load avg 1m"], rows))
    print("\nper request type (REFRESH dashboard: a whole refresh, one listing and its files' GETs):\n")
    print(wl.markdown(["scenarios", "target", "request", "count", "per s", "p50 ms", "p99 ms", "failures"], detail))
    print(f"\n'all our CPU s': CPU seconds of every process of this benchmark (Locust, gateway, nginx, proxy, moto);"
          f" 'other load': cores used meanwhile by processes outside it. At the end: {wl.loadavg()}")
    names = list(rps)
    wl.bar_chart(chart, f"Locust scenarios, {args.users} users, {args.seconds:g} s each: requests/s (higher is better)",
                 names, {t: [rps[g].get(t, math.nan) for g in names] for t in targets}, "requests/s",
                 note=f"origin: moto + shaped_proxy (+{args.latency} first byte, {args.rate}/s per connection); "
                      f"{version}; {time.strftime('%Y-%m-%d')}")
    wl.tidy(tmp, chart)
    return 1 if failed_runs else 0


def importlib_missing(name: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(name) is None


if __name__ == "__main__":
    raise SystemExit(main())
