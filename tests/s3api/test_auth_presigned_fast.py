"""auth.fastpath.presigned_fast: a presigned GET or HEAD is checked as the general path checks it.

For URLs botocore presigns (as `generate_presigned_url` does), then mutated (a parameter dropped,
repeated, changed or percent-encoded differently, the signature, the clock, the expiry, headers
added, the path), the fast path gives the identity the general path gives or leaves the request
to it, and `authenticate` answers as the general path does, with and without the memo.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from urllib.parse import quote, urlsplit

from botocore.auth import S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.s3api.auth import RequestView, VerifiedSignatures, authenticate
from gateway.s3api.auth.common import _parse_query
from gateway.s3api.auth.fastpath import presigned_fast
from gateway.s3api.auth.sigv4check import _decode, _encode, canonical_query
from gateway.s3api.auth.sigv4 import _canonical_uris
from gateway.signing import (EMPTY_SHA256, UNSIGNED_PAYLOAD, canonical_headers, canonical_query_string,
                             canonical_request, derive_signing_key, signature_hex, string_to_sign)
from tests.s3api.test_auth_fastpath import HOST, NOW, SECRETS, SKEW, _clock, general, outcome

Mutation = Callable[[RequestView], RequestView]


def presigned(method: str, path: str, query: str, headers: dict[str, str], *, access_key: str, secret: str,
              region: str, expires: int) -> RequestView:
    """What the ASGI server hands over for the URL botocore presigns (and the headers sent with it)."""
    url = f"http://{HOST}{quote(path, safe='/~')}" + (f"?{query}" if query else "")
    request = AWSRequest(method=method, url=url, headers=dict(headers))
    with _clock(NOW):
        S3SigV4QueryAuth(Credentials(access_key, secret), "s3", region, expires=expires).add_auth(request)
    prepared = request.prepare()
    parts = urlsplit(prepared.url)
    wire = [(name.lower(), value.encode("utf-8").decode("latin-1")) for name, value in headers.items()]
    wire.append(("host", parts.netloc))
    return RequestView(prepared.method, parts.path, parts.query, tuple(wire))


def resigned(view: RequestView, secret: str) -> RequestView:
    """`view` with the X-Amz-Signature the general path computes for what its query now says:
    a mutated URL whose signature still matches, so that only the other checks can refuse it."""
    pairs = _parse_query(view.query_string)
    params = dict(pairs)
    parts = params.get("X-Amz-Credential", "").rsplit("/", 4)
    if len(parts) != 5 or "X-Amz-Signature" not in params:
        return view
    names = params.get("X-Amz-SignedHeaders", "host").split(";")
    lowered = [n.lower() for n in names]
    block = canonical_headers(((n, v) for n, v in view.headers if n in set(lowered)), lowered)
    creq = canonical_request(
        method=view.method.upper(), canonical_uri=_canonical_uris(view.raw_path)[0],
        canonical_query=canonical_query_string([(n, v) for n, v in pairs if n != "X-Amz-Signature"]),
        canonical_header_block=block, signed_headers=";".join(names), payload_hash=UNSIGNED_PAYLOAD)
    key = derive_signing_key(secret, parts[1], parts[2], parts[3])
    signature = signature_hex(key, string_to_sign(params.get("X-Amz-Date", ""), "/".join(parts[1:]), creq))
    old = "X-Amz-Signature=" + quote(params["X-Amz-Signature"], safe="")
    return replace(view, query_string=view.query_string.replace(old, "X-Amz-Signature=" + signature, 1))


def _edit(old: str, new: str) -> Mutation:
    return lambda view: replace(view, query_string=view.query_string.replace(old, new, 1))


def _query(extra: str) -> Mutation:
    return lambda view: replace(view, query_string=f"{view.query_string}&{extra}")


def _header(name: str, value: str) -> Mutation:
    return lambda view: replace(view, headers=(*view.headers, (name, value)))


def _signature(edit: Callable[[str], str]) -> Mutation:
    def mutate(view: RequestView) -> RequestView:
        head, _, signature = view.query_string.partition("X-Amz-Signature=")
        signature, sep, tail = signature.partition("&")
        return replace(view, query_string=f"{head}X-Amz-Signature={edit(signature)}{sep}{tail}")
    return mutate


MUTATIONS: list[Mutation] = [
    _edit("X-Amz-Algorithm=AWS4-HMAC-SHA256", "X-Amz-Algorithm=AWS4-HMAC-SHA512"),
    _edit("X-Amz-Algorithm=AWS4-HMAC-SHA256&", ""),
    _edit("X-Amz-Expires=", "X-Amz-Expires=1"),
    _edit("X-Amz-Expires=", "X-Amz-Expires=-"),
    _edit("X-Amz-Expires=", "X-Amz-Expires=99999999999999"),
    _edit("X-Amz-Expires=", "X-Amz-Expires=x"),
    _edit("X-Amz-Date=20240309", "X-Amz-Date=20240308"),
    _edit("X-Amz-Date=", "X-Amz-Date=x"),
    _edit("%2F20240309%2F", "%2F20240308%2F"),
    _edit("%2Fs3%2F", "%2Fec2%2F"),
    _edit("%2Faws4_request", "%2Faws4_requests"),
    _edit("AKIAFAST%2F", "AKIANOBODY%2F"),
    _edit("AKIAFAST%2F", "AKIAOTHER%2F"),
    _edit("AKIAFAST%2F", "%20AKIAFAST%2F"),
    _edit("AKIAFAST%2F", "AKIAFAST/"),
    _edit("X-Amz-SignedHeaders=host", "X-Amz-SignedHeaders=Host"),
    _edit("X-Amz-SignedHeaders=host", "X-Amz-SignedHeaders=host%3Bx-amz-meta-a"),
    _edit("X-Amz-SignedHeaders=host", "X-Amz-SignedHeaders=x-amz-meta-a%3Bhost"),
    _edit("X-Amz-SignedHeaders=host", "X-Amz-SignedHeaders=range"),
    _edit("X-Amz-SignedHeaders=host", "X-Amz-SignedHeaders=host%3B"),
    _edit("X-Amz-Signature=", "X-Amz-%53ignature="),
    _edit("X-Amz-Credential=", "X-Amz-Credential=x&X-Amz-Credential="),
    _edit("&", "&&"),
    _signature(str.upper),
    _signature(lambda s: s[:-1] + ("0" if s[-1:] != "0" else "1")),
    _signature(lambda s: s[:10]),
    _signature(lambda s: ""),
    _query("X-Amz-Date=20240309T120000Z"),
    _query("Signature=abc"),
    _query("AWSAccessKeyId=abc"),
    _query("response-content-type=text%2Fplain"),
    _query("versionId=a%20b+c"),
    _query("x-id=GetObject"),
    _query("%41=1"),
    _header("authorization", "AWS a:b"),
    _header("x-amz-content-sha256", UNSIGNED_PAYLOAD),
    _header("x-amz-meta-a", "1"),
    _header("x-amz-meta-a", "  spaced   out "),
    _header("x-amz-meta-a", "é"),
    _header("range", "bytes=0-9"),
    # x-amz-content-sha256 signed: the general path's identity then checks the body against it.
    lambda view: _header("x-amz-content-sha256", EMPTY_SHA256)(
        _edit("X-Amz-SignedHeaders=host", "X-Amz-SignedHeaders=host%3Bx-amz-content-sha256")(view)),
    _header("host", HOST),
    lambda view: replace(view, method=view.method.lower()),
    lambda view: replace(view, method="HEAD" if view.method == "GET" else "GET"),
    lambda view: replace(view, raw_path=view.raw_path + "é"),
    lambda view: replace(view, raw_path=view.raw_path.replace("%20", "+")),
    lambda view: replace(view, raw_path=""),
]
SKEWS = st.sampled_from([timedelta(0), timedelta(0), timedelta(seconds=59), timedelta(seconds=61),
                         timedelta(hours=1), timedelta(hours=1, microseconds=1), -SKEW,
                         -SKEW - timedelta(microseconds=1), timedelta(days=8)])


@settings(max_examples=1000, deadline=None)
@given(
    method=st.sampled_from(["GET", "GET", "HEAD", "PUT"]),
    path=st.sampled_from(["/bucket/object", "/bucket/dt=2024-01-01/a b+c", "/bucket/é€", "/bucket/a%2Fb", "/b/x"]),
    query=st.sampled_from(["", "", "versionId=v1", "response-content-disposition=attachment%3B%20x", "partNumber=2"]),
    expires=st.sampled_from([60, 3600, 604800, 604801]),
    key=st.sampled_from([("AKIAFAST", "fast-secret/+=")] * 4 + [("AKIAFAST", "not-the-secret"),
                         ("AKIA/SLASHED", "slashed-secret"), ("AKIANOBODY", "x")]),
    region=st.sampled_from(["us-east-1", "eu-central-1"]),
    skew=SKEWS,
    mutations=st.lists(st.sampled_from(MUTATIONS), max_size=2),
    resign=st.booleans(),
)
def test_the_fast_path_answers_presigned_urls_as_the_general_path(
    method: str, path: str, query: str, expires: int, key: tuple[str, str], region: str, skew: timedelta,
    mutations: list[Mutation], resign: bool,
) -> None:
    view = presigned(method, path, query, {}, access_key=key[0], secret=key[1], region=region, expires=expires)
    for mutation in mutations:
        view = mutation(view)
    if resign:
        view = resigned(view, key[1])
    now = NOW + skew
    expected = general(view, now)
    fast = presigned_fast(view, SECRETS.get, now, SKEW)
    assert fast is None or fast == expected
    assert outcome(lambda: authenticate(view, SECRETS.get, now=now, max_skew=SKEW)) == expected
    memo = VerifiedSignatures()
    for _ in range(2):
        assert outcome(lambda: authenticate(view, SECRETS.get, now=now, max_skew=SKEW, verified=memo)) == expected


@settings(max_examples=200, deadline=None)
@given(
    method=st.sampled_from(["GET", "HEAD"]),
    path=st.sampled_from(["/bucket/object", "/bucket/dir/part-00000.parquet", "/bucket/a b", "/bucket/é"]),
    query=st.sampled_from(["", "versionId=abc", "response-content-type=text%2Fplain"]),
    headers=st.sampled_from([{}, {"range": "bytes=0-99"}, {"user-agent": "Mozilla/5.0 (X11)  x"}]),
    expires=st.sampled_from([60, 3600, 604800]),
    skew=st.sampled_from([timedelta(0), timedelta(seconds=59), -SKEW]),
)
def test_a_presigned_get_takes_the_fast_path(method: str, path: str, query: str, headers: dict[str, str],
                                             expires: int, skew: timedelta) -> None:
    view = presigned(method, path, query, headers, access_key="AKIAFAST", secret="fast-secret/+=",
                     region="us-east-1", expires=expires)
    fast = presigned_fast(view, SECRETS.get, NOW + skew, SKEW)
    assert fast is not None and fast == general(view, NOW + skew)
    assert fast.access_key == "AKIAFAST" and fast.valid_until == NOW + timedelta(seconds=expires)


def test_a_long_made_up_parameter_is_checked_but_not_remembered() -> None:
    def with_long(letter: str) -> RequestView:
        view = presigned("GET", "/bucket/object", "", {}, access_key="AKIAFAST", secret="fast-secret/+=",
                         region="us-east-1", expires=60)
        return resigned(_query("x=" + letter * 5000)(view), "fast-secret/+=")

    canonical_query(with_long("a").query_string)  # its short parameters remembered (by the pure-Python twin)
    before = (_decode.cache_info().currsize, _encode.cache_info().currsize)
    view = with_long("b")
    assert canonical_query(view.query_string) is not None
    assert presigned_fast(view, SECRETS.get, NOW, SKEW) == general(view, NOW)
    # Only its new signature (64 characters) was remembered, decoded; not the 5,000 b's.
    assert (_decode.cache_info().currsize, _encode.cache_info().currsize) == (before[0] + 1, before[1])
