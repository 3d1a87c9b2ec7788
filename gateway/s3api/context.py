"""What every S3 operation's handler is given: the request and the few services it uses
(Services, made once per endpoint), and the steps they share (authorising, sending the request
on to the origin, relaying the origin's answer)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.responses import Response

from gateway.config import ServerSettings
from gateway.engine import Engine, Forwarded
from gateway.s3api import headers as hdrs
from gateway.s3api.access import AccessPolicy
from gateway.s3api.receiving import BodyReceiver
from gateway.s3api.request import S3Request
from gateway.s3api.responses import empty_response, stream_response
from gateway.s3api.routes import Action

# Query parameters that authenticate the client's own request; never sent on.
_AUTH_QUERY = frozenset({
    "X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires", "X-Amz-SignedHeaders",
    "X-Amz-Signature", "X-Amz-Security-Token", "AWSAccessKeyId", "Signature", "Expires", "x-id",
})
# Reads of the bucket itself, allowed to anyone holding some grant on it.
_BUCKET_LEVEL_READS = frozenset({"HeadBucket", "GetBucketLocation"})


@dataclass(frozen=True, slots=True)
class Services:
    """What the S3 endpoint's handlers (and the hit path) use of the gateway, made once."""

    engine: Engine  # reads, writes and everything sent on to the origin
    policy: AccessPolicy  # who may do what (authorisation), and the users' secrets
    server: ServerSettings  # the limits handlers read (max_xml_size, max_object_size, TLS)
    bodies: BodyReceiver  # request bodies, received whole and verified


@dataclass(slots=True)
class Context:
    req: S3Request
    services: Services

    def check(self, action: Action | None = None, bucket: str | None = None, key: str | None = None) -> None:
        """Authorise the request (or a second resource it touches, such as a copy source)."""
        req = self.req
        assert req.operation is not None
        action = action or req.operation.action
        bucket = bucket if bucket is not None else req.bucket
        if key is None and action == "list" and req.operation.name not in _BUCKET_LEVEL_READS:
            key = req.query.get("prefix", "")  # a listing is authorised by its prefix
        elif key is None and action in ("read", "write"):
            key = req.key or ""
        self.services.policy.check(req.user, action, bucket, key)

    def origin_query(self, drop: frozenset[str] = frozenset()) -> list[tuple[str, str]]:
        """The request's query as the origin receives it: the one parsed query, less authentication."""
        return [(k, v) for k, v in self.req.query.items() if k not in _AUTH_QUERY and k not in drop]

    async def forward(self, method: str, *, headers: dict[str, str] | None = None, body: bytes | None = None,
                      query: list[tuple[str, str]] | None = None) -> Forwarded:
        """The request sent on to the origin: to its object, with its query by default."""
        req = self.req
        return await self.services.engine.forward(method, req.bucket, req.key,
                                             query=self.origin_query() if query is None else query,
                                             headers=headers, body=body, resource=req.resource)

    async def forward_to_bucket(self, method: str, *, headers: dict[str, str] | None = None,
                                body: bytes | None = None) -> Forwarded:
        """A bucket operation sent on to the origin (no key, no query)."""
        return await self.services.engine.forward(method, self.req.bucket, None, headers=headers, body=body,
                                             resource=self.req.resource)

    async def relay(self, response: Forwarded, *, headers: dict[str, str] | None = None) -> Response:
        """Send the origin's answer on: its status, object headers and (streamed) body."""
        out = hdrs.from_origin(response.header_items)
        out.update(headers or {})
        if response.status == 206 and "content-range" in response.headers:
            out["content-range"] = response.headers["content-range"]
        if "content-length" in response.headers and response.status not in (204, 304):
            out["content-length"] = response.headers["content-length"]
        if self.req.method == "HEAD" or response.status in (204, 304):
            await response.aclose()
            return empty_response(self.req.request_id, status=response.status, headers=out)
        return stream_response(response.chunks(), self.req.request_id, status=response.status, headers=out)


Handler = Callable[[Context], Awaitable[Response]]
