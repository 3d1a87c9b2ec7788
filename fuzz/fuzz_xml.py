"""Fuzz target `xml`: S3's XML request bodies and origin answers (gateway/s3api/xml/).

Text: an XML document. Controls: which parser, and the size cap. Client bodies
(CompleteMultipartUpload, Delete, CreateBucketConfiguration) must parse or raise an
S3Error with a 4xx status (MalformedXML, MaxMessageLengthExceeded, InvalidPartOrder, ...);
an origin answer (ListBucketResult, ListAllMyBucketsResult, DeleteResult) may also be a 500
InternalError, since garbage from the origin is the gateway's failure. What parses renders
back to a document that parses to the same thing; max-keys is fuzzed on the text too.
"""

from __future__ import annotations

import sys

import atheris
from _harness import Controls, check, client_error, main, seed

with atheris.instrument_imports(include=["gateway"]):
    from gateway.errors import S3Error
    from gateway.s3api import xml

LIMITS = (xml.DEFAULT_XML_LIMIT, 64, 1024)
TARGETS = ("complete", "delete", "create_bucket", "list_objects", "list_buckets", "delete_result", "max_keys")


def origin_error(exc: Exception) -> None:
    if isinstance(exc, S3Error) and exc.code == "InternalError":
        return
    client_error(exc)


def test_one_input(data: bytes) -> None:
    ctl = Controls(data)
    target = TARGETS[ctl.pick(len(TARGETS) - 1)]
    limit = LIMITS[ctl.pick(len(LIMITS) - 1)]
    max_keys = 1000 if ctl.flag() else 3
    body = ctl.rest()

    if target == "complete":
        try:
            parts = xml.parse_complete_multipart(body, limit=limit)
        except Exception as exc:
            client_error(exc)
            return
        check(len(body) <= limit, "a body over the limit parsed")
        numbers = [p.part_number for p in parts]
        check(parts and numbers == sorted(set(numbers)) and 1 <= numbers[0] and numbers[-1] <= 10000,
              f"part numbers {numbers[:10]}")
        again = xml.parse_complete_multipart(xml.render_complete_multipart_request(parts), limit=2**31)
        check(again == parts, lambda: f"{parts[:3]} rendered and parsed back as {again[:3]}")
    elif target == "delete":
        try:
            request = xml.parse_delete_objects(body, max_keys=max_keys, limit=limit)
        except Exception as exc:
            client_error(exc)
            return
        check(len(body) <= limit and 0 < len(request.objects) <= max_keys, "delete request size")
        again = xml.parse_delete_objects(xml.render_delete_request(request), max_keys=max_keys, limit=2**31)
        check(again == request, lambda: f"{request} rendered and parsed back as {again}")
    elif target == "create_bucket":
        try:
            location = xml.parse_create_bucket_configuration(body, limit=limit)
        except Exception as exc:
            client_error(exc)
            return
        check(location is None or (location == location.strip() and location), f"location {location!r}")
    elif target == "list_objects":
        try:
            page = xml.parse_list_objects(body)
        except Exception as exc:
            origin_error(exc)
            return
        for encoding in (None, "url"):
            rendered = xml.render_list_objects_v2(
                page, bucket="b", prefix=page.prefix, delimiter=page.delimiter, max_keys=1000,
                continuation_token=None, start_after=None, fetch_owner=True, encoding_type=encoding)
            if encoding == "url":
                # encoding-type=url is what makes every key safe in XML: it must parse back.
                back = xml.parse_list_objects(rendered)
                check([c.key for c in back.contents] == [c.key for c in page.contents], "keys changed")
                check(back.common_prefixes == page.common_prefixes, "prefixes changed")
            xml.render_list_objects_v1(page, bucket="b", prefix=page.prefix, delimiter=page.delimiter,
                                       max_keys=1000, marker=page.marker, encoding_type=encoding)
    elif target == "list_buckets":
        try:
            result = xml.parse_list_buckets(body)
        except Exception as exc:
            origin_error(exc)
            return
        xml.render_list_buckets(result)
    elif target == "delete_result":
        try:
            outcome = xml.parse_delete_result(body)
        except Exception as exc:
            origin_error(exc)
            return
        xml.render_delete_result(outcome.deleted, outcome.errors, quiet=False)
    else:
        text = body.decode("utf-8", "surrogateescape")
        try:
            number = xml.validate_max_keys(text)
        except Exception as exc:
            client_error(exc)
            return
        check(0 <= number <= 2**31 - 1, f"max-keys {number}")


NS = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'
DECL = '<?xml version="1.0" encoding="UTF-8"?>\n'


def seeds() -> dict[str, bytes]:
    complete = (f'{DECL}<CompleteMultipartUpload {NS}><Part><ETag>"a54357aff0632cce46d942af68356b38"</ETag>'
                "<PartNumber>1</PartNumber></Part><Part><ETag>\"0c78aef83f66abc1fa1e8477f296d394\"</ETag>"
                "<ChecksumCRC32>AAAAAA==</ChecksumCRC32><PartNumber>2</PartNumber></Part></CompleteMultipartUpload>")
    delete = (f"{DECL}<Delete {NS}><Object><Key>a/b.txt</Key></Object><Object><Key>c&amp;d</Key>"
              "<VersionId>3/L4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY</VersionId><ETag>\"x\"</ETag></Object>"
              "<Quiet>true</Quiet></Delete>")
    listing = (f'{DECL}<ListBucketResult {NS}><Name>b</Name><Prefix>p%2F</Prefix><KeyCount>2</KeyCount>'
               "<MaxKeys>1000</MaxKeys><Delimiter>%2F</Delimiter><EncodingType>url</EncodingType>"
               "<IsTruncated>true</IsTruncated><NextContinuationToken>tok</NextContinuationToken>"
               "<Contents><Key>p%2Fa+b%25</Key><LastModified>2024-04-30T12:00:00.000Z</LastModified>"
               "<ETag>&quot;x&quot;</ETag><ChecksumAlgorithm>CRC32</ChecksumAlgorithm><Size>5</Size>"
               "<Owner><ID>o</ID></Owner><StorageClass>STANDARD</StorageClass><RestoreStatus>"
               "<IsRestoreInProgress>false</IsRestoreInProgress></RestoreStatus></Contents>"
               "<CommonPrefixes><Prefix>p%2Fd%2F</Prefix></CommonPrefixes></ListBucketResult>")
    buckets = (f"{DECL}<ListAllMyBucketsResult {NS}><Owner><ID>o</ID><DisplayName>d</DisplayName></Owner>"
               "<Buckets><Bucket><Name>b</Name><CreationDate>2009-02-03T16:45:09.000Z</CreationDate>"
               "<BucketRegion>eu-west-1</BucketRegion></Bucket></Buckets></ListAllMyBucketsResult>")
    result = (f"{DECL}<DeleteResult {NS}><Deleted><Key>a</Key><DeleteMarker>true</DeleteMarker>"
              "<DeleteMarkerVersionId>v</DeleteMarkerVersionId></Deleted><Error><Key>b</Key>"
              "<Code>AccessDenied</Code><Message>Access Denied</Message></Error></DeleteResult>")
    create = f"<CreateBucketConfiguration {NS}><LocationConstraint>eu-west-1</LocationConstraint></CreateBucketConfiguration>"
    return {
        "complete": seed(complete, 0, 0, 1),
        "complete-small-cap": seed(complete, 0, 1, 1),
        "delete": seed(delete, 1, 0, 1),
        "delete-three": seed(delete.replace("<Quiet>", "<Object><Key>e</Key></Object><Quiet>"), 1, 0, 0),
        "create-bucket": seed(create, 2, 0, 1),
        "list-objects": seed(listing, 3, 0, 1),
        "list-buckets": seed(buckets, 4, 0, 1),
        "delete-result": seed(result, 5, 0, 1),
        "max-keys": seed("1000", 6, 0, 1),
        "entity": seed('<!DOCTYPE d [<!ENTITY e "x">]><Delete><Object><Key>&e;</Key></Object></Delete>', 1, 0, 1),
    }


if __name__ == "__main__":
    main("xml", test_one_input, seeds)
    sys.exit(0)
