"""The hit path below ASGI: a GET or HEAD of an object whose metadata is fresh in memory
and whose bytes one block holds that a tier reads at once (the memory tier; a disk tier
when the page cache holds the block) is answered inside the HTTP protocol's callback, with
no ASGI cycle, task or response object run.

It takes the same steps as the ASGI path, with the same functions (parse_request, the
app's `identify`, the policy, reads.object_answer, the responses module), and counts
and logs the same way (S3App.finished). At the first doubt (a body, a write, a sub-resource,
a personal read, a miss, any S3 error such as a failed signature or a 304) it answers
None, having counted nothing, and the ASGI app takes the request; one that got as far as
being authenticated is handed over parsed (server.IDENTIFIED), so a miss or a disk hit
does not pay for parsing and the signature twice.
"""

from __future__ import annotations

import time
from typing import Any

from gateway.engine import ObjectMeta, OneBlock
from gateway.errors import S3Error
from gateway.s3api import reads
from gateway.s3api.context import Context
from gateway.s3api import headers as hdrs
from gateway.s3api.replays import Replay, Replays, keepable
from gateway.s3api.responses import body_response, empty_response, new_request_id
from gateway.s3api.server import IDENTIFIED, S3App, S3Request, answered_for, note_answer, parse_request

_READS = frozenset({"GetObject", "HeadObject"})
_BODY_HEADERS = (b"content-length", b"transfer-encoding")

# uvicorn writes the same status lines; 200 and 206 are the only ones answered here.
_STATUS_LINES = {200: b"HTTP/1.1 200 OK\r\n", 206: b"HTTP/1.1 206 Partial Content\r\n"}


async def _no_body() -> dict[str, Any]:
    raise AssertionError("the hit path answers only requests without a body")


class HitPath:
    """Answers cache hits for an S3App from the HTTP protocol (gateway.httpserver.Hits)."""

    def __init__(self, app: S3App) -> None:
        self.app = app
        self._domain = app.settings.server.domain
        self.replays = Replays(app)

    def answer(self, scope: dict[str, Any], default_headers: list[tuple[bytes, bytes]],
               keep_alive: bool) -> tuple[list[bytes | memoryview], Replay | None] | None:
        """The whole HTTP answer to the request of `scope` (an ASGI HTTP scope) when it is a
        hit, with what answering it again takes (None when it may not be kept), else None
        (nothing counted). `default_headers` are the server's (Date); `keep_alive` False
        adds Connection: close, as uvicorn does."""
        method = scope["method"]
        if method != "GET" and method != "HEAD":
            return None
        for name, value in scope["headers"]:
            if name in _BODY_HEADERS and (name == b"transfer-encoding" or value.strip() not in (b"", b"0")):
                return None
        started = time.perf_counter()
        request_id = new_request_id()
        app = self.app
        engine = app.engine
        try:
            req = parse_request(scope, _no_body, request_id, self._domain)
            app.identify(req)
            scope[IDENTIFIED] = req  # declined from here on, the app takes it as it is
            if req.operation is None or req.operation.name not in _READS or "partNumber" in req.query:
                return None
            Context(req, app).check()
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
        if method == "GET":
            read = engine.one_block(bucket, key, meta, answer.start, answer.end)
            hit = None if read is None else engine.read_block_now(read, meta)
            if hit is None:
                return None
            body, answer.headers[reads.X_CACHE] = hit
            response = body_response(body, request_id, status=answer.status, headers=answer.headers)
        else:
            engine.head_answered_now()
            answer.headers[reads.X_CACHE] = "hit-mem"  # as the app says of metadata from memory
            response = empty_response(request_id, status=answer.status, headers=answer.headers)
            body, read = b"", None
        status_line = _STATUS_LINES[answer.status]
        head = [status_line]
        for name, value in default_headers:
            head += (name, b": ", value, b"\r\n")
        for name, value in response.raw_headers:
            head += (name, b": ", value, b"\r\n")
        closing = b"\r\n" if keep_alive else b"connection: close\r\n\r\n"
        head.append(closing)
        outcome: dict[str, Any] = {"bytes": len(body), "cache": None}
        note_answer(outcome, answer.status, response.raw_headers)
        app.finished(req, scope, request_id, outcome, time.perf_counter() - started)
        app.stats.below_asgi += 1
        return [b"".join(head), body], self._replay(req, scope, meta, read, status_line, response.raw_headers,
                                                     closing, keep_alive, outcome)

    def _replay(self, req: S3Request, scope: dict[str, Any], meta: ObjectMeta, read: OneBlock | None,
                status_line: bytes, raw_headers: list[tuple[bytes, bytes]], closing: bytes, keep_alive: bool,
                outcome: dict[str, Any]) -> Replay | None:
        """What answering the same request again takes (`read`: the block a GET's bytes came
        from), or None when it may not be kept."""
        identity = req.identity
        assert identity is not None
        secret = self.app.policy.secret_for(identity.access_key) if identity.access_key is not None else None
        times = keepable(req, identity, secret)
        if times is None:
            return None
        return Replay(req, identity.access_key, secret, *times, req.query.get("versionId"),
                      reads.wants_whole_checksums(req), meta, read, status_line, raw_headers,
                      closing, keep_alive, answered_for(req, scope["method"], outcome))
