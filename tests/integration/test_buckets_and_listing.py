"""Bucket operations and listings: the same answers as S3, with exactly S3's fields."""

from __future__ import annotations

import httpx
import pytest
from botocore.exceptions import ClientError

from tests.support import READER, client

pytestmark = pytest.mark.usefixtures("clean_origin")


def code(exc: pytest.ExceptionInfo[ClientError]) -> str:
    return exc.value.response["Error"]["Code"]


def test_bucket_lifecycle(s3, direct):
    s3.create_bucket(Bucket="alpha")
    s3.create_bucket(Bucket="beta")
    names = [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert names == [b["Name"] for b in direct.list_buckets()["Buckets"]] == ["alpha", "beta"]
    s3.head_bucket(Bucket="alpha")
    assert s3.get_bucket_location(Bucket="alpha")["LocationConstraint"] is None
    s3.delete_bucket(Bucket="beta")
    with pytest.raises(ClientError) as exc:
        s3.head_bucket(Bucket="beta")
    assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_invalid_bucket_name_is_refused_before_the_origin(s3, direct):
    with pytest.raises(ClientError) as exc:
        s3.create_bucket(Bucket="Bad_Name")
    assert code(exc) == "InvalidBucketName"
    assert direct.list_buckets()["Buckets"] == []


def test_delete_non_empty_bucket(s3):
    s3.create_bucket(Bucket="bkt")
    s3.put_object(Bucket="bkt", Key="k", Body=b"x")
    with pytest.raises(ClientError) as exc:
        s3.delete_bucket(Bucket="bkt")
    assert code(exc) == "BucketNotEmpty"


def fill(s3, keys):
    s3.create_bucket(Bucket="bkt")
    for key in keys:
        s3.put_object(Bucket="bkt", Key=key, Body=b"x")


KEYS = ["a/1", "a/2", "a/b/3", "c", "d/4", "e e/5", "z&<>"]


def test_list_v2_matches_origin(s3, direct):
    fill(s3, KEYS)
    for kwargs in ({}, {"Prefix": "a/"}, {"Delimiter": "/"}, {"Prefix": "a/", "Delimiter": "/"},
                   {"StartAfter": "a/2"}, {"MaxKeys": 2}, {"FetchOwner": True}):
        got, want = s3.list_objects_v2(Bucket="bkt", **kwargs), direct.list_objects_v2(Bucket="bkt", **kwargs)
        for field in ("Contents", "CommonPrefixes", "IsTruncated", "KeyCount", "Prefix", "Delimiter", "MaxKeys", "StartAfter"):
            g, w = got.get(field), want.get(field)
            if field == "Contents" and g:
                g = [{k: v for k, v in o.items() if k != "Owner" or kwargs.get("FetchOwner")} for o in g]
                w = [{k: v for k, v in o.items() if k != "Owner" or kwargs.get("FetchOwner")} for o in w]
            assert g == w, (kwargs, field)


def test_list_v2_pagination_echoes_tokens(s3):
    fill(s3, KEYS)
    seen, token = [], None
    while True:
        kwargs = {"MaxKeys": 3} | ({"ContinuationToken": token} if token else {})
        page = s3.list_objects_v2(Bucket="bkt", **kwargs)
        seen += [o["Key"] for o in page.get("Contents", [])]
        if token:
            assert page["ContinuationToken"] == token
        else:
            assert "ContinuationToken" not in page
        if not page["IsTruncated"]:
            assert "NextContinuationToken" not in page
            break
        token = page["NextContinuationToken"]
    assert seen == sorted(KEYS)


def test_list_v2_owner_only_with_fetch_owner(s3):
    fill(s3, ["k"])
    assert "Owner" not in s3.list_objects_v2(Bucket="bkt")["Contents"][0]
    assert "Owner" in s3.list_objects_v2(Bucket="bkt", FetchOwner=True)["Contents"][0]


def test_list_v1_marker(s3):
    fill(s3, KEYS)
    page = s3.list_objects(Bucket="bkt", MaxKeys=2)
    assert page["IsTruncated"] and page["Marker"] == ""
    assert "NextMarker" not in page  # S3 sends NextMarker only when a delimiter was given
    marker = page["Contents"][-1]["Key"]
    rest = s3.list_objects(Bucket="bkt", Marker=marker)
    assert rest["Marker"] == marker
    assert [o["Key"] for o in page["Contents"] + rest["Contents"]] == sorted(KEYS)


def test_encoding_type_url_applies_to_keys_and_prefixes(gateway, s3):
    fill(s3, ["sp ace/x", "amp&/y", "plain"])
    raw = httpx.get(f"{gateway.endpoint}/bkt?list-type=2&delimiter=%2F&encoding-type=url",
                    headers=_signed_headers(gateway.endpoint, "/bkt", "list-type=2&delimiter=%2F&encoding-type=url"))
    body = raw.text
    assert "<EncodingType>url</EncodingType>" in body
    # S3's form of URL encoding: space as '+', '/' kept.
    assert "<Prefix>sp+ace/</Prefix>" in body
    assert "<Prefix>amp%26/</Prefix>" in body
    assert "<Delimiter>/</Delimiter>" in body
    # boto3 asks for url encoding by default and decodes it back.
    page = s3.list_objects_v2(Bucket="bkt", Delimiter="/")
    assert [p["Prefix"] for p in page["CommonPrefixes"]] == ["amp&/", "sp ace/"]


def test_v1_echoes_its_prefix_as_sent_where_v2_encodes_it(gateway, s3):
    """With encoding-type=url, ListObjects v1 encodes Marker, Delimiter, keys and common
    prefixes but echoes Prefix as sent; v2 encodes Prefix, StartAfter and Delimiter too
    (ceph/s3-tests test_bucket_list_prefix_unreadable; botocore decodes exactly those)."""
    fill(s3, ["a b+/x y", "a b+/z", "quux"])
    unreadable = s3.list_objects(Bucket="bkt", Prefix="\n")
    assert unreadable["Prefix"] == "\n" and "Contents" not in unreadable
    page = s3.list_objects(Bucket="bkt", Prefix="a b+", Delimiter="+", Marker="a b")
    assert (page["Prefix"], page["Delimiter"], page["Marker"]) == ("a b+", "+", "a b")
    assert [p["Prefix"] for p in page.get("CommonPrefixes", [])] == []
    assert [o["Key"] for o in page["Contents"]] == ["a b+/x y", "a b+/z"]
    # moto leaves a v1 page's CommonPrefixes unencoded, so no '+' under a common prefix here.
    for key in ("a b&/x y", "a b&/d e/1"):
        s3.put_object(Bucket="bkt", Key=key, Body=b"x")
    query = "delimiter=%2F&encoding-type=url&marker=a%20b&prefix=a%20b%26%2F"
    v1 = httpx.get(f"{gateway.endpoint}/bkt?{query}", headers=_signed_headers(gateway.endpoint, "/bkt", query)).text
    assert ("<Prefix>a b&amp;/</Prefix><Marker>a+b</Marker><MaxKeys>1000</MaxKeys><Delimiter>/</Delimiter>"
            "<EncodingType>url</EncodingType>") in v1
    assert "<Key>a+b%26/x+y</Key>" in v1 and "<CommonPrefixes><Prefix>a+b%26/d+e/</Prefix></CommonPrefixes>" in v1
    query = "delimiter=%2F&encoding-type=url&list-type=2&prefix=a%20b%26%2F&start-after=a%20b"
    v2 = httpx.get(f"{gateway.endpoint}/bkt?{query}", headers=_signed_headers(gateway.endpoint, "/bkt", query)).text
    assert "<Prefix>a+b%26/</Prefix><StartAfter>a+b</StartAfter>" in v2
    assert "<Key>a+b%26/x+y</Key>" in v2 and "<CommonPrefixes><Prefix>a+b%26/d+e/</Prefix></CommonPrefixes>" in v2


def test_bad_max_keys_is_invalid_argument(s3):
    fill(s3, ["k"])
    with pytest.raises(ClientError) as exc:
        s3.list_objects_v2(Bucket="bkt", MaxKeys=-1)
    assert code(exc) == "InvalidArgument"


def test_list_missing_bucket(s3):
    with pytest.raises(ClientError) as exc:
        s3.list_objects_v2(Bucket="nobucket")
    assert code(exc) == "NoSuchBucket"


def test_reader_sees_only_granted_buckets(gateway, s3):
    s3.create_bucket(Bucket="shared")
    s3.create_bucket(Bucket="private")
    reader = client(gateway.endpoint, READER)
    assert [b["Name"] for b in reader.list_buckets()["Buckets"]] == ["shared"]


def _signed_headers(endpoint: str, path: str, query: str) -> dict[str, str]:
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    from tests.support import ADMIN

    request = AWSRequest(method="GET", url=f"{endpoint}{path}?{query}")
    S3SigV4Auth(Credentials(*ADMIN), "s3", "us-east-1").add_auth(request)
    return dict(request.headers)
