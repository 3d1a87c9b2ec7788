"""Fuzz target `auth`: SigV4/SigV2 header and presigned-query parsing and canonicalisation
(gateway/s3api/auth/, gateway/signing.py).

Text: a request, `METHOD TARGET` on line 1 and `name: value` headers after it (latin-1,
as the server decodes the wire). Controls: a mode, and the payload hash for mode 1.

- 0: authenticated as it is at a fixed time. The seeds are valid signed requests
  (header SigV4, presigned SigV4, header and query SigV2), so mutations walk every check.
- 1: the request is signed here with gateway.signing.sign_request_v4 (its path, query
  and headers read as DECODED text) and put on the wire encoded: it must verify.
- 2: as 1, but presigned (X-Amz-* query parameters, built here): it must verify.
- 3: as 1, with SigV2 (Authorization: AWS key:signature, built here): it must verify.

Contract: an S3Error with a 4xx status, never another exception; in modes 1-3 the access
key that signed, since signer and verifier must agree on every canonical form.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import sys
from datetime import datetime, timezone

import atheris
from _harness import Controls, check, client_error, main, seed

with atheris.instrument_imports(include=["gateway"]):
    from gateway.s3api.auth.common import _percent_decode
    from gateway.s3api.auth import RequestView, authenticate
    from gateway.signing import (
        canonical_headers,
        canonical_query_string,
        canonical_request,
        derive_signing_key,
        sign_request_v4,
        signature_hex,
        string_to_sign,
        uri_encode,
    )

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=timezone.utc)
AMZ_DATE = "20240501T120000Z"
AK, SK = "AKIAFUZZ", "fuzz/secret+key"
SECRETS = {AK: SK, "AKIAOTHER": "other"}
PAYLOADS = ("UNSIGNED-PAYLOAD", hashlib.sha256(b"").hexdigest(), "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
            "STREAMING-UNSIGNED-PAYLOAD-TRAILER")
AUTH_QUERY = {"X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires", "X-Amz-SignedHeaders",
              "X-Amz-Signature", "AWSAccessKeyId", "Signature", "Expires"}
# Names the signing modes set themselves, or that HTTP would not let through as given.
OWN_HEADERS = {"authorization", "x-amz-date", "x-amz-content-sha256", "date", "host", ""}


def parse(text: str) -> tuple[str, str, list[tuple[str, str]]]:
    lines = text.split("\n")
    method, _, target = lines[0].partition(" ")
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers.append((name.strip().lower(), value.strip()))
    return method, target, headers


def wire(text: str) -> str:
    """Decoded text as the server sees it: its UTF-8 bytes read as latin-1."""
    return text.encode("utf-8", "surrogateescape").decode("latin-1")


def signable(method: str, target: str, headers: list[tuple[str, str]]) -> tuple[str, str, list[tuple[str, str]], dict[str, str]]:
    """Method, decoded path, decoded query pairs and headers a client could really send."""
    method = "".join(c for c in method if c.isascii() and c.isalpha()).upper() or "GET"
    path, _, query = target.partition("?")
    path = "/" + path.lstrip("/")
    pairs = []
    for part in query.split("&"):
        if part:
            name, _, value = part.partition("=")
            if name not in AUTH_QUERY:
                pairs.append((name, value))
    sent: dict[str, str] = {"host": "s3.example.com"}
    for name, value in headers:
        if name in OWN_HEADERS or not all(c.isascii() and (c.isalnum() or c in "-_.") for c in name):
            continue
        # A value as HTTP carries it: no control characters (h11 refuses them).
        sent[name] = "".join(c for c in value if c == "\t" or not (ord(c) < 32 or ord(c) == 127))
    return method, path, pairs, sent


def encoded_query(pairs: list[tuple[str, str]]) -> str:
    return "&".join(f"{uri_encode(n, keep_slash=False)}={uri_encode(v, keep_slash=False)}" for n, v in pairs)


def sign_v4_header(method: str, path: str, pairs: list[tuple[str, str]], sent: dict[str, str], payload: str) -> RequestView:
    added = sign_request_v4(method=method, path=path, query=pairs, headers=sent, payload_hash=payload,
                            access_key=AK, secret_key=SK, region="eu-west-1", now=NOW)
    headers = tuple((n, wire(v)) for n, v in {**sent, **added}.items())
    return RequestView(method, uri_encode(path, keep_slash=True), encoded_query(pairs), headers)


def presign_v4(method: str, path: str, pairs: list[tuple[str, str]], sent: dict[str, str]) -> RequestView:
    scope = f"{AMZ_DATE[:8]}/eu-west-1/s3/aws4_request"
    names = sorted(sent)  # every header: S3 refuses unsigned x-amz-* ones
    params = [*pairs, ("X-Amz-Algorithm", "AWS4-HMAC-SHA256"), ("X-Amz-Credential", f"{AK}/{scope}"),
              ("X-Amz-Date", AMZ_DATE), ("X-Amz-Expires", "3600"), ("X-Amz-SignedHeaders", ";".join(names))]
    creq = canonical_request(method=method, canonical_uri=uri_encode(path, keep_slash=True),
                             canonical_query=canonical_query_string(params),
                             canonical_header_block=canonical_headers(sent.items(), names),
                             signed_headers=";".join(names), payload_hash="UNSIGNED-PAYLOAD")
    key = derive_signing_key(SK, AMZ_DATE[:8], "eu-west-1", "s3")
    params.append(("X-Amz-Signature", signature_hex(key, string_to_sign(AMZ_DATE, scope, creq))))
    headers = tuple((n, wire(v)) for n, v in sent.items())
    return RequestView(method, uri_encode(path, keep_slash=True), encoded_query(params), headers)


def sign_v2_header(method: str, path: str, sent: dict[str, str]) -> RequestView:
    """S3's documented SigV2 string to sign, for a request without sub-resources."""
    date = "Wed, 01 May 2024 12:00:00 GMT"
    headers = {n: v for n, v in sent.items() if not n.startswith("x-amz-") or n.isascii()}
    amz = "".join(f"{n}:{' '.join(headers[n].split())}\n" for n in sorted(headers) if n.startswith("x-amz-"))
    # SigV2 does not trim values: send the trimmed ones so the wire and the signature agree.
    headers = {n: (" ".join(v.split()) if n.startswith("x-amz-") else v) for n, v in headers.items()}
    resource = uri_encode(path, keep_slash=True)
    to_sign = (f"{method}\n{headers.get('content-md5', '').strip()}\n{headers.get('content-type', '').strip()}\n"
               f"{date}\n{amz}{resource}")
    signature = base64.b64encode(hmac.new(SK.encode(), to_sign.encode("utf-8", "surrogateescape"),
                                          hashlib.sha1).digest()).decode()
    headers.update({"date": date, "authorization": f"AWS {AK}:{signature}"})
    return RequestView(method, resource, "", tuple((n, wire(v)) for n, v in headers.items()))


def test_one_input(data: bytes) -> None:
    ctl = Controls(data)
    mode = ctl.pick(3)
    payload = PAYLOADS[ctl.pick(len(PAYLOADS) - 1)]
    virtual = ctl.flag()
    raw = ctl.rest()

    if mode == 0:
        method, target, headers = parse(raw.decode("latin-1"))
        path, _, query = target.partition("?")
        view = RequestView(method, path, query, tuple(headers))
        try:
            identity = authenticate(view, SECRETS.get, now=NOW, bucket_from_host="bucket" if virtual else None)
        except Exception as exc:
            client_error(exc)
            return
        check(identity.access_key is None or identity.access_key in SECRETS, f"identity {identity}")
        return

    method, target, headers = parse(raw.decode("utf-8", "surrogateescape"))
    method, path, pairs, sent = signable(method, target, headers)
    for name in ("content-md5", "content-type"):  # SigV2 signs these; S3 refuses some of their values earlier
        sent.pop(name, None)
    if mode == 1:
        view = sign_v4_header(method, path, pairs, sent, payload)
    elif mode == 2:
        view = presign_v4(method, path, pairs, sent)
    else:
        view = sign_v2_header(method, path, {n: v for n, v in sent.items() if n != "x-amz-content-sha256"})
    # The percent-decoding the verifier does undoes uri_encode exactly, surrogates included.
    check(_percent_decode(uri_encode(path, keep_slash=True)) == path, f"path {path!r} does not round-trip")
    try:
        identity = authenticate(view, SECRETS.get, now=NOW)
    except Exception as exc:
        client_error(exc)
        raise AssertionError(f"mode {mode}: a request signed here was refused: {exc!r}\n{view}") from exc
    check(identity.access_key == AK, f"identity {identity}")


def seeds() -> dict[str, bytes]:
    def text(view: RequestView) -> str:
        target = view.raw_path + ("?" + view.query_string if view.query_string else "")
        return "\n".join([f"{view.method} {target}", *(f"{n}: {v}" for n, v in view.headers)])

    sent = {"host": "s3.example.com", "x-amz-meta-a": "b  c", "range": "bytes=0-9"}
    pairs = [("versionId", "x+y"), ("response-content-type", "text/plain; charset=utf-8")]
    key = "/bucket/dir/ünï cødé%2F?.txt"
    requests = {
        "v4-header": sign_v4_header("GET", key, pairs, sent, "UNSIGNED-PAYLOAD"),
        "v4-header-put": sign_v4_header("PUT", "/bucket/k", [], {**sent, "content-type": "image/png"},
                                        PAYLOADS[1]),
        "v4-streaming": sign_v4_header("PUT", "/bucket/k", [], sent, PAYLOADS[2]),
        "v4-presigned": presign_v4("GET", key, pairs, sent),
        "v2-header": sign_v2_header("GET", "/bucket/k", sent),
    }
    out = {name: seed(text(view).encode("latin-1"), 0, 0, 0) for name, view in requests.items()}
    out["v2-query"] = seed("GET /bucket/k?AWSAccessKeyId=AKIAFUZZ&Expires=1714568400&Signature=abc%2B%3D\n"
                           "host: s3.example.com", 0, 0, 1)
    out["anonymous"] = seed("GET /bucket/k\nhost: s3.example.com\nx-amz-content-sha256: UNSIGNED-PAYLOAD", 0, 0, 0)
    out["sign-v4"] = seed(f"GET {key}?list-type=2&prefix=a%2Fb&=&x\nx-amz-meta-ü: ö  ü\nrange: bytes=0-1", 1, 0, 0)
    out["sign-v4-sha"] = seed("PUT /b/k\ncontent-type: text/plain\nx-amz-tagging: a=b", 1, 1, 0)
    out["presign"] = seed(f"GET {key}?versionId=1\nx-amz-meta-a: b", 2, 0, 0)
    out["sign-v2"] = seed("PUT /b/ü k\nx-amz-meta-a:  b   c\nx-amz-acl: private", 3, 0, 0)
    return out


if __name__ == "__main__":
    main("auth", test_one_input, seeds)
    sys.exit(0)
