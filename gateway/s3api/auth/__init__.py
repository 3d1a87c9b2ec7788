"""Authentication of incoming requests (SigV4/SigV2, header/presigned, anonymous): pure, clock and secrets passed in.

One module per part: model (what is read and answered), common (wire bytes, query, dates,
clock, secrets), payload (x-amz-content-sha256), sigv4 (header, credential scope, the
signature check), fastpath (the SigV4 check of an SDK's GET or HEAD, signed or presigned,
answering as sigv4 does or leaving the request to it; its work in the compiled _sigv4check, or
in sigv4check, its pure-Python twin, where that was not built), shaped (the signature of an SDK's
request of a kept shape checked anew), memo (checks that passed lately), presigned (SigV4 query
string), sigv2, dispatch (which one applies).
"""

from __future__ import annotations

from gateway.s3api.auth.dispatch import authenticate
from gateway.s3api.auth.memo import VerifiedSignatures
from gateway.s3api.auth.model import ChunkSigner, Identity, PayloadCheck, PayloadMode, RequestView, SecretLookup
from gateway.s3api.auth.payload import STREAMING_SIGNED, STREAMING_SIGNED_TRAILER, STREAMING_UNSIGNED_TRAILER
from gateway.s3api.auth.presigned import MAX_PRESIGN_EXPIRES
from gateway.s3api.auth.sigv2 import SIGV2_SUBRESOURCES
from gateway.s3api.auth.sigv4 import SERVICE

__all__ = [
    "MAX_PRESIGN_EXPIRES",
    "SERVICE",
    "SIGV2_SUBRESOURCES",
    "STREAMING_SIGNED",
    "STREAMING_SIGNED_TRAILER",
    "STREAMING_UNSIGNED_TRAILER",
    "ChunkSigner",
    "Identity",
    "PayloadCheck",
    "PayloadMode",
    "RequestView",
    "SecretLookup",
    "VerifiedSignatures",
    "authenticate",
]
