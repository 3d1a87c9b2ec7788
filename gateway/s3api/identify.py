"""Who sent a request and what it asks: its signature checked (s3api.auth, with the memo of
checks that passed lately), its user looked up, its operation named (s3api.routes). The ASGI
app and the hit path below it identify a request with the same object."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from gateway.config import AuthSettings
from gateway.s3api.access import AccessPolicy
from gateway.s3api.auth import Identity, PayloadCheck, VerifiedSignatures, authenticate
from gateway.s3api.request import S3Request
from gateway.s3api.routes import resolve

__all__ = ["Authenticator"]

_METHODS = frozenset({"GET", "HEAD", "PUT", "POST", "DELETE", "OPTIONS"})
_PREFLIGHT = Identity(None, PayloadCheck("unsigned"))  # who sends a CORS preflight: anyone


class Authenticator:
    """Identifies requests for one endpoint. Event loop only (the memo is not locked)."""

    def __init__(self, auth: AuthSettings, policy: AccessPolicy) -> None:
        self.policy = policy
        self.max_skew = timedelta(seconds=auth.max_clock_skew)  # of a request's signing time from the clock
        self.verified = VerifiedSignatures()  # SigV4 checks that passed lately (auth.memo)

    def identify(self, req: S3Request) -> None:
        """Authenticate the request (raising S3Error) and name its operation (None: none fits).
        A CORS preflight (OPTIONS) is not authenticated: browsers send it without credentials,
        whatever a presigned URL's query says (S3 does not check it either)."""
        if req.method == "OPTIONS":
            req.identity = _PREFLIGHT
        else:
            req.identity = authenticate(
                req.view, self.policy.secret_for, now=datetime.now(timezone.utc), max_skew=self.max_skew,
                bucket_from_host=req.host_bucket, verified=self.verified,
            )
            if req.identity.access_key is not None:
                req.user = self.policy.user(req.identity.access_key)
        if req.method in _METHODS:
            req.operation = resolve(req.method, req.bucket, req.key, req.query, req.headers)
