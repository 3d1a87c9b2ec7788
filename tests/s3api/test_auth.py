"""s3api.auth: requests signed by botocore's own signers verify; tampered ones fail with S3's codes."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from urllib.parse import quote, urlsplit

import botocore.auth
import pytest
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.errors import S3Error
from gateway.s3api.auth import ChunkSigner, RequestView, authenticate
from gateway.signing import EMPTY_SHA256, derive_signing_key

AK, SK = "AKIAGATEWAYTEST", "s3cr3t/with+special=chars"
OTHER_AK, OTHER_SK = "AKIAOTHER", "other-secret"
SECRETS = {AK: SK, OTHER_AK: OTHER_SK}
NOW = datetime(2024, 3, 9, 12, 0, 0, tzinfo=timezone.utc)
HOST = "s3.local:9000"
ODD_KEY = "dir/a key+plus%pct=eq~tilde é€😀!*'()"


def secret_for(access_key: str) -> str | None:
    return SECRETS.get(access_key)


@pytest.fixture(autouse=True)
def _frozen_botocore_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: NOW.replace(tzinfo=None))


def url_for(path: str, query: str = "", host: str = HOST) -> str:
    return f"http://{host}{quote(path, safe='/~')}" + (f"?{query}" if query else "")


def view_of(req: AWSRequest) -> RequestView:
    """What the ASGI server hands us for the request botocore would send."""
    prepared = req.prepare()
    parts = urlsplit(prepared.url)
    headers = []
    for name, value in prepared.headers.items():
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        headers.append((name.lower(), value))
    if not any(n == "host" for n, _ in headers):
        headers.append(("host", parts.netloc))
    return RequestView(prepared.method, parts.path, parts.query, tuple(headers))


def with_header(view: RequestView, name: str, value: str | None) -> RequestView:
    headers = [(n, v) for n, v in view.headers if n != name]
    if value is not None:
        headers.append((name, value))
    return replace(view, headers=tuple(headers))


def expect(code: str, view: RequestView, *, now: datetime = NOW, **kw: object) -> S3Error:
    with pytest.raises(S3Error) as info:
        authenticate(view, secret_for, now=now, **kw)  # type: ignore[arg-type]
    assert info.value.code == code, info.value
    return info.value


# --- SigV4 Authorization header ----------------------------------------------------------------------


def sigv4(
    method: str = "GET",
    path: str = "/bucket/" + ODD_KEY,
    query: str = "",
    *,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    secret: str = SK,
    access_key: str = AK,
    region: str = "eu-central-1",
    payload: str | None = None,
    host: str = HOST,
) -> RequestView:
    req = AWSRequest(method=method, url=url_for(path, query, host), data=body, headers=dict(headers or {}))
    auth_cls = botocore.auth.S3SigV4Auth
    if payload is not None:
        # What SDKs that stream (Java, Go, the CRT) put in x-amz-content-sha256.
        auth_cls = type("StreamingAuth", (botocore.auth.S3SigV4Auth,), {"payload": lambda self, request: payload})
    auth_cls(Credentials(access_key, secret), "s3", region).add_auth(req)
    return view_of(req)


def test_sigv4_header_valid_with_odd_key_and_query() -> None:
    # Built the way botocore's S3 serializer builds it: percent-encoded, never "+" for a space.
    pairs = {"versionId": "a+b=c/d e%", "response-content-type": "text/plain; x=ü", "uploads": ""}
    view = sigv4(query="&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in pairs.items()))
    identity = authenticate(view, secret_for, now=NOW)
    assert identity.access_key == AK
    assert identity.payload.mode == "sha256"
    assert identity.payload.expected_sha256 == EMPTY_SHA256


def test_sigv4_header_put_with_body_and_metadata() -> None:
    body = b"some body"
    view = sigv4("PUT", body=body, headers={"Content-Type": "text/plain", "x-amz-meta-Spaced": "  a   b  ", "Content-MD5": "x"})
    identity = authenticate(view, secret_for, now=NOW)
    assert identity.payload.expected_sha256 == hashlib.sha256(body).hexdigest()


def test_sigv4_virtual_hosted_style_any_region() -> None:
    view = sigv4(path="/" + ODD_KEY, host="bucket.s3.local:9000", region="mars-north-7")
    assert authenticate(view, secret_for, now=NOW).access_key == AK


def test_sigv4_path_signed_verbatim_is_accepted() -> None:
    # Clients that sign the wire path (an encoded slash, an unencoded "!") instead of the once-encoded form.
    for raw in ("/bucket/a%2Fb", "/bucket/a!b$c"):
        req = AWSRequest(method="GET", url=f"http://{HOST}{raw}")
        botocore.auth.S3SigV4Auth(Credentials(AK, SK), "s3", "us-east-1").add_auth(req)
        view = view_of(req)
        assert view.raw_path == raw
        assert authenticate(view, secret_for, now=NOW).access_key == AK


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda v: with_header(v, "x-amz-meta-note", "changed"), id="header"),
        pytest.param(lambda v: with_header(v, "content-type", "text/evil"), id="content-type"),
        pytest.param(lambda v: replace(v, raw_path=v.raw_path + "x"), id="path"),
        pytest.param(lambda v: replace(v, raw_path=v.raw_path.replace("%20", "+")), id="path-encoding"),
        pytest.param(lambda v: replace(v, query_string=v.query_string + "&acl"), id="query-added"),
        pytest.param(lambda v: replace(v, query_string=v.query_string.replace("v1", "v2")), id="query-changed"),
        pytest.param(lambda v: replace(v, method="DELETE"), id="method"),
        pytest.param(lambda v: with_header(v, "host", "evil.example"), id="host"),
    ],
)
def test_sigv4_header_tampered(tamper) -> None:  # type: ignore[no-untyped-def]
    view = sigv4("PUT", query="versionId=v1", headers={"x-amz-meta-note": "orig", "Content-Type": "text/plain"})
    authenticate(view, secret_for, now=NOW)
    err = expect("SignatureDoesNotMatch", tamper(view))
    assert err.status == 403


def test_sigv4_header_wrong_secret_and_unknown_key() -> None:
    expect("SignatureDoesNotMatch", sigv4(secret="not-the-secret"))
    err = expect("InvalidAccessKeyId", sigv4(access_key="AKIANOBODY"))
    assert err.status == 403


@pytest.mark.parametrize("delta", [timedelta(minutes=16), -timedelta(minutes=16), timedelta(days=2)])
def test_sigv4_header_skewed_clock(delta: timedelta) -> None:
    err = expect("RequestTimeTooSkewed", sigv4(), now=NOW + delta)
    assert err.status == 403
    # Within the window it verifies.
    authenticate(sigv4(), secret_for, now=NOW + delta / 2 if abs(delta) < timedelta(minutes=30) else NOW)


def test_sigv4_header_custom_skew() -> None:
    expect("RequestTimeTooSkewed", sigv4(), now=NOW + timedelta(minutes=2), max_skew=timedelta(minutes=1))


def test_sigv4_unsigned_amz_header_is_refused() -> None:
    err = expect("AccessDenied", with_header(sigv4(), "x-amz-acl", "public-read-write"))
    assert err.extra["HeadersNotSigned"] == "x-amz-acl"


def test_sigv4_missing_or_bad_content_sha256() -> None:
    view = sigv4()
    err = expect("InvalidRequest", with_header(view, "x-amz-content-sha256", None))
    assert "x-amz-content-sha256" in err.message
    expect("InvalidArgument", with_header(view, "x-amz-content-sha256", "nope"))


@pytest.mark.parametrize(
    ("payload", "mode"),
    [
        ("UNSIGNED-PAYLOAD", "unsigned"),
        ("STREAMING-AWS4-HMAC-SHA256-PAYLOAD", "streaming-signed"),
        ("STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER", "streaming-signed-trailer"),
        ("STREAMING-UNSIGNED-PAYLOAD-TRAILER", "streaming-unsigned-trailer"),
    ],
)
def test_sigv4_payload_modes(payload: str, mode: str) -> None:
    view = sigv4("PUT", payload=payload, region="us-west-2")
    identity = authenticate(view, secret_for, now=NOW)
    assert identity.payload.mode == mode
    signer = identity.payload.chunk_signer
    if mode.startswith("streaming-signed"):
        assert signer is not None
        assert signer.seed_signature == view.header("authorization").rsplit("Signature=", 1)[1]  # type: ignore[union-attr]
        assert signer.signing_key == derive_signing_key(SK, "20240309", "us-west-2", "s3")
        assert signer.amz_date == "20240309T120000Z"
        assert signer.scope == "20240309/us-west-2/s3/aws4_request"
    else:
        assert signer is None


def test_chunk_signer_repr_hides_the_key() -> None:
    signer = ChunkSigner(b"\x01secret-key-bytes", "20240309T120000Z", "scope", "seed")
    assert "secret" not in repr(signer) and "signing_key" not in repr(signer)


def test_aws_published_streaming_seed_request_verifies() -> None:
    # The seed request of AWS's "PUT Object" chunked-upload example.
    view = RequestView(
        "PUT",
        "/examplebucket/chunkObject.txt",
        "",
        (
            ("host", "s3.amazonaws.com"),
            ("x-amz-date", "20130524T000000Z"),
            ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
            (
                "authorization",
                "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
                "SignedHeaders=content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;"
                "x-amz-decoded-content-length;x-amz-storage-class,"
                "Signature=4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9",
            ),
            ("x-amz-content-sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"),
            ("content-encoding", "aws-chunked"),
            ("x-amz-decoded-content-length", "66560"),
            ("content-length", "66824"),
        ),
    )
    secrets = {"AKIAIOSFODNN7EXAMPLE": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}
    identity = authenticate(view, secrets.get, now=datetime(2013, 5, 24, 0, 5, tzinfo=timezone.utc))
    assert identity.payload.mode == "streaming-signed"
    assert identity.payload.chunk_signer is not None
    assert identity.payload.chunk_signer.seed_signature == "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"


def _replace_auth(view: RequestView, old: str, new: str) -> RequestView:
    value = view.header("authorization")
    assert value is not None and old in value
    return with_header(view, "authorization", value.replace(old, new))


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (", Signature=", ", Sig="),
        ("Credential=", "Cred="),
        ("/s3/", "/ec2/"),
        ("/aws4_request", "/aws5_request"),
        ("/20240309/", "/20240308/"),
        ("/20240309/", "/2024030x/"),
        ("SignedHeaders=", "SignedHeaders=;"),
        ("host;", ""),
        ("Signature=", "Signature=, Extra="),
    ],
)
def test_sigv4_malformed_authorization(old: str, new: str) -> None:
    err = expect("AuthorizationHeaderMalformed", _replace_auth(sigv4(), old, new))
    assert err.status == 400


def test_sigv4_bad_signature_text_is_a_mismatch() -> None:
    view = sigv4()
    value = view.header("authorization") or ""
    expect("SignatureDoesNotMatch", with_header(view, "authorization", value[:-64] + "zz" * 32))
    expect("SignatureDoesNotMatch", with_header(view, "authorization", value[:-1]))
    expect("SignatureDoesNotMatch", with_header(view, "authorization", value[:-64] + "é" * 64))


def test_sigv4_missing_or_bad_date() -> None:
    view = sigv4()
    expect("AccessDenied", with_header(view, "x-amz-date", None))
    expect("AccessDenied", with_header(view, "x-amz-date", "yesterday"))
    # The Date header may stand in for x-amz-date when it carries the same instant.
    moved = with_header(with_header(view, "x-amz-date", None), "date", format_datetime(NOW, usegmt=True))
    expect("SignatureDoesNotMatch", moved)  # x-amz-date was signed, so the canonical headers differ


@pytest.mark.parametrize("value", ["AWS4-HMAC-SHA512 Credential=x", "Bearer token", "", "AWS4-ECDSA-P256-SHA256 x"])
def test_unsupported_authorization_type(value: str) -> None:
    expect("InvalidArgument", with_header(sigv4(), "authorization", value))


def test_header_and_query_auth_together() -> None:
    view = sigv4()
    expect("InvalidArgument", replace(view, query_string="X-Amz-Signature=abc"))
    expect("InvalidArgument", replace(view, query_string="AWSAccessKeyId=x&Signature=y&Expires=1"))
    doubled = replace(view, headers=view.headers + (("authorization", "AWS a:b"),))
    expect("InvalidArgument", doubled)


# --- SigV4 presigned ----------------------------------------------------------------------------------


def presign_v4(
    method: str = "GET", path: str = "/bucket/" + ODD_KEY, query: str = "", *, expires: int = 3600,
    secret: str = SK, access_key: str = AK, headers: dict[str, str] | None = None,
) -> RequestView:
    req = AWSRequest(method=method, url=url_for(path, query), headers=dict(headers or {}))
    botocore.auth.S3SigV4QueryAuth(Credentials(access_key, secret), "s3", "ap-south-2", expires=expires).add_auth(req)
    return view_of(req)


def test_presigned_v4_valid() -> None:
    view = presign_v4(query="response-content-disposition=attachment%3B%20filename%3D%22a%20b.txt%22&versionId=x%2By")
    identity = authenticate(view, secret_for, now=NOW + timedelta(minutes=59))
    assert identity.access_key == AK
    assert identity.payload.mode == "unsigned"


def test_presigned_v4_put_with_signed_header() -> None:
    view = presign_v4("PUT", headers={"Content-Type": "image/png"})
    assert authenticate(view, secret_for, now=NOW).access_key == AK
    expect("SignatureDoesNotMatch", with_header(view, "content-type", "text/html"))


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda v: replace(v, raw_path=v.raw_path + "2"), id="path"),
        pytest.param(lambda v: replace(v, query_string=v.query_string + "&extra=1"), id="query-added"),
        pytest.param(lambda v: replace(v, query_string=v.query_string.replace("X-Amz-Expires=3600", "X-Amz-Expires=3601")), id="expires"),
        pytest.param(lambda v: with_header(v, "host", "other:1"), id="host"),
        pytest.param(lambda v: replace(v, method="PUT"), id="method"),
    ],
)
def test_presigned_v4_tampered(tamper) -> None:  # type: ignore[no-untyped-def]
    expect("SignatureDoesNotMatch", tamper(presign_v4()))


def test_presigned_v4_wrong_secret_and_unknown_key() -> None:
    expect("SignatureDoesNotMatch", presign_v4(secret="wrong"))
    expect("InvalidAccessKeyId", presign_v4(access_key="AKIANOBODY"))


def test_presigned_v4_expiry() -> None:
    view = presign_v4(expires=60)
    authenticate(view, secret_for, now=NOW + timedelta(seconds=60))
    err = expect("AccessDenied", view, now=NOW + timedelta(seconds=61))
    assert err.message == "Request has expired"
    err = expect("AccessDenied", view, now=NOW - timedelta(hours=1))
    assert err.message == "Request is not valid yet"


def test_presigned_v4_expires_limits() -> None:
    authenticate(presign_v4(expires=604800), secret_for, now=NOW)
    expect("AuthorizationQueryParametersError", presign_v4(expires=604801))
    view = presign_v4()
    for bad in ("abc", "-5", "9" * 5000, "١٢"):
        expect("AuthorizationQueryParametersError", replace(view, query_string=view.query_string.replace("X-Amz-Expires=3600", f"X-Amz-Expires={bad}")))


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("X-Amz-Date=", "X-Amz-Datum="),
        ("X-Amz-Algorithm=AWS4-HMAC-SHA256", "X-Amz-Algorithm=AWS4-HMAC-SHA1"),
        ("X-Amz-Credential=", "X-Amz-Credential=x&X-Amz-Credential="),
        ("%2Fs3%2F", "%2Fsqs%2F"),
        ("%2Faws4_request", "%2Fnope"),
        ("X-Amz-Date=20240309T120000Z", "X-Amz-Date=20240309"),
        ("X-Amz-Date=20240309T120000Z", "X-Amz-Date=20240310T000000Z"),
        ("X-Amz-SignedHeaders=host", "X-Amz-SignedHeaders=range"),
        ("X-Amz-SignedHeaders=host", "X-Amz-SignedHeaders="),
    ],
)
def test_presigned_v4_garbled_parameters(old: str, new: str) -> None:
    view = presign_v4()
    assert old in view.query_string
    err = expect("AuthorizationQueryParametersError", replace(view, query_string=view.query_string.replace(old, new)))
    assert err.status == 400


# --- SigV2 ------------------------------------------------------------------------------------------------


def sigv2(
    method: str = "GET", path: str = "/bucket/" + ODD_KEY, query: str = "", *, headers: dict[str, str] | None = None,
    secret: str = SK, access_key: str = AK, auth_path: str | None = None, host: str = HOST,
) -> RequestView:
    date = format_datetime(NOW, usegmt=True)
    auth = type("FixedDateV1", (botocore.auth.HmacV1Auth,), {"_get_date": lambda self: date})(Credentials(access_key, secret))
    req = AWSRequest(method=method, url=url_for(path, query, host), headers=dict(headers or {}))
    if auth_path is not None:
        req.auth_path = auth_path
    auth.add_auth(req)
    return view_of(req)


def test_sigv2_header_valid_with_subresources() -> None:
    query = "acl&versionId=v%2B1&response-content-type=text%2Fplain%3B%20x&prefix=ignored&uploadId=u1"
    view = sigv2(query=query, headers={"x-amz-meta-A": "1", "Content-Type": "a/b", "Content-MD5": "abc="})
    identity = authenticate(view, secret_for, now=NOW + timedelta(minutes=10))
    assert identity.access_key == AK
    assert identity.payload.mode == "unsigned"


def test_sigv2_virtual_hosted() -> None:
    view = sigv2(path="/" + ODD_KEY, host="bucket.s3.local:9000", auth_path=quote("/bucket/" + ODD_KEY, safe="/~"))
    assert authenticate(view, secret_for, now=NOW, bucket_from_host="bucket").access_key == AK
    expect("SignatureDoesNotMatch", view)
    expect("SignatureDoesNotMatch", view, bucket_from_host="other")


def test_sigv2_x_amz_date_replaces_date() -> None:
    # botocore keeps Date in the string to sign; S3's own rule signs an empty Date line. Both verify.
    view = sigv2(headers={"x-amz-date": format_datetime(NOW, usegmt=True)})
    assert authenticate(view, secret_for, now=NOW).access_key == AK
    no_date = with_header(view, "date", None)
    import base64
    import hmac as _hmac

    to_sign = f"GET\n\n\n\nx-amz-date:{format_datetime(NOW, usegmt=True)}\n{no_date.raw_path}"
    sig = base64.b64encode(_hmac.new(SK.encode(), to_sign.encode(), hashlib.sha1).digest()).decode()
    spec_view = with_header(no_date, "authorization", f"AWS {AK}:{sig}")
    assert authenticate(spec_view, secret_for, now=NOW).access_key == AK
    expect("RequestTimeTooSkewed", spec_view, now=NOW + timedelta(hours=1))


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda v: with_header(v, "x-amz-meta-a", "2"), id="amz-header"),
        pytest.param(lambda v: with_header(v, "content-type", "x/y"), id="content-type"),
        pytest.param(lambda v: replace(v, raw_path=v.raw_path + "x"), id="path"),
        pytest.param(lambda v: replace(v, query_string="acl&versionId=v2"), id="subresource"),
        pytest.param(lambda v: replace(v, method="HEAD"), id="method"),
    ],
)
def test_sigv2_header_tampered(tamper) -> None:  # type: ignore[no-untyped-def]
    view = sigv2(query="acl&versionId=v1", headers={"x-amz-meta-a": "1", "Content-Type": "a/b"})
    authenticate(view, secret_for, now=NOW)
    expect("SignatureDoesNotMatch", tamper(view))


def test_sigv2_header_failures() -> None:
    expect("SignatureDoesNotMatch", sigv2(secret="wrong"))
    expect("InvalidAccessKeyId", sigv2(access_key="AKIANOBODY"))
    expect("RequestTimeTooSkewed", sigv2(), now=NOW + timedelta(minutes=20))
    expect("AccessDenied", with_header(sigv2(), "date", None))
    expect("AccessDenied", with_header(sigv2(), "date", "not a date"))
    for bad in ("AWS nocolon", "AWS :sig", "AWS key:", "AWS"):
        expect("InvalidArgument", with_header(sigv2(), "authorization", bad))


def presign_v2(path: str = "/bucket/" + ODD_KEY, query: str = "", *, expires: int = 300, secret: str = SK) -> tuple[RequestView, int]:
    auth = botocore.auth.HmacV1QueryAuth(Credentials(AK, secret), expires=expires)
    auth._get_date = lambda: str(int(NOW.timestamp()) + expires)  # type: ignore[method-assign]
    req = AWSRequest(method="GET", url=url_for(path, query))
    auth.add_auth(req)
    return view_of(req), int(NOW.timestamp()) + expires


def test_presigned_v2() -> None:
    view, expiry = presign_v2(query="response-content-disposition=attachment%3B%20x&versionId=3")
    assert authenticate(view, secret_for, now=NOW).access_key == AK
    err = expect("AccessDenied", view, now=datetime.fromtimestamp(expiry + 1, timezone.utc))
    assert err.message == "Request has expired"
    expect("SignatureDoesNotMatch", replace(view, raw_path=view.raw_path + "x"))
    expect("SignatureDoesNotMatch", presign_v2(secret="wrong")[0])
    expect("AccessDenied", replace(view, query_string="AWSAccessKeyId=" + AK))
    expect("AuthorizationQueryParametersError", replace(view, query_string=view.query_string.replace(f"Expires={expiry}", "Expires=soon")))
    unknown = replace(view, query_string=view.query_string.replace(f"AWSAccessKeyId={AK}", "AWSAccessKeyId=NOBODY"))
    expect("InvalidAccessKeyId", unknown)


@pytest.mark.parametrize("appended", ["retention", "legal-hold", "select&select-type=2", "%76ersionId=3",
                                      "object-lock", "attributes", "prefix=a&retention"])
def test_sigv2_refuses_parameters_its_signature_does_not_cover(appended: str) -> None:
    """A presigned SigV2 GET cannot be turned into another operation by appending a parameter
    outside the sub-resources it signed (it would be sent on with the gateway's credentials)."""
    view, _ = presign_v2()
    assert authenticate(view, secret_for, now=NOW).access_key == AK
    err = expect("AccessDenied", replace(view, query_string=view.query_string + "&" + appended))
    assert "not signed" in err.message
    header_signed = sigv2(method="PUT")
    expect("AccessDenied", replace(header_signed, query_string=appended))


def test_sigv2_allows_unsigned_listing_parameters_and_signed_extras() -> None:
    view, _ = presign_v2(path="/bucket")
    for appended in ("prefix=a%2F", "delimiter=%2F&max-keys=5&marker=m", "list-type=2&start-after=x&x-id=ListObjectsV2"):
        assert authenticate(replace(view, query_string=view.query_string + "&" + appended), secret_for, now=NOW)
    # botocore signs select/select-type as sub-resources: such a request names them in its signature.
    assert authenticate(sigv2(method="POST", query="select&select-type=2"), secret_for, now=NOW).access_key == AK


# --- anonymous ------------------------------------------------------------------------------------------


def test_anonymous() -> None:
    view = RequestView("GET", "/bucket/key", "list-type=2", (("host", HOST),))
    identity = authenticate(view, secret_for, now=NOW)
    assert identity.access_key is None and identity.payload.mode == "unsigned"
    trailer = with_header(view, "x-amz-content-sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER")
    assert authenticate(trailer, secret_for, now=NOW).payload.mode == "streaming-unsigned-trailer"
    hexed = with_header(view, "x-amz-content-sha256", "AB" * 32)
    assert authenticate(hexed, secret_for, now=NOW).payload.expected_sha256 == "ab" * 32
    expect("InvalidRequest", with_header(view, "x-amz-content-sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"))
    expect("InvalidArgument", with_header(view, "x-amz-content-sha256", "garbage"))


# --- properties ----------------------------------------------------------------------------------------

key_text = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), min_size=1, max_size=30)
# Query names that are not authentication parameters (a generated "X-Amz-SignedHeaders" would
# make a different, refused, request of a presigned URL).
query_name = key_text.filter(lambda n: not n.lower().startswith("x-amz-") and n not in ("AWSAccessKeyId", "Signature", "Expires"))
query_pairs = st.lists(st.tuples(query_name, st.text(st.characters(exclude_categories=("Cs",)), max_size=20)), max_size=3)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=key_text, pairs=query_pairs)
def test_any_key_and_query_signed_by_botocore_verifies(key: str, pairs: list[tuple[str, str]]) -> None:
    query = "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in pairs)
    for view in (sigv4(path="/b/" + key, query=query), presign_v4(path="/b/" + key, query=query)):
        assert authenticate(view, secret_for, now=NOW).access_key == AK


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=key_text, version=st.text(st.characters(exclude_categories=("Cs",)), max_size=10))
def test_any_key_signed_by_botocore_v2_verifies(key: str, version: str) -> None:
    view = sigv2(path="/b/" + key, query="versionId=" + quote(version, safe=""))
    assert authenticate(view, secret_for, now=NOW).access_key == AK


@settings(max_examples=200, deadline=None)
@given(
    method=st.sampled_from(["GET", "PUT"]),
    raw_path=st.text(max_size=30),
    query=st.text(max_size=60),
    headers=st.lists(
        st.tuples(
            st.sampled_from(["authorization", "x-amz-date", "date", "x-amz-content-sha256", "host", "x-amz-meta-x"]),
            st.one_of(
                st.text(max_size=40),
                st.sampled_from(
                    [
                        "AWS4-HMAC-SHA256 Credential=AKIAGATEWAYTEST/20240309/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00",
                        "AWS AKIAGATEWAYTEST:abc=",
                        "20240309T120000Z",
                        "Sat, 09 Mar 2024 12:00:00 GMT",
                        "UNSIGNED-PAYLOAD",
                    ]
                ),
            ),
        ),
        max_size=5,
    ),
)
def test_garbage_never_escapes_as_another_exception(method: str, raw_path: str, query: str, headers: list[tuple[str, str]]) -> None:
    view = RequestView(method, raw_path, query, tuple(headers))
    try:
        authenticate(view, secret_for, now=NOW)
    except S3Error as exc:
        assert 400 <= exc.status < 500


@pytest.mark.parametrize("signature_version", ["s3v4", "s3"])
@pytest.mark.parametrize("style", ["path", "virtual"])
def test_boto3_generate_presigned_url(monkeypatch: pytest.MonkeyPatch, signature_version: str, style: str) -> None:
    import boto3
    from botocore.config import Config

    monkeypatch.undo()  # the real clock: HmacV1QueryAuth reads time.time() anyway
    client = boto3.client(
        "s3", endpoint_url="http://s3.local:9000", aws_access_key_id=AK, aws_secret_access_key=SK, region_name="us-east-1",
        config=Config(signature_version=signature_version, s3={"addressing_style": style}),
    )
    url = client.generate_presigned_url(
        "get_object", Params={"Bucket": "bkt", "Key": ODD_KEY, "ResponseContentDisposition": "attachment; filename=\"x y\""}, ExpiresIn=300
    )
    parts = urlsplit(url)
    view = RequestView("GET", parts.path, parts.query, (("host", parts.netloc),))
    bucket = "bkt" if style == "virtual" else None
    now = datetime.now(timezone.utc)
    assert authenticate(view, secret_for, now=now, bucket_from_host=bucket).access_key == AK
    expect("AccessDenied", view, now=now + timedelta(seconds=400), bucket_from_host=bucket)
