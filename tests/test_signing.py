"""gateway.signing: the SigV4 primitives, checked against AWS's published vectors and botocore."""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from urllib.parse import quote

import botocore.auth
import pytest
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.signing import (
    EMPTY_SHA256,
    UNSIGNED_PAYLOAD,
    canonical_query_string,
    derive_signing_key,
    sha256_hex,
    sign_request_v4,
    uri_encode,
)

NOW = datetime(2024, 3, 9, 12, 34, 56, tzinfo=timezone.utc)
AK, SK = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
# Text a client could put in a key or query: no surrogates (not encodable) and no NUL.
key_text = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=40)


def test_constants() -> None:
    assert UNSIGNED_PAYLOAD == "UNSIGNED-PAYLOAD"
    assert EMPTY_SHA256 == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert sha256_hex(b"") == EMPTY_SHA256


@pytest.mark.parametrize(
    ("value", "keep_slash", "expected"),
    [
        ("AZaz09-_.~", False, "AZaz09-_.~"),
        ("a b+c%d=e", False, "a%20b%2Bc%25d%3De"),
        ("a/b", False, "a%2Fb"),
        ("a/b", True, "a/b"),
        ("*!'()", True, "%2A%21%27%28%29"),
        ("é€😀", True, "%C3%A9%E2%82%AC%F0%9F%98%80"),
        ("", True, ""),
    ],
)
def test_uri_encode(value: str, keep_slash: bool, expected: str) -> None:
    assert uri_encode(value, keep_slash=keep_slash) == expected


def test_uri_encode_round_trips_non_utf8_bytes() -> None:
    # A path byte that is not UTF-8 is decoded with surrogateescape and must encode back to itself.
    assert uri_encode(b"/a\xffb".decode("utf-8", "surrogateescape"), keep_slash=True) == "/a%FFb"


def test_canonical_query_sorts_by_encoded_name_then_value() -> None:
    pairs = [("b", "2"), ("a", "z"), ("a", "y"), ("A", "1"), ("a b", ""), ("~", "+")]
    assert canonical_query_string(pairs) == "A=1&a=y&a=z&a%20b=&b=2&~=%2B"


def test_derive_signing_key_matches_the_published_vector() -> None:
    # AWS's "derive a signing key" example (IAM, 2012-02-15).
    key = derive_signing_key("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20120215", "us-east-1", "iam")
    assert key.hex() == "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d"


def test_sign_matches_the_published_s3_get_example() -> None:
    # AWS's S3 "GET Object" header-auth example (examplebucket/test.txt, Range bytes=0-9).
    out = sign_request_v4(
        method="GET",
        path="/test.txt",
        query=[],
        headers={"host": "examplebucket.s3.amazonaws.com", "range": "bytes=0-9"},
        payload_hash=EMPTY_SHA256,
        access_key="AKIAIOSFODNN7EXAMPLE",
        secret_key="wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        region="us-east-1",
        now=datetime(2013, 5, 24, tzinfo=timezone.utc),
    )
    assert out == {
        "authorization": "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
        "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
        "x-amz-date": "20130524T000000Z",
        "x-amz-content-sha256": EMPTY_SHA256,
    }


def test_sign_requires_host() -> None:
    with pytest.raises(ValueError):
        sign_request_v4(
            method="GET", path="/", query=[], headers={}, payload_hash=EMPTY_SHA256,
            access_key=AK, secret_key=SK, region="us-east-1", now=NOW,
        )


def _botocore_authorization(
    monkeypatch: pytest.MonkeyPatch,
    *,
    method: str,
    path: str,
    query: list[tuple[str, str]],
    headers: dict[str, str],
    body: bytes,
    region: str,
) -> dict[str, str]:
    """Sign the same request with botocore's S3SigV4Auth, the signer boto3 uses for S3."""
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: NOW.replace(tzinfo=None))
    qs = "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in query)
    url = f"https://{headers['host']}{quote(path, safe='/~')}" + (f"?{qs}" if qs else "")
    req = AWSRequest(method=method, url=url, data=body, headers={k: v for k, v in headers.items() if k != "host"})
    botocore.auth.S3SigV4Auth(Credentials(AK, SK), "s3", region).add_auth(req)
    return {k.lower(): v for k, v in req.headers.items()}


def test_sign_matches_botocore_byte_for_byte(monkeypatch: pytest.MonkeyPatch) -> None:
    path = "/my-bucket/dir/a key+with%odd=chars~é€/😀"
    query = [("versionId", "a+b=c/d e"), ("response-content-type", "text/plain; charset=utf-8"), ("x", "~%")]
    headers = {"host": "s3.eu-west-3.amazonaws.com", "content-type": "text/plain", "x-amz-meta-note": "  spaced   out  "}
    body = b"hello world"
    ours = sign_request_v4(
        method="PUT", path=path, query=query, headers=headers, payload_hash=sha256_hex(body),
        access_key=AK, secret_key=SK, region="eu-west-3", now=NOW,
    )
    theirs = _botocore_authorization(monkeypatch, method="PUT", path=path, query=query, headers=headers, body=body, region="eu-west-3")
    assert ours["authorization"] == theirs["authorization"]
    assert ours["x-amz-date"] == theirs["x-amz-date"] == "20240309T123456Z"
    assert ours["x-amz-content-sha256"] == theirs["x-amz-content-sha256"] == hashlib.sha256(body).hexdigest()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    key=key_text,
    query=st.lists(st.tuples(key_text.filter(bool), key_text), max_size=4, unique_by=lambda kv: kv[0]),
    meta=st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=20),
)
def test_sign_agrees_with_botocore_for_any_key_and_query(
    monkeypatch: pytest.MonkeyPatch, key: str, query: list[tuple[str, str]], meta: str
) -> None:
    path = "/bucket/" + key
    headers = {"host": "localhost:9000", "x-amz-meta-m": meta}
    ours = sign_request_v4(
        method="GET", path=path, query=query, headers=headers, payload_hash=EMPTY_SHA256,
        access_key=AK, secret_key=SK, region="us-east-1", now=NOW,
    )
    theirs = _botocore_authorization(monkeypatch, method="GET", path=path, query=query, headers=headers, body=b"", region="us-east-1")
    assert ours["authorization"] == theirs["authorization"]
