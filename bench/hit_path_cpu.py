"""CPU per cache hit answered by the hit path below ASGI, in process, step by step.

Starts moto and a gateway (in a thread of this process, as the tests do), warms one object,
captures the ASGI scope uvicorn built for a presigned GET of it, and then calls the hit path
(GatewayApp.hit) with that scope N times: the CPU per answer, and per step of it (parsing,
the signature check with its memo, the look-ups, the answer's headers, the access log); then
the same request's bytes answered again as kept (GatewayApp.replay, s3api.replays). The
garbage collector is tuned as in a served process (gateway.gcpauses) before anything is timed. No
socket, no HTTP parsing and no load generator: what is left is the gateway's own Python, so
a change to it shows here in one run on a shared machine, where wrk's figures move by tens
of percent between runs.

    .venv/bin/python bench/hit_path_cpu.py                  # 4 KiB, SigV4 presigned, 20,000 calls
    .venv/bin/python bench/hit_path_cpu.py --size 1MiB --signing v2 --calls 5000
    .venv/bin/python bench/hit_path_cpu.py --profile        # plus cProfile's top functions
    .venv/bin/python bench/hit_path_cpu.py --signing v4-header --profile   # as an SDK signs: each call anew

`--signing v4-header`: a GET signed as boto3 signs it (SigV4 in the Authorization header), each
call a request signed anew (its own amz-sdk-invocation-id, so its own signature), which no memo
has seen: what every hit costs a client that signs each request, as the SDKs and the engines on
them do. Such a request is never answered as kept, so there is no replay line.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import pstats
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gateway import gcpauses  # noqa: E402
from gateway.config import CacheSettings  # noqa: E402
from gateway.config.units import parse_size  # noqa: E402
from gateway.s3api import headers as hdrs  # noqa: E402
from gateway.s3api import reads  # noqa: E402
from gateway.s3api.context import Context  # noqa: E402
from gateway.s3api.hits import _no_body  # noqa: E402
from gateway.s3api.responses import body_response  # noqa: E402
from gateway.s3api.accounting import Served, answered_for  # noqa: E402
from gateway.s3api.request import parse_request  # noqa: E402
from tests.servers import moto_server  # noqa: E402
from tests.support import ADMIN, REGION, RunningGateway, base_settings  # noqa: E402

BUCKET, KEY = "bench", "object"


def cpu_per_call(calls: int, func: Callable[[], Any]) -> float:
    """Microseconds of this process's CPU per call of `func`."""
    started = time.process_time()
    for _ in range(calls):
        func()
    return (time.process_time() - started) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="4KiB", help="object size (one block: at most cache.block_size)")
    parser.add_argument("--signing", choices=("v4", "v2", "v4-header"), default="v4",
                        help="presigned URL signature version, or v4-header: signed anew per call, as an SDK does")
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--profile", action="store_true", help="then cProfile the calls (top 25 by own time)")
    args = parser.parse_args()
    size = parse_size(args.size, "--size")
    with moto_server() as origin:
        settings = dataclasses.replace(base_settings(origin), cache=CacheSettings(memory_quota=max(64 << 20, 4 * size)))
        with RunningGateway(settings) as gateway:
            signature = "s3" if args.signing == "v2" else "s3v4"
            s3 = boto3.client("s3", endpoint_url=gateway.endpoint, region_name=REGION, aws_access_key_id=ADMIN[0],
                              aws_secret_access_key=ADMIN[1],
                              config=Config(signature_version=signature, s3={"addressing_style": "path"}))
            s3.create_bucket(Bucket=BUCKET)
            s3.put_object(Bucket=BUCKET, Key=KEY, Body=b"x" * size)
            url = s3.generate_presigned_url("get_object", Params={"Bucket": BUCKET, "Key": KEY}, ExpiresIn=3600)
            app = gateway.server.config.app
            hits = app.hits
            assert hits is not None, "server.hit_path is off"
            captured: list[tuple[dict[str, Any], list[tuple[bytes, bytes]], bool]] = []
            answer = hits.answer

            def capture(scope: dict[str, Any], default_headers: list[tuple[bytes, bytes]], keep_alive: bool) -> Any:
                captured.append((dict(scope), list(default_headers), keep_alive))
                return answer(scope, default_headers, keep_alive)

            hits.answer = capture  # type: ignore[method-assign]
            for _ in range(3):  # warm: metadata, the block, the signature memo
                if args.signing == "v4-header":
                    got = s3.get_object(Bucket=BUCKET, Key=KEY)
                    got["Body"].read()
                    source = got["ResponseMetadata"]["HTTPHeaders"].get("x-cache")
                else:
                    got = httpx.get(url)
                    assert got.status_code == 200, got.text
                    source = got.headers.get("x-cache")
            hits.answer = answer  # type: ignore[method-assign]
            print(f"{args.size} object, {args.signing} GET, x-cache {source}, {args.calls:,} calls")
            scope, default_headers, keep_alive = captured[-1]
            count = args.calls + 2 * min(args.calls, 1000) + args.calls // 2 + 4  # what the calls below take
            fresh = signed_anew(gateway.endpoint, scope, count) if args.signing == "v4-header" else None
            gcpauses.collect_less_often()  # as a served process runs (the requests made above frozen too)
            next_scope = (lambda: next(fresh)) if fresh is not None else (lambda: dict(scope))
            assert app.hit(next_scope(), default_headers, keep_alive) is not None, "the hit path declined the request"
            whole = cpu_per_call(args.calls, lambda: app.hit(next_scope(), default_headers, keep_alive))
            print(f"  GatewayApp.hit, the whole answer: {whole:7.1f} us CPU")
            request = hits.replays.kept()[-1] if fresh is None else b""  # the presigned GET's bytes, kept
            if fresh is None:
                assert app.replay(request, default_headers) is not None, "the kept request was not answered again"
                again = cpu_per_call(args.calls, lambda: app.replay(request, default_headers))
                print(f"  GatewayApp.replay, the same bytes again: {again:7.1f} us CPU")
            steps(app.s3, next_scope, min(args.calls, 1000) if fresh is not None else args.calls)
            if args.profile:
                profile = cProfile.Profile()
                profile.enable()
                for _ in range(args.calls if fresh is None else args.calls // 2):
                    app.hit(next_scope(), default_headers, keep_alive)
                    if fresh is None:
                        app.replay(request, default_headers)
                profile.disable()
                pstats.Stats(profile).sort_stats("tottime").print_stats(25)


def signed_anew(endpoint: str, scope: dict[str, Any], count: int) -> Iterator[dict[str, Any]]:
    """`count` copies of the captured request, each signed anew (SigV4 in the header, its own
    amz-sdk-invocation-id) as boto3 signs a request, made before any is timed."""
    target = scope["raw_path"].decode("latin-1") + ("?" + scope["query_string"].decode() if scope["query_string"] else "")
    kept = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]
            if name not in (b"authorization", b"x-amz-date", b"amz-sdk-invocation-id")}
    signer = S3SigV4Auth(Credentials(*ADMIN), "s3", REGION)
    scopes = []
    for number in range(count):
        request = AWSRequest(method="GET", url=endpoint + target,
                             headers={**kept, "amz-sdk-invocation-id": f"{number:08x}-0000-4000-8000-000000000000"})
        signer.add_auth(request)
        scopes.append({**scope, "headers": [(name.lower().encode("latin-1"), value.encode("latin-1"))
                                            for name, value in request.headers.items()]})
    return iter(scopes)


def steps(s3app: Any, next_scope: Callable[[], dict[str, Any]], calls: int) -> None:
    """The answer's steps one by one, as HitPath.answer takes them (their sum is a little
    less than the whole: the head's assembly and the counters are left out)."""
    engine = s3app.engine
    scope = next_scope()

    def parsed() -> Any:
        return parse_request(next_scope(), _no_body, "0000000000000000", s3app.services.server.domain)

    def identified() -> Any:
        req = parsed()
        s3app.authenticator.identify(req)
        return req

    req = identified()
    meta = engine.fresh_now(req.bucket, req.key, version_id=None, checksums=reads.wants_whole_checksums(req))
    answer = reads.object_answer(req, meta, {})
    read = engine.one_block(req.bucket, req.key, meta, answer.start, answer.end)
    hit = engine.read_block_now(read, meta)
    outcome = {"bytes": len(hit[0]), "cache": hit[1], "status": answer.status}
    parse = cpu_per_call(calls, parsed)
    figures = {
        "parse_request": parse,
        "identify (signature, user, operation)": cpu_per_call(calls, identified) - parse,
        "authorize (Context.check)": cpu_per_call(calls, lambda: Context(req, s3app.services).check()),
        "overrides, personal headers": cpu_per_call(
            calls, lambda: (reads.response_overrides(req), hdrs.personal_read_headers(req.headers))),
        "metadata (fresh_now)": cpu_per_call(calls, lambda: engine.fresh_now(req.bucket, req.key, version_id=None,
                                                                              checksums=False)),
        "object_answer": cpu_per_call(calls, lambda: reads.object_answer(req, meta, {})),
        "bytes (one_block, read_block_now)": cpu_per_call(calls, lambda: engine.read_block_now(
            engine.one_block(req.bucket, req.key, meta, answer.start, answer.end), meta)),
        "headers (body_response)": cpu_per_call(calls, lambda: body_response(hit[0], "0", status=200,
                                                                             headers=answer.headers)),
        "stats and access log (Accounts.record)": cpu_per_call(calls, lambda: s3app.accounts.record(
            Served(answered_for(req, scope["method"], outcome), "0", outcome["bytes"], outcome["cache"], 0.001))),
    }
    for name, micros in figures.items():
        print(f"    {name:40s} {micros:7.1f} us")


if __name__ == "__main__":
    main()
