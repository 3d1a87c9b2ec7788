"""The XML S3 speaks, checked against botocore's own parser and serializer.

Rendered documents are read back through a real boto3 client whose HTTP layer is
replaced by the renderer, so every handler a client runs (the encoding-type=url
it adds to listings and the decoding after) is exercised.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qs, unquote_plus, urlsplit

import boto3
import botocore.session
import pytest
from botocore.awsrequest import AWSResponse
from botocore.config import Config
from botocore.exceptions import ClientError
from botocore.parsers import ResponseParserError, create_parser
from botocore.serialize import create_serializer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.errors import S3Error
from gateway.s3api import xml
from gateway.s3api.xml import (
    Bucket,
    CompletedPart,
    DeleteCondition,
    DeletedEntry,
    DeleteErrorEntry,
    DeleteRequest,
    ListBucketsResult,
    ListPage,
    ObjectEntry,
    Owner,
)

S3_MODEL = botocore.session.get_session().get_service_model("s3")
DECL = b'<?xml version="1.0" encoding="UTF-8"?>\n'
NS = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'


# --- harness: botocore as the client -----------------------------------------------------------------


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


_handler: Callable[[dict[str, list[str]]], tuple[int, bytes]] | None = None


def _send(request: Any, **_: Any) -> AWSResponse:
    assert _handler is not None
    query = parse_qs(urlsplit(request.url).query, keep_blank_values=True)
    status, body = _handler(query)
    return AWSResponse(request.url, status, {"content-type": "application/xml"}, _Raw(body))


@functools.cache
def client() -> Any:
    s3 = boto3.client(
        "s3", region_name="us-east-1", endpoint_url="http://s3.test",
        aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret",
        config=Config(retries={"total_max_attempts": 1}, s3={"addressing_style": "path"}),
    )
    s3.meta.events.register("before-send.s3", _send)
    return s3


@contextmanager
def serving(handler: Callable[[dict[str, list[str]]], tuple[int, bytes]]) -> Iterator[None]:
    global _handler
    _handler = handler
    try:
        yield
    finally:
        _handler = None


def botocore_parse(operation: str, body: bytes, status: int = 200) -> dict[str, Any]:
    """botocore's rest-xml parser alone, with no client handlers (no URL decoding)."""
    op = S3_MODEL.operation_model(operation)
    return create_parser("rest-xml").parse({"body": body, "headers": {}, "status_code": status}, op.output_shape)


def botocore_body(operation: str, params: dict[str, Any]) -> bytes:
    """The request body botocore itself would send."""
    body = create_serializer("rest-xml").serialize_to_request(params, S3_MODEL.operation_model(operation))["body"]
    return body if isinstance(body, bytes) else body.encode()


# Keys S3 can hold: any Unicode text.  XML 1.0 cannot carry C0 controls other than
# TAB, LF, CR (nor U+FFFE/U+FFFF), which only encoding-type=url can return.
any_key = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=24)
_XML_INVALID = [chr(c) for c in range(0x20) if c not in (0x9, 0xA, 0xD)] + ["\ufffe", "\uffff"]
xml_key = st.text(st.characters(exclude_categories=["Cs"], exclude_characters=_XML_INVALID), min_size=1, max_size=24)
tricky = st.sampled_from(["a b", "a+b", "100%", "&<>\"'", "한글/x", "~*", "\r\n\t", "a//b", " ", "%2F"])


def entry(key: str, **kw: Any) -> ObjectEntry:
    defaults = dict(last_modified="2009-10-12T17:50:30.000Z", etag='"fba9dede5f27731c9771645a39863328"', size=434234)
    defaults.update(kw)
    return ObjectEntry(key=key, **defaults)


# --- escaping ------------------------------------------------------------------------------------------


def test_xml_escape_writes_what_s3_writes() -> None:
    assert xml.xml_escape('a&b<c>d"e\'f') == "a&amp;b&lt;c&gt;d&quot;e'f"
    # S3 writes control characters as hex references, even those XML 1.0 forbids.
    assert xml.xml_escape("x\x1b\x08\r\n\t") == "x&#x1b;&#x8;&#xd;&#xa;&#x9;"
    assert xml.xml_escape("é한😀") == "é한😀"


@pytest.mark.parametrize(
    ("key", "encoded"),
    [("a b.txt", "a+b.txt"), ("a+b.txt", "a%2Bb.txt"), ("100%.csv", "100%25.csv"),
     ("한글/x.txt", "%ED%95%9C%EA%B8%80/x.txt"), ("run books/x", "run+books/x"), ("foo+1/", "foo%2B1/")],
)
def test_url_encoding_is_s3s(key: str, encoded: str) -> None:
    assert xml.url_encode(key) == encoded


@given(any_key)
def test_url_encoding_round_trips(key: str) -> None:
    assert unquote_plus(xml.url_encode(key)) == key


# --- errors ---------------------------------------------------------------------------------------------


def test_error_document_bytes() -> None:
    body = xml.error_document("InvalidRange", "The requested range is not satisfiable", resource=None,
                              request_id="6P8V24V3C31Z8BMM",
                              extra={"RangeRequested": "bytes=20-", "ActualObjectSize": "10"}, host_id="h/1=")
    assert body == (DECL + b"<Error><Code>InvalidRange</Code><Message>The requested range is not satisfiable"
                    b"</Message><RangeRequested>bytes=20-</RangeRequested><ActualObjectSize>10</ActualObjectSize>"
                    b"<RequestId>6P8V24V3C31Z8BMM</RequestId><HostId>h/1=</HostId></Error>")


def test_error_document_resource_and_escaping() -> None:
    body = xml.error_document("NoSuchKey", "The specified key does not exist.", resource="/b/a&b",
                              request_id="R", extra={})
    assert b"<Resource>/b/a&amp;b</Resource><RequestId>R</RequestId></Error>" in body
    assert b"xmlns" not in body
    assert b"<Resource>" not in xml.error_document("X", "m", resource="", request_id="R")


def test_botocore_reads_the_error_document() -> None:
    body = xml.error_document("InvalidRange", "The requested range is not satisfiable", resource=None,
                              request_id="REQ", extra={"RangeRequested": "bytes=20-", "ActualObjectSize": "10"})
    with serving(lambda q: (416, body)), pytest.raises(ClientError) as info:
        client().get_object(Bucket="b", Key="k", Range="bytes=20-")
    error = info.value.response["Error"]
    assert error == {"Code": "InvalidRange", "Message": "The requested range is not satisfiable",
                     "RangeRequested": "bytes=20-", "ActualObjectSize": "10"}


# --- ListBuckets ----------------------------------------------------------------------------------------


def test_list_buckets_round_trip_and_botocore() -> None:
    result = ListBucketsResult(
        owner=Owner("bcaf1ffd86f461ca5fb16fd081034f", "webfile"),
        buckets=[Bucket("quotes", "2006-02-03T16:45:09.000Z"), Bucket("a&b", "2006-02-03T16:41:58.000Z", "eu-west-1")],
    )
    body = xml.render_list_buckets(result)
    assert body.startswith(DECL + f"<ListAllMyBucketsResult {NS}><Owner><ID>bcaf1ffd86f461ca5fb16fd081034f</ID>"
                           "<DisplayName>webfile</DisplayName></Owner><Buckets><Bucket><Name>quotes</Name>".encode())
    assert xml.parse_list_buckets(body) == result
    with serving(lambda q: (200, body)):
        parsed = client().list_buckets()
    assert [b["Name"] for b in parsed["Buckets"]] == ["quotes", "a&b"]
    assert parsed["Buckets"][1]["BucketRegion"] == "eu-west-1"
    assert parsed["Owner"] == {"ID": "bcaf1ffd86f461ca5fb16fd081034f", "DisplayName": "webfile"}


def test_list_buckets_empty_and_paginated() -> None:
    result = ListBucketsResult(owner=None, buckets=[], continuation_token="tok", prefix="p")
    body = xml.render_list_buckets(result)
    assert b"<Buckets></Buckets><ContinuationToken>tok</ContinuationToken><Prefix>p</Prefix>" in body
    assert xml.parse_list_buckets(body) == result
    parsed = botocore_parse("ListBuckets", body)
    assert parsed["ContinuationToken"] == "tok" and parsed["Buckets"] == []


def test_origin_garbage_is_a_server_error() -> None:
    for parse in (xml.parse_list_buckets, xml.parse_list_objects, xml.parse_delete_result):
        with pytest.raises(S3Error) as info:
            parse(b"<oops")
        assert info.value.status == 500
        with pytest.raises(S3Error):
            parse(b"<Other/>")


# --- ListObjects v2 --------------------------------------------------------------------------------------


def v2(page: ListPage, **kw: Any) -> bytes:
    args: dict[str, Any] = dict(bucket="bucket", prefix="", delimiter=None, max_keys=1000, continuation_token=None,
                                start_after=None, fetch_owner=False, encoding_type=None)
    args.update(kw)
    return xml.render_list_objects_v2(page, **args)


def v1(page: ListPage, **kw: Any) -> bytes:
    args: dict[str, Any] = dict(bucket="bucket", prefix="", delimiter=None, max_keys=1000, marker=None,
                                encoding_type=None)
    args.update(kw)
    return xml.render_list_objects_v1(page, **args)


def test_v2_matches_s3s_document() -> None:
    # The shape of the AWS API reference's example for prefix + delimiter.
    page = ListPage(contents=[entry("sample.jpg", etag='"bf1d737a4d46a19f3bced6905cc8b902"', size=142863,
                                    last_modified="2011-02-26T01:56:20.000Z")],
                    common_prefixes=["photos/"])
    assert v2(page, bucket="example-bucket", delimiter="/") == DECL + (
        f"<ListBucketResult {NS}><Name>example-bucket</Name><Prefix></Prefix><KeyCount>2</KeyCount>"
        "<MaxKeys>1000</MaxKeys><Delimiter>/</Delimiter><IsTruncated>false</IsTruncated><Contents>"
        "<Key>sample.jpg</Key><LastModified>2011-02-26T01:56:20.000Z</LastModified>"
        "<ETag>&quot;bf1d737a4d46a19f3bced6905cc8b902&quot;</ETag><Size>142863</Size>"
        "<StorageClass>STANDARD</StorageClass></Contents><CommonPrefixes><Prefix>photos/</Prefix>"
        "</CommonPrefixes></ListBucketResult>").encode()


def test_v2_contents_order_with_checksums_and_owner() -> None:
    page = ListPage(contents=[entry("k", owner=Owner("id"), checksum_algorithm=("CRC64NVME",),
                                    checksum_type="FULL_OBJECT")])
    body = v2(page, fetch_owner=True)
    assert (b"<Contents><Key>k</Key><LastModified>2009-10-12T17:50:30.000Z</LastModified><ETag>&quot;"
            b"fba9dede5f27731c9771645a39863328&quot;</ETag><ChecksumAlgorithm>CRC64NVME</ChecksumAlgorithm>"
            b"<ChecksumType>FULL_OBJECT</ChecksumType><Size>434234</Size><Owner><ID>id</ID></Owner>"
            b"<StorageClass>STANDARD</StorageClass></Contents>") in body
    assert b"<Owner>" not in v2(page, fetch_owner=False)


def test_v2_echoes_exactly_what_s3_echoes() -> None:
    page = ListPage(contents=[entry("a")], is_truncated=True, next_continuation_token="NEXT")
    body = v2(page, continuation_token="TOKEN", start_after="s", max_keys=1)
    assert (b"<Name>bucket</Name><Prefix></Prefix><ContinuationToken>TOKEN</ContinuationToken>"
            b"<NextContinuationToken>NEXT</NextContinuationToken><KeyCount>1</KeyCount><MaxKeys>1</MaxKeys>"
            b"<IsTruncated>true</IsTruncated>") in body
    # A continuation token displaces StartAfter (recorded against AWS by localstack).
    assert b"StartAfter" not in body
    assert b"<Prefix>p</Prefix><StartAfter>s</StartAfter><NextContinuationToken>" in v2(page, prefix="p", start_after="s")
    quiet = v2(ListPage(contents=[entry("a")], next_continuation_token="NEXT"))
    for absent in (b"ContinuationToken", b"StartAfter", b"Delimiter", b"EncodingType"):
        assert absent not in quiet
    assert b"Delimiter" not in v2(page, delimiter="")  # an empty delimiter is not echoed
    assert b"<Delimiter>/</Delimiter><EncodingType>url</EncodingType><IsTruncated>" in v2(
        page, delimiter="/", encoding_type="url")


def test_v2_through_botocore() -> None:
    page = ListPage(contents=[entry("photos/a b.jpg", owner=Owner("id", "name"))], common_prefixes=["photos/x y/"],
                    is_truncated=True, next_continuation_token="1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=")

    def handler(q: dict[str, list[str]]) -> tuple[int, bytes]:
        assert q["encoding-type"] == ["url"]  # botocore always asks
        return 200, v2(page, prefix=q["prefix"][0], delimiter=q["delimiter"][0], max_keys=int(q["max-keys"][0]),
                       start_after=q["start-after"][0], fetch_owner=q["fetch-owner"] == ["true"],
                       encoding_type=q["encoding-type"][0])

    with serving(handler):
        got = client().list_objects_v2(Bucket="bucket", Prefix="photos/", Delimiter="/", MaxKeys=2,
                                       StartAfter="photos/a", FetchOwner=True)
    assert got["Name"] == "bucket" and got["Prefix"] == "photos/" and got["Delimiter"] == "/"
    assert got["StartAfter"] == "photos/a" and got["MaxKeys"] == 2 and got["KeyCount"] == 2
    assert got["IsTruncated"] is True and got["NextContinuationToken"] == page.next_continuation_token
    assert got["EncodingType"] == "url"
    (item,) = got["Contents"]
    assert item["Key"] == "photos/a b.jpg" and item["Size"] == 434234 and item["StorageClass"] == "STANDARD"
    assert item["ETag"] == '"fba9dede5f27731c9771645a39863328"' and item["Owner"] == {"ID": "id", "DisplayName": "name"}
    assert item["LastModified"].isoformat() == "2009-10-12T17:50:30+00:00"
    assert got["CommonPrefixes"] == [{"Prefix": "photos/x y/"}]


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(any_key, tricky), max_size=5), st.lists(st.one_of(any_key, tricky), max_size=3),
       st.one_of(any_key, tricky), st.booleans())
def test_v2_keys_survive_a_real_client(keys: list[str], prefixes: list[str], prefix: str, truncated: bool) -> None:
    page = ListPage(contents=[entry(k) for k in keys], common_prefixes=prefixes, is_truncated=truncated,
                    next_continuation_token="t" if truncated else None)

    def handler(q: dict[str, list[str]]) -> tuple[int, bytes]:
        return 200, v2(page, prefix=q["prefix"][0], delimiter=q["delimiter"][0],
                       start_after=q["start-after"][0], encoding_type=q["encoding-type"][0])

    with serving(handler):
        got = client().list_objects_v2(Bucket="b", Prefix=prefix, Delimiter=prefix, StartAfter=prefix)
    assert [c["Key"] for c in got.get("Contents", [])] == keys
    assert [c["Prefix"] for c in got.get("CommonPrefixes", [])] == prefixes
    assert (got["Prefix"], got["Delimiter"], got["StartAfter"]) == (prefix, prefix, prefix)
    assert got["KeyCount"] == len(keys) + len(prefixes) and got["IsTruncated"] is truncated


@given(st.lists(xml_key, max_size=5), st.lists(xml_key, max_size=3), xml_key)
def test_v2_without_url_encoding_parses_to_the_same_keys(keys: list[str], prefixes: list[str], prefix: str) -> None:
    body = v2(ListPage(contents=[entry(k) for k in keys], common_prefixes=prefixes), prefix=prefix, delimiter=prefix)
    got = botocore_parse("ListObjectsV2", body)
    assert [c["Key"] for c in got.get("Contents", [])] == keys
    assert [c["Prefix"] for c in got.get("CommonPrefixes", [])] == prefixes
    assert got["Prefix"] == prefix and got["Delimiter"] == prefix


def test_keys_xml_cannot_carry_are_written_as_s3_writes_them() -> None:
    # S3 answers such a listing with a reference XML 1.0 forbids; XML parsers (and
    # botocore) refuse it, as they refuse S3's.  encoding-type=url is the way out.
    body = v2(ListPage(contents=[entry("a\x1bb")]))
    assert b"<Key>a&#x1b;b</Key>" in body
    with pytest.raises(ResponseParserError):
        botocore_parse("ListObjectsV2", body)
    assert b"<Key>a%1Bb</Key>" in v2(ListPage(contents=[entry("a\x1bb")]), encoding_type="url")


# --- ListObjects v1 ---------------------------------------------------------------------------------------


def test_v1_document() -> None:
    page = ListPage(contents=[entry("a&b", owner=Owner("id", "dn"))])
    assert v1(page, prefix="p") == DECL + (
        f"<ListBucketResult {NS}><Name>bucket</Name><Prefix>p</Prefix><Marker></Marker><MaxKeys>1000</MaxKeys>"
        "<IsTruncated>false</IsTruncated><Contents><Key>a&amp;b</Key><LastModified>2009-10-12T17:50:30.000Z"
        "</LastModified><ETag>&quot;fba9dede5f27731c9771645a39863328&quot;</ETag><Size>434234</Size>"
        "<Owner><ID>id</ID><DisplayName>dn</DisplayName></Owner><StorageClass>STANDARD</StorageClass>"
        "</Contents></ListBucketResult>").encode()


def test_v1_encodes_all_but_its_prefix() -> None:
    page = ListPage(contents=[entry("a b+/c")], common_prefixes=["a b+/d e/"], is_truncated=True)
    body = v1(page, prefix="a b+\n", delimiter="+", marker="a b", encoding_type="url")
    assert (b"<Prefix>a b+&#xa;</Prefix><Marker>a+b</Marker><NextMarker>a+b%2B/d+e/</NextMarker><MaxKeys>1000</MaxKeys>"
            b"<Delimiter>%2B</Delimiter><EncodingType>url</EncodingType>") in body
    assert b"<Key>a+b%2B/c</Key>" in body and b"<CommonPrefixes><Prefix>a+b%2B/d+e/</Prefix>" in body
    assert b"<Prefix>a+b%2B%0A</Prefix><StartAfter>a+b</StartAfter>" in v2(
        page, prefix="a b+\n", start_after="a b", encoding_type="url")


def test_v1_next_marker_only_for_truncated_delimited_listings() -> None:
    page = ListPage(contents=[entry("a")], common_prefixes=["b/"], is_truncated=True)
    body = v1(page, delimiter="/", marker="m", max_keys=2, encoding_type="url")
    assert (b"<Prefix></Prefix><Marker>m</Marker><NextMarker>b/</NextMarker><MaxKeys>2</MaxKeys>"
            b"<Delimiter>/</Delimiter><EncodingType>url</EncodingType><IsTruncated>true</IsTruncated>") in body
    assert b"NextMarker" not in v1(page)  # no delimiter: the client uses the last key
    assert b"NextMarker" not in v1(ListPage(contents=[entry("a")]), delimiter="/")  # not truncated
    given_marker = ListPage(contents=[entry("a")], is_truncated=True, next_marker="zz")
    assert b"<NextMarker>zz</NextMarker>" in v1(given_marker, delimiter="/")


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(any_key, tricky), min_size=1, max_size=5), st.lists(st.one_of(any_key, tricky), max_size=3),
       st.one_of(any_key, tricky), st.one_of(xml_key, tricky))
def test_v1_keys_survive_a_real_client(keys: list[str], prefixes: list[str], marker: str, prefix: str) -> None:
    # Prefix is echoed as sent, not encoded: one XML cannot carry fails the client, as S3's does.
    page = ListPage(contents=[entry(k, owner=Owner("id")) for k in keys], common_prefixes=prefixes, is_truncated=True)

    def handler(q: dict[str, list[str]]) -> tuple[int, bytes]:
        return 200, v1(page, prefix=q["prefix"][0], delimiter=q["delimiter"][0], marker=q["marker"][0],
                       encoding_type=q["encoding-type"][0])

    with serving(handler):
        got = client().list_objects(Bucket="b", Prefix=prefix, Delimiter=marker, Marker=marker)
    assert [c["Key"] for c in got["Contents"]] == keys
    assert all(c["Owner"] == {"ID": "id"} for c in got["Contents"])
    assert [c["Prefix"] for c in got.get("CommonPrefixes", [])] == prefixes
    assert got["Marker"] == marker and got["Delimiter"] == marker
    assert got["Prefix"] == prefix  # S3 echoes v1's Prefix as sent, and botocore does not decode it
    assert got["NextMarker"] == max([keys[-1]] + prefixes[-1:])


# --- the origin's listings ---------------------------------------------------------------------------------


def test_parse_an_s3_listing() -> None:
    body = (b'<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            b"<Name>b</Name><Prefix>run books/</Prefix><Marker></Marker><NextMarker>run+books/a%2Bb</NextMarker>"
            b"<MaxKeys>1</MaxKeys><Delimiter>/</Delimiter><EncodingType>url</EncodingType><IsTruncated>true"
            b"</IsTruncated><Contents><Key>run+books/a%2Bb</Key><LastModified>2026-03-23T15:29:28.000Z</LastModified>"
            b"<ETag>&quot;6761d6772dc789aa1a2be9e51757c93b&quot;</ETag><ChecksumAlgorithm>CRC64NVME"
            b"</ChecksumAlgorithm><ChecksumType>FULL_OBJECT</ChecksumType><Size>10</Size><Owner><ID>6cf4</ID>"
            b"</Owner><StorageClass>STANDARD</StorageClass><RestoreStatus><IsRestoreInProgress>false"
            b"</IsRestoreInProgress><RestoreExpiryDate>2012-12-21T00:00:00.000Z</RestoreExpiryDate></RestoreStatus>"
            b"</Contents><CommonPrefixes><Prefix>run+books/%ED%95%9C/</Prefix></CommonPrefixes></ListBucketResult>")
    page = xml.parse_list_objects(body)
    assert page.contents == [ObjectEntry(
        key="run books/a+b", last_modified="2026-03-23T15:29:28.000Z", etag='"6761d6772dc789aa1a2be9e51757c93b"',
        size=10, owner=Owner("6cf4"), checksum_algorithm=("CRC64NVME",), checksum_type="FULL_OBJECT",
        restore_status=xml.RestoreStatus(False, "2012-12-21T00:00:00.000Z"))]
    assert page.common_prefixes == ["run books/한/"]
    assert (page.prefix, page.marker, page.next_marker, page.delimiter) == ("run books/", "", "run books/a+b", "/")
    assert page.is_truncated and page.max_keys == 1 and page.encoding_type == "url"
    # Rendered again for a client that asked for no encoding, the keys are the real ones.
    assert b"<Key>run books/a+b</Key>" in v1(page)


@given(st.lists(any_key, max_size=5), st.lists(any_key, max_size=3), st.booleans())
def test_origin_listing_round_trip(keys: list[str], prefixes: list[str], v2_shape: bool) -> None:
    page = ListPage(contents=[entry(k) for k in keys], common_prefixes=prefixes, is_truncated=True,
                    next_continuation_token="tok", next_marker=keys[-1] if keys else None)
    body = (v2(page, encoding_type="url", delimiter="/", start_after="s t") if v2_shape
            else v1(page, encoding_type="url", delimiter="/", marker="m n"))
    parsed = xml.parse_list_objects(body)
    assert parsed.contents == page.contents and parsed.common_prefixes == prefixes
    assert parsed.is_truncated and parsed.delimiter == "/"
    if v2_shape:
        assert parsed.next_continuation_token == "tok" and parsed.start_after == "s t"
        assert parsed.key_count == len(keys) + len(prefixes)
    else:
        assert parsed.marker == "m n"


@pytest.mark.parametrize(("value", "expected"), [(None, 1000), ("0", 0), ("1", 1), ("1000", 1000), ("5000", 5000),
                                                 ("2147483647", 2147483647), ("+7", 7), ("007", 7)])
def test_max_keys(value: str | None, expected: int) -> None:
    assert xml.validate_max_keys(value) == expected


@pytest.mark.parametrize("value", ["abc", "", " 5", "1.5", "2147483648", "-2147483649", "1e3", "٣"])
def test_max_keys_not_an_integer(value: str) -> None:
    with pytest.raises(S3Error) as info:
        xml.validate_max_keys(value)
    err = info.value
    assert (err.code, err.status) == ("InvalidArgument", 400)
    assert err.message == "Provided max-keys not an integer or within integer range"
    assert err.extra == {"ArgumentName": "max-keys", "ArgumentValue": value}


def test_max_keys_negative() -> None:
    with pytest.raises(S3Error) as info:
        xml.validate_max_keys("-1")
    assert info.value.message == "Argument maxKeys must be an integer between 0 and 2147483647"
    assert info.value.extra == {"ArgumentName": "maxKeys", "ArgumentValue": "-1"}


# --- hostile and broken request bodies ------------------------------------------------------------------------

BILLION_LAUGHS = (b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
                  + b"".join(b'<!ENTITY lol%d "%s">' % (i, (b"&lol%d;" % (i - 1) if i > 1 else b"&lol;") * 10)
                             for i in range(1, 10))
                  + b"]><Delete><Object><Key>&lol9;</Key></Object></Delete>")
EXTERNAL = (b'<?xml version="1.0"?><!DOCTYPE d [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
            b"<Delete><Object><Key>&x;</Key></Object></Delete>")
PARAMETER = (b'<?xml version="1.0"?><!DOCTYPE d [<!ENTITY % p SYSTEM "http://example.com/x.dtd"> %p;]>'
             b"<Delete><Object><Key>k</Key></Object></Delete>")

PARSERS: list[Callable[[bytes], object]] = [
    xml.parse_delete_objects, xml.parse_complete_multipart, xml.parse_create_bucket_configuration]


@pytest.mark.parametrize("parse", PARSERS)
@pytest.mark.parametrize("body", [BILLION_LAUGHS, EXTERNAL, PARAMETER, b"<Delete>&undefined;</Delete>",
                                  b"<a", b"\x00\xff", b'<?xml version="1.0" encoding="nonsense"?><Delete/>',
                                  b"<Wrong/>", b'<Delete xmlns="urn:other"/>', b"text"])
def test_bad_bodies_are_malformed_xml(parse: Callable[[bytes], object], body: bytes) -> None:
    started = time.perf_counter()
    with pytest.raises(S3Error) as info:
        parse(body)
    assert time.perf_counter() - started < 0.5
    assert (info.value.code, info.value.status) == ("MalformedXML", 400)
    assert info.value.message == ("The XML you provided was not well-formed or did not validate against our "
                                  "published schema")


@pytest.mark.parametrize("parse", [xml.parse_delete_objects, xml.parse_complete_multipart,
                                   xml.parse_create_bucket_configuration])
def test_oversized_bodies(parse: Callable[..., object]) -> None:
    with pytest.raises(S3Error) as info:
        parse(b"<Delete>" + b" " * 2000 + b"</Delete>", limit=1000)
    assert (info.value.code, info.value.status) == ("MaxMessageLengthExceeded", 400)


@pytest.mark.parametrize("parse", PARSERS)
@given(body=st.one_of(
    st.binary(max_size=300),
    st.text(max_size=300).map(str.encode),
    st.builds(lambda inner: f"<Delete><Object><Key>{inner}</Key></Object></Delete>".encode(), st.text(max_size=40)),
    st.builds(lambda n, e: f"<CompleteMultipartUpload><Part><PartNumber>{n}</PartNumber><ETag>{e}</ETag></Part>"
                           f"</CompleteMultipartUpload>".encode(), st.text(max_size=12), st.text(max_size=12)),
))
def test_request_parsers_raise_only_s3_errors(parse: Callable[[bytes], object], body: bytes) -> None:
    try:
        parse(body)
    except S3Error as err:
        assert 400 <= err.status < 500


# --- DeleteObjects -------------------------------------------------------------------------------------------


def test_delete_objects_from_botocore() -> None:
    body = botocore_body("DeleteObjects", {"Bucket": "b", "Delete": {
        "Objects": [{"Key": "a b&c"}, {"Key": "v", "VersionId": "3/L4kqtJl"},
                    {"Key": "e", "ETag": '"abc"', "LastModifiedTime": "2024-01-01T00:00:00Z", "Size": 5}],
        "Quiet": True}})
    request = xml.parse_delete_objects(body)
    assert request.quiet is True
    assert request.objects == [("a b&c", None), ("v", "3/L4kqtJl"), ("e", None)]
    condition = request.conditions[("e", None)]
    assert condition.etag == '"abc"' and condition.size == "5" and condition.last_modified_time
    assert xml.parse_delete_objects(xml.render_delete_request(request)) == request


def test_delete_objects_limits() -> None:
    def body(n: int) -> bytes:
        return b"<Delete>" + b"".join(b"<Object><Key>k%d</Key></Object>" % i for i in range(n)) + b"</Delete>"

    assert len(xml.parse_delete_objects(body(1000)).objects) == 1000
    for n in (0, 1001):  # S3 answers MalformedXML to both
        with pytest.raises(S3Error) as info:
            xml.parse_delete_objects(body(n))
        assert info.value.code == "MalformedXML"
    with pytest.raises(S3Error):
        xml.parse_delete_objects(body(3), max_keys=2)


@pytest.mark.parametrize("body", [
    b"<Delete><Object><VersionId>v</VersionId></Object></Delete>",
    b"<Delete><Object><Key>a</Key><Key>b</Key></Object></Delete>",
    b"<Delete><Quiet>maybe</Quiet><Object><Key>a</Key></Object></Delete>",
])
def test_delete_objects_schema(body: bytes) -> None:
    with pytest.raises(S3Error) as info:
        xml.parse_delete_objects(body)
    assert info.value.code == "MalformedXML"


def test_delete_objects_details() -> None:
    request = xml.parse_delete_objects(f'<Delete {NS}><Object><Key> a&#13;b </Key></Object></Delete>'.encode())
    assert request == DeleteRequest(quiet=False, objects=[(" a\rb ", None)])
    assert xml.parse_delete_objects(b"<Delete><Quiet>1</Quiet><Object><Key></Key></Object></Delete>").quiet is True


@given(st.lists(st.tuples(xml_key, st.none() | xml_key), min_size=1, max_size=8), st.booleans())
def test_delete_request_round_trip(objects: list[tuple[str, str | None]], quiet: bool) -> None:
    conditions = {objects[0]: DeleteCondition(etag='"e"', size="1")}
    request = DeleteRequest(quiet=quiet, objects=objects, conditions=conditions)
    assert xml.parse_delete_objects(xml.render_delete_request(request)) == request


def test_rebuilt_requests_keep_the_conditions_of_the_kept_objects() -> None:
    request = xml.parse_delete_objects(b"<Delete><Object><Key>a</Key><ETag>x</ETag></Object>"
                                       b"<Object><Key>b</Key><ETag>y</ETag></Object></Delete>")
    kept = DeleteRequest(quiet=request.quiet, objects=request.objects[1:], conditions=request.conditions)
    assert xml.render_delete_request(kept) == DECL + f"<Delete {NS}><Object><Key>b</Key><ETag>y</ETag></Object></Delete>".encode()


def test_delete_result() -> None:
    deleted = [DeletedEntry("a&b"), DeletedEntry("v", version_id="1", delete_marker=True, delete_marker_version_id="2")]
    errors = [DeleteErrorEntry("c", "AccessDenied", "Access Denied"), DeleteErrorEntry("d", "NoSuchVersion", "m", "9")]
    body = xml.render_delete_result(deleted, errors, quiet=False)
    assert body == DECL + (
        f"<DeleteResult {NS}><Deleted><Key>a&amp;b</Key></Deleted><Deleted><Key>v</Key><VersionId>1</VersionId>"
        "<DeleteMarker>true</DeleteMarker><DeleteMarkerVersionId>2</DeleteMarkerVersionId></Deleted><Error><Key>c"
        "</Key><Code>AccessDenied</Code><Message>Access Denied</Message></Error><Error><Key>d</Key><VersionId>9"
        "</VersionId><Code>NoSuchVersion</Code><Message>m</Message></Error></DeleteResult>").encode()
    result = xml.parse_delete_result(body)
    assert result.deleted == deleted and result.errors == errors
    with serving(lambda q: (200, body)):
        got = client().delete_objects(Bucket="b", Delete={"Objects": [{"Key": "a&b"}]})
    assert got["Deleted"][1] == {"Key": "v", "VersionId": "1", "DeleteMarker": True, "DeleteMarkerVersionId": "2"}
    assert got["Errors"][0] == {"Key": "c", "Code": "AccessDenied", "Message": "Access Denied"}
    quiet = xml.render_delete_result(deleted, errors, quiet=True)
    assert b"<Deleted>" not in quiet and quiet.count(b"<Error>") == 2


# --- CompleteMultipartUpload ----------------------------------------------------------------------------------


def complete(*parts: tuple[object, str]) -> bytes:
    inner = "".join(f"<Part><PartNumber>{n}</PartNumber><ETag>{e}</ETag></Part>" for n, e in parts)
    return f"<CompleteMultipartUpload>{inner}</CompleteMultipartUpload>".encode()


def test_complete_multipart_from_botocore() -> None:
    body = botocore_body("CompleteMultipartUpload", {"Bucket": "b", "Key": "k", "UploadId": "u", "MultipartUpload": {
        "Parts": [{"PartNumber": 1, "ETag": '"a54357aff0632cce46d942af68356b38"', "ChecksumCRC32": "AAAAAA=="},
                  {"PartNumber": 3, "ETag": '"0c78aef83f66abc1fa1e8477f296d394"', "ChecksumSHA256": "x="}]}})
    parts = xml.parse_complete_multipart(body)
    assert parts == [CompletedPart(1, '"a54357aff0632cce46d942af68356b38"', {"ChecksumCRC32": "AAAAAA=="}),
                     CompletedPart(3, '"0c78aef83f66abc1fa1e8477f296d394"', {"ChecksumSHA256": "x="})]
    rendered = xml.render_complete_multipart_request(parts)
    assert rendered.startswith(DECL + f"<CompleteMultipartUpload {NS}><Part><ETag>&quot;a5".encode())
    assert xml.parse_complete_multipart(rendered) == parts


@pytest.mark.parametrize(("body", "code"), [
    (b"<CompleteMultipartUpload/>", "MalformedXML"),
    (complete((0, "e")), "InvalidArgument"),
    (complete((-3, "e")), "InvalidArgument"),
    (complete((2, "e"), (1, "e")), "InvalidPartOrder"),
    (complete((1, "e"), (1, "e")), "InvalidPartOrder"),
    (complete((1, "e"), (10001, "e")), "InvalidPart"),
    (complete(("one", "e")), "MalformedXML"),
    (complete(("", "e")), "MalformedXML"),
    (complete(("99999999999", "e")), "MalformedXML"),
    (b"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber></Part></CompleteMultipartUpload>", "MalformedXML"),
])
def test_complete_multipart_checks(body: bytes, code: str) -> None:
    with pytest.raises(S3Error) as info:
        xml.parse_complete_multipart(body)
    assert (info.value.code, info.value.status) == (code, 400)


def test_complete_multipart_accepts_10000_parts() -> None:
    assert xml.parse_complete_multipart(complete((1, "a"), (10000, "b")))[-1].part_number == 10000


@given(st.lists(st.integers(1, 10000), min_size=1, max_size=20, unique=True), xml_key)
def test_complete_multipart_round_trip(numbers: list[int], etag: str) -> None:
    parts = [CompletedPart(n, etag, {"ChecksumCRC64NVME": "c"} if n % 2 else {}) for n in sorted(numbers)]
    assert xml.parse_complete_multipart(xml.render_complete_multipart_request(parts)) == parts


# --- CreateBucket / GetBucketLocation ----------------------------------------------------------------------------


def test_create_bucket_configuration() -> None:
    assert xml.parse_create_bucket_configuration(b"") is None
    assert xml.parse_create_bucket_configuration(b"  \n") is None
    body = botocore_body("CreateBucket", {"Bucket": "b", "CreateBucketConfiguration": {"LocationConstraint": "eu-west-1"}})
    assert xml.parse_create_bucket_configuration(body) == "eu-west-1"
    assert xml.parse_create_bucket_configuration(b"<CreateBucketConfiguration/>") is None
    assert xml.parse_create_bucket_configuration(
        b"<CreateBucketConfiguration><LocationConstraint></LocationConstraint></CreateBucketConfiguration>") is None


