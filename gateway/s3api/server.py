"""The S3 endpoint as an ASGI app, its dispatch: parse (s3api.request) → identify
(s3api.identify) → the operation's handler, given the request and the endpoint's services
(s3api.context) → response; each answer recorded as it goes out (s3api.accounting)."""

from __future__ import annotations

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway import log
from gateway.config import Settings
from gateway.engine import Engine
from gateway.errors import S3Error
from gateway.s3api import cors, handlers
from gateway.s3api.access import AccessPolicy
from gateway.s3api.accounting import Accounts, Sending
from gateway.s3api.context import Context, Services
from gateway.s3api.identify import Authenticator
from gateway.s3api.receiving import BodyReceiver, unread_body
from gateway.s3api.request import IDENTIFIED, S3Request, parse_request
from gateway.s3api.responses import error_response, new_request_id


class S3App:
    """The ASGI app that answers the S3 REST protocol.

    Made once: `services` (what handlers use), `authenticator` (who sent a request, what it asks)
    and `accounts` (what every answer leaves behind), shared with the hit path (s3api.hits)."""

    def __init__(self, settings: Settings, engine: Engine) -> None:
        policy = AccessPolicy(settings.auth)
        self.engine = engine
        self.services = Services(engine, policy, settings.server, BodyReceiver(settings.server))
        self.authenticator = Authenticator(settings.auth, policy)
        self.accounts = Accounts(engine)  # what every answer leaves behind (s3api.accounting)
        self._domain = settings.server.domain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        req: S3Request | None = scope.pop(IDENTIFIED, None)
        if req is not None:
            req.receive = receive
        request_id = req.request_id if req is not None else new_request_id()
        sending = Sending(self.accounts, scope["method"], request_id, send, req)
        try:
            if req is None:
                sending.req = req = parse_request(scope, receive, request_id, self._domain)
                self.authenticator.identify(req)
            response = await self._handle(req)
        except S3Error as err:
            response = error_response(err if err.resource else _with_resource(err, req), request_id, method=scope["method"])
        except Exception:
            log.s3api.exception("unhandled error in request %s", request_id)
            response = error_response(S3Error("InternalError"), request_id, method=scope["method"])
        if req is not None and req.bucket and "origin" in req.headers and req.method != "OPTIONS":
            await cors.add_headers(Context(req, self.services), response)
        if unread_body(scope, req):
            # We answered without reading the body (an early error, or a client that
            # waits on Expect: 100-continue and will not send it): the connection can't
            # be reused, since its next bytes would be that body.
            response.headers["connection"] = "close"
        try:
            await response(scope, receive, sending.send)
        finally:
            if req is not None:
                await req.held.aclose()
                if req._body is not None:
                    await req._body.aclose()
            sending.done()  # an answer that never sent its last bytes (an error mid-stream)

    async def _handle(self, req: S3Request) -> Response:
        if req.operation is None:
            raise S3Error("MethodNotAllowed", resource=req.resource)
        if "partNumber" in req.query:
            _check_part_number(req.query["partNumber"])
        handler = handlers.HANDLERS.get(req.operation.name, handlers.passthrough)
        return await handler(Context(req, self.services))


def _check_part_number(value: str) -> None:
    """S3's check of partNumber, made here so that no origin sees a bad one."""
    if not (value.isascii() and value.isdigit() and len(value) <= 5 and 1 <= int(value) <= 10000):
        raise S3Error("InvalidArgument", "Part number must be an integer between 1 and 10000, inclusive",
                      extra={"ArgumentName": "partNumber", "ArgumentValue": value[:64]})


def _with_resource(err: S3Error, req: S3Request | None) -> S3Error:
    if req is not None:
        err.resource = req.resource
    return err
