"""The S3 endpoint as an ASGI app: parse → authenticate → authorize → operation → response."""

from __future__ import annotations

import logging
import re
import time
from contextlib import AsyncExitStack
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import unquote_to_bytes

import orjson
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from gateway import log
from gateway.config import Settings, User
from gateway.engine import Engine
from gateway.errors import S3Error
from gateway.s3api import cors, handlers
from gateway.s3api import headers as hdrs
from gateway.s3api.access import AccessPolicy
from gateway.s3api.auth import Identity, PayloadCheck, RequestView, VerifiedSignatures, authenticate
from gateway.s3api.body import VerifiedBody, receive_verified_body
from gateway.s3api.form import FormReader, boundary_of
from gateway.s3api.responses import error_response, new_request_id
from gateway.s3api.routes import Operation, resolve
from gateway.s3api.stats import RequestStats

_MAX_KEY_BYTES = 1024
_MAX_HEADER_BYTES = 8192  # S3's limit on the request header section
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_METHODS = frozenset({"GET", "HEAD", "PUT", "POST", "DELETE", "OPTIONS"})
_PREFLIGHT = Identity(None, PayloadCheck("unsigned"))  # who sends a CORS preflight: anyone
# The scope key under which the hit path (s3api.hits) leaves a request it parsed and
# authenticated and then declined, so that the app does not do that work again.
IDENTIFIED = "gateway.identified"


@dataclass(slots=True)
class S3Request:
    """One parsed request.

    `query` is the request's query decided once: each name with the first value the client
    gave it (S3 also takes the first of a repeated parameter). It is what is authorized, what
    keys every cache and what the origin receives; only signature checks read the raw query.
    """

    method: str
    bucket: str | None
    key: str | None
    query: dict[str, str]
    headers: dict[str, str]
    view: RequestView
    host_bucket: str | None
    request_id: str
    receive: Receive
    operation: Operation | None = None
    identity: Identity | None = None
    user: User | None = None
    _body: VerifiedBody | None = field(default=None, repr=False)
    # What the answer holds until it was sent (object reads: buffer shares, origin responses),
    # closed when the request ends, whatever happened.
    held: AsyncExitStack = field(default_factory=AsyncExitStack, repr=False)
    body_received: bool = False  # the last body message arrived (even if the body then failed a check)

    @property
    def resource(self) -> str:
        return "/" + "/".join(p for p in (self.bucket, self.key) if p)


class S3App:
    """The ASGI app that answers the S3 REST protocol."""

    def __init__(self, settings: Settings, engine: Engine) -> None:
        self.settings = settings
        self.engine = engine
        self.policy = AccessPolicy(settings.auth)
        self._skew = timedelta(seconds=settings.auth.max_clock_skew)
        self.stats = RequestStats()
        self.verified = VerifiedSignatures()  # SigV4 checks that passed lately (auth.memo)
        # Called with every request's access-log entry (a dict), logged or not: the shadow estimate.
        self.observers: list[Callable[[dict[str, Any]], None]] = []

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
                self.finished(req, scope, request_id, outcome, time.perf_counter() - started)

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

    def finished(self, req: S3Request | None, scope: Scope, request_id: str, outcome: dict[str, Any],
                 seconds: float) -> None:
        """A request answered (`outcome`: see note_answer): counted, and its access-log entry.
        One of a known user that succeeded shows that its bucket exists (Engine.bucket_exists:
        a CORS preflight for it may then ask the origin for its rules without a rate limit)."""
        if req is not None and req.user is not None and req.bucket is not None and outcome["status"] < 400:
            self.engine.bucket_exists(req.bucket)
        self.stats.record(
            req.operation.name if req is not None and req.operation is not None else "unknown",
            outcome["status"], seconds, cache=outcome["cache"], sent=outcome["bytes"])
        logged = log.access.isEnabledFor(logging.INFO)
        if logged or self.observers:
            _access_log(access_entry(req, scope["method"], outcome), request_id, outcome["bytes"], outcome["cache"],
                        seconds, self.observers, logged)

    def finished_again(self, answered: Answered, request_id: str, sent: int, cache: str, seconds: float) -> None:
        """A request answered again as `answered` describes it: counted and logged as `finished`
        counts and logs it (s3api.replays)."""
        self.stats.record(answered.operation, answered.status, seconds, cache=cache, sent=sent)
        logged = log.access.isEnabledFor(logging.INFO)
        if logged or self.observers:
            _access_log(dict(answered.entry), request_id, sent, cache, seconds, self.observers, logged)

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


def parse_request(scope: Scope, receive: Receive, request_id: str, domain: str) -> S3Request:
    """Split the wire request into bucket, key, query and headers (path-style or virtual-hosted)."""
    if sum(len(k) + len(v) for k, v in scope["headers"]) > _MAX_HEADER_BYTES:
        raise S3Error("RequestHeaderSectionTooLarge", extra={"MaxSizeAllowed": str(_MAX_HEADER_BYTES)})
    raw_headers = tuple((k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in scope["headers"])
    headers: dict[str, str] = {}
    for name, value in raw_headers:
        headers[name] = f"{headers[name]},{value}" if name in headers else value
    raw_path_bytes: bytes = scope.get("raw_path") or scope["path"].encode("utf-8")
    raw_path = raw_path_bytes.decode("latin-1")
    query_string = scope.get("query_string", b"").decode("latin-1")
    view = RequestView(method=scope["method"], raw_path=raw_path, query_string=query_string, headers=raw_headers)
    bucket_from_host = _bucket_from_host(headers.get("host", ""), domain)
    if _BAD_ESCAPE.search(raw_path):
        raise S3Error("InvalidURI", "Couldn't parse the specified URI.")
    try:
        path = _unquote(raw_path)
        query_pairs = [
            (_unquote(name), _unquote(value))
            for name, _, value in (part.partition("=") for part in query_string.split("&") if part)
        ]
    except UnicodeDecodeError:
        raise S3Error("InvalidURI", "Couldn't parse the specified URI.") from None
    if not path.startswith("/") or "\x00" in path:
        raise S3Error("InvalidURI", "Couldn't parse the specified URI.")
    if bucket_from_host is not None:
        bucket: str | None = bucket_from_host
        key: str | None = path[1:] or None
    else:
        bucket_part, _, key_part = path[1:].partition("/")
        bucket = bucket_part or None
        key = key_part or None
    if bucket is not None and not _plausible_bucket(bucket):
        raise S3Error("InvalidBucketName", resource=f"/{bucket}", extra={"BucketName": bucket})
    if key is not None and len(key.encode("utf-8")) > _MAX_KEY_BYTES:
        raise S3Error("KeyTooLongError", resource=f"/{bucket}")
    query: dict[str, str] = {}
    for name, value in query_pairs:
        query.setdefault(name, value)
    return S3Request(
        method=scope["method"], bucket=bucket, key=key, query=query,
        headers=headers, view=view, host_bucket=bucket_from_host, request_id=request_id, receive=receive,
    )


def note_answer(outcome: dict[str, Any], status: int, headers: Iterable[tuple[bytes, bytes]]) -> None:
    """What the access log and stats keep of an answer's status line and headers: the status,
    the x-cache value, and the object's size when the answer shows it."""
    outcome["status"] = status
    for name, value in headers:
        if name == b"x-cache":
            outcome["cache"] = value.decode("latin-1")
        elif name == b"content-range":  # bytes a-b/SIZE: the object's size
            outcome["size"] = value.rpartition(b"/")[2].decode("latin-1")
        elif name == b"content-length" and status == 200:
            outcome.setdefault("size", value.decode("latin-1"))


def _check_part_number(value: str) -> None:
    """S3's check of partNumber, made here so that no origin sees a bad one."""
    if not (value.isascii() and value.isdigit() and len(value) <= 5 and 1 <= int(value) <= 10000):
        raise S3Error("InvalidArgument", "Part number must be an integer between 1 and 10000, inclusive",
                      extra={"ArgumentName": "partNumber", "ArgumentValue": value[:64]})


def _unquote(text: str) -> str:
    """%XX-decode as UTF-8 (raises UnicodeDecodeError for bytes that are not)."""
    if "%" not in text and text.isascii():
        return text
    return unquote_to_bytes(text).decode("utf-8")


def _bucket_from_host(host: str, domain: str) -> str | None:
    if not domain:
        return None
    name = host.rsplit(":", 1)[0].lower() if not host.startswith("[") else host
    suffix = "." + domain.lower()
    if name.endswith(suffix) and len(name) > len(suffix):
        return name[: -len(suffix)]
    return None


def _plausible_bucket(name: str) -> bool:
    # Existing buckets may predate today's naming rules (upper case, '_', 255 chars in
    # us-east-1); CreateBucket applies the strict rules, everything else only these.
    return 0 < len(name) <= 255 and all(c.isascii() and (c.isalnum() or c in "._-") for c in name)


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


@dataclass(frozen=True, slots=True)
class Answered:
    """What the counters and the access log say of every answer to one request sent again and
    again (s3api.replays): its operation's name, its status, and its access-log entry but for
    the fields each answer fills in (access_entry)."""

    operation: str
    status: int
    entry: dict[str, Any]


def answered_for(req: S3Request, method: str, outcome: dict[str, Any]) -> Answered:
    """How `finished` counts and logs `req`, answered with `outcome` (status and size)."""
    return Answered(req.operation.name if req.operation is not None else "unknown", outcome["status"],
                    access_entry(req, method, outcome))


def access_entry(req: S3Request | None, method: str, outcome: dict[str, Any]) -> dict[str, Any]:
    """A request's access-log entry with the fields its answer's status and size settle;
    time, request_id, bytes, cache and latency_ms are None, for `_access_log` to fill in.

    `user` is the access key (never a secret, a signature or the query string of a presigned
    URL); `size` the object's size when the answer shows it (a GET's Content-Range or
    whole-object Content-Length)."""
    operation = req.operation.name if req and req.operation else None
    # An object's size, from the answer to a read of it (a listing's length is no object's).
    size = outcome.get("size") if operation in ("GetObject", "HeadObject") else None
    return {
        "time": None,
        "request_id": None,
        "user": req.user.access_key if req and req.user else None,
        "operation": operation,
        "method": method,
        "bucket": req.bucket if req else None,
        "key": req.key if req else None,
        "range": req.headers.get("range") if req else None,
        "status": outcome["status"],
        "bytes": None,
        "cache": None,
        "size": int(size) if size is not None and size.isdigit() else None,
        "latency_ms": None,
    }


def _access_log(entry: dict[str, Any], request_id: str, sent: int, cache: str | None, seconds: float,
                observers: list[Callable[[dict[str, Any]], None]], logged: bool) -> None:
    """A request's access-log entry (from access_entry, completed here) handed to the
    `observers`, and `logged` as one JSON line. `cache` is the answer's x-cache value."""
    # round(x, 3) and round(x, 2) but for a value within float error of a tie, without round()'s
    # decimal conversion: the two cost a twentieth of a request sent again (s3api.replays).
    entry["time"] = int(time.time() * 1000 + 0.5) / 1000  # seconds, to the millisecond
    entry["request_id"] = request_id
    entry["bytes"] = sent
    entry["cache"] = cache
    entry["latency_ms"] = int(seconds * 100_000 + 0.5) / 100
    for observe in observers:
        try:
            observe(entry)
        except Exception:  # an estimate must never cost a request
            log.s3api.exception("an access-log observer failed")
    if logged:
        log.access.info(orjson.dumps(entry).decode())
