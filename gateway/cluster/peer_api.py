"""The peer API's server side: the routes under /_peer/ that other nodes, and the other
workers of this node, ask for blocks (the wire format is described in cluster/peers.py).
Served on the S3 port when the fleet is on or the node has several workers, and only to
requests signed with the cluster secret or the node's own (gateway.node.workers)."""

from __future__ import annotations

import base64
from collections import Counter
from collections.abc import Awaitable, Callable

import orjson
from starlette.types import Receive, Scope, Send

from gateway import log
from gateway.cluster.peers import (AUTH_HEADER, BLOCK_HEADER, BLOCK_PATH, CACHED_HEADER, HOLD_PATH, META_HEADER,
                                   OPEN_PATH, PEER_PREFIX, OpenAnswer, PeerRefused, decode_query, refusal, verify)

__all__ = ["PeerApp"]

# (bucket, key, etag, version id or "", object size, index, peers, in_file) -> the block's bytes, or
# None when another worker of this node asked `in_file` and the block is in this worker's file of
# the node's memory tier. `peers`: another worker asked for its own read, which may go to the
# fleet's owners; another node's request never goes to a third node (no circles).
ServeBlock = Callable[[str, str, str, str, int, int, bool, bool], Awaitable["bytes | None"]]
# (bucket, key, version id or "", index, peers, in_file) -> the open's answer (its block None as
# above) or None.
ServeOpen = Callable[[str, str, str, int, bool, bool], Awaitable["OpenAnswer | None"]]
# (bucket, key, etag, version id or "", object size, replicas) -> bytes fetched.
ServeHold = Callable[[str, str, str, str, int, int], Awaitable[int]]


class PeerApp:
    """Plain ASGI handler of /_peer/v1/block, /_peer/v1/open and /_peer/v1/hold.

    The callables do the work (the engine's block reader: from the cache, else from the
    origin once); they raise PeerRefused for an S3 error the origin gave, LookupError
    when this node cannot serve blocks, ValueError for a block outside the object.
    `served[outcome]` counts answers (block, open, refused, unauthorized, ...).
    """

    def __init__(self, cluster_secret: str, node_secret: str, serve_block: ServeBlock, serve_open: ServeOpen,
                 serve_hold: ServeHold) -> None:
        # Other nodes sign with the cluster secret, this node's other workers with the node's own.
        self._secrets = [(secret.encode(), sibling) for secret, sibling in ((cluster_secret, False),
                                                                            (node_secret, True)) if secret]
        self._serve_block = serve_block
        self._serve_open = serve_open
        self._serve_hold = serve_hold
        self.served: Counter[str] = Counter()

    @staticmethod
    def handles(path: str) -> bool:
        return path.startswith(PEER_PREFIX)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path, method = scope["path"], scope["method"]
        query = scope.get("query_string", b"").decode("latin-1")
        header = next((v.decode("latin-1") for n, v in scope["headers"] if n == AUTH_HEADER.encode()), None)
        raw_path = scope.get("raw_path", path.encode()).decode("latin-1")
        # 200 if a secret signs it, else 401 (no or malformed signature) before 403 (a wrong one).
        checked = [(verify(secret, header, method, raw_path, query), sibling) for secret, sibling in self._secrets]
        status, sibling = min(checked, default=(401, False))
        if status != 200:
            self.served["unauthorized"] += 1
            return await _answer(send, status, orjson.dumps({"error": "peer requests are signed with the "
                                                                      "cluster secret (x-gateway-peer)"}))
        if method != "GET" or path not in (BLOCK_PATH, OPEN_PATH, HOLD_PATH):
            return await _answer(send, 404, orjson.dumps({"error": f"no peer route {method} {path}"}))
        params = decode_query(query)
        try:
            in_file = sibling and params.get("file") == "1"
            peers = sibling and params.get("peers") == "1"
            if path == BLOCK_PATH:
                data = await self._serve_block(params["bucket"], params["key"], params["etag"], params["vid"],
                                               int(params["size"]), int(params["index"]), peers, in_file)
                self.served["block"] += 1
                if data is None:
                    return await _answer(send, 200, b"", b"application/octet-stream", _IN_FILE)
                return await _answer(send, 200, data, b"application/octet-stream")
            if path == HOLD_PATH:
                fetched = await self._serve_hold(params["bucket"], params["key"], params["etag"], params["vid"],
                                                 int(params["size"]), int(params["replicas"]))
                self.served["hold"] += 1
                return await _answer(send, 200, orjson.dumps({"bytes": fetched}))
            opened = await self._serve_open(params["bucket"], params["key"], params["vid"], int(params["index"]),
                                            peers, in_file)
        except PeerRefused as refused:
            self.served["refused"] += 1
            return await _answer(send, 424, refusal(refused.error, refused.changed))
        except (KeyError, ValueError) as exc:
            self.served["bad_request"] += 1
            return await _answer(send, 400, orjson.dumps({"error": f"bad peer request: {exc}"}))
        except LookupError:
            self.served["unavailable"] += 1
            return await _answer(send, 503, orjson.dumps({"error": "this node keeps no blocks"}))
        except Exception:
            # An error of this node (not the origin's): the asking node goes to the next owner.
            log.cluster.exception("serving a peer %s failed", path)
            self.served["failed"] += 1
            return await _answer(send, 503, orjson.dumps({"error": "the block could not be served"}))
        if opened is None:
            self.served["open_none"] += 1
            return await _answer(send, 204, b"")
        self.served["open"] += 1
        await _answer(send, 200, opened.data or b"", b"application/octet-stream",
                      [(META_HEADER.encode(), base64.b64encode(opened.meta)), *(_IN_FILE if opened.data is None else []),
                       *(_CACHED if opened.cached else [])])


_IN_FILE = [(BLOCK_HEADER.encode(), b"file")]
_CACHED = [(CACHED_HEADER.encode(), b"1")]


async def _answer(send: Send, status: int, body: bytes, content_type: bytes = b"application/json",
                  extra: list[tuple[bytes, bytes]] | None = None) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode()), *(extra or [])]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
