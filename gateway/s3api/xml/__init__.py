"""S3's XML: parse what clients (defusedxml) and the origin (no DTD) send, render what S3 sends: pure.

One module per document family: common (escaping, safe parsing, readers, Owner), error
(the error document), buckets (ListBuckets, CreateBucket), listing (ListObjects v1/v2),
cors (GetBucketCors), delete (DeleteObjects), multipart (CompleteMultipartUpload), post (POST Object's tagging
field and answer). Callers use this package.
"""

from __future__ import annotations

from gateway.s3api.xml.buckets import (
    Bucket,
    ListBucketsResult,
    parse_create_bucket_configuration,
    parse_list_buckets,
    render_list_buckets,
)
from gateway.s3api.xml.common import DEFAULT_XML_LIMIT, S3_NS, Owner, url_encode, xml_escape
from gateway.s3api.xml.cors import CorsRule, parse_cors_configuration
from gateway.s3api.xml.delete import (
    DeleteCondition,
    DeletedEntry,
    DeleteErrorEntry,
    DeleteRequest,
    DeleteResult,
    parse_delete_objects,
    parse_delete_result,
    render_delete_request,
    render_delete_result,
)
from gateway.s3api.xml.error import error_document
from gateway.s3api.xml.listing import (
    ListPage,
    ObjectEntry,
    RestoreStatus,
    parse_list_objects,
    render_list_objects_v1,
    render_list_objects_v2,
    validate_max_keys,
)
from gateway.s3api.xml.multipart import CompletedPart, parse_complete_multipart, render_complete_multipart_request
from gateway.s3api.xml.post import parse_tagging, render_post_response

__all__ = [
    "DEFAULT_XML_LIMIT",
    "S3_NS",
    "Bucket",
    "CompletedPart",
    "CorsRule",
    "DeleteCondition",
    "DeleteErrorEntry",
    "DeleteRequest",
    "DeleteResult",
    "DeletedEntry",
    "ListBucketsResult",
    "ListPage",
    "ObjectEntry",
    "Owner",
    "RestoreStatus",
    "error_document",
    "parse_complete_multipart",
    "parse_cors_configuration",
    "parse_create_bucket_configuration",
    "parse_delete_objects",
    "parse_delete_result",
    "parse_list_buckets",
    "parse_list_objects",
    "parse_tagging",
    "render_complete_multipart_request",
    "render_delete_request",
    "render_delete_result",
    "render_list_buckets",
    "render_list_objects_v1",
    "render_list_objects_v2",
    "render_post_response",
    "url_encode",
    "validate_max_keys",
    "xml_escape",
]
