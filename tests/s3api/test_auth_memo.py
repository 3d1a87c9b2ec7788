"""auth.memo: a memo of checks that passed (SigV4 signatures, whole GETs and HEADs of every
signing mechanism) never changes an answer. Whatever was verified before, any request (changed
in one byte of its method, path, query, a header, its signature, or sent later, up to and past
the bounds of its clock skew and expiry to the second) gets what a fresh check gives: the same
identity or the same error."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import botocore.auth
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.errors import S3Error
from gateway.s3api.auth import RequestView, VerifiedSignatures, authenticate
from gateway.s3api.auth.memo import KNOWN_REQUEST_MAX, SEEN_BY
from tests.s3api.test_auth import NOW, SK, presign_v2, presign_v4, secret_for, sigv2, sigv4



def _signed_at_now() -> list[RequestView]:
    """Requests as botocore signs them at NOW, made once: each is verified into the memo first."""
    clock = botocore.auth.get_current_datetime
    botocore.auth.get_current_datetime = lambda: NOW.replace(tzinfo=None)  # type: ignore[assignment]
    try:
        return [
            presign_v4(query="versionId=x%2By&response-content-type=text%2Fplain"),
            presign_v4("PUT", headers={"Content-Type": "image/png"}),
            sigv4("GET", query="list-type=2&prefix=a%20b", headers={"Range": "bytes=0-9"}),
            sigv4("PUT", body=b"hello", headers={"x-amz-meta-a": "1"}),
            sigv4("HEAD"),
            sigv2(query="versionId=3", headers={"Range": "bytes=1-2"}),
            presign_v2(query="response-content-type=text%2Fplain", expires=3600)[0],
        ]
    finally:
        botocore.auth.get_current_datetime = clock  # type: ignore[assignment]


SIGNED = _signed_at_now()


def outcome(view: RequestView, now: datetime, memo: VerifiedSignatures | None,
            secrets: dict[str, str] | None = None) -> object:
    lookup = secret_for if secrets is None else secrets.get
    try:
        identity = authenticate(view, lookup, now=now, verified=memo)
    except S3Error as exc:
        return exc.code, exc.message
    return identity


def _flip(text: str, at: int) -> str:
    if not text:
        return "x"
    at %= len(text)
    return text[:at] + ("A" if text[at] != "A" else "B") + text[at + 1:]


def mutate(view: RequestView, what: str, at: int) -> RequestView:
    if what == "method":
        return replace(view, method="HEAD" if view.method == "GET" else "GET")
    if what == "path":
        return replace(view, raw_path=_flip(view.raw_path, at))
    if what == "query":
        return replace(view, query_string=_flip(view.query_string, at))
    if what == "header":
        headers = list(view.headers)
        name, value = headers[at % len(headers)]
        headers[at % len(headers)] = (name, _flip(value, at))
        return replace(view, headers=tuple(headers))
    if what == "extra-header":
        return replace(view, headers=(*view.headers, ("x-amz-meta-new", "1")))
    return view


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.integers(0, len(SIGNED) - 1), what=st.sampled_from(["none", "method", "path", "query", "header",
                                                                     "extra-header"]),
       at=st.integers(0, 10_000),
       later=st.sampled_from([0, 59 * 60, 3600, 3601, 20 * 60, -20 * 60, 15 * 60, 15 * 60 + 1, -15 * 60,
                              -15 * 60 - 1]),
       rotated=st.booleans())
def test_a_memo_never_changes_an_answer(which: int, what: str, at: int, later: int, rotated: bool) -> None:
    memo = VerifiedSignatures()
    original = SIGNED[which]
    for _ in range(2):  # a whole GET or HEAD is kept the second time it comes
        assert not isinstance(outcome(original, NOW, memo), tuple)  # verified, and kept
    view = mutate(original, what, at)
    now = NOW + timedelta(seconds=later)
    secrets = {k: (v + "-rotated" if rotated and v == SK else v) for k, v in
               {"AKIAGATEWAYTEST": SK, "AKIAOTHER": "other-secret"}.items()}
    assert outcome(view, now, memo, secrets) == outcome(view, now, None, secrets)


def test_a_request_sent_again_is_answered_from_the_memo() -> None:
    """A signature (PUT) from the second time it comes; a whole GET or HEAD is kept the second time
    it comes (memo.again) and answered from the memo from the third; with an empty query (its
    query ends as others' do: counted as come before) from the second."""
    for view in SIGNED:
        memo = VerifiedSignatures()
        early = view.method == "PUT" or not view.query_string
        first = outcome(view, NOW, memo)
        assert outcome(view, NOW, memo) == first
        assert memo.hits == early
        assert outcome(view, NOW, memo) == first
        assert memo.hits == 1 + early


def test_a_get_that_comes_once_is_not_kept() -> None:
    """A presigned URL used once (a web page's image, a notebook's generate_presigned_url per file)
    costs no keeping; one that comes again is kept, and answered from the memo from then on."""
    memo = VerifiedSignatures()
    gets = [view for view in SIGNED if view.method in ("GET", "HEAD") and view.query_string]
    for view in gets:
        outcome(view, NOW, memo)
    assert len(memo._requests) == 0 and memo.hits == 0
    for view in gets:
        outcome(view, NOW, memo)
    assert len(memo._requests) == len(gets) and memo.hits == 0
    for view in gets:
        outcome(view, NOW, memo)
    assert memo.hits == len(gets)


def test_a_request_whose_slot_another_took_is_kept_the_next_time() -> None:
    """The table of requests seen once holds one per slot: a request whose slot a later one took
    is checked again in full, and kept the time after."""
    memo = VerifiedSignatures(size=1)  # 16 slots
    view = SIGNED[0]
    outcome(view, NOW, memo)
    memo._seen[hash(view.query_string[-SEEN_BY:]) & memo._mask] = 0  # taken by another
    outcome(view, NOW, memo)
    assert len(memo._requests) == 0
    outcome(view, NOW, memo)
    assert len(memo._requests) == 1 and memo.hits == 0
    assert outcome(view, NOW, memo) == outcome(view, NOW, None) and memo.hits == 1


def test_the_memo_keeps_at_most_its_size() -> None:
    memo = VerifiedSignatures(size=2)
    for view in SIGNED:
        outcome(view, NOW, memo)
        outcome(view, NOW, memo)
    memo.hits = 0
    assert len(memo._verified) <= 2 and len(memo._requests) == 2
    outcome(SIGNED[0], NOW, memo)  # the oldest went first: checked again, not a hit
    assert memo.hits == 0


def test_a_whole_get_is_known_only_within_its_time_bounds_and_secret() -> None:
    memo = VerifiedSignatures()
    view = SIGNED[0]  # presigned for an hour from NOW
    first = outcome(view, NOW, memo)
    assert outcome(view, NOW, memo) == first and memo.hits == 0  # kept now
    assert outcome(view, NOW + timedelta(seconds=3600), memo) == first and memo.hits == 1
    assert outcome(view, NOW + timedelta(seconds=3600, microseconds=1), memo) == ("AccessDenied", "Request has expired")
    rotated = {"AKIAGATEWAYTEST": SK + "-rotated"}
    assert outcome(view, NOW, memo, rotated)[0] == "SignatureDoesNotMatch"  # type: ignore[index]
    assert memo.hits == 1


def test_a_request_too_large_to_keep_is_checked_every_time() -> None:
    memo = VerifiedSignatures()
    view = SIGNED[0]
    padded = replace(view, headers=(*view.headers, ("x-padding", "p" * KNOWN_REQUEST_MAX)))  # not signed: still valid
    first = outcome(padded, NOW, memo)
    assert not isinstance(first, tuple) and outcome(padded, NOW, memo) == first
    assert len(memo._requests) == 0


def test_a_request_an_sdk_marked_as_its_own_is_checked_and_never_kept() -> None:
    """A request with amz-sdk-invocation-id (boto3 and every AWS SDK send one, new per request)
    is never sent again byte for byte: it is checked as without a memo, and not kept."""
    clock = botocore.auth.get_current_datetime
    botocore.auth.get_current_datetime = lambda: NOW.replace(tzinfo=None)  # type: ignore[assignment]
    try:
        marked = [sigv4(method, headers={"amz-sdk-invocation-id": f"{n:08x}-0000-4000-8000-000000000000"})
                  for n, method in enumerate(("GET", "HEAD", "PUT"))]
    finally:
        botocore.auth.get_current_datetime = clock  # type: ignore[assignment]
    memo = VerifiedSignatures()
    for view in marked:
        for _ in range(2):
            assert outcome(view, NOW, memo) == outcome(view, NOW, None)
            assert not isinstance(outcome(view, NOW, memo), tuple)
        wrong = replace(view, headers=tuple((n, _flip(v, 3) if n == "authorization" else v) for n, v in view.headers))
        assert outcome(wrong, NOW, memo) == outcome(wrong, NOW, None) != outcome(view, NOW, None)
    assert memo.hits == 0 and not memo._verified and not memo._requests


def test_a_request_of_many_tiny_headers_is_checked_every_time() -> None:
    """Few characters, many headers: each header held once parsed (a tuple and two strings) counts
    (memo.kept_size), or 4,096 such requests kept grew the gateway by ~500 MB."""
    memo = VerifiedSignatures()
    view = SIGNED[0]
    many = replace(view, headers=(*view.headers, *[("a", "b")] * 600))  # not signed: still valid
    assert sum(len(n) + len(v) for n, v in many.headers) + len(view.raw_path) + len(view.query_string) < 4096
    first = outcome(many, NOW, memo)
    assert not isinstance(first, tuple) and outcome(many, NOW, memo) == first
    assert len(memo._requests) == 0
    assert outcome(view, NOW, memo) == outcome(view, NOW, memo) and len(memo._requests) == 1  # a usual one is kept
