"""Fuzz target `form`: POST Object's front end: multipart/form-data read in pieces
(gateway/s3api/form.py), the policy and its signature (gateway/s3api/auth/postpolicy.py), and
the headers the fields make (gateway/s3api/postobject.py).

Text: the body of a form (boundary `B`). Controls: the size of the pieces the body arrives in,
whether the policy is signed by the harness (so that its conditions are reached).

Contract: an S3Error with a 4xx status; a field name is lower-case; the file's bytes are a
piece of the body that ends where the closing boundary begins; no header made from the fields
holds a control character (nothing a field says can split a header of the origin request).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import sys
from collections.abc import AsyncIterator, Coroutine
from datetime import datetime, timezone
from typing import Any

import atheris
from _harness import Controls, check, client_error, main, seed

with atheris.instrument_imports(include=["gateway.s3api.form", "gateway.s3api.auth.postpolicy",
                                         "gateway.s3api.postobject"]):
    from gateway.s3api import postobject
    from gateway.s3api.auth.postpolicy import verify_post_policy
    from gateway.s3api.form import FormReader

SECRET = "fuzz-secret"
NOW = datetime(2030, 1, 1, tzinfo=timezone.utc)


def _secret_for(access_key: str) -> str | None:
    return SECRET if access_key == "AKIAFUZZ" else None


def _drive(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that never waits on anything (its body comes from a list): no event loop."""
    try:
        while True:
            coroutine.send(None)
    except StopIteration as done:
        return done.value


async def _pieces(body: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start:start + size]


async def _read(body: bytes, size: int) -> tuple[dict[str, str], Any, bytes]:
    form = FormReader(_pieces(body, size), b"B")
    fields, file = await form.fields()
    content = b""
    if file is not None:
        content = b"".join([piece async for piece in form.file_chunks()])
        await form.finish()
    return fields, file, content


def test_one_input(data: bytes) -> None:
    ctl = Controls(data)
    size = 1 + ctl.pick(255)
    sign = ctl.flag()
    body = ctl.rest()
    try:
        fields, file, content = _drive(_read(body, size))
    except Exception as exc:
        client_error(exc)
        return
    check(all(name == name.lower() for name in fields), f"a field name not lower-cased: {sorted(fields)!r}")
    if file is not None:
        check(content + b"\r\n--B" in body, "the file's bytes are not the body's, up to a boundary")
    if sign and "policy" in fields:
        fields["awsaccesskeyid"] = "AKIAFUZZ"
        fields["signature"] = base64.b64encode(hmac.new(SECRET.encode(), fields["policy"].encode(),
                                                        hashlib.sha1).digest()).decode()
    try:
        policy = verify_post_policy(fields, _secret_for, now=NOW)
        policy.check_fields(fields, "bucket")
    except Exception as exc:
        client_error(exc)
    if file is None:
        return
    try:
        headers, promised = postobject._object_headers(fields, file)
    except Exception as exc:
        client_error(exc)
        return
    for name, value in [*headers.items(), *promised.items()]:
        check(not any(c < " " and c != "\t" or c == "\x7f" for c in value), f"a control character in {name}: {value!r}")


def seeds() -> dict[str, bytes]:
    def form(*parts: bytes) -> bytes:
        return b"".join(b"--B\r\n" + p + b"\r\n" for p in parts) + b"--B--\r\n"

    def field(name: str, value: str) -> bytes:
        return b'Content-Disposition: form-data; name="%s"\r\n\r\n%s' % (name.encode(), value.encode())

    policy = base64.b64encode(b'{"expiration": "2031-01-01T00:00:00Z", "conditions": [{"bucket": "bucket"}, '
                              b'["starts-with", "$key", "up/"], ["content-length-range", 0, 100], '
                              b'{"content-type": "text/plain"}, ["eq", "$x-amz-meta-a", "b"]]}').decode()
    upload = b'Content-Disposition: form-data; name="file"; filename="a.txt"\r\nContent-Type: text/plain\r\n\r\nhello'
    return {
        "signed": seed(form(field("key", "up/${filename}"), field("policy", policy), field("content-type", "text/plain"),
                            field("x-amz-meta-a", "b"), upload), 7, 1),
        "v4": seed(form(field("key", "k"), field("x-amz-algorithm", "AWS4-HMAC-SHA256"),
                        field("x-amz-credential", "AKIAFUZZ/20300101/us-east-1/s3/aws4_request"),
                        field("x-amz-date", "20300101T000000Z"), field("policy", policy),
                        field("x-amz-signature", "0" * 64), upload), 64, 0),
        "tagging": seed(form(field("key", "k"), field("tagging", "<Tagging><TagSet><Tag><Key>a</Key><Value>b</Value>"
                                                                 "</Tag></TagSet></Tagging>"), field("acl", "private"),
                             field("x-amz-checksum-sha256", "LPJNul+wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ="), upload),
                        3, 0),
        "split": seed(form(field("key", "k"), field("content-type", "a\r\nb: c"), upload), 1, 0),
        "no-file": seed(form(field("key", "k")), 200, 0),
    }


if __name__ == "__main__":
    main("form", test_one_input, seeds)
    sys.exit(0)
