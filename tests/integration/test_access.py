"""Authentication and authorization as real clients exercise them, valid and tampered."""

from __future__ import annotations


import httpx
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from tests.support import ADMIN, READER, TEAM, client, wait_expired

pytestmark = pytest.mark.usefixtures("clean_origin")


def code(exc: pytest.ExceptionInfo[ClientError]) -> str:
    return exc.value.response["Error"]["Code"]


@pytest.fixture
def shared(s3):
    s3.create_bucket(Bucket="shared")
    s3.create_bucket(Bucket="public")
    s3.put_object(Bucket="shared", Key="team/doc.txt", Body=b"team data")
    s3.put_object(Bucket="shared", Key="secret/plan.txt", Body=b"top secret")
    s3.put_object(Bucket="public", Key="open.txt", Body=b"for everyone")
    return s3


def test_unknown_access_key(gateway, shared):
    bad = client(gateway.endpoint, ("AKIANOBODY000000000", "whatever"))
    with pytest.raises(ClientError) as exc:
        bad.get_object(Bucket="shared", Key="team/doc.txt")
    assert code(exc) == "InvalidAccessKeyId"


def test_wrong_secret(gateway, shared):
    bad = client(gateway.endpoint, (ADMIN[0], "wrong-secret"))
    with pytest.raises(ClientError) as exc:
        bad.list_objects_v2(Bucket="shared")
    assert code(exc) == "SignatureDoesNotMatch"


def test_reader_can_read_not_write(gateway, shared):
    reader = client(gateway.endpoint, READER)
    assert reader.get_object(Bucket="shared", Key="secret/plan.txt")["Body"].read() == b"top secret"
    with pytest.raises(ClientError) as exc:
        reader.put_object(Bucket="shared", Key="team/new", Body=b"x")
    assert code(exc) == "AccessDenied"
    with pytest.raises(ClientError) as exc:
        reader.delete_object(Bucket="shared", Key="team/doc.txt")
    assert code(exc) == "AccessDenied"
    with pytest.raises(ClientError) as exc:
        reader.list_objects_v2(Bucket="other")
    assert code(exc) == "AccessDenied"


def test_prefix_grant(gateway, shared):
    team = client(gateway.endpoint, TEAM)
    assert team.get_object(Bucket="shared", Key="team/doc.txt")["Body"].read() == b"team data"
    team.put_object(Bucket="shared", Key="team/new.txt", Body=b"new")
    for call in (
        lambda: team.get_object(Bucket="shared", Key="secret/plan.txt"),
        lambda: team.head_object(Bucket="shared", Key="secret/plan.txt"),
        lambda: team.get_object(Bucket="shared", Key="secret/plan.txt", Range="bytes=0-3"),
        lambda: team.put_object(Bucket="shared", Key="secret/x", Body=b"x"),
        lambda: team.list_objects_v2(Bucket="shared", Prefix="secret/"),
        lambda: team.copy_object(Bucket="shared", Key="team/stolen", CopySource="shared/secret/plan.txt"),
        lambda: team.delete_bucket(Bucket="shared"),
    ):
        with pytest.raises(ClientError) as exc:
            call()
        assert code(exc) in ("AccessDenied", "403")  # a HEAD answer has no body, only the status
    listed = team.list_objects_v2(Bucket="shared", Prefix="team/")
    assert [o["Key"] for o in listed["Contents"]] == ["team/doc.txt", "team/new.txt"]


def test_a_listing_wider_than_a_grant_shows_only_what_the_grant_covers(gateway, shared):
    shared.put_object(Bucket="shared", Key="root.txt", Body=b"at the root")
    shared.put_object(Bucket="shared", Key="team/sub/deep.txt", Body=b"deep")
    team = client(gateway.endpoint, TEAM)  # may read shared/team/ only
    rolled = team.list_objects_v2(Bucket="shared", Delimiter="/")
    assert [p["Prefix"] for p in rolled["CommonPrefixes"]] == ["team/"] and "Contents" not in rolled
    assert rolled["KeyCount"] == 1 and not rolled["IsTruncated"]
    everything = team.list_objects_v2(Bucket="shared")
    assert [o["Key"] for o in everything["Contents"]] == ["team/doc.txt", "team/sub/deep.txt"]
    assert everything.get("Prefix", "") == ""
    assert [o["Key"] for o in team.list_objects(Bucket="shared", Prefix="te")["Contents"]] == \
        ["team/doc.txt", "team/sub/deep.txt"]
    with pytest.raises(ClientError) as exc:
        team.list_objects_v2(Bucket="shared", Prefix="secret/")
    assert code(exc) == "AccessDenied"


def test_several_grants_inside_a_listing(start_gateway, clean_origin):
    from gateway.config import AuthSettings, Grant, User

    two = ("AKIATWO000000000001", "two-secret-0000000000000000000000000001")
    gateway = start_gateway(auth=AuthSettings(users=(
        User(*ADMIN, grants=(), admin=True),
        User(*two, grants=(Grant("lake", "a/x/", "read"), Grant("lake", "a/y/", "read"), Grant("lake", "b/", "read"))),
    )))
    admin = client(gateway.endpoint)
    admin.create_bucket(Bucket="lake")
    for key in ("a/x/1", "a/z/hidden", "b/2", "c/3"):
        admin.put_object(Bucket="lake", Key=key, Body=b"v")
    user = client(gateway.endpoint, two)
    top = user.list_objects_v2(Bucket="lake", Delimiter="/")
    assert [p["Prefix"] for p in top["CommonPrefixes"]] == ["a/", "b/"]
    under_a = user.list_objects_v2(Bucket="lake", Prefix="a/", Delimiter="/")
    assert [p["Prefix"] for p in under_a["CommonPrefixes"]] == ["a/x/"]  # nothing lies under a/y/
    first = user.list_objects_v2(Bucket="lake", Delimiter="/", MaxKeys=1)
    assert [p["Prefix"] for p in first["CommonPrefixes"]] == ["a/"] and first["IsTruncated"]
    rest = user.list_objects_v2(Bucket="lake", Delimiter="/", ContinuationToken=first["NextContinuationToken"])
    assert [p["Prefix"] for p in rest["CommonPrefixes"]] == ["b/"] and not rest["IsTruncated"]
    with pytest.raises(ClientError) as exc:  # two grants under a/ and no delimiter: not put together
        user.list_objects_v2(Bucket="lake", Prefix="a/")
    assert code(exc) == "AccessDenied"


def test_delete_objects_authorises_each_key(gateway, shared):
    team = client(gateway.endpoint, TEAM)
    result = team.delete_objects(Bucket="shared", Delete={"Objects": [{"Key": "team/doc.txt"}, {"Key": "secret/plan.txt"}]})
    assert [d["Key"] for d in result["Deleted"]] == ["team/doc.txt"]
    assert [(e["Key"], e["Code"]) for e in result["Errors"]] == [("secret/plan.txt", "AccessDenied")]
    assert shared.get_object(Bucket="shared", Key="secret/plan.txt")["Body"].read() == b"top secret"


def test_anonymous_only_where_configured(gateway, shared):
    assert httpx.get(f"{gateway.endpoint}/public/open.txt").content == b"for everyone"
    denied = httpx.get(f"{gateway.endpoint}/shared/team/doc.txt")
    assert denied.status_code == 403 and "<Code>AccessDenied</Code>" in denied.text
    assert httpx.put(f"{gateway.endpoint}/public/new.txt", content=b"x").status_code == 403


@pytest.mark.parametrize("signature_version", ["s3v4", "s3"])
def test_presigned_urls(gateway, shared, signature_version):
    signer = client(gateway.endpoint, ADMIN, signature_version=signature_version)
    url = signer.generate_presigned_url("get_object", Params={"Bucket": "shared", "Key": "team/doc.txt"}, ExpiresIn=60)
    assert httpx.get(url).content == b"team data"
    tampered = url.replace("team/doc.txt", "secret/plan.txt")
    response = httpx.get(tampered)
    assert response.status_code == 403 and "<Code>SignatureDoesNotMatch</Code>" in response.text


@pytest.mark.parametrize("signature_version", ["s3v4", "s3"])
def test_expired_presigned_url(gateway, shared, signature_version):
    signer = client(gateway.endpoint, ADMIN, signature_version=signature_version)
    url = signer.generate_presigned_url("get_object", Params={"Bucket": "shared", "Key": "team/doc.txt"}, ExpiresIn=1)
    wait_expired(url)
    response = httpx.get(url)
    assert response.status_code == 403 and "<Code>AccessDenied</Code>" in response.text


def test_presigned_put(gateway, shared):
    signer = client(gateway.endpoint, ADMIN)
    url = signer.generate_presigned_url("put_object", Params={"Bucket": "shared", "Key": "team/up.txt"}, ExpiresIn=60)
    assert httpx.put(url, content=b"uploaded").status_code == 200
    assert shared.get_object(Bucket="shared", Key="team/up.txt")["Body"].read() == b"uploaded"


def test_sigv2_presigned_put_cannot_become_another_operation(gateway, shared, direct):
    """`?retention` (not a SigV2 sub-resource, so not signed) appended to a presigned SigV2 PUT."""
    signer = client(gateway.endpoint, ADMIN, signature_version="s3")
    url = signer.generate_presigned_url("put_object", Params={"Bucket": "shared", "Key": "team/up.txt"}, ExpiresIn=60)
    body = b"<Retention><Mode>GOVERNANCE</Mode><RetainUntilDate>2030-01-01T00:00:00Z</RetainUntilDate></Retention>"
    for extra in ("&retention", "&legal-hold", "&%74agging"):
        response = httpx.put(url + extra, content=body)
        assert response.status_code == 403 and "not signed" in response.text, response.text
    assert "Contents" not in direct.list_objects_v2(Bucket="shared", Prefix="team/up")
    assert httpx.put(url, content=b"uploaded").status_code == 200


def test_presigned_url_does_not_widen_grants(gateway, shared):
    team = client(gateway.endpoint, TEAM)
    url = team.generate_presigned_url("get_object", Params={"Bucket": "shared", "Key": "secret/plan.txt"}, ExpiresIn=60)
    response = httpx.get(url)
    assert response.status_code == 403 and "<Code>AccessDenied</Code>" in response.text


def test_sigv2_header_auth(gateway, shared):
    old = client(gateway.endpoint, ADMIN, signature_version="s3")
    assert old.get_object(Bucket="shared", Key="team/doc.txt")["Body"].read() == b"team data"
    old.put_object(Bucket="shared", Key="team/v2.txt", Body=b"v2", Metadata={"k": "v"})
    assert old.head_object(Bucket="shared", Key="team/v2.txt")["Metadata"] == {"k": "v"}


@pytest.mark.parametrize("checksum", ["CRC32", "CRC32C", "SHA1", "SHA256", "CRC64NVME"])
def test_flexible_checksums(gateway, shared, checksum):
    s3 = client(gateway.endpoint, ADMIN)
    s3.put_object(Bucket="shared", Key="c", Body=b"checked" * 1000, ChecksumAlgorithm=checksum)
    got = s3.get_object(Bucket="shared", Key="c")["Body"].read()
    assert got == b"checked" * 1000


def test_virtual_hosted_style(gateway, shared):
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    host = "shared.s3.gateway.test"
    request = AWSRequest(method="GET", url=f"http://{host}/team/doc.txt")
    S3SigV4Auth(Credentials(*ADMIN), "s3", "us-east-1").add_auth(request)
    response = httpx.get(f"{gateway.endpoint}/team/doc.txt", headers=dict(request.headers) | {"host": host})
    assert response.status_code == 200 and response.content == b"team data"


def test_clock_skew(gateway, shared):
    from datetime import datetime, timedelta, timezone

    from gateway.signing import EMPTY_SHA256, sign_request_v4

    host = gateway.endpoint.removeprefix("http://")
    headers = {"host": host}
    headers.update(sign_request_v4(
        method="GET", path="/shared/team/doc.txt", query=[], headers=headers, payload_hash=EMPTY_SHA256,
        access_key=ADMIN[0], secret_key=ADMIN[1], region="us-east-1",
        now=datetime.now(timezone.utc) - timedelta(hours=1),
    ))
    response = httpx.get(f"{gateway.endpoint}/shared/team/doc.txt", headers=headers)
    assert response.status_code == 403 and "<Code>RequestTimeTooSkewed</Code>" in response.text


def test_region_in_scope_is_accepted(gateway, shared):
    import boto3

    other = boto3.client("s3", endpoint_url=gateway.endpoint, region_name="eu-west-1",
                         aws_access_key_id=ADMIN[0], aws_secret_access_key=ADMIN[1],
                         config=Config(s3={"addressing_style": "path"}))
    assert other.get_object(Bucket="shared", Key="team/doc.txt")["Body"].read() == b"team data"
