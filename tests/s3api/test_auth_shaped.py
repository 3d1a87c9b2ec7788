"""auth.shaped: the shape of a request head (signed in its headers or presigned) (the compiled _sigv4check.shape and its twin, byte for
byte), the canonical request of a kept request cut around its values, and the signature of a new
request of the same shape checked anew: accepted only where the full check accepts it, its own
Range too (put in its place: a Range changed after signing is refused).

Requests botocore signs (headers as the SDKs send them, amz-sdk-invocation-id and amz-sdk-request
among them), written as the heads a client sends, then mutated (the case of names, spacing,
headers repeated, bytes not ASCII, a signature, a date, the query) and made up.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import replace
from collections.abc import Callable
from datetime import datetime, timedelta
from urllib.parse import quote, urlsplit

import botocore.auth
import pytest
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gateway.s3api.auth import Identity, RequestView, authenticate, shaped
from tests.s3api import test_auth_fastpath as header_signed
from tests.s3api import test_auth_presigned_fast as presigned
from tests.s3api.test_auth_fastpath import NOW, SECRETS, SKEW, _clock, outcome
from tests.s3api.test_sigv4check_twin import _both, _Key, needs_compiled

ACCESS_KEY, SECRET = "AKIAFAST", SECRETS["AKIAFAST"]
HOST = header_signed.HOST


def signed(method: str, path: str, query: str, headers: dict[str, str], *, at: datetime = NOW,
           secret: str = SECRET, payload: str = "UNSIGNED-PAYLOAD", invocation: str | None = None) -> RequestView:
    """The request botocore's S3 signer makes at `at`, as the server hands it over, with an SDK's
    amz-sdk-invocation-id (new each time unless given) and amz-sdk-request."""
    url = f"http://{HOST}{quote(path, safe='/~%')}" + (f"?{query}" if query else "")
    sdk = {"amz-sdk-invocation-id": invocation or str(uuid.uuid4()), "amz-sdk-request": "attempt=1; max=3"}
    request = AWSRequest(method=method, url=url, headers={**sdk, **headers})
    signer = type("Signer", (botocore.auth.S3SigV4Auth,), {"payload": lambda self, request: payload})
    with _clock(at):
        signer(Credentials(ACCESS_KEY, secret), "s3", "us-east-1").add_auth(request)
    prepared = request.prepare()
    parts = urlsplit(prepared.url)
    wire = [(name.lower(), (value.decode("latin-1") if isinstance(value, bytes) else value)
             .encode("utf-8").decode("latin-1")) for name, value in prepared.headers.items()]
    if not any(name == "host" for name, _ in wire):
        wire.insert(0, ("host", parts.netloc))
    return RequestView(prepared.method, parts.path, parts.query, tuple(wire))


def head_of(view: RequestView) -> bytes:
    """The head a client writes for `view` (names as botocore writes them, "Name: value")."""
    target = view.raw_path + (f"?{view.query_string}" if view.query_string else "")
    lines = [f"{view.method} {target} HTTP/1.1"] + [f"{name.title()}: {value}" for name, value in view.headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def full(view: RequestView, now: datetime) -> object:
    return outcome(lambda: authenticate(view, SECRETS.get, now=now, max_skew=SKEW))


HeadMutation = Callable[[bytes], bytes]


def _lines(edit: Callable[[list[bytes]], list[bytes]]) -> HeadMutation:
    return lambda head: b"\r\n".join(edit(head[:-4].split(b"\r\n"))) + b"\r\n\r\n"


HEAD_MUTATIONS: list[HeadMutation | None] = [
    None, None, None,
    lambda head: head.lower(),
    lambda head: head.replace(b"X-Amz-Date: ", b"x-amz-date: "),
    lambda head: head.replace(b"Authorization: ", b"AUTHORIZATION: "),
    lambda head: head.replace(b"X-Amz-Date: ", b"X-Amz-Date:"),
    lambda head: head.replace(b"Authorization: ", b"Authorization:  "),
    lambda head: head.replace(b"Amz-Sdk-Request: ", b"Amz-Sdk-Request:\t"),
    lambda head: head.replace(b"; max=3", b";  max=3"),
    lambda head: head.replace(b"; max=3", b"; max=3 "),
    lambda head: head.replace(b"Host: ", b"Host:   "),
    lambda head: head.replace(b", SignedHeaders=", b",SignedHeaders="),
    lambda head: head.replace(b"Credential=", b"Credential= "),
    lambda head: head.replace(b"/us-east-1/", b"/us,east-1/"),
    lambda head: head.replace(b"T120000Z", b"T120000"),
    lambda head: head.replace(b"T120000Z", b"t120000Z"),
    lambda head: head.replace(b"Host: ", b"Host: \xc3\xa9"),
    lambda head: head.replace(b"Amz-Sdk-Invocation-Id: ", b"Amz-Sdk-Invocation-Id: \xff"),
    lambda head: head.replace(b"\r\nHost", b"\nHost"),
    lambda head: head.replace(b" HTTP/1.1", b"?X-Amz-Signature=0 HTTP/1.1", 1),
    lambda head: head.replace(b" HTTP/1.1", b"&x-amz-expires=1 HTTP/1.1", 1),
    lambda head: head.replace(b"GET ", b"get ", 1),
    lambda head: head.replace(b" HTTP/1.1", b" HTTP/1.0", 1),
    lambda head: head + b"GET / HTTP/1.1\r\n\r\n",
    lambda head: head[:-2],
    _lines(lambda lines: lines + [line for line in lines if line.startswith(b"Authorization")]),
    _lines(lambda lines: lines + [line for line in lines if line.startswith(b"X-Amz-Date")]),
    _lines(lambda lines: lines + [line for line in lines if line.startswith(b"Amz-Sdk-Request")]),
    _lines(lambda lines: [line for line in lines if not line.startswith(b"Authorization")]),
    _lines(lambda lines: [line for line in lines if not line.startswith(b"Amz-Sdk")]),
    _lines(lambda lines: [lines[0]] + list(reversed(lines[1:]))),
    _lines(lambda lines: [line[:-1] + line[-1:].upper() if line.startswith(b"Authorization") else line
                          for line in lines]),
    _lines(lambda lines: lines + [line for line in lines if line.startswith(b"Range")]),
    lambda head: head.replace(b"Range: ", b"Range:  "),
    lambda head: head.replace(b"Range: ", b"RANGE: "),
    lambda head: head.replace(b"Range: bytes=", b"Range: bytes= "),
    lambda head: head.replace(b"Range: bytes=", b"Range: bytes=\t"),
]

METHODS = st.sampled_from(["GET", "GET", "HEAD"])
PATHS = st.sampled_from(["/bucket/object", "/bucket/dir/part-00000.parquet", "/bucket/dt=2024-01-01/a b+c",
                         "/bucket/é€", "/bucket/a%2Fb", "/bucket/k~(1)"])
QUERIES = st.sampled_from(["", "x-id=GetObject", "versionId=v1&x-id=GetObject", "response-content-type=text%2Fplain"])
HEADERS = st.dictionaries(st.sampled_from(["range", "if-none-match", "x-amz-meta-note", "x-amz-checksum-mode",
                                           "user-agent", "origin"]),
                          st.sampled_from(["bytes=0-99", '"etag"', "ENABLED", "Boto3/1.35.0 md/Botocore#1.35.0",
                                           "  spaced   out  ", "http://example.com"]), max_size=3)
PAYLOADS = st.sampled_from(["UNSIGNED-PAYLOAD", header_signed.EMPTY_SHA256])


@needs_compiled
@settings(max_examples=600, deadline=None)
@given(method=METHODS, path=PATHS, query=QUERIES, headers=HEADERS, payload=PAYLOADS,
       mutations=st.lists(st.sampled_from(HEAD_MUTATIONS), max_size=2))
def test_sdk_signed_heads_shape_alike(method: str, path: str, query: str, headers: dict[str, str], payload: str,
                                      mutations: list[HeadMutation | None]) -> None:
    head = head_of(signed(method, path, query, headers, payload=payload))
    for mutation in mutations:
        if mutation is not None:
            head = mutation(head)
    made = _both("shape", head)
    if isinstance(made, tuple):  # the key and the values give the head back: one structure per key
        key, amz_date, date, signature, invocation, sdk_request, byte_range = made
        assert len(key) + len(amz_date) + len(date) + len(signature) + len(invocation or "") \
            + len(sdk_request or "") + len(byte_range or "") == len(head)
        assert (byte_range is None) == (b"\r\nrange: " not in head.lower())
        assert amz_date[:8] == date or b"T120000" not in head


_HEAD_BYTES = st.sampled_from([b"GET ", b"HEAD ", b"/b/k", b"?a=1", b" HTTP/1.1", b"\r\n", b": ", b":", b" ",
                               b"Authorization", b"x-amz-date", b"AMZ-SDK-REQUEST", b"amz-sdk-invocation-id",
                               b"AWS4-HMAC-SHA256 Credential=K/20240309/r/s3/aws4_request, SignedHeaders=host, "
                               b"Signature=" + b"a" * 64, b"20240309T120000Z", b"x", b"\t", b"\xe9", b"\n", b",",
                               b"Range", b"bytes=0-99", b"bytes=-5"])


@needs_compiled
@settings(max_examples=1500, deadline=None)
@given(pieces=st.lists(_HEAD_BYTES, max_size=30), end=st.booleans())
def test_made_up_heads_shape_alike(pieces: list[bytes], end: bool) -> None:
    _both("shape", b"".join(pieces) + (b"\r\n\r\n" if end else b""))


@needs_compiled
def test_the_usual_head_shapes_alike() -> None:
    head = (b"GET /b/k?x-id=GetObject HTTP/1.1\r\nHost: h\r\nX-Amz-Date: 20240309T120000Z\r\n"
            b"amz-sdk-invocation-id: id-1\r\namz-sdk-request: attempt=1; max=3\r\nAuthorization: AWS4-HMAC-SHA256 "
            b"Credential=K/20240309/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-date, Signature="
            + b"a" * 64 + b"\r\n\r\n")
    assert _both("shape", head) == (
        b"GET /b/k?x-id=GetObject HTTP/1.1\r\nHost: h\r\nX-Amz-Date: \r\namz-sdk-invocation-id: \r\n"
        b"amz-sdk-request: \r\nAuthorization: AWS4-HMAC-SHA256 Credential=K//us-east-1/s3/aws4_request, "
        b"SignedHeaders=host;x-amz-date, Signature=\r\n\r\n",
        "20240309T120000Z", "20240309", "a" * 64, "id-1", "attempt=1; max=3", None)
    ranged = head.replace(b"\r\n\r\n", b"\r\nRange: bytes=100-199\r\n\r\n")
    assert _both("shape", ranged)[0] == _both("shape", head)[0].replace(b"\r\n\r\n", b"\r\nRange: \r\n\r\n")
    assert _both("shape", ranged)[6] == "bytes=100-199"
    for declined in (head.replace(b"GET", b"PUT"), head.replace(b"a" * 64, b"A" * 64),
                     head.replace(b"?x-id=GetObject", b"?X-Amz-Credential=x"), head.replace(b"id-1", b"id  1")):
        assert _both("shape", declined) is None


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(request=st.binary(max_size=300), key=st.binary(max_size=64),
       provided=st.one_of(st.text(st.sampled_from("0123456789abcdefABé"), min_size=63, max_size=65)))
def test_signed_compares_alike(request: bytes, key: bytes, provided: str) -> None:
    _both("signs", request, _Key(key, "20240309T120000Z"), provided)


def _second(kind: str, method: str, path: str, query: str, headers: dict[str, str], payload: str) -> RequestView:
    """Another send of the same request, signed anew, as `kind` says."""
    if kind == "later":
        return signed(method, path, query, headers, at=NOW + timedelta(seconds=37), payload=payload)
    if kind == "other secret":
        return signed(method, path, query, headers, secret="not-the-secret", payload=payload)
    if kind == "long ago":
        return signed(method, path, query, headers, at=NOW - timedelta(minutes=20), payload=payload)
    view = signed(method, path, query, headers, at=NOW + timedelta(seconds=1), payload=payload)
    if kind == "signature":
        return replace(view, headers=tuple(
            (name, value[:-1] + ("0" if value[-1] != "0" else "1")) if name == "authorization" else (name, value)
            for name, value in view.headers))
    assert kind == "credential date"
    return replace(view, headers=tuple(
        (name, value.replace("/20240309/", "/20240308/")) if name == "authorization" else (name, value)
        for name, value in view.headers))


@settings(max_examples=400, deadline=None)
@given(method=METHODS, path=PATHS, query=QUERIES, headers=HEADERS, payload=PAYLOADS,
       kind=st.sampled_from(["later", "later", "other secret", "long ago", "signature", "credential date"]),
       clock=st.sampled_from([timedelta(0), timedelta(seconds=40), SKEW, -SKEW, timedelta(minutes=16)]))
def test_a_request_of_a_kept_shape_is_accepted_only_as_the_full_check_accepts_it(
        method: str, path: str, query: str, headers: dict[str, str], payload: str, kind: str,
        clock: timedelta) -> None:
    first = signed(method, path, query, headers, payload=payload)
    shape = shaped.shape_of(head_of(first))
    assume(shape is not None and isinstance(full(first, NOW), Identity))
    assert shape is not None
    made = shaped.template(first, shape, SECRET, SKEW)
    assert made is not None  # every request the full check accepts and shapes is kept
    second = _second(kind, method, path, query, headers, payload)
    again = shaped.shape_of(head_of(second))
    assert again is not None and again[0] == shape[0]  # the same key: only the values changed
    accepted = shaped.signed_anew(made, again, SECRET, NOW + clock, SKEW)
    answer = full(second, NOW + clock)
    assert accepted == (isinstance(answer, Identity) and answer.access_key == ACCESS_KEY), (kind, answer)


RANGES = st.one_of(
    st.tuples(st.integers(0, 10**7), st.integers(0, 10**7)).map(lambda ab: f"bytes={min(ab)}-{max(ab)}"),
    st.integers(0, 10**7).map(lambda n: f"bytes=-{n}"),
    st.integers(0, 10**7).map(lambda n: f"bytes={n}-"),
    st.sampled_from(["bytes=0-1,3-4", "bytes=0-1, 3-4", "bytes=x-y", "items=0-1", "bytes=5-2", "bytes=-", "BYTES=1-2",
                     "bytes=0-99"]),
)


@settings(max_examples=400, deadline=None)
@given(method=METHODS, path=PATHS, query=QUERIES, headers=HEADERS, payload=PAYLOADS, first_range=RANGES,
       second_range=RANGES, changed=st.one_of(st.none(), RANGES),
       kind=st.sampled_from(["later", "later", "other secret", "signature"]),
       clock=st.sampled_from([timedelta(0), timedelta(seconds=40), timedelta(minutes=16)]))
def test_a_request_of_a_kept_shape_with_its_own_range_is_accepted_only_as_the_full_check_accepts_it(
        method: str, path: str, query: str, headers: dict[str, str], payload: str, first_range: str,
        second_range: str, changed: str | None, kind: str, clock: timedelta) -> None:
    """The Range is signed (botocore signs every header): a request signed with its own Range is
    accepted as the full check accepts it; one whose Range was `changed` after signing is refused."""
    first = signed(method, path, query, {**headers, "range": first_range}, payload=payload)
    shape = shaped.shape_of(head_of(first))
    assume(shape is not None and isinstance(full(first, NOW), Identity))
    assert shape is not None and shape[shaped.RANGE] == first_range
    made = shaped.template(first, shape, SECRET, SKEW)
    assert made is not None
    second = _second(kind, method, path, query, {**headers, "range": second_range}, payload)
    if changed is not None:
        second = replace(second, headers=tuple((name, changed if name == "range" else value)
                                               for name, value in second.headers))
    again = shaped.shape_of(head_of(second))
    assert again is not None and again[0] == shape[0]  # the same key: only the values (the Range too) changed
    accepted = shaped.signed_anew(made, again, SECRET, NOW + clock, SKEW)
    answer = full(second, NOW + clock)
    assert accepted == (isinstance(answer, Identity) and answer.access_key == ACCESS_KEY), (kind, changed, answer)
    if changed is not None and changed != second_range:
        assert not accepted


def test_a_range_no_signature_covers_is_any_range_as_for_the_full_check() -> None:
    """A Range left out of SignedHeaders (not as the SDKs sign) is in no place of the template: any
    value of it passes, as it passes the full check."""
    first = signed("GET", "/bucket/object", "", {})
    with_range = replace(first, headers=(*first.headers, ("range", "bytes=0-9")))
    shape = shaped.shape_of(head_of(with_range))
    assert shape is not None and isinstance(full(with_range, NOW), Identity)
    made = shaped.template(with_range, shape, SECRET, SKEW)
    assert made is not None and shaped.RANGE not in made.slots
    other = shaped.shape_of(head_of(replace(first, headers=(*first.headers, ("range", "bytes=-5")))))
    assert other is not None and other[0] == shape[0]
    assert shaped.signed_anew(made, other, SECRET, NOW, SKEW)
    assert isinstance(full(replace(first, headers=(*first.headers, ("range", "bytes=-5"))), NOW), Identity)


def test_a_template_is_not_made_for_the_wrong_secret_or_a_request_not_signed_as_shaped() -> None:
    first = signed("GET", "/bucket/object", "", {"range": "bytes=0-9"})
    shape = shaped.shape_of(head_of(first))
    assert shape is not None
    assert shaped.template(first, shape, SECRET, SKEW) is not None
    assert shaped.template(first, shape, "rotated-secret", SKEW) is None
    other = shaped.shape_of(head_of(signed("GET", "/bucket/object", "", {"range": "bytes=0-9"},
                                           at=NOW + timedelta(seconds=1))))
    assert other is not None
    assert shaped.template(first, other, SECRET, SKEW) is None  # another request's values


@pytest.mark.parametrize("secret", ["rotated-secret", SECRET])
def test_a_new_request_is_checked_with_the_secret_it_was_kept_with(secret: str) -> None:
    first = signed("GET", "/bucket/object", "", {})
    shape = shaped.shape_of(head_of(first))
    assert shape is not None
    made = shaped.template(first, shape, SECRET, SKEW)
    assert made is not None
    again = shaped.shape_of(head_of(signed("GET", "/bucket/object", "", {}, at=NOW + timedelta(seconds=2))))
    assert again is not None
    assert shaped.signed_anew(made, again, secret, NOW, SKEW) == (secret == SECRET)


def presigned_at(method: str, path: str, query: str, headers: dict[str, str], *, at: datetime = NOW,
                 secret: str = SECRET, expires: int = 3600) -> RequestView:
    """The URL botocore presigns at `at`, as the server hands it over (with `headers` besides)."""
    url = f"http://{HOST}{quote(path, safe='/~%')}" + (f"?{query}" if query else "")
    request = AWSRequest(method=method, url=url, headers=dict(headers))
    with _clock(at):
        botocore.auth.S3SigV4QueryAuth(Credentials(ACCESS_KEY, secret), "s3", "us-east-1",
                                       expires=expires).add_auth(request)
    parts = urlsplit(request.prepare().url)
    return RequestView(method, parts.path, parts.query, (("host", parts.netloc), *headers.items()))


@needs_compiled
@settings(max_examples=600, deadline=None)
@given(method=METHODS, path=PATHS, query=QUERIES, headers=HEADERS, expires=st.sampled_from([60, 3600, 604800]),
       view_mutations=st.lists(st.sampled_from(presigned.MUTATIONS), max_size=1),
       mutations=st.lists(st.sampled_from(HEAD_MUTATIONS), max_size=1))
def test_presigned_heads_shape_alike(method: str, path: str, query: str, headers: dict[str, str], expires: int,
                                     view_mutations: list[presigned.Mutation],
                                     mutations: list[HeadMutation | None]) -> None:
    view = presigned_at(method, path, query, headers, expires=expires)
    for view_mutation in view_mutations:
        view = view_mutation(view)
    head = head_of(view)
    for mutation in mutations:
        if mutation is not None:
            head = mutation(head)
    _both("shape", head)


def _second_presigned(kind: str, method: str, path: str, query: str, headers: dict[str, str],
                      expires: int) -> RequestView:
    """Another presigned URL of the same request, made anew, as `kind` says."""
    if kind == "later":
        return presigned_at(method, path, query, headers, at=NOW + timedelta(seconds=37), expires=expires)
    if kind == "other secret":
        return presigned_at(method, path, query, headers, secret="not-the-secret", expires=expires)
    if kind == "long ago":
        return presigned_at(method, path, query, headers, at=NOW - timedelta(hours=2), expires=expires)
    view = presigned_at(method, path, query, headers, at=NOW + timedelta(seconds=1), expires=expires)
    if kind == "signature":
        return replace(view, query_string=re.sub(r"X-Amz-Signature=[0-9a-f]{63}", "X-Amz-Signature=" + "0" * 63,
                                                 view.query_string))
    assert kind == "credential date"
    return replace(view, query_string=view.query_string.replace("%2F20240309%2F", "%2F20240308%2F"))


@settings(max_examples=400, deadline=None)
@given(method=METHODS, path=PATHS, query=QUERIES, headers=HEADERS, expires=st.sampled_from([60, 3600, 604800]),
       kind=st.sampled_from(["later", "later", "other secret", "long ago", "signature", "credential date"]),
       clock=st.sampled_from([timedelta(0), timedelta(seconds=61), timedelta(hours=1, seconds=1), -SKEW,
                              -SKEW - timedelta(seconds=2), timedelta(days=8)]))
def test_a_presigned_url_of_a_kept_shape_is_accepted_only_as_the_full_check_accepts_it(
        method: str, path: str, query: str, headers: dict[str, str], expires: int, kind: str,
        clock: timedelta) -> None:
    first = presigned_at(method, path, query, headers, expires=expires)
    shape = shaped.shape_of(head_of(first))
    assume(shape is not None and isinstance(full(first, NOW), Identity))
    assert shape is not None
    made = shaped.template(first, shape, SECRET, SKEW)
    assert made is not None and made.expires == str(expires)
    second = _second_presigned(kind, method, path, query, headers, expires)
    again = shaped.shape_of(head_of(second))
    assert again is not None and again[0] == shape[0]
    accepted = shaped.signed_anew(made, again, SECRET, NOW + clock, SKEW)
    answer = full(second, NOW + clock)
    assert accepted == (isinstance(answer, Identity) and answer.access_key == ACCESS_KEY), (kind, answer)
