"""The admin API under `admin.path`, protected by the admin token (never by S3 credentials)."""

from __future__ import annotations

import asyncio
import hmac
import importlib.util
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl

import orjson
from starlette.types import Receive, Scope, Send

from gateway.admin import dashboard
from gateway.admin.ledger import PERIOD, Counts, Ledger, read
from gateway.admin.load import LoadRequest, load_prefix
from gateway.admin.metrics import CONTENT_TYPE_LATEST, registry_for, render
from gateway.admin.node import Node
from gateway.admin.nodewide import Family, families, node_metrics, node_shadow, node_stats, workers_figure
from gateway.admin.ready import readiness, siblings_up
from gateway.admin.siblings import ACTION_TIMEOUT, LOCAL, SiblingAdmin
from gateway.admin.stats import HOT_OBJECTS, stats_counts, stats_document
from gateway.admin.tableplan import FORMATS
from gateway.cluster.peers import decode_query
from gateway.config import AdminSettings
from gateway.errors import S3Error
from gateway.events import MAX_EVENT_BYTES, EventError, parse_s3_event
from gateway.node.workers import WorkerSet
from gateway.tables.partitions import parse_filters

Handler = Callable[[Scope, Receive, Send], Awaitable[None]]
# A worker's own part of a node-wide request: (method, query) -> its answer.
OwnPart = Callable[[str, dict[str, str]], Awaitable[dict[str, Any]]]
# Answered without the token: load balancers and probes; the dashboard page, which holds no figures.
_OPEN = frozenset({"/healthz", "/readyz", "/dashboard"})
_LOAD_PARAMETERS = {"bucket", "prefix", "replicas", "table", "snapshot", "footers", "plan"}


class AdminApp:
    """A small router of plain ASGI handlers. Without a token: `GET healthz` (the process
    runs), `GET readyz` (the origin and Redis answer; in a node of several workers, every
    worker came up: gateway.admin.ready) and `GET dashboard` (an HTML page
    whose script asks for the token and polls `stats`). With the token:

    - `GET metrics`: Prometheus text; `GET stats`: the node's figures as JSON;
    - `POST|DELETE pin?bucket=B&prefix=P`: pin or unpin a prefix at runtime;
    - `POST purge?bucket=B[&prefix=P|&key=K]`: forget cached metadata, listings and
      blocks of a key, a prefix or a bucket (evict);
    - `POST load?bucket=B[&prefix=P][&replicas=N][&table=iceberg|delta][&snapshot=ID]
      [&partition=F...][&footers=1][&plan=1]`: load every object under the prefix, or the
      files of the table there (gateway.admin.load), into the cache (Alluxio's
      distributedLoad; in a fleet each block by its owners, N of them with `replicas`); the
      answer streams one JSON line of progress about twice a second and a last one with
      `"done": true`. The load goes on if the client leaves;
    - `POST events`: an S3 event notification (plain, via SNS, or EventBridge); what it
      names is forgotten.

    A node of several workers (`workers`, gateway.node.workers) is one cache, and a request
    lands on whichever worker got its connection: that worker answers for the node, its own
    part plus its siblings' (gateway.admin.siblings, gateway.admin.nodewide). `stats` and
    `metrics` are the figures of all workers together, with `workers` (how many of how many
    answered); `purge` and `pin` are carried out by every worker (each holds its own blocks
    and, without Redis, its pins); what `purge` and `events` invalidate reaches the other
    workers through the node's invalidation journal; `load` runs on this worker, its reads
    going to each block's owner. `healthz`, `readyz` and `dashboard` are this worker's answer.
    The counters it shows never go down while the node runs (gateway.admin.ledger): each
    worker's count goes on from the workers before it at its index, and a sibling that does
    not answer counts with what it last wrote (`keep_counts` writes them).
    """

    def __init__(self, settings: AdminSettings, node: Node, workers: WorkerSet | None = None) -> None:
        self.settings = settings
        self.node = node
        self.registry = registry_for(node)
        self.workers = workers or WorkerSet()
        self.siblings = None if self.workers.alone else SiblingAdmin(self.workers, settings.path)
        self._token = settings.token.encode()
        # (Without an admin token no one reads the counters: nothing to keep.)
        self.ledger = None if self.siblings is None or not self._token \
            else Ledger(self.workers.ledger_path(self.workers.index))
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
        # This worker's part, asked by a sibling under local/ (signed with the node's secret).
        self._own: dict[tuple[str, str], OwnPart] = {
            ("GET", "/stats"): self._own_stats,
            ("GET", "/metrics"): self._own_metrics,
            ("POST", "/pin"): self._own_pin,
            ("DELETE", "/pin"): self._own_pin,
            ("POST", "/purge"): self._own_purge,
            ("GET", "/pins"): self._own_pins,
        }

    async def aclose(self) -> None:
        if self.siblings is not None:
            await self.siblings.aclose()
        if self.ledger is not None:  # every request was answered: nothing this worker counted is lost
            self._counted()

    async def keep_counts(self) -> None:
        """Write this worker's counts to its ledger every PERIOD seconds (a node of several),
        when it answered anything since: an idle worker does nothing."""
        last: dict[str, Any] = {}
        while self.ledger is not None:
            if (now := stats_counts(self.node)) != last:  # some µs; collecting every counter takes ~1 ms
                self._counted()
                last = now
            await asyncio.sleep(PERIOD)

    def _counted(self) -> tuple[list[Family], dict[str, Any]]:
        """This worker's metric families and stats counts, with its predecessors' counts
        (a node of several workers), written to its ledger before anyone is shown them."""
        own, counts = families(self.registry), stats_counts(self.node)
        if self.ledger is None:
            return own, counts
        own, counts = self.ledger.carry(own, counts)
        self.ledger.write(own, counts)
        return own, counts

    def _absent(self, answers: list[dict[str, Any]]) -> list[Counts]:
        """The ledgers of the siblings missing from `answers` (each names its "worker")."""
        assert self.siblings is not None
        missing = workers_figure(answers, self.siblings.count)["missing"]
        return [counts for index in missing if (counts := read(self.workers.ledger_path(index))) is not None]

    async def adopt_pins(self) -> None:
        """Take the runtime pins the siblings hold, once, as a worker starts (or restarts)
        in a node without Redis: runtime pins then live in each worker's memory, and a
        restarted worker would otherwise evict the pinned blocks it owns. With Redis every
        worker reads them from there."""
        if self.siblings is None or self.node.engine.shared is not None or not self._token:
            return  # (without an admin token no one can set runtime pins, and siblings have no admin API)
        pins = self.node.pins
        # As the node starts, once every worker is up: one up before this one may have taken a
        # pin that could not reach this one yet, and asking the others before they listen only
        # gets refusals. (Past the wait, those that answer: one that does not is a problem.)
        await siblings_up(self.workers)
        for answer in await self.siblings.ask("GET", "/pins"):
            for bucket, prefix in answer["pins"]:
                if not pins.is_runtime((bucket, prefix)):
                    await pins.set((bucket, prefix), True)

    def handles(self, path: str) -> bool:
        return bool(self._token) and (path == self.settings.path or path.startswith(self.settings.path + "/"))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = scope["path"][len(self.settings.path):]
        method = scope["method"]
        if self.siblings is not None and route.startswith(LOCAL + "/"):
            return await self._from_sibling(scope, receive, send, route[len(LOCAL):])
        if route not in _OPEN and not self._authorized(scope):
            return await _json(send, 401, {"error": "a valid admin token is required (Authorization: Bearer ...)"})
        handler = self._routes.get((method, route))
        if handler is None:
            return await _json(send, 404, {"error": f"no admin route {method} {route or '/'}"})
        await handler(scope, receive, send)

    async def _from_sibling(self, scope: Scope, receive: Receive, send: Send, route: str) -> None:
        """A sibling asks for this worker's own part of a node-wide request."""
        assert self.siblings is not None
        server = scope.get("server")  # (host, port) over TCP; (path, None) on a unix socket
        if server is not None and server[1] is not None:  # the node's port: siblings call on the unix socket
            return await _json(send, 403, {"error": "calls between workers come over the worker's unix socket"})
        status = self.siblings.verify(scope)
        if status != 200:
            return await _json(send, status, {"error": "calls between workers are signed with the node's secret "
                                                       "(x-gateway-worker)"})
        own = self._own.get((scope["method"], route))
        if own is None:
            return await _json(send, 404, {"error": f"no worker route {scope['method']} {route}"})
        answer = await own(scope["method"], decode_query(scope.get("query_string", b"").decode("latin-1")))
        await _json(send, 200, {**answer, "worker": self.workers.index})

    # healthz and readyz: this worker's answer. A load balancer's probe lands on one worker,
    # like the requests it vouches for; the supervisor restarts a worker that is gone. In a
    # node of several, readyz also waits for every worker to have come up (admin.ready).
    async def _healthz(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _json(send, 200, {"status": "ok"})

    async def _readyz(self, scope: Scope, receive: Receive, send: Send) -> None:
        checks = await readiness(self.node.engine, self.workers)
        failed = {name: why for name, why in checks.items() if why != "ok"}
        if failed:
            await _json(send, 503, {"status": "unavailable", "failed": failed, "checks": checks})
        else:
            await _json(send, 200, {"status": "ok", "checks": checks})

    async def _dashboard(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": dashboard.HEADERS})
        await send({"type": "http.response.body", "body": dashboard.PAGE})

    async def _metrics(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.siblings is None:
            return await _send(send, 200, render(self.registry), CONTENT_TYPE_LATEST.encode())
        others = await self.siblings.ask("GET", "/metrics")
        parts = [{**await self._own_metrics("GET", {}), "worker": self.workers.index}, *others]
        text = node_metrics([part["families"] for part in parts], node_shadow(part["shadow"] for part in parts),
                            self.siblings.count, [counts.families for counts in self._absent(parts)])
        await _send(send, 200, text, CONTENT_TYPE_LATEST.encode())

    async def _own_metrics(self, method: str, query: dict[str, str]) -> dict[str, Any]:
        shadow = self.node.shadow
        return {"families": self._counted()[0], "shadow": shadow.estimates() if shadow is not None else None}

    async def _stats(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.siblings is None:
            return await _json(send, 200, stats_document(self.node))
        others = await self.siblings.ask("GET", "/stats")
        parts = [{**await self._own_stats("GET", {}), "worker": self.workers.index}, *others]
        await _json(send, 200, node_stats(parts, self.siblings.count, [counts.stats for counts in self._absent(parts)]))

    async def _own_stats(self, method: str, query: dict[str, str]) -> dict[str, Any]:
        # More of the hottest objects than are shown: one warm on every worker still ranks in the sum.
        document = stats_document(self.node, hot=4 * HOT_OBJECTS)
        if self.ledger is not None:  # its counts go on from its predecessors'
            counts = self._counted()[1]
            hits, misses = counts["hits"], counts["misses"]
            document.update(counts, hit_ratio=hits / (hits + misses) if hits + misses else 0.0)
        return document

    async def _pin(self, scope: Scope, receive: Receive, send: Send) -> None:
        query = _query(scope)
        bucket, prefix = query.get("bucket", ""), query.get("prefix", "")
        if not bucket or set(query) - {"bucket", "prefix"}:
            return await _json(send, 400, {"error": "pin takes bucket and an optional prefix"})
        pin, pins, method = (bucket, prefix), self.node.pins, scope["method"]
        if method == "DELETE" and pin in pins.configured:
            return await _json(send, 409, {"error": f"{bucket}/{prefix} is pinned by the configuration "
                                                    "(cache.pinned); change it there"})
        if self.siblings is None and method == "DELETE" and not pins.is_runtime(pin):
            return await _json(send, 404, {"error": f"{bucket}/{prefix} is not pinned"})
        # Every worker pins (without Redis, runtime pins live in each process); an unpin is
        # "not pinned" only when no worker had the pin.
        answers = [{**await self._own_pin(method, query), "worker": self.workers.index}]
        if self.siblings is not None:
            answers += await self.siblings.ask(method, "/pin", [("bucket", bucket), ("prefix", prefix)],
                                               timeout=ACTION_TIMEOUT)
            if method == "DELETE" and not any(answer["was"] for answer in answers):
                return await _json(send, 404, {"error": f"{bucket}/{prefix} is not pinned"})
        document = {"bucket": bucket, "prefix": prefix, "pinned": method == "POST",
                    "shared": all(answer["shared"] for answer in answers)}
        await _json(send, 200, self._with_workers(document, answers))

    async def _own_pins(self, method: str, query: dict[str, str]) -> dict[str, Any]:
        pins = self.node.pins
        return {"pins": [pin for pin in pins.pins if pins.is_runtime(pin)]}

    async def _own_pin(self, method: str, query: dict[str, str]) -> dict[str, Any]:
        """{"was": pinned at runtime here before, "shared": Redis took it (RuntimePins.set)}."""
        pin = (query["bucket"], query.get("prefix", ""))
        was = self.node.pins.is_runtime(pin)
        return {"was": was, "shared": await self.node.pins.set(pin, method == "POST")}

    async def _purge(self, scope: Scope, receive: Receive, send: Send) -> None:
        query = _query(scope)
        bucket = query.get("bucket", "")
        if not bucket or ("key" in query and "prefix" in query):
            return await _json(send, 400, {"error": "purge takes bucket and at most one of key, prefix"})
        exact = "key" in query
        target = query.get("key", query.get("prefix", ""))
        removed = await self.node.engine.purge_prefix(bucket, target, exact)
        if self.siblings is None:
            return await _json(send, 200, {"bucket": bucket, "blocks_removed": removed})
        others = await self.siblings.ask("POST", "/purge", [("bucket", bucket), ("key" if exact else "prefix", target)],
                                         timeout=ACTION_TIMEOUT)
        document = {"bucket": bucket, "blocks_removed": removed + sum(other["blocks_removed"] for other in others)}
        await _json(send, 200, self._with_workers(document, [{"worker": self.workers.index}, *others]))

    async def _own_purge(self, method: str, query: dict[str, str]) -> dict[str, Any]:
        """The blocks this worker owns under the key or prefix, evicted (the metadata is
        forgotten through the journal the asked worker appended to)."""
        store, target = self.node.engine.store, query.get("key", query.get("prefix", ""))
        return {"blocks_removed": 0 if store is None else await store.evict_prefix(query["bucket"], target)}

    async def _load(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            request = self._load_request(scope)
        except S3Error as err:
            return await _json(send, 400, {"error": err.message})
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/x-ndjson")]})
        last: dict[str, object] = {}
        try:
            async for progress in load_prefix(self.node.engine, request):
                last = progress.as_dict()
                await send({"type": "http.response.body", "body": orjson.dumps(last) + b"\n", "more_body": True})
            last["done"] = True
        except S3Error as err:  # the listing or the table could not be read: nothing (more) can be loaded
            last = {**last, "done": True, "error": f"{err.code}: {err.message}"}
        await send({"type": "http.response.body", "body": orjson.dumps(last) + b"\n"})

    def _load_request(self, scope: Scope) -> LoadRequest:
        """The load a `POST load` asks for; S3Error with the message to answer 400 with."""
        pairs = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        query = {name: value for name, value in pairs if name != "partition"}
        bucket, replicas, snapshot = query.get("bucket", ""), query.get("replicas"), query.get("snapshot")
        if not bucket or set(query) - _LOAD_PARAMETERS:
            raise S3Error("InvalidArgument", "load takes bucket, and optionally prefix, replicas, table, snapshot, "
                                             "partition (repeated), footers and plan")
        if replicas is not None and (not replicas.isdigit() or not 1 <= int(replicas) <= 1000):
            raise S3Error("InvalidArgument", "replicas: a whole number from 1 to 1000")
        if replicas is not None and self.node.engine.fleet is None:
            raise S3Error("InvalidArgument", "replicas: this node is not part of a fleet")
        table = query.get("table") or None
        if table is not None and table not in FORMATS:
            raise S3Error("InvalidArgument", f"table: one of {', '.join(FORMATS)}, got {table!r}")
        if snapshot is not None and (table is None or not snapshot.lstrip("-").isdigit()):
            raise S3Error("InvalidArgument", "snapshot: a whole number (an Iceberg snapshot id, a Delta version), "
                                             "with table")
        footers = query.get("footers", "") in ("1", "true")
        missing = [name for name in {"iceberg": ["fastavro", "pyarrow"], "delta": ["pyarrow"]}.get(table or "", [])
                   + (["pyarrow"] if footers else []) if importlib.util.find_spec(name) is None]
        if missing:
            raise S3Error("NotImplemented", f"this node lacks {', '.join(sorted(set(missing)))}, which table and "
                                            "footer loads read with: pip install 's3-cache-gateway[tables]'")
        return LoadRequest(bucket, query.get("prefix", ""), table, None if snapshot is None else int(snapshot),
                           parse_filters(value for name, value in pairs if name == "partition"),
                           footers=footers, plan=query.get("plan", "") in ("1", "true"),
                           replicas=None if replicas is None else int(replicas))

    async def _events(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await _read_body(receive, MAX_EVENT_BYTES)
        if body is None:
            return await _json(send, 413, {"error": f"an event is at most {MAX_EVENT_BYTES} bytes"})
        try:
            changes = parse_s3_event(body)
        except EventError as exc:
            return await _json(send, 400, {"error": f"not an S3 event notification: {exc}"})
        await self.node.engine.changed(changes)  # every node, and every worker of this one (the journal)
        await _json(send, 200, {"invalidated": len(changes)})

    def _with_workers(self, document: dict[str, Any], answers: list[dict[str, Any]]) -> dict[str, Any]:
        """A node-wide action's answer, with how many workers carried it out (alone: as is)."""
        if self.siblings is None:
            return document
        return {**document, "workers": workers_figure(answers, self.siblings.count)}

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
