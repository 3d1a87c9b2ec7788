"""x-amz-content-sha256: which body a signature promises (a hash, unsigned, aws-chunked), and the check that follows."""

from __future__ import annotations

import re

from gateway.errors import S3Error
from gateway.s3api.auth.model import ChunkSigner, PayloadCheck, PayloadMode, RequestView
from gateway.signing import UNSIGNED_PAYLOAD

STREAMING_SIGNED = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
STREAMING_SIGNED_TRAILER = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
STREAMING_UNSIGNED_TRAILER = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"

_HEX64 = re.compile(r"[0-9a-fA-F]{64}")


def _payload_mode(value: str) -> PayloadMode:
    if _HEX64.fullmatch(value):
        return "sha256"
    mode = {
        UNSIGNED_PAYLOAD: "unsigned",
        STREAMING_SIGNED: "streaming-signed",
        STREAMING_SIGNED_TRAILER: "streaming-signed-trailer",
        STREAMING_UNSIGNED_TRAILER: "streaming-unsigned-trailer",
    }.get(value)
    if mode is None:
        raise S3Error(
            "InvalidArgument",
            "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-UNSIGNED-PAYLOAD-TRAILER, "
            "STREAMING-AWS4-HMAC-SHA256-PAYLOAD, STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER or a valid sha256 value.",
            extra={"ArgumentName": "x-amz-content-sha256", "ArgumentValue": value[:80]},
        )
    return mode  # type: ignore[return-value]


def _payload_from_mode(
    mode: PayloadMode, content_sha256: str, key: bytes, amz_date: str, scope: str, signature: str
) -> PayloadCheck:
    if mode == "sha256":
        return PayloadCheck("sha256", expected_sha256=content_sha256.lower())
    if mode in ("streaming-signed", "streaming-signed-trailer"):
        return PayloadCheck(mode, chunk_signer=ChunkSigner(key, amz_date, scope, signature))
    return PayloadCheck(mode)


def _payload_check(view: RequestView) -> PayloadCheck:
    """The body check for requests whose signature does not cover a chunk signer (SigV2, anonymous).

    Without the header the body is unsigned; a hex value is still verified, an
    unsigned trailer is still decoded, but signed chunks cannot be checked here.
    """
    value = view.header("x-amz-content-sha256")
    if value is None:
        return PayloadCheck("unsigned")
    mode = _payload_mode(value)
    if mode in ("streaming-signed", "streaming-signed-trailer"):
        raise S3Error("InvalidRequest", f"x-amz-content-sha256 {value} requires a SigV4 Authorization header.")
    if mode == "sha256":
        return PayloadCheck("sha256", expected_sha256=value.lower())
    return PayloadCheck(mode)
