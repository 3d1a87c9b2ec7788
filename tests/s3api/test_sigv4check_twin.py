"""The compiled SigV4 check (auth/_sigv4check.c) and its pure-Python twin (auth.sigv4check) build the
same thing from the same request, byte for byte: the parts of its headers, its canonical query, its
canonical requests, strings to sign and signatures, and the decision; and auth.fastpath answers the
same with either.

Requests as SDKs send them (botocore signs them, in the headers or presigned, each anew), mutated
(a signature, the clock, the scope, headers added, repeated, respaced or not ASCII, the query, the
path), and made up (headers, queries and paths of any characters). Under `make test` the compiled
module must be there (S3GW_REQUIRE_COMPILED=1): CI cannot run the twin alone without failing.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.s3api.auth import RequestView, fastpath, sigv4check
from gateway.signing import derive_signing_key
from tests.s3api import test_auth_fastpath as header_signed
from tests.s3api import test_auth_presigned_fast as presigned
from tests.s3api.test_auth_fastpath import NOW, SECRETS, SKEW, outcome


def _compiled() -> ModuleType | None:
    try:
        return importlib.import_module("gateway.s3api.auth._sigv4check")
    except ImportError:
        if os.environ.get("S3GW_REQUIRE_COMPILED"):
            raise
        return None


COMPILED = _compiled()
needs_compiled = pytest.mark.skipif(COMPILED is None, reason="gateway/s3api/auth/_sigv4check.c is not built here "
                                     "(pip install -e . with a C compiler and Python's headers builds it)")


def test_make_test_runs_the_compiled_check() -> None:
    if not os.environ.get("S3GW_REQUIRE_COMPILED"):
        pytest.skip("S3GW_REQUIRE_COMPILED is not set (make test sets it)")
    assert COMPILED is not None and fastpath.COMPILED


def _both(call: str, *args: object) -> object:
    """The compiled and the twin's answer to the same call, asserted equal."""
    assert COMPILED is not None
    twin_args = tuple(sigv4check.keyed(a.key, a.to_sign) if isinstance(a, _Key) else a for a in args)
    compiled_args = tuple(COMPILED.keyed(a.key, a.to_sign) if isinstance(a, _Key) else a for a in args)
    twin, compiled = outcome(lambda: getattr(sigv4check, call)(*twin_args)), \
        outcome(lambda: getattr(COMPILED, call)(*compiled_args))
    assert compiled == twin, (call, args)
    return twin


class _Key:
    """A signing key and a string to sign's first part, made into each implementation's keyed() by _both."""

    def __init__(self, key: bytes, amz_date: str) -> None:
        self.key = key
        self.to_sign = f"AWS4-HMAC-SHA256\n{amz_date}\n20240309/us-east-1/s3/aws4_request\n"


def _compare(view: RequestView, key: bytes, names: tuple[str, ...] | None = None) -> None:
    """Every function of both implementations on `view`: the same answers."""
    parts = _both("header_parts", view.headers)
    canonical = _both("canonical_query", view.query_string)
    query = canonical[0] if isinstance(canonical, tuple) else view.query_string
    signed_text, provided, amz_date = "host", "0" * 64, "20240309T120000Z"
    if isinstance(parts, tuple) and parts[0] is not None:
        _, signed_text, provided, amz_date, _ = parts
        amz_date = amz_date or ""
    elif isinstance(canonical, tuple) and canonical[1] is not None:
        params = dict(zip(sigv4check.AUTH_PARAMS, canonical[1]))
        signed_text = params["X-Amz-SignedHeaders"] or signed_text
        provided = params["X-Amz-Signature"] or provided
        amz_date = params["X-Amz-Date"] or amz_date
    names = names if names is not None else tuple(signed_text.split(";"))
    payload_hash = next((v for n, v in view.headers if n == "x-amz-content-sha256"), "UNSIGNED-PAYLOAD")
    common = (view.method, view.raw_path, query, view.headers, names, signed_text, payload_hash,
              _Key(key, amz_date if amz_date.isascii() else "20240309T120000Z"))
    forms = _both("canonical", *common)
    decision = _both("verify", *common, provided)
    if isinstance(forms, tuple):
        assert decision == any(signature == provided for _, _, signature in forms)
    else:
        assert decision is None


@contextmanager
def _fastpath_with(module: ModuleType) -> Iterator[None]:
    """auth.fastpath with `module` as its check."""
    saved = (fastpath._header_parts, fastpath._canonical_query, fastpath._verify, fastpath._check)
    fastpath._header_parts, fastpath._canonical_query, fastpath._verify = (
        module.header_parts, module.canonical_query, module.verify)
    fastpath._check = module
    _forget_keyed()
    try:
        yield
    finally:
        fastpath._header_parts, fastpath._canonical_query, fastpath._verify, fastpath._check = saved
        _forget_keyed()


def _forget_keyed() -> None:
    """The checks fastpath remembers, which keep what one implementation's keyed() made."""
    fastpath._header_signed.cache_clear()
    fastpath._presigned.cache_clear()


def _decisions(view: RequestView, skew: timedelta) -> None:
    """auth.fastpath's answer with the compiled check and with the twin: the same."""
    assert COMPILED is not None
    answers = []
    for module in (COMPILED, sigv4check):
        with _fastpath_with(module):
            answers.append(outcome(lambda: fastpath.fast_identity(view, SECRETS.get, NOW + skew, SKEW)))
    assert answers[0] == answers[1]


KEY = derive_signing_key("fast-secret/+=", "20240309", "us-east-1", "s3")


@needs_compiled
@settings(max_examples=500, deadline=None)
@given(
    method=st.sampled_from(["GET", "HEAD"]),
    path=header_signed.PATHS,
    query=header_signed.QUERIES,
    headers=header_signed.EXTRA_HEADERS,
    payload=header_signed.PAYLOADS,
    key=st.sampled_from([("AKIAFAST", "fast-secret/+=")] * 3 + [("AKIAFAST", "not-the-secret")]),
    skew=header_signed.SKEWS,
    mutations=st.lists(st.sampled_from(header_signed.MUTATIONS), max_size=2),
    resign=st.booleans(),
)
def test_sdk_signed_requests_build_alike(method: str, path: str, query: str, headers: dict[str, str], payload: str,
                                         key: tuple[str, str], skew: timedelta,
                                         mutations: list[header_signed.Mutation | None], resign: bool) -> None:
    view = header_signed.signed(method, path, query, headers, access_key=key[0], secret=key[1], region="us-east-1",
                                service="s3", payload=payload)
    for mutation in mutations:
        if mutation is not None:
            view = mutation(view)
    if resign:
        view = header_signed.resigned(view, key[1])
    _compare(view, KEY)
    _decisions(view, skew)


@needs_compiled
@settings(max_examples=500, deadline=None)
@given(
    method=st.sampled_from(["GET", "HEAD"]),
    path=st.sampled_from(["/bucket/object", "/bucket/dt=2024-01-01/a b+c", "/bucket/é€", "/bucket/a%2Fb", "/b/x"]),
    query=st.sampled_from(["", "versionId=v1", "response-content-disposition=attachment%3B%20x", "a=1&a=0&a"]),
    expires=st.sampled_from([60, 3600, 604801]),
    key=st.sampled_from([("AKIAFAST", "fast-secret/+=")] * 3 + [("AKIAFAST", "not-the-secret")]),
    skew=presigned.SKEWS,
    mutations=st.lists(st.sampled_from(presigned.MUTATIONS), max_size=2),
    resign=st.booleans(),
)
def test_presigned_urls_each_new_build_alike(method: str, path: str, query: str, expires: int, key: tuple[str, str],
                                            skew: timedelta, mutations: list[presigned.Mutation],
                                            resign: bool) -> None:
    view = presigned.presigned(method, path, query, {}, access_key=key[0], secret=key[1], region="us-east-1",
                               expires=expires)
    for mutation in mutations:
        view = mutation(view)
    if resign:
        view = presigned.resigned(view, key[1])
    _compare(view, KEY)
    _decisions(view, skew)


# Made-up requests: any characters where the wire could put them, and some it could not.
_TEXT = st.text(st.sampled_from("aZ09-_.~/%&=+ ;:,\t\x1c\x7féÿ€\udcff2F41zx"), max_size=24)
_NAMES = st.sampled_from(["host", "x-amz-date", "x-amz-meta-a", "X-Amz-Meta-B", "range", "authorization",
                          "x-amz-content-sha256", "é", "x-amz-"])


@needs_compiled
@settings(max_examples=1000, deadline=None)
@given(
    method=st.sampled_from(["GET", "HEAD", "get", "PÜT"]),
    path=_TEXT,
    query=_TEXT,
    headers=st.lists(st.tuples(_NAMES, _TEXT), max_size=6),
    names=st.lists(_NAMES, max_size=4),
    key=st.binary(max_size=64),
)
def test_made_up_requests_build_alike(method: str, path: str, query: str, headers: list[tuple[str, str]],
                                      names: list[str], key: bytes) -> None:
    view = RequestView(method, path, query, tuple(headers))
    _compare(view, key, tuple(names))


@needs_compiled
@given(value=st.text(st.characters(max_codepoint=0x7f), max_size=40))
def test_header_values_trim_alike(value: str) -> None:
    # Trimming (str.split()'s whitespace: \t \n \v \f \r, \x1c-\x1f and space) is what C must copy.
    view = RequestView("GET", "/b/k", "", (("host", "h"), ("x-amz-meta-a", value)))
    _compare(view, KEY, ("host", "x-amz-meta-a"))


@needs_compiled
def test_authorization_forms_split_alike() -> None:
    signature = "a" * 64
    for authorization in (f"AWS4-HMAC-SHA256 Credential=K/20240309/us-east-1/s3/aws4_request, SignedHeaders=host, "
                          f"Signature={signature}", "AWS4-HMAC-SHA256 Credential=, SignedHeaders=, Signature=" + "b" * 64,
                          "AWS4-HMAC-SHA256 Credential=a, Signature=x, SignedHeaders=" + "c" * 64,
                          f"AWS4-HMAC-SHA256 Credential=a,, SignedHeaders=h, Signature={signature}",
                          f"AWS4-HMAC-SHA256 Credential=é, SignedHeaders=h, Signature={signature}",
                          f"AWS4-HMAC-SHA256 Credential=a, SignedHeaders=h, Signature={signature[:-1]},",
                          "AWS4-HMAC-SHA256 Credential=", "AWS a:b", ""):
        _both("header_parts", (("authorization", authorization), ("x-amz-date", "d")))



# Queries of the signing parameters: named plainly or %-encoded, twice, with SigV2's, escapes cut
# short at the end, more parameters than the compiled check holds on its stack (32).
_QUERY_NAMES = st.sampled_from(["X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires",
                                "X-Amz-SignedHeaders", "X-Amz-Signature", "AWSAccessKeyId", "Signature",
                                "X-Amz-%44ate", "X%2DAmz-Signature", "x-amz-date", "X-Amz-Signatur", "a", "x-id", ""])
_QUERY_PART = st.one_of(st.tuples(_QUERY_NAMES, st.sampled_from(["=", ""]), _TEXT).map("".join),
                        st.sampled_from(["%", "%4", "%41", "a=%4", "a=b%", "a=%e2%82%ac", "="]))


@needs_compiled
@settings(max_examples=1000, deadline=None)
@given(parts=st.lists(_QUERY_PART, max_size=40))
def test_made_up_queries_build_alike(parts: list[str]) -> None:
    _both("canonical_query", "&".join(parts))
