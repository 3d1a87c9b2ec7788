"""The admin API under `admin.path`, protected by the admin token (never by S3 credentials)."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qsl

import orjson
from starlette.types import Receive, Scope, Send

from gateway.config import AdminSettings
from gateway.events import MAX_EVENT_BYTES, Change, EventError, parse_s3_event


class AdminApp:
    """`GET healthz`; with the token: `POST purge?bucket=B[&prefix=P|&key=K]` and `POST events`.

    `purge` forgets cached metadata, listings and blocks of a key, a prefix or a bucket;
    `events` takes an S3 event notification (plain, via SNS, or EventBridge) and forgets
    what it names. Both callbacks are the engine's.
    """

    def __init__(
        self,
        settings: AdminSettings,
        purge: Callable[[str, str, bool], Awaitable[int]],
        changed: Callable[[list[Change]], Awaitable[None]],
    ) -> None:
        self.settings = settings
        self._purge = purge
        self._changed = changed
        self._token = settings.token.encode()

    def handles(self, path: str) -> bool:
        return bool(self._token) and (path == self.settings.path or path.startswith(self.settings.path + "/"))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = scope["path"][len(self.settings.path):]
        method = scope["method"]
        if route == "/healthz" and method in ("GET", "HEAD"):
            return await _json(send, 200, {"status": "ok"})
        if not self._authorized(scope):
            return await _json(send, 401, {"error": "a valid admin token is required (Authorization: Bearer ...)"})
        if route == "/purge" and method == "POST":
            query = _query(scope)
            bucket = query.get("bucket", "")
            if not bucket or ("key" in query and "prefix" in query):
                return await _json(send, 400, {"error": "purge takes bucket and at most one of key, prefix"})
            exact = "key" in query
            removed = await self._purge(bucket, query.get("key", query.get("prefix", "")), exact)
            return await _json(send, 200, {"bucket": bucket, "blocks_removed": removed})
        if route == "/events" and method == "POST":
            body = await _read_body(receive, MAX_EVENT_BYTES)
            if body is None:
                return await _json(send, 413, {"error": f"an event is at most {MAX_EVENT_BYTES} bytes"})
            try:
                changes = parse_s3_event(body)
            except EventError as exc:
                return await _json(send, 400, {"error": f"not an S3 event notification: {exc}"})
            await self._changed(changes)
            return await _json(send, 200, {"invalidated": len(changes)})
        return await _json(send, 404, {"error": f"no admin route {method} {route or '/'}"})

    def _authorized(self, scope: Scope) -> bool:
        for name, value in scope["headers"]:
            if name == b"authorization" and value.startswith(b"Bearer "):
                return hmac.compare_digest(value[len(b"Bearer "):], self._token)
        return False


def _query(scope: Scope) -> dict[str, str]:
    return dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True))


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body += message.get("body", b"")
        if len(body) > limit:
            return None
        if not message.get("more_body", False):
            return bytes(body)


async def _json(send: Send, status: int, document: object) -> None:
    body = orjson.dumps(document)
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
