"""The admin API of the other workers of this node (gateway.node.workers), as a worker asks it.

An admin request lands on whichever worker the kernel gave its connection to; that worker
answers for the whole node: its own part, plus each sibling's, asked over the sibling's
unix socket. A sibling is asked for its OWN figures or action, under `<admin.path>/local/`
(`stats`, `metrics`, `purge`, `pin`, `pins`), never for the node's, so no call fans out
twice. (Events need no call: what they invalidate reaches every worker through the
node's invalidation journal, gateway.node.journal.)

Those routes take no admin token: a call carries `x-gateway-worker: v1 <unix time> <HMAC>`
(cluster.peers.sign, under the node's secret, WorkerSet.secret) of its method, path and
query string, which is all it says (no route reads a body). The secret never travels and
exists only in the node's processes; a call with no valid signature is refused (401 none
or malformed, 403 wrong or stale), and so is one that came over TCP (403): siblings call
on the worker's unix socket, in the node's private run folder, so a signed call seen on a
network is never taken.

A sibling that does not answer within the timeout (restarting, hung) is left out, and
the node's answer says how many workers it holds (`workers`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson
from starlette.types import Scope
from yarl import URL

from gateway.cluster.peers import encode_query, sign, verify
from gateway.node.workers import WorkerSet

__all__ = ["AUTH_HEADER", "LOCAL", "SiblingAdmin"]

log = logging.getLogger("gateway.admin")

LOCAL = "/local"  # under admin.path: a worker's own part of an admin request
AUTH_HEADER = "x-gateway-worker"
FIGURES_TIMEOUT = 2.0  # seconds for a sibling's figures: a dashboard or a scrape must not wait on a hung one
ACTION_TIMEOUT = 10.0  # seconds for a purge or a pin: evicting a large prefix from a disk tier takes a while
_MAX_ANSWER = 16 << 20  # a sibling's figures are some KiB; anything this large is not an answer


class SiblingAdmin:
    """Calls to the admin API of this worker's siblings: one keep-alive session per sibling
    (made on first use, on the loop that uses it; `aclose` at shutdown)."""

    def __init__(self, workers: WorkerSet, admin_path: str) -> None:
        if workers.alone:
            raise ValueError("a node of one process has no siblings")
        self.workers = workers
        self._prefix = quote(admin_path + LOCAL)
        self._sessions: dict[int, aiohttp.ClientSession] = {}

    @property
    def count(self) -> int:
        """The node's workers, this one included."""
        return self.workers.count

    async def ask(self, method: str, route: str, params: list[tuple[str, str]] | None = None,
                  *, timeout: float = FIGURES_TIMEOUT) -> list[dict[str, Any]]:
        """The JSON answers of the siblings that answered `route` (under local/) with 200 in
        time, all asked at once."""
        answers = await asyncio.gather(*(self._ask(index, method, route, params or [], timeout)
                                         for index in self.workers.siblings()))
        return [answer for answer in answers if answer is not None]

    async def _ask(self, index: int, method: str, route: str, params: list[tuple[str, str]],
                   timeout: float) -> dict[str, Any] | None:
        path = self._prefix + route
        query = encode_query(params)
        try:
            async with asyncio.timeout(timeout):
                status, answer = await self._call(index, method, path, query)
            document = orjson.loads(answer) if status == 200 else None
        except (aiohttp.ClientError, OSError, TimeoutError, orjson.JSONDecodeError) as exc:
            # Not started yet, restarting, gone, hung: the answer says so in its `workers` figure.
            log.info("worker %d did not answer %s %s: %s", index, method, route, exc.__class__.__name__)
            return None
        if not isinstance(document, dict):
            log.warning("worker %d answered %s %s with HTTP %d", index, method, route, status)
            return None
        return document

    async def _call(self, index: int, method: str, path: str, query: str) -> tuple[int, bytes]:
        target = URL(f"http://worker{path}?{query}", encoded=True)
        for attempt in range(2):
            headers = {AUTH_HEADER: sign(self.workers.secret, method, path, query)}
            try:
                async with self._session(index).request(method, target, headers=headers,
                                                        allow_redirects=False) as response:
                    if (response.content_length or 0) > _MAX_ANSWER:
                        return response.status, b""
                    return response.status, await response.read()
            except aiohttp.ServerDisconnectedError:
                # A kept-alive connection the sibling closed (it restarted): once more, on a new one.
                # Every worker route may run twice: a purge or a pin twice comes to the same.
                if attempt == 1:
                    raise
        raise AssertionError("unreachable")

    def _session(self, index: int) -> aiohttp.ClientSession:
        session = self._sessions.get(index)
        if session is None:
            session = self._sessions[index] = aiohttp.ClientSession(
                connector=aiohttp.UnixConnector(self.workers.socket_path(index), limit=8, keepalive_timeout=3.0),
                auto_decompress=False, skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding"))
        return session

    async def aclose(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            await session.close()

    def verify(self, scope: Scope) -> int:
        """200 when the call is signed by a worker of this node, else 401 or 403 (cluster.peers.verify)."""
        header = next((v.decode("latin-1") for n, v in scope["headers"] if n == AUTH_HEADER.encode()), None)
        raw_path = scope.get("raw_path") or scope["path"].encode("utf-8")
        return verify(self.workers.secret, header, scope["method"], raw_path.decode("latin-1"),
                      scope.get("query_string", b"").decode("latin-1"))
