"""Browser GETs of warm objects: with an Origin header (the bucket has CORS rules) against the same
GETs without one, in one run. A browser's request carries an Origin; its answer must carry the
bucket's Access-Control-* headers (gateway/s3api/cors.py), from the hit path below ASGI too.

`gateway demo` (one node in front of moto on loopback) serves a 4 KiB object whose bucket has a
CORS rule; wrk sends one presigned GET over and over, four ways, alternating round by round:

  plain          no Origin (a request sent again byte for byte: answered as kept, s3api.replays)
  origin         with an Origin the rule allows (kept as well, with the rule's headers)
  plain fresh    no Origin, a header of its own on every request (none kept: the hit path each time)
  origin fresh   with the Origin, fresh (the hit path adds the rule's headers each time)

It prints req/s per cell and the ratio origin / plain for kept and for fresh requests; each
cell's answer is checked once for its x-cache and Access-Control-Allow-Origin.

    .venv/bin/python bench/cors_hits.py                      # about 1 minute
    .venv/bin/python bench/cors_hits.py --rounds 3 --seconds 5 --connections 8

Needs: apt-get install -y wrk.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import boto3
import httpx

ROOT = Path(__file__).resolve().parent.parent
ORIGIN = "https://app.example.com"
LUA = """\
-- bench/cors_hits.py: one path; args: the Origin ("-" for none), and "fresh" for a header of its own per request.
local path, origin, fresh, n = "", nil, false, 0
function init(args)
  path = args[1]
  if args[2] ~= "-" then origin = args[2] end
  fresh = args[3] == "fresh"
end
function request()
  local headers = {}
  if origin then headers["Origin"] = origin end
  if fresh then n = n + 1; headers["X-Bench-Request"] = tostring(n) end
  return wrk.format("GET", path, headers)
end
"""
CELLS = [("plain", None, False), ("origin", ORIGIN, False), ("plain fresh", None, True), ("origin fresh", ORIGIN, True)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_demo(port: int, log: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([str(ROOT / ".venv" / "bin" / "gateway"), "demo", "--port", str(port)],
                            stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if "Try it" in log.read_text(errors="replace"):
            return proc
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    raise SystemExit(f"gateway demo did not start:\n{log.read_text(errors='replace')[-2000:]}")


def prepare(endpoint: str) -> str:
    """The object, the bucket's CORS rule, a presigned GET of it (path and query), warmed."""
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                      aws_access_key_id="demo-access-key", aws_secret_access_key="demo-secret-key")
    s3.put_object(Bucket="demo", Key="bench/cors-4k.bin", Body=os.urandom(4096))
    s3.put_bucket_cors(Bucket="demo", CORSConfiguration={"CORSRules": [
        {"AllowedOrigins": [ORIGIN], "AllowedMethods": ["GET", "HEAD"], "ExposeHeaders": ["ETag"]}]})
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "demo", "Key": "bench/cors-4k.bin"},
                                    ExpiresIn=3600)
    for headers in ({}, {"origin": ORIGIN}, {}, {"origin": ORIGIN}):
        httpx.get(url, headers=headers, timeout=30).raise_for_status()
    return url.removeprefix(endpoint)


def probe(endpoint: str, path: str, origin: str | None) -> str:
    headers = {"origin": origin} if origin else {}
    answer = httpx.get(endpoint + path, headers={**headers, "x-bench-request": "probe"}, timeout=30)
    return f"{answer.headers.get('x-cache')}, allow-origin {answer.headers.get('access-control-allow-origin')}"


def wrk(endpoint: str, path: str, origin: str | None, fresh: bool, seconds: float, connections: int,
        script: Path) -> float:
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", "-s", str(script), endpoint, "--", path,
           origin or "-", "fresh" if fresh else "kept"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60, check=True).stdout
    if "Non-2xx" in out or "Socket errors" in out:
        raise SystemExit(f"wrk saw errors:\n{out}")
    found = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if found is None:
        raise SystemExit(f"no Requests/sec in wrk's output:\n{out}")
    return float(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=8)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="cors-hits-"))
    script = work / "cors.lua"
    script.write_text(LUA)
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    demo = start_demo(port, work / "demo.log")
    try:
        path = prepare(endpoint)
        for name, origin, _ in CELLS[:2]:
            print(f"{name:13s} answered: {probe(endpoint, path, origin)}")
        results: dict[str, list[float]] = {name: [] for name, _, _ in CELLS}
        for round_ in range(args.rounds):
            for name, origin, fresh in CELLS if round_ % 2 == 0 else list(reversed(CELLS)):
                results[name].append(wrk(endpoint, path, origin, fresh, args.seconds, args.connections, script))
        print(f"\nwrk -t1 -c{args.connections} -d{args.seconds:g}s, {args.rounds} rounds; req/s per round:")
        for name, values in results.items():
            print(f"  {name:13s} " + "  ".join(f"{v:9,.0f}" for v in values))
        for kind in ("", " fresh"):
            ratios = [o / p for o, p in zip(results[f"origin{kind}"], results[f"plain{kind}"])]
            print(f"origin / plain{kind or ' (kept)'}: " + "  ".join(f"{r:.2f}x" for r in ratios))
        print(f"load average at end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    finally:
        os.killpg(demo.pid, 15)
        demo.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main())
