"""The hit path below ASGI: a GET or HEAD of an object whose metadata is fresh in memory
and whose bytes one block holds that a tier reads at once (the memory tier; a disk tier
when the page cache holds the block) is answered inside the HTTP protocol's callback, with
no ASGI cycle, task or response object run.

It takes the same steps as the ASGI path, with the same functions and services (parse_request,
the app's Authenticator, the policy, reads.object_answer, cors.answer_headers, the responses
module), and counts and logs the same way: what it answered is a `Served`, kept in every book
by the one function the app's answers are (s3api.accounting.Accounts.record). At the first
doubt (a body, a write, a sub-resource, a personal read, an Origin whose bucket's CORS rules are
not in memory, a miss, any S3 error such as a failed signature or a 304) it answers None, having
counted nothing, and the ASGI app takes the request; one that got as far as being
authenticated is handed over parsed (request.IDENTIFIED), so a miss or a disk hit does not
pay for parsing and the signature twice.

In a fleet, a GET of one block another node owns gets a later answer: the steps above, then
a task of the protocol waits for the block (Engine.read_block, as the app reads it) and the
answer is made and counted once it came; if the block cannot be had (an S3 error, the object
changed), nothing is counted and the app takes the request, parsed as it is.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.engine import ObjectMeta, OneBlock
from gateway.errors import S3Error
from gateway.s3api import cors, reads
from gateway.s3api import headers as hdrs
from gateway.s3api.accounting import BELOW_ASGI, Accounts, Served, answered_for, outcome_of
from gateway.s3api.context import Context, Services
from gateway.s3api.identify import Authenticator
from gateway.s3api.replays import Keeper, Replay, Replays, keepable
from gateway.s3api.request import IDENTIFIED, S3Request, parse_request
from gateway.s3api.responses import new_request_id, raw_headers

# (keep-alive) -> the whole answer, made once the block of a GET another node owns came.
_Make = Callable[[bool], list[bytes | memoryview]]
_Later = Callable[[], Awaitable[tuple[_Make, Keeper] | None]]  # httpserver.Later

_READS = frozenset({"GetObject", "HeadObject"})
_BODY_HEADERS = (b"content-length", b"transfer-encoding")

# uvicorn writes the same status lines; 200 and 206 are the only ones answered here.
_STATUS_LINES = {200: b"HTTP/1.1 200 OK\r\n", 206: b"HTTP/1.1 206 Partial Content\r\n"}


async def _no_body() -> dict[str, Any]:
    raise AssertionError("the hit path answers only requests without a body")


def http_head(status: int, default_headers: list[tuple[bytes, bytes]], headers: list[tuple[bytes, bytes]],
              keep_alive: bool) -> bytes:
    """The head of an answer (200 or 206) as uvicorn writes it: status line, the server's default
    headers (Date), `headers`, and Connection: close when not `keep_alive`."""
    head = [_STATUS_LINES[status]]
    for name, value in (*default_headers, *headers):
        head += (name, b": ", value, b"\r\n")
    head.append(_closing(keep_alive))
    return b"".join(head)


def _closing(keep_alive: bool) -> bytes:
    return b"\r\n" if keep_alive else b"connection: close\r\n\r\n"


class HitPath:
    """Answers cache hits from the HTTP protocol (gateway.httpserver.Hits), with the services,
    authenticator and accounts of the ASGI app (s3api.server.S3App) it answers for."""

    def __init__(self, services: Services, authenticator: Authenticator, accounts: Accounts) -> None:
        self.services, self.authenticator, self.accounts = services, authenticator, accounts
        self._domain = services.server.domain
        self.replays = Replays(services, accounts, max_skew=authenticator.max_skew)

    def answer(self, scope: dict[str, Any], default_headers: list[tuple[bytes, bytes]], keep_alive: bool,
               ) -> tuple[list[bytes | memoryview], Keeper] | _Later | None:
        """The whole HTTP answer to the request of `scope` (an ASGI HTTP scope) when it is a
        hit, with what keeping it to answer it again takes (replays.Keeper); a later answer
        (httpserver.Later) when it is a GET of one block another node owns; else None (nothing
        counted).
        `default_headers` are the server's (Date); `keep_alive` False adds Connection: close,
        as uvicorn does."""
        method = scope["method"]
        if method != "GET" and method != "HEAD":
            return None
        for name, value in scope["headers"]:
            if name in _BODY_HEADERS and (name == b"transfer-encoding" or value.strip() not in (b"", b"0")):
                return None
        started = time.perf_counter()
        request_id = new_request_id()
        services = self.services
        engine = services.engine
        try:
            req = parse_request(scope, _no_body, request_id, self._domain)
            self.authenticator.identify(req)
            scope[IDENTIFIED] = req  # declined from here on, the app takes it as it is
            if req.operation is None or req.operation.name not in _READS or "partNumber" in req.query:
                return None
            Context(req, services).check()
            overrides = reads.response_overrides(req)
            if hdrs.personal_read_headers(req.headers):
                return None
            bucket, key = req.bucket or "", req.key or ""
            meta = engine.fresh_now(bucket, key, version_id=req.query.get("versionId"),
                                    checksums=reads.wants_whole_checksums(req))
            if meta is None:
                return None
            answer = reads.object_answer(req, meta, overrides)
        except S3Error:
            return None
        origin, cors_document = req.headers.get("origin"), None
        if origin is not None:  # a browser's: the bucket's CORS rules decide what the answer adds
            known, cors_document = engine.bucket_cors_now(bucket)
            if not known:
                return None
            answer.headers.update(cors.answer_headers(cors_document, origin, method))
        made = _Made(req, scope, request_id, started, answer, default_headers)
        made.cors = cors_document
        if method == "HEAD":
            answer.headers[reads.X_CACHE] = "hit-mem"  # as the app says of metadata from memory
            pieces = self._whole(made, b"", keep_alive)
            return pieces, functools.partial(self._replay, made, meta, None)
        read = engine.one_block(bucket, key, meta, answer.start, answer.end)
        if read is None:
            return None
        hit = engine.read_block_now(read, meta)
        if hit is None:
            return functools.partial(self._later, made, meta, read) if engine.peer_owns(read) else None
        body, answer.headers[reads.X_CACHE] = hit
        pieces = self._whole(made, body, keep_alive)
        return pieces, functools.partial(self._replay, made, meta, read)

    async def _later(self, made: _Made, meta: ObjectMeta, read: OneBlock) -> tuple[_Make, Keeper] | None:
        """A GET of one block another node owns: the block read as the app reads it, then (what
        makes the answer for the connection's keep-alive of that moment, counted as it is made,
        what keeping the request takes once it was made); None (nothing counted) when the read
        fails: the app answers, and says why."""
        try:
            got = await self.services.engine.read_block(read, meta)
        except S3Error:  # ObjectChanged too: the app reads the object as it is now
            return None
        async with got:
            body = got.body
            assert body is not None  # a read within one block is in hand
        made.answer.headers[reads.X_CACHE] = got.source
        return functools.partial(self._whole, made, body), functools.partial(self._replay, made, meta, read)

    def _whole(self, made: _Made, body: bytes | memoryview, keep_alive: bool) -> list[bytes | memoryview]:
        """The HTTP answer (head, body) to a request made up to its body, counted and logged."""
        answer, request_id = made.answer, made.request_id
        lines = raw_headers(answer.headers, request_id, len(body))  # (a HEAD's body is b"")
        made.status_line, made.raw_headers = _STATUS_LINES[answer.status], lines
        made.closing, made.keep_alive = _closing(keep_alive), keep_alive
        head = http_head(answer.status, made.default_headers, lines, keep_alive)
        outcome = made.outcome = outcome_of(answer.status, answer.headers, len(body))
        self.accounts.record(Served(answered_for(made.req, made.scope["method"], outcome), request_id, len(body),
                                    outcome["cache"], time.perf_counter() - made.started, BELOW_ASGI))
        return [head, body]

    def _replay(self, made: _Made, meta: ObjectMeta, read: OneBlock | None) -> Replay | None:
        """What answering the same request again takes (`read`: the block a GET's bytes came
        from), or None when it may not be kept; once the answer was made (_whole)."""
        req = made.req
        identity = req.identity
        assert identity is not None
        secret = self.services.policy.secret_for(identity.access_key) if identity.access_key is not None else None
        times = keepable(req, identity, secret)
        if times is None:
            return None
        return Replay(req, identity.access_key, secret, *times, req.query.get("versionId"),
                      reads.wants_whole_checksums(req), meta, read, made.status_line, made.raw_headers,
                      made.closing, made.keep_alive, answered_for(req, made.scope["method"], made.outcome),
                      cors=made.cors)


class _Made:
    """A request the hit path answers, up to its body; then what answering it made."""

    __slots__ = ("req", "scope", "request_id", "started", "answer", "default_headers",
                 "status_line", "raw_headers", "closing", "keep_alive", "outcome", "cors")

    def __init__(self, req: S3Request, scope: dict[str, Any], request_id: str, started: float,
                 answer: reads.ObjectAnswer, default_headers: list[tuple[bytes, bytes]]) -> None:
        self.req, self.scope, self.request_id, self.started = req, scope, request_id, started
        self.answer, self.default_headers = answer, default_headers
        self.status_line = self.closing = b""
        self.keep_alive = True
        self.raw_headers: list[tuple[bytes, bytes]] = []
        self.outcome: dict[str, Any] = {}
        self.cors: bytes | None = None  # the bucket's CORS document the answer's headers came from
