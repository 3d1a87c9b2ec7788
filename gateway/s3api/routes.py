"""Which S3 operation a request is: by method, bucket/key presence and sub-resource."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Scope = Literal["service", "bucket", "object"]
Action = Literal["list", "read", "write", "bucket-write", "bucket-admin", "none"]

# Bucket sub-resources that configure the bucket itself (policy, ACL, lifecycle, ...).
# The gateway passes these through with its own origin credentials, so only users
# marked admin may call them.
BUCKET_CONFIG_SUBRESOURCES = frozenset({
    "accelerate", "acl", "analytics", "cors", "encryption", "intelligent-tiering",
    "inventory", "lifecycle", "logging", "metadataTable", "metrics", "notification",
    "object-lock", "ownershipControls", "policy", "policyStatus", "publicAccessBlock",
    "replication", "requestPayment", "tagging", "versioning", "website",
})
# Object sub-resources passed through to the origin, authorised like reads/writes of the key.
OBJECT_SUBRESOURCES = frozenset({"acl", "tagging", "retention", "legal-hold", "attributes", "torrent", "restore", "select"})


@dataclass(frozen=True, slots=True)
class Operation:
    name: str
    action: Action
    passthrough: bool = False  # forwarded to the origin as it is (after auth), not interpreted


def resolve(method: str, bucket: str | None, key: str | None, query: Mapping[str, str], headers: Mapping[str, str]) -> Operation | None:
    """The operation for this request, or None when S3 has no such operation (MethodNotAllowed)."""
    if bucket is None:
        return Operation("ListBuckets", "none") if method == "GET" else None
    if method == "OPTIONS":
        return Operation("PreflightCORS", "none")  # a browser's, never signed (s3api.cors)
    if key is None:
        return _bucket_operation(method, query, headers)
    return _object_operation(method, query, headers)


def _bucket_operation(method: str, query: Mapping[str, str], headers: Mapping[str, str]) -> Operation | None:
    config = next((name for name in query if name in BUCKET_CONFIG_SUBRESOURCES), None)
    if method == "GET":
        if "location" in query:
            return Operation("GetBucketLocation", "list")
        if "uploads" in query:
            return Operation("ListMultipartUploads", "list")
        if "versions" in query:
            return Operation("ListObjectVersions", "list", passthrough=True)
        if config:
            return Operation(f"GetBucket:{config}", "bucket-admin", passthrough=True)
        if query.get("list-type") == "2":
            return Operation("ListObjectsV2", "list")
        return Operation("ListObjects", "list")
    if method == "HEAD":
        return Operation("HeadBucket", "list")
    if method == "PUT":
        if config:
            return Operation(f"PutBucket:{config}", "bucket-admin", passthrough=True)
        return Operation("CreateBucket", "bucket-write")
    if method == "DELETE":
        if config:
            return Operation(f"DeleteBucket:{config}", "bucket-admin", passthrough=True)
        return Operation("DeleteBucket", "bucket-write")
    if method == "POST":
        if "delete" in query:
            return Operation("DeleteObjects", "write")
        if headers.get("content-type", "").lower().startswith("multipart/form-data"):
            return Operation("PostObject", "write")  # authorized by the form's policy (s3api.postobject)
        return None
    return None


def _object_operation(method: str, query: Mapping[str, str], headers: Mapping[str, str]) -> Operation | None:
    sub = next((name for name in query if name in OBJECT_SUBRESOURCES), None)
    upload = "uploadId" in query
    if method == "GET":
        if upload:
            return Operation("ListParts", "write")
        if sub:
            return Operation(f"GetObject:{sub}", "read", passthrough=True)
        return Operation("GetObject", "read")
    if method == "HEAD":
        return Operation("HeadObject", "read")
    if method == "PUT":
        if upload and "partNumber" in query:
            if "x-amz-copy-source" in headers:
                return Operation("UploadPartCopy", "write")
            return Operation("UploadPart", "write")
        if sub:
            return Operation(f"PutObject:{sub}", "write", passthrough=True)
        if "x-amz-copy-source" in headers:
            return Operation("CopyObject", "write")
        return Operation("PutObject", "write")
    if method == "POST":
        if "uploads" in query:
            return Operation("CreateMultipartUpload", "write")
        if upload:
            return Operation("CompleteMultipartUpload", "write")
        if sub in ("restore", "select"):
            return Operation(f"PostObject:{sub}", "read" if sub == "select" else "write", passthrough=True)
        return None
    if method == "DELETE":
        if upload:
            return Operation("AbortMultipartUpload", "write")
        if sub:
            return Operation(f"DeleteObject:{sub}", "write", passthrough=True)
        return Operation("DeleteObject", "write")
    return None
