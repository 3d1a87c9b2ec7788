"""auth.fastpath: the SigV4 header check of an SDK's GET answers what the general check answers.

For requests botocore signs (GET and HEAD as the SDKs send them, and others), then mutated (a
signature byte, the secret, the clock, a header dropped, changed, added or repeated, the query,
the scope, the signed-headers list, whitespace, non-ASCII), the fast path gives the identity the
general path gives, or leaves the request to it; `authenticate` answers as the general path does.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from urllib.parse import quote, urlsplit

import botocore.auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import S3Error
from gateway.s3api.auth import RequestView, VerifiedSignatures, authenticate
from gateway.s3api.auth.common import _parse_query, _wire_text
from gateway.s3api.auth.dispatch import _authenticate
from gateway.s3api.auth.fastpath import sigv4_fast
from gateway.s3api.auth.sigv4check import keyed
from gateway.s3api.auth.sigv4 import _canonical_uris
from gateway.signing import (
    EMPTY_SHA256,
    canonical_headers,
    canonical_query_string,
    canonical_request,
    derive_signing_key,
    signature_hex,
    string_to_sign,
)

NOW = datetime(2024, 3, 9, 12, 0, 0, tzinfo=timezone.utc)
SKEW = timedelta(minutes=15)
# " AKIAFAST": a key the general path's strip() never reads, with the same secret, so that a
# fast path reading the Credential unstripped would accept it under the wrong name.
SECRETS = {"AKIAFAST": "fast-secret/+=", " AKIAFAST": "fast-secret/+=", "AKIA/SLASHED": "slashed-secret",
           "AKIAOTHER": "other-secret"}
HOST = "s3.local:9000"

Mutation = Callable[[RequestView], RequestView]


@contextmanager
def _clock(at: datetime) -> Iterator[None]:
    clock = botocore.auth.get_current_datetime
    botocore.auth.get_current_datetime = lambda: at.replace(tzinfo=None)  # type: ignore[assignment]
    try:
        yield
    finally:
        botocore.auth.get_current_datetime = clock  # type: ignore[assignment]


def signed(method: str, path: str, query: str, headers: dict[str, str], *, access_key: str, secret: str,
           region: str, service: str, payload: str) -> RequestView:
    """What the ASGI server hands over for the request botocore's S3 signer makes."""
    url = f"http://{HOST}{quote(path, safe='/~')}" + (f"?{query}" if query else "")
    request = AWSRequest(method=method, url=url, headers=dict(headers))
    signer = type("Signer", (botocore.auth.S3SigV4Auth,), {"payload": lambda self, request: payload})
    with _clock(NOW):
        signer(Credentials(access_key, secret), service, region).add_auth(request)
    prepared = request.prepare()
    parts = urlsplit(prepared.url)
    wire = []
    for name, value in prepared.headers.items():
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        wire.append((name.lower(), value.encode("utf-8").decode("latin-1")))  # as received: bytes read as latin-1
    if not any(n == "host" for n, _ in wire):
        wire.append(("host", parts.netloc))
    return RequestView(prepared.method, parts.path, parts.query, tuple(wire))


def outcome(check: Callable[[], object]) -> object:
    try:
        return check()
    except S3Error as exc:
        return exc.code, exc.status, exc.message, exc.extra


def general(view: RequestView, now: datetime) -> object:
    return outcome(lambda: _authenticate(view, SECRETS.get, now, SKEW, None, None))


def resigned(view: RequestView, secret: str) -> RequestView:
    """`view` with the signature the general path computes for it, whatever its Authorization
    names (scope, signed headers): a mutated request whose signature still matches, so that
    only the other checks can refuse it."""
    auth = [v for n, v in view.headers if n == "authorization"]
    if not auth or "Credential=" not in auth[0] or "SignedHeaders=" not in auth[0] or "Signature=" not in auth[0]:
        return view
    value = auth[0]
    credential = value.split("Credential=", 1)[1].split(",", 1)[0].strip()
    names = value.split("SignedHeaders=", 1)[1].split(",", 1)[0].strip().split(";")
    parts = credential.rsplit("/", 4)
    if len(parts) != 5:
        return view
    lowered = [n.lower() for n in names]
    block = canonical_headers(((n, _wire_text(v)) for n, v in view.headers if n in set(lowered)), lowered)
    creq = canonical_request(
        method=view.method.upper(), canonical_uri=_canonical_uris(view.raw_path)[0],
        canonical_query=canonical_query_string(_parse_query(view.query_string)), canonical_header_block=block,
        signed_headers=";".join(names), payload_hash=view.header("x-amz-content-sha256") or "",
    )
    key = derive_signing_key(secret, parts[1], parts[2], parts[3])
    signature = signature_hex(key, string_to_sign(view.header("x-amz-date") or "", "/".join(parts[1:]), creq))
    head, found, tail = value.rpartition("Signature=")
    new = head + found + signature + tail[64:]
    return replace(view, headers=tuple((n, new if v is value else v) for n, v in view.headers))


# --- mutations, applied after signing --------------------------------------------------------------


def _authorization(view: RequestView) -> str:
    return next((v for n, v in view.headers if n == "authorization"), "")


def _edit_authorization(old: str, new: str) -> Mutation:
    def edit(view: RequestView) -> RequestView:
        if not old:
            return view
        return replace(view, headers=tuple((n, v.replace(old, new, 1) if n == "authorization" else v)
                                           for n, v in view.headers))
    return edit


def _flip_signature(at: int) -> Mutation:
    def flip(view: RequestView) -> RequestView:
        value = _authorization(view)
        if len(value) < 64:
            return view
        i = len(value) - 1 - at % 64
        swapped = value[:i] + ("0" if value[i] != "0" else "1") + value[i + 1:]
        return replace(view, headers=tuple((n, swapped if n == "authorization" else v) for n, v in view.headers))
    return flip


def _drop(which: int) -> Mutation:
    def drop(view: RequestView) -> RequestView:
        i = which % len(view.headers)
        return replace(view, headers=view.headers[:i] + view.headers[i + 1:])
    return drop


def _change(which: int, value: str) -> Mutation:
    def change(view: RequestView) -> RequestView:
        i = which % len(view.headers)
        return replace(view, headers=(*view.headers[:i], (view.headers[i][0], value), *view.headers[i + 1:]))
    return change


def _repeat(which: int, same: bool) -> Mutation:
    def repeat(view: RequestView) -> RequestView:
        name, value = view.headers[which % len(view.headers)]
        return replace(view, headers=(*view.headers, (name, value if same else value + "x")))
    return repeat


def _add(name: str, value: str) -> Mutation:
    return lambda view: replace(view, headers=(*view.headers, (name, value)))


def _respace(which: int) -> Mutation:
    """Whitespace that trimming removes, put into a value after signing: still the same signature."""
    def respace(view: RequestView) -> RequestView:
        i = which % len(view.headers)
        name, value = view.headers[i]
        if name == "authorization":
            return view
        return replace(view, headers=(*view.headers[:i], (name, f" {value.replace(' ', '  ')}\t"), *view.headers[i + 1:]))
    return respace


def _query(extra: str) -> Mutation:
    return lambda view: replace(view, query_string=f"{view.query_string}&{extra}" if view.query_string else extra)


def _date_header(view: RequestView) -> RequestView:
    return replace(view, headers=tuple(("date", "Sat, 09 Mar 2024 12:00:00 GMT") if n == "x-amz-date" else (n, v)
                                       for n, v in view.headers))


MUTATIONS: list[Mutation | None] = [
    None, None, None,
    _edit_authorization(", SignedHeaders=", ",SignedHeaders="),
    _edit_authorization(", Signature=", ",  Signature="),
    _edit_authorization("Credential=", "Credential= "),
    _edit_authorization("SignedHeaders=host;", "SignedHeaders="),
    _edit_authorization(";host", ""),
    _edit_authorization("SignedHeaders=", "SignedHeaders=Host;"),
    _edit_authorization("/20240309/", "/20240308/"),
    _edit_authorization("/20240309/", "/2024030x/"),
    _edit_authorization("/s3/", "/ec2/"),
    _edit_authorization("/aws4_request", "/aws4_requests"),
    _edit_authorization("AKIAFAST/", "AKIAOTHER/"),
    _edit_authorization("AKIAFAST/", "AKIANOBODY/"),
    _edit_authorization("AWS4-HMAC-SHA256 ", "AWS4-HMAC-SHA256  "),
    _edit_authorization("AWS4-HMAC-SHA256 ", " AWS4-HMAC-SHA256 "),
    lambda view: _edit_authorization(_authorization(view)[-64:], _authorization(view)[-64:].upper())(view),
    lambda view: _edit_authorization(_authorization(view), _authorization(view) and _authorization(view) + " ")(view),
    lambda view: _edit_authorization(_authorization(view), _authorization(view) and _authorization(view) + ", Extra=1")(view),
    *[_flip_signature(at) for at in (0, 17, 63)],
    *[_drop(i) for i in range(8)],
    *[_change(i, v) for i, v in ((0, "x"), (3, "é"), (5, ""), (6, "20240309T120001Z"))],
    *[_repeat(i, same) for i in range(0, 8, 3) for same in (True, False)],
    *[_respace(i) for i in range(6)],
    _add("x-amz-acl", "public-read"),
    _add("x-amz-meta-unsigned", "1"),
    _add("user-agent", "an unsigned header"),
    _add("content-type", "text/plain"),
    _add("weird\nx-amz-name", "1"),
    _add("authorization", "AWS a:b"),
    _query("acl"),
    _query("X-Amz-Signature=abc"),
    _query("Signature=abc"),
    _query("x-id=GetObject"),
    _date_header,
    lambda view: replace(view, method=view.method.lower()),
    lambda view: replace(view, method="HEAD" if view.method == "GET" else "GET"),
    lambda view: replace(view, raw_path=view.raw_path + "é"),
    lambda view: replace(view, raw_path=view.raw_path.replace("%20", "+")),
    lambda view: replace(view, raw_path=""),
]

# What an SDK signs besides host, the date and the payload hash, and some it does not.
EXTRA_HEADERS = st.dictionaries(
    st.sampled_from(["amz-sdk-invocation-id", "amz-sdk-request", "range", "if-none-match", "x-amz-meta-note",
                     "x-amz-checksum-mode", "accept-encoding", "user-agent", "x-amz-request-payer"]),
    st.one_of(
        st.sampled_from(["00000000-0000-4000-8000-000000000000", "attempt=1; max=3", "bytes=0-99", "identity",
                         '"etag"', "ENABLED", "requester", "Boto3/1.35.0 md/Botocore#1.35.0",
                         "  spaced   out  ", "tab\there", "é", "€uro", "", "a%b"]),
        st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7e), max_size=12),
    ),
    max_size=5,
)
PAYLOADS = st.sampled_from(["UNSIGNED-PAYLOAD", "UNSIGNED-PAYLOAD", EMPTY_SHA256, EMPTY_SHA256, EMPTY_SHA256.upper(), "a" * 64,
                            "STREAMING-AWS4-HMAC-SHA256-PAYLOAD", "STREAMING-UNSIGNED-PAYLOAD-TRAILER", "nope"])
PATHS = st.one_of(
    st.sampled_from(["/bucket/object", "/bucket/dir/part-00000.parquet", "/bucket/dt=2024-01-01/a b+c",
                     "/bucket/é€", "/bucket/", "/bucket/a%2Fb"]),
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",), exclude_characters="?#\x00"),
            max_size=20).map(lambda key: "/bucket/" + key),
)
QUERIES = st.sampled_from(["", "", "x-id=GetObject", "versionId=v1&x-id=GetObject", "partNumber=2",
                           "response-content-type=text%2Fplain", "prefix=a%20b&list-type=2", "acl"])
SKEWS = st.sampled_from([timedelta(0), timedelta(0), timedelta(0), timedelta(seconds=1), -timedelta(seconds=1), SKEW, -SKEW,
                         SKEW + timedelta(microseconds=1), -SKEW - timedelta(microseconds=1),
                         timedelta(minutes=16), timedelta(days=1)])


@settings(max_examples=1000, deadline=None)
@given(
    method=st.sampled_from(["GET", "GET", "GET", "HEAD", "PUT"]),
    path=PATHS,
    query=QUERIES,
    headers=EXTRA_HEADERS,
    payload=PAYLOADS,
    key=st.sampled_from([("AKIAFAST", "fast-secret/+=")] * 4 + [("AKIAFAST", "not-the-secret"),
                         ("AKIA/SLASHED", "slashed-secret"), ("AKIANOBODY", "x")]),
    region=st.sampled_from(["us-east-1", "eu-central-1", "mars-north-7"]),
    service=st.sampled_from(["s3", "s3", "s3", "ec2"]),
    skew=SKEWS,
    mutations=st.lists(st.sampled_from(MUTATIONS), max_size=2),
    resign=st.booleans(),
)
def test_the_fast_path_answers_as_the_general_path(
    method: str, path: str, query: str, headers: dict[str, str], payload: str, key: tuple[str, str], region: str,
    service: str, skew: timedelta, mutations: list[Mutation | None], resign: bool,
) -> None:
    view = signed(method, path, query, headers, access_key=key[0], secret=key[1], region=region, service=service,
                  payload=payload)
    for mutation in mutations:
        if mutation is not None:
            view = mutation(view)
    if resign:
        view = resigned(view, key[1])
    now = NOW + skew
    expected = general(view, now)
    fast = sigv4_fast(view, SECRETS.get, now, SKEW)
    assert fast is None or fast == expected
    assert outcome(lambda: authenticate(view, SECRETS.get, now=now, max_skew=SKEW)) == expected
    memo = VerifiedSignatures()
    for _ in range(2):
        assert outcome(lambda: authenticate(view, SECRETS.get, now=now, max_skew=SKEW, verified=memo)) == expected


# One change each, on an SDK's GET signed anew after it (resigned): what only the checks other
# than the signature's can refuse.
CHECKED: list[Mutation] = [
    _edit_authorization("SignedHeaders=host;", "SignedHeaders="),
    _edit_authorization(";host", ""),
    _edit_authorization("/20240309/", "/20240308/"),
    _edit_authorization("/s3/", "/ec2/"),
    _edit_authorization("/aws4_request", "/aws4_requests"),
    _edit_authorization("AKIAFAST/", " AKIAFAST/"),
    _edit_authorization("AKIAFAST/", "AKIANOBODY/"),
    _edit_authorization(", Signature=", ",Signature="),
    _edit_authorization("SignedHeaders=", "SignedHeaders=Host;"),
    _edit_authorization("SignedHeaders=", "SignedHeaders=amz-sdk-request;"),
    _add("x-amz-acl", "public-read"),
    _add("x-amz-date", "20240309T120000Z"),
    lambda view: replace(view, headers=(("authorization", "AWS a:b"), *view.headers)),
    lambda view: replace(view, headers=(("x-amz-content-sha256", "UNSIGNED-PAYLOAD"), *view.headers)),
    *[_repeat(i, same) for i in range(0, 8, 2) for same in (True, False)],
    *[_drop(i) for i in range(8)],
    *[_respace(i) for i in range(6)],
    _query("X-Amz-Signature=abc"),
    _query("X-Amz-Credential=abc"),
    _query("Signature=abc"),
    _query("AWSAccessKeyId=abc"),
    _query("x-id=GetObject"),
    _date_header,
    lambda view: replace(view, method=view.method.lower()),
    _change(5, "é"),
    _change(5, "\xe9"),
]


@settings(max_examples=600, deadline=None)
@given(
    method=st.sampled_from(["GET", "HEAD"]),
    path=st.sampled_from(["/bucket/object", "/bucket/dt=2024-01-01/a b", "/bucket/x"]),
    query=st.sampled_from(["", "x-id=GetObject"]),
    headers=st.fixed_dictionaries({"amz-sdk-invocation-id": st.uuids().map(str),
                                   "amz-sdk-request": st.sampled_from(["attempt=1", "attempt=2; max=3"])}),
    payload=st.sampled_from(["UNSIGNED-PAYLOAD", EMPTY_SHA256]),
    skew=SKEWS,
    mutation=st.sampled_from(CHECKED),
)
def test_each_check_as_the_general_path(method: str, path: str, query: str, headers: dict[str, str], payload: str,
                                        skew: timedelta, mutation: Mutation) -> None:
    view = resigned(mutation(signed(method, path, query, headers, access_key="AKIAFAST", secret="fast-secret/+=",
                                    region="us-east-1", service="s3", payload=payload)), "fast-secret/+=")
    now = NOW + skew
    expected = general(view, now)
    fast = sigv4_fast(view, SECRETS.get, now, SKEW)
    assert fast is None or fast == expected
    assert outcome(lambda: authenticate(view, SECRETS.get, now=now, max_skew=SKEW)) == expected


@settings(max_examples=100, deadline=None)
@given(
    method=st.sampled_from(["GET", "HEAD"]),
    path=st.sampled_from(["/bucket/object", "/bucket/dir/part-00000.parquet", "/b/x.y~z_-"]),
    query=st.sampled_from(["", "x-id=GetObject", "versionId=abc&x-id=GetObject"]),
    headers=st.fixed_dictionaries({"amz-sdk-invocation-id": st.uuids().map(str),
                                   "amz-sdk-request": st.sampled_from(["attempt=1", "attempt=2; max=3",
                                                                       " attempt=2;  max=3\t", "attempt=1 "])}),
    payload=st.sampled_from(["UNSIGNED-PAYLOAD", EMPTY_SHA256]),
    region=st.sampled_from(["us-east-1", "eu-central-1"]),
    skew=st.sampled_from([timedelta(0), SKEW, -SKEW, timedelta(seconds=-3)]),
)
def test_an_sdk_get_takes_the_fast_path(method: str, path: str, query: str, headers: dict[str, str], payload: str,
                                        region: str, skew: timedelta) -> None:
    view = signed(method, path, query, headers, access_key="AKIAFAST", secret="fast-secret/+=", region=region,
                  service="s3", payload=payload)
    fast = sigv4_fast(view, SECRETS.get, NOW + skew, SKEW)
    assert fast is not None and fast == general(view, NOW + skew)
    assert fast.access_key == "AKIAFAST"


def test_the_kept_signing_hashes_are_hmac_sha256_with_the_signing_key() -> None:
    key = derive_signing_key("fast-secret/+=", "20240309", "us-east-1", "s3")
    inner, outer, _ = keyed(key, "")
    for message in (b"", b"x", b"y" * 200):
        mac = inner.copy()
        mac.update(message)
        result = outer.copy()
        result.update(mac.digest())
        assert result.hexdigest() == hmac.new(key, message, hashlib.sha256).hexdigest()
    assert keyed(key, "")[0].copy().hexdigest() == inner.copy().hexdigest()


def test_only_space_is_printable_among_the_whitespace_trimming_removes() -> None:
    # The fast path's test of values that need no trimming (printable, single spaces) relies on it.
    assert [c for c in map(chr, range(128)) if c.isspace() and c.isprintable()] == [" "]
