"""The S3 endpoint as an ASGI app: parse (s3api.request) → authenticate → authorize → operation →
response, each answer recorded (s3api.accounting)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone
from typing import Any

from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from gateway import log
from gateway.config import Settings
from gateway.engine import Engine
from gateway.errors import S3Error
from gateway.s3api import cors, handlers
from gateway.s3api import headers as hdrs
from gateway.s3api.access import AccessPolicy
from gateway.s3api.accounting import Accounts, answered_for, note_answer
from gateway.s3api.auth import Identity, PayloadCheck, VerifiedSignatures, authenticate
from gateway.s3api.body import VerifiedBody, receive_verified_body
from gateway.s3api.form import FormReader, boundary_of
from gateway.s3api.request import IDENTIFIED, S3Request, parse_request
from gateway.s3api.responses import error_response, new_request_id
from gateway.s3api.routes import resolve

_METHODS = frozenset({"GET", "HEAD", "PUT", "POST", "DELETE", "OPTIONS"})
_PREFLIGHT = Identity(None, PayloadCheck("unsigned"))  # who sends a CORS preflight: anyone


class S3App:
    """The ASGI app that answers the S3 REST protocol."""

    def __init__(self, settings: Settings, engine: Engine) -> None:
        self.settings = settings
        self.engine = engine
        self.policy = AccessPolicy(settings.auth)
        self._skew = timedelta(seconds=settings.auth.max_clock_skew)
        self.accounts = Accounts(engine.bucket_exists)  # what every answer leaves behind (s3api.accounting)
        self.verified = VerifiedSignatures()  # SigV4 checks that passed lately (auth.memo)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        started = time.perf_counter()
        req: S3Request | None = scope.pop(IDENTIFIED, None)
        if req is not None:
            req.receive = receive
        request_id = req.request_id if req is not None else new_request_id()
        outcome: dict[str, Any] = {"status": 500, "bytes": 0, "cache": None}
        logged = False

        def log_answer() -> None:
            nonlocal logged
            if not logged:
                logged = True
                self.accounts.record(answered_for(req, scope["method"], outcome), request_id, outcome["bytes"],
                                     outcome["cache"], time.perf_counter() - started)

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                note_answer(outcome, message["status"], message.get("headers", ()))
            elif message["type"] == "http.response.body":
                outcome["bytes"] += len(message.get("body", b""))
                if not message.get("more_body", False):
                    # Logged as its last bytes go to the server, as the hit path logs its own: they
                    # let the connection's next request start (pipelined, at once; else once the
                    # client has read them), which the hit path answers and logs there and then,
                    # while this task still closes what the answer held. Logged after that, a
                    # connection's lines would not be in the order it was answered in.
                    log_answer()
            await send(message)

        try:
            if req is None:
                req = parse_request(scope, receive, request_id, self.settings.server.domain)
                self.identify(req)
            response = await self._handle(req)
        except S3Error as err:
            response = error_response(err if err.resource else _with_resource(err, req), request_id, method=scope["method"])
        except Exception:
            log.s3api.exception("unhandled error in request %s", request_id)
            response = error_response(S3Error("InternalError"), request_id, method=scope["method"])
        if req is not None and req.bucket and "origin" in req.headers and req.method != "OPTIONS":
            await cors.add_headers(handlers.Context(req, self), response)
        if _unread_body(scope, req):
            # We answered without reading the body (an early error, or a client that
            # waits on Expect: 100-continue and will not send it): the connection can't
            # be reused, since its next bytes would be that body.
            response.headers["connection"] = "close"
        try:
            await response(scope, receive, counting_send)
        finally:
            if req is not None:
                await req.held.aclose()
                if req._body is not None:
                    await req._body.aclose()
            log_answer()  # an answer that never sent its last bytes (an error mid-stream)

    def identify(self, req: S3Request) -> None:
        """Authenticate the request (raising S3Error) and name its operation (None: none fits).
        A CORS preflight (OPTIONS) is not authenticated: browsers send it without credentials,
        whatever a presigned URL's query says (S3 does not check it either)."""
        if req.method == "OPTIONS":
            req.identity = _PREFLIGHT
        else:
            req.identity = authenticate(
                req.view, self.policy.secret_for, now=datetime.now(timezone.utc), max_skew=self._skew,
                bucket_from_host=req.host_bucket, verified=self.verified,
            )
            if req.identity.access_key is not None:
                req.user = self.policy.user(req.identity.access_key)
        if req.method in _METHODS:
            req.operation = resolve(req.method, req.bucket, req.key, req.query, req.headers)

    async def _handle(self, req: S3Request) -> Response:
        if req.operation is None:
            raise S3Error("MethodNotAllowed", resource=req.resource)
        if "partNumber" in req.query:
            _check_part_number(req.query["partNumber"])
        handler = handlers.HANDLERS.get(req.operation.name, handlers.passthrough)
        return await handler(handlers.Context(req, self))

    async def body(self, req: S3Request, *, max_size: int | None = None,
                   object_checksums: bool = False) -> VerifiedBody:
        """The request body, received whole and verified (signature, digests, lengths).

        `object_checksums`: the request's x-amz-checksum-* headers describe the object it
        makes, not its body (CompleteMultipartUpload), so the body is not checked against them.
        """
        if req._body is None:
            assert req.identity is not None
            server = self.settings.server
            headers = req.headers
            if object_checksums:
                headers = {n: v for n, v in headers.items()
                           if n not in hdrs.CHECKSUM_VALUES and n != "x-amz-sdk-checksum-algorithm"}
            req._body = await receive_verified_body(
                _body_chunks(req), headers, req.identity.payload,
                max_size=server.max_object_size if max_size is None else max_size,
                spool_memory=server.spool_memory, spool_dir=server.spool_dir or None,
            )
        return req._body

    def form(self, req: S3Request) -> FormReader:
        """The request's multipart/form-data body (POST Object), read as it arrives."""
        return FormReader(_body_chunks(req), boundary_of(req.headers.get("content-type", "")))

    async def small_body(self, req: S3Request, *, object_checksums: bool = False) -> tuple[VerifiedBody, bytes]:
        """A verified body that is an XML document: refused early above server.max_xml_size."""
        body = await self.body(req, max_size=self.settings.server.max_xml_size, object_checksums=object_checksums)
        return body, await body.read_all()


def _check_part_number(value: str) -> None:
    """S3's check of partNumber, made here so that no origin sees a bad one."""
    if not (value.isascii() and value.isdigit() and len(value) <= 5 and 1 <= int(value) <= 10000):
        raise S3Error("InvalidArgument", "Part number must be an integer between 1 and 10000, inclusive",
                      extra={"ArgumentName": "partNumber", "ArgumentValue": value[:64]})


async def _body_chunks(req: S3Request) -> AsyncIterator[bytes]:
    while True:
        message = await req.receive()
        if message["type"] == "http.disconnect":
            raise S3Error("IncompleteBody", "The client closed the connection before sending the whole body.")
        chunk = message.get("body", b"")
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            req.body_received = True
            return


def _unread_body(scope: Scope, req: S3Request | None) -> bool:
    if req is not None and req.body_received:
        return False
    for name, value in scope["headers"]:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() not in (b"", b"0")):
            return True
    return False


def _with_resource(err: S3Error, req: S3Request | None) -> S3Error:
    if req is not None:
        err.resource = req.resource
    return err


