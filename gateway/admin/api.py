"""The admin API under `admin.path`, protected by the admin token (never by S3 credentials)."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qsl

import orjson
from starlette.types import Receive, Scope, Send

from gateway.admin import dashboard
from gateway.admin.load import load_prefix
from gateway.admin.metrics import CONTENT_TYPE_LATEST, registry_for, render
from gateway.admin.node import Node
from gateway.admin.ready import readiness
from gateway.admin.stats import stats_document
from gateway.config import AdminSettings
from gateway.errors import S3Error
from gateway.events import MAX_EVENT_BYTES, EventError, parse_s3_event

Handler = Callable[[Scope, Receive, Send], Awaitable[None]]
# Answered without the token: load balancers and probes; the dashboard page, which holds no figures.
_OPEN = frozenset({"/healthz", "/readyz", "/dashboard"})


class AdminApp:
    """A small router of plain ASGI handlers. Without a token: `GET healthz` (the process
    runs), `GET readyz` (the origin and Redis answer) and `GET dashboard` (an HTML page
    whose script asks for the token and polls `stats`). With the token:

    - `GET metrics`: Prometheus text; `GET stats`: the node's figures as JSON;
    - `POST|DELETE pin?bucket=B&prefix=P`: pin or unpin a prefix at runtime;
    - `POST purge?bucket=B[&prefix=P|&key=K]`: forget cached metadata, listings and
      blocks of a key, a prefix or a bucket (evict);
    - `POST load?bucket=B[&prefix=P][&replicas=N]`: load every object under the prefix into
      the cache (Alluxio's distributedLoad; in a fleet each block by its owners, N of them
      with `replicas`); the answer streams one JSON line of progress about twice a second
      and a last one with `"done": true`. The load goes on if the client leaves;
    - `POST events`: an S3 event notification (plain, via SNS, or EventBridge); what it
      names is forgotten.
    """

    def __init__(self, settings: AdminSettings, node: Node) -> None:
        self.settings = settings
        self.node = node
        self.registry = registry_for(node)
        self._token = settings.token.encode()
        self._routes: dict[tuple[str, str], Handler] = {
            ("GET", "/healthz"): self._healthz,
            ("HEAD", "/healthz"): self._healthz,
            ("GET", "/readyz"): self._readyz,
            ("GET", "/dashboard"): self._dashboard,
            ("GET", "/metrics"): self._metrics,
            ("GET", "/stats"): self._stats,
            ("POST", "/pin"): self._pin,
            ("DELETE", "/pin"): self._pin,
            ("POST", "/purge"): self._purge,
            ("POST", "/load"): self._load,
            ("POST", "/events"): self._events,
        }

    def handles(self, path: str) -> bool:
        return bool(self._token) and (path == self.settings.path or path.startswith(self.settings.path + "/"))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = scope["path"][len(self.settings.path):]
        method = scope["method"]
        if route not in _OPEN and not self._authorized(scope):
            return await _json(send, 401, {"error": "a valid admin token is required (Authorization: Bearer ...)"})
        handler = self._routes.get((method, route))
        if handler is None:
            return await _json(send, 404, {"error": f"no admin route {method} {route or '/'}"})
        await handler(scope, receive, send)

    async def _healthz(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _json(send, 200, {"status": "ok"})

    async def _readyz(self, scope: Scope, receive: Receive, send: Send) -> None:
        checks = await readiness(self.node.engine)
        failed = {name: why for name, why in checks.items() if why != "ok"}
        if failed:
            await _json(send, 503, {"status": "unavailable", "failed": failed, "checks": checks})
        else:
            await _json(send, 200, {"status": "ok", "checks": checks})

    async def _dashboard(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": dashboard.HEADERS})
        await send({"type": "http.response.body", "body": dashboard.PAGE})

    async def _metrics(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _send(send, 200, render(self.registry), CONTENT_TYPE_LATEST.encode())

    async def _stats(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _json(send, 200, stats_document(self.node))

    async def _pin(self, scope: Scope, receive: Receive, send: Send) -> None:
        query = _query(scope)
        bucket, prefix = query.get("bucket", ""), query.get("prefix", "")
        if not bucket or set(query) - {"bucket", "prefix"}:
            return await _json(send, 400, {"error": "pin takes bucket and an optional prefix"})
        pin, pins = (bucket, prefix), self.node.pins
        if scope["method"] == "DELETE":
            if pin in pins.configured:
                return await _json(send, 409, {"error": f"{bucket}/{prefix} is pinned by the configuration "
                                                        "(cache.pinned); change it there"})
            if not pins.is_runtime(pin):
                return await _json(send, 404, {"error": f"{bucket}/{prefix} is not pinned"})
        pinned = scope["method"] == "POST"
        shared = await pins.set(pin, pinned)
        await _json(send, 200, {"bucket": bucket, "prefix": prefix, "pinned": pinned, "shared": shared})

    async def _purge(self, scope: Scope, receive: Receive, send: Send) -> None:
        query = _query(scope)
        bucket = query.get("bucket", "")
        if not bucket or ("key" in query and "prefix" in query):
            return await _json(send, 400, {"error": "purge takes bucket and at most one of key, prefix"})
        exact = "key" in query
        removed = await self.node.engine.purge_prefix(bucket, query.get("key", query.get("prefix", "")), exact)
        await _json(send, 200, {"bucket": bucket, "blocks_removed": removed})

    async def _load(self, scope: Scope, receive: Receive, send: Send) -> None:
        query = _query(scope)
        bucket, prefix = query.get("bucket", ""), query.get("prefix", "")
        replicas = query.get("replicas")
        if not bucket or set(query) - {"bucket", "prefix", "replicas"}:
            return await _json(send, 400, {"error": "load takes bucket, and optionally prefix and replicas"})
        if replicas is not None and (not replicas.isdigit() or not 1 <= int(replicas) <= 1000):
            return await _json(send, 400, {"error": "replicas: a whole number from 1 to 1000"})
        if replicas is not None and self.node.engine.fleet is None:
            return await _json(send, 400, {"error": "replicas: this node is not part of a fleet"})
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/x-ndjson")]})
        last: dict[str, object] = {}
        try:
            async for progress in load_prefix(self.node.engine, bucket, prefix,
                                              replicas=int(replicas) if replicas is not None else None):
                last = progress.as_dict()
                await send({"type": "http.response.body", "body": orjson.dumps(last) + b"\n", "more_body": True})
            last["done"] = True
        except S3Error as err:  # the listing failed: nothing (more) can be loaded
            last = {**last, "done": True, "error": f"{err.code}: {err.message}"}
        await send({"type": "http.response.body", "body": orjson.dumps(last) + b"\n"})

    async def _events(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await _read_body(receive, MAX_EVENT_BYTES)
        if body is None:
            return await _json(send, 413, {"error": f"an event is at most {MAX_EVENT_BYTES} bytes"})
        try:
            changes = parse_s3_event(body)
        except EventError as exc:
            return await _json(send, 400, {"error": f"not an S3 event notification: {exc}"})
        await self.node.engine.changed(changes)
        await _json(send, 200, {"invalidated": len(changes)})

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
    await _send(send, status, orjson.dumps(document), b"application/json")


async def _send(send: Send, status: int, body: bytes, content_type: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", content_type), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
