"""Fuzz target `request`: the request line and headers before authentication: percent-decoding,
bucket and key validation (gateway/s3api/request.py parse_request), operation routing, partNumber,
x-amz-copy-source, max-keys, continuation tokens, and the body headers (gateway/s3api/bodycheck.py:
lengths, aws-chunked, checksums and trailers announced, Content-MD5).

Text: raw bytes, `METHOD TARGET` on line 1, `name: value` headers after it, given to the parser
as the ASGI server would (bytes). Controls: virtual-hosted or path style, the payload mode
authentication would have found, the size cap.

Contract: an S3Error with a 4xx status (NotImplemented 501 for an unknown Transfer-Encoding is
S3's own answer); a key never holds NUL nor more than 1024 UTF-8 bytes; a bucket is plausible.
"""

from __future__ import annotations

import sys

import atheris
from _harness import Controls, check, client_error, main, seed

# Only the front end: server.py's imports pull in the engine, the store and the cluster.
with atheris.instrument_imports(include=["gateway.s3api", "gateway.signing", "gateway.errors"]):
    from gateway.s3api import bodycheck, handlers, request, routes, server, xml
    from gateway.s3api.headers import strip_aws_chunked
    from gateway.s3api.auth import ChunkSigner, PayloadCheck

SIGNER = ChunkSigner(b"k" * 32, "20240501T120000Z", "20240501/us-east-1/s3/aws4_request", "0" * 64)
PAYLOADS = (PayloadCheck("unsigned"), PayloadCheck("sha256", expected_sha256="0" * 64),
            PayloadCheck("streaming-signed", chunk_signer=SIGNER),
            PayloadCheck("streaming-signed-trailer", chunk_signer=SIGNER),
            PayloadCheck("streaming-unsigned-trailer"))
S3_501 = ("NotImplemented",)


async def _never() -> dict[str, object]:
    raise AssertionError("the body is not read here")


def test_one_input(data: bytes) -> None:
    ctl = Controls(data)
    domain = "s3.example.com" if ctl.flag() else ""
    payload = PAYLOADS[ctl.pick(len(PAYLOADS) - 1)]
    max_size = 5 * 2**30 if ctl.flag() else 1000
    lines = ctl.rest().split(b"\n")
    method, _, target = lines[0].partition(b" ")
    raw_path, _, query = target.partition(b"?")
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if sep:
            headers.append((name.strip().lower(), value.strip()))
    scope = {"type": "http", "method": method.decode("latin-1"), "path": raw_path.decode("latin-1"),
             "raw_path": raw_path, "query_string": query, "headers": headers}

    try:
        req = request.parse_request(scope, _never, "req-1", domain)
    except Exception as exc:
        client_error(exc)
        return
    if req.key is not None:
        check("\x00" not in req.key and len(req.key.encode("utf-8")) <= 1024, f"key {req.key[:80]!r}")
        check(req.key != "", "an empty key")
    if req.bucket is not None:
        check(request._plausible_bucket(req.bucket), f"bucket {req.bucket!r}")

    # What the handlers read from a parsed request, each on its own.
    steps = [
        lambda: routes.resolve(req.method, req.bucket, req.key, req.query, req.headers),
        lambda: server._check_part_number(req.query["partNumber"]) if "partNumber" in req.query else None,
        lambda: xml.validate_max_keys(req.query.get("max-keys")),
        lambda: handlers._decode_own_token(req.query),
        lambda: bodycheck.plan_body(req.headers, payload, max_size),
        lambda: strip_aws_chunked(req.headers.get("content-encoding")),
    ]
    if "x-amz-copy-source" in req.headers:
        steps.append(lambda: handlers.parse_copy_source(req.headers["x-amz-copy-source"]))
    for step in steps:
        try:
            result = step()
        except Exception as exc:
            client_error(exc, allow=S3_501)
            continue
        if isinstance(result, bodycheck.BodyPlan):
            declared = result.decoded_length if result.chunked else result.content_length
            check(declared is None or declared <= max_size, f"a plan for {declared} bytes over {max_size}")
            check(len(result.checksum_algorithms) <= 1, f"checksums {result.checksum_algorithms}")


def seeds() -> dict[str, bytes]:
    def req(first: str, *headers: str) -> bytes:
        return "\n".join([first, "host: s3.example.com", *headers]).encode("utf-8")

    return {
        "get": seed(req("GET /bucket/dir/a%20b%2Bc.txt?versionId=1&partNumber=2", "range: bytes=0-9"), 0, 0, 1),
        "virtual": seed(req("GET /k%C3%BC?list-type=2&max-keys=10&continuation-token=gw1-YWJj",
                            "host: bucket.s3.example.com"), 1, 0, 1),
        "list": seed(req("GET /bucket?prefix=a%2F&delimiter=%2F&encoding-type=url&max-keys=1000"), 0, 0, 1),
        "put-chunked": seed(req("PUT /bucket/k", "content-encoding: aws-chunked,gzip",
                                "x-amz-content-sha256: STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER",
                                "content-length: 300", "x-amz-decoded-content-length: 200",
                                "x-amz-trailer: x-amz-checksum-crc32c", "x-amz-sdk-checksum-algorithm: CRC32C"),
                            0, 3, 1),
        "put-md5": seed(req("PUT /bucket/k", "content-length: 5", "content-md5: XUFAKrxLKna5cZ2REBfFkg==",
                            "x-amz-checksum-sha256: LPJNul+wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ="), 0, 1, 0),
        "copy": seed(req("PUT /bucket/k", "x-amz-copy-source: /src/a%2Fb?versionId=3", "content-length: 0"), 0, 0, 1),
        "delete": seed(req("POST /bucket?delete", "content-length: 100", "transfer-encoding: chunked"), 0, 0, 1),
        "upload": seed(req("PUT /bucket/k?partNumber=10000&uploadId=abc", "content-length: 1"), 0, 4, 1),
    }


if __name__ == "__main__":
    main("request", test_one_input, seeds)
    sys.exit(0)
