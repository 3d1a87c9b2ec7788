"""The peer API's server side: the routes under /_peer/ that other nodes, and the other
workers of this node, ask for blocks (the wire format is described in cluster/peers.py).
Served on the S3 port when the fleet is on or the node has several workers, and only to
requests signed with the cluster secret or the node's own (gateway.node.workers)."""

from __future__ import annotations

import base64
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import NamedTuple
from urllib.parse import parse_qsl

import orjson
from starlette.types import Receive, Scope, Send

from gateway import log
from gateway.cluster.peers import (AGE_HEADER, AT_HEADER, AUTH_HEADER, BLOCK_HEADER, BLOCK_PATH, CACHED_HEADER,
                                   FETCHED_HEADER, HELD_MAX, HELD_PATH, HOLD_PATH, LIST_PATH, META_HEADER, META_PATH,
                                   MAX_SKEW, OPEN_PATH, PEER_PREFIX, TAKE_PATH, OpenAnswer, PeerRefused, decode_query,
                                   mask_indexes, refusal, verify)
from gateway.hitanswers import ASGI, BELOW_ASGI, REPLAYED
from gateway.lru import LRU

__all__ = ["KEPT_REQUESTS", "KeptBlock", "PeerApp"]

KEPT_REQUESTS = 1024  # block requests kept per process to be answered again, the oldest out first
_MAX_KEPT_BYTES = 4096  # a longer request (a very long key) is answered the whole way every time

# (bucket, key, etag, version id or "", object size, index, peers, in_file) -> (the block's bytes, or
# None when another worker of this node asked `in_file` and the block is in this worker's file of
# the node's memory tier; whether it was fetched from the origin for this ask, not held). `peers`: another worker asked for its own read, which may go to the
# fleet's owners; another node's request never goes to a third node (no circles).
ServeBlock = Callable[[str, str, str, str, int, int, bool, bool], Awaitable["tuple[bytes | None, bool]"]]
# (bucket, key, etag, version id or "", object size, index, lo, hi) -> (where in the block the bytes
# start, bytes of the block holding [lo, hi), whether they were fetched from the origin for this ask).
ServePart = Callable[[str, str, str, str, int, int, int, int], Awaitable["tuple[int, bytes, bool]"]]
# (bucket, key, etag, version id or "", object size, index) -> the block's bytes when a tier holds
# it now (read on the event loop, no wait), else None.
ServeBlockNow = Callable[[str, str, str, str, int, int], "bytes | memoryview | None"]
# (bucket, key, version id or "", index, peers, in_file, cached) -> the open's answer (its block None
# as above) or None; `cached`: only what the worker holds (another worker of this node asks).
ServeOpen = Callable[[str, str, str, int, bool, bool, bool], Awaitable["OpenAnswer | None"]]
# (bucket, key, etag, version id or "", object size, replicas) -> bytes fetched.
ServeHold = Callable[[str, str, str, str, int, int], Awaitable[int]]
# (bucket, key, etag, version id or "", object size, index, giving worker, giving node or "" (a worker
# of this node), in the taker's file of the node's shared memory tier) -> None: a block the giver lends
# is taken (before the answer). (The same but the giver, and the worker of this node that lent it,
# None: this one) -> the bytes it lent, or None.
ServeTake = Callable[[str, str, str, str, int, int, int, str, bool], Awaitable[None]]
ServeLent = Callable[[str, str, str, str, int, int, "int | None"], Awaitable["bytes | None"]]
# (bucket, key, etag, version id or "", object size, block indexes, whether a worker of this node
# asks (then only of the blocks this worker owns)) -> the indexes of those held now.
ServeHeld = Callable[[str, str, str, str, int, list[int], bool], Awaitable["set[int]"]]
# The same without an await; None when that takes one (another worker of this node is asked).
ServeHeldNow = Callable[[str, str, str, str, int, list[int], bool], "set[int] | None"]
# Another worker of this node (without Redis) asks the owner worker: (bucket, key, version id or "",
# checksums, cached) -> (the metadata in the shared form, a 404 included; its age in seconds), or
# None when `cached` (only what it knows, not its origin) and it knows nothing fresh; (bucket, key,
# version id or "", the shared form, the journal's records published when it was fetched) -> None,
# what the asker's origin answered (kept if nothing was written since); (bucket, the listing's query)
# -> (the origin's listing body, its age in seconds).
ServeMeta = Callable[[str, str, str, bool, bool], Awaitable["tuple[bytes, float] | None"]]
ServeToldMeta = Callable[[str, str, str, bytes, int], None]
ServeListing = Callable[[str, list[tuple[str, str]]], Awaitable[tuple[bytes, float]]]


class NodeMetadata(NamedTuple):
    """What a worker answers its node's other workers about metadata and listings (see above)."""

    meta: ServeMeta
    told: ServeToldMeta
    listing: ServeListing


class KeptBlock(NamedTuple):
    """A block request answered in the HTTP protocol, to be answered again when the same bytes
    come again: the block asked for (ServeBlockNow's arguments), when its signature was made
    (it is good until MAX_SKEW after), and the connection's keep-alive of its answer."""

    block: tuple[str, str, str, str, int, int]
    signed_at: int
    keep_alive: bool = True


class PeerApp:
    """Plain ASGI handler of the routes under /_peer/v1/: block, open, hold, held and take.

    The callables do the work (the engine's block reader: from the cache, else from the
    origin once); they raise PeerRefused for an S3 error the origin gave, LookupError
    when this node cannot serve blocks, ValueError for a block outside the object.
    `served[outcome]` counts answers (block, open, refused, unauthorized, ...); `below_asgi`
    those of them answered in the HTTP protocol (`answer_now`), `replayed` those of them
    answered as kept (the same request bytes again, `replay`): each answer counted by `_count`,
    whichever way it was made.
    """

    def __init__(self, cluster_secret: str, node_secret: str, serve_block: ServeBlock, serve_open: ServeOpen,
                 serve_hold: ServeHold, serve_block_now: ServeBlockNow | None = None, *,
                 serve_take: ServeTake | None = None, serve_lent: ServeLent | None = None,
                 serve_held: ServeHeld | None = None, serve_held_now: ServeHeldNow | None = None,
                 serve_part: ServePart | None = None, node_metadata: NodeMetadata | None = None) -> None:
        # Other nodes sign with the cluster secret, this node's other workers with the node's own.
        self._secrets = [(secret.encode(), sibling) for secret, sibling in ((cluster_secret, False),
                                                                            (node_secret, True)) if secret]
        self._serve_block = serve_block
        self._serve_open = serve_open
        self._serve_hold = serve_hold
        self._serve_block_now = serve_block_now
        self._serve_take = serve_take
        self._serve_lent = serve_lent
        self._serve_held = serve_held
        self._serve_held_now = serve_held_now
        self._serve_part = serve_part
        self._node_metadata = node_metadata
        self.served: Counter[str] = Counter()
        self._kept: LRU[bytes, KeptBlock] = LRU(KEPT_REQUESTS)

    @staticmethod
    def handles(path: str) -> bool:
        return path.startswith(PEER_PREFIX)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path, method = scope["path"], scope["method"]
        query = scope.get("query_string", b"").decode("latin-1")
        status, sibling = self._signed(scope, query)
        if status != 200:
            self._count("unauthorized")
            return await _answer(send, status, orjson.dumps({"error": "peer requests are signed with the "
                                                                      "cluster secret (x-gateway-peer)"}))
        if method != "GET" or path not in (BLOCK_PATH, OPEN_PATH, HOLD_PATH, TAKE_PATH, HELD_PATH, META_PATH, LIST_PATH):
            return await _answer(send, 404, orjson.dumps({"error": f"no peer route {method} {path}"}))
        params = decode_query(query)
        try:
            in_file = sibling and params.get("file") == "1"
            peers = sibling and params.get("peers") == "1"
            if path in (TAKE_PATH, HELD_PATH) or params.get("lent") == "1":
                return await self._lending(send, path, params, sibling)
            if path == BLOCK_PATH and "lo" in params and sibling and self._serve_part is not None:
                at, part, from_origin = await self._serve_part(*_block_asked(params), int(params["lo"]),
                                                               int(params["hi"]))
                self._count("part")
                return await _answer(send, 200, part, b"application/octet-stream",
                                     [(AT_HEADER.encode(), str(at).encode()), *(_FETCHED if from_origin else [])])
            if path in (META_PATH, LIST_PATH):
                return await self._metadata(send, path, params, sibling)
            if path == BLOCK_PATH:
                data, from_origin = await self._serve_block(*_block_asked(params), peers, in_file)
                self._count("block")
                told = _FETCHED if from_origin else []
                if data is None:
                    return await _answer(send, 200, b"", b"application/octet-stream", [*_IN_FILE, *told])
                return await _answer(send, 200, data, b"application/octet-stream", told)
            if path == HOLD_PATH:
                fetched = await self._serve_hold(params["bucket"], params["key"], params["etag"], params["vid"],
                                                 int(params["size"]), int(params["replicas"]))
                self._count("hold")
                return await _answer(send, 200, orjson.dumps({"bytes": fetched}))
            opened = await self._serve_open(params["bucket"], params["key"], params["vid"], int(params["index"]),
                                            peers, in_file, sibling and params.get("cached") == "1")
        except PeerRefused as refused:
            self._count("refused")
            return await _answer(send, 424, refusal(refused.error, refused.changed))
        except (KeyError, ValueError) as exc:
            self._count("bad_request")
            return await _answer(send, 400, orjson.dumps({"error": f"bad peer request: {exc}"}))
        except LookupError:
            self._count("unavailable")
            return await _answer(send, 503, orjson.dumps({"error": "this node keeps no blocks"}))
        except Exception:
            # An error of this node (not the origin's): the asking node goes to the next owner.
            log.cluster.exception("serving a peer %s failed", path)
            self._count("failed")
            return await _answer(send, 503, orjson.dumps({"error": "the block could not be served"}))
        if opened is None:
            self._count("open_none")
            return await _answer(send, 204, b"")
        self._count("open")
        await _answer(send, 200, opened.data or b"", b"application/octet-stream",
                      [(META_HEADER.encode(), base64.b64encode(opened.meta)), *(_IN_FILE if opened.data is None else []),
                       *(_CACHED if opened.cached else []),
                       *([(AGE_HEADER.encode(), f"{opened.age:.3f}".encode())] if opened.age else [])])

    async def _lending(self, send: Send, path: str, params: dict[str, str], sibling: bool) -> None:
        """Which blocks this node holds (`held`); a block lent to its owner, by another worker of
        this node or another node: the owner told to take it (`take`), the giver asked for it (`lent`)."""
        if path == HELD_PATH:
            described, first, mask = _held_question(params)
            if self._serve_held is None:
                raise LookupError("this worker keeps no blocks")
            held = await self._serve_held(*described, mask_indexes(first, mask), sibling)
            self._count("held")
            return await _answer(send, 200, _held_answer(first, mask, held))
        block = _block_asked(params)
        if path == TAKE_PATH:
            node = params.get("node", "")  # (a worker of this node passes on what another node offered)
            if not (sibling or node):
                raise ValueError("a take from another node names it")
            if self._serve_take is None:
                raise LookupError("this worker keeps no blocks")
            if sibling and "told" in params and self._node_metadata is not None:  # (told before it is taken)
                self._node_metadata.told(params["bucket"], params["key"], params["mvid"],
                                         base64.urlsafe_b64decode(params["told"].encode()), int(params["journal"]))
            await self._serve_take(*block, int(params["from"]), node, sibling and params.get("file") == "1")
            self._count("take")
            return await _answer(send, 204, b"")
        worker = None if sibling else int(params["worker"])
        data = await self._serve_lent(*block, worker) if self._serve_lent is not None else None
        self._count("lent" if data is not None else "lent_gone")
        if data is None:
            return await _answer(send, 404, orjson.dumps({"error": "not lent, or taken already"}))
        return await _answer(send, 200, data, b"application/octet-stream")

    async def _metadata(self, send: Send, path: str, params: dict[str, str], sibling: bool) -> None:
        """An object's metadata or a listing page, asked by another worker of this node, as this
        worker knows it or asks its origin once; or metadata it is told (`told`)."""
        answers = self._node_metadata
        if answers is None or not sibling:
            raise LookupError("only the workers of this node, without Redis, share metadata this way")
        if path == LIST_PATH:
            body, age = await answers.listing(params["bucket"], _listing_query(params["q"]))
            self._count("listing")
        elif "told" in params:
            answers.told(params["bucket"], params["key"], params["vid"],
                         base64.urlsafe_b64decode(params["told"].encode()), int(params["journal"]))
            self._count("meta_told")
            return await _answer(send, 204, b"")
        else:
            known = await answers.meta(params["bucket"], params["key"], params["vid"], params.get("checksums") == "1",
                                       params.get("cached") == "1")
            self._count("meta" if known is not None else "meta_none")
            if known is None:
                return await _answer(send, 204, b"")
            body, age = known
        await _answer(send, 200, body, b"application/octet-stream", [(AGE_HEADER.encode(), repr(age).encode())])

    def answer_now(self, scope: Scope) -> tuple[list[tuple[bytes, bytes]], bytes | memoryview, KeptBlock] | None:
        """(headers, body) of the 200 answer to a signed block request whose block a tier holds
        now, or to a `held` question this worker answers without asking another, made in the
        HTTP protocol (gateway.httpserver.Hits) as `__call__` would answer it, and what answering
        the same bytes again takes (`keep`); None (nothing counted) for anything else, which
        `__call__` then answers."""
        if scope["method"] != "GET" or scope["path"] not in (BLOCK_PATH, HELD_PATH):
            return None
        query = scope.get("query_string", b"").decode("latin-1")
        signed, sibling = self._signed(scope, query)
        if signed != 200:
            return None
        params = decode_query(query)
        if scope["path"] == HELD_PATH:
            return self._held_now(params, sibling)
        if self._serve_block_now is None:
            return None
        if params.get("file") == "1" or params.get("lent") == "1" or "lo" in params:
            return None  # __call__ says (a file, a lent block, a part)
        try:
            block = _block_asked(params)
        except (KeyError, ValueError):
            return None
        data = self._serve_block_now(*block)
        if data is None:
            return None
        self._count("block", BELOW_ASGI)
        signed_at = int(next(v for n, v in scope["headers"] if n == _AUTH_HEADER).split(b" ")[1])  # verified above
        return _body_headers(len(data)), data, KeptBlock(block, signed_at)

    def _held_now(self, params: dict[str, str],
                  sibling: bool) -> tuple[list[tuple[bytes, bytes]], bytes | memoryview, KeptBlock] | None:
        """answer_now's answer to a `held` question this worker answers without an await (never
        kept: the answer changes as blocks come and go)."""
        try:
            described, first, mask = _held_question(params)
            held = None if self._serve_held_now is None else \
                self._serve_held_now(*described, mask_indexes(first, mask), sibling)
        except (KeyError, ValueError):
            return None  # __call__ answers 400
        if held is None:
            return None
        self._count("held", BELOW_ASGI)
        body = _held_answer(first, mask, held)
        return _body_headers(len(body), b"application/json"), body, _NOT_KEPT

    def keep(self, request: bytes, kept: KeptBlock) -> None:
        """`request`, exactly as read, was answered by answer_now, which gave `kept` (an answer
        of no block, signed at no time, is not kept)."""
        if len(request) > _MAX_KEPT_BYTES or kept.signed_at <= 0:
            return
        self._kept.put(request, kept)

    def replay(self, request: bytes) -> tuple[list[tuple[bytes, bytes]], bytes | memoryview, bool] | None:
        """(headers, body, keep-alive) of the answer to a block request kept before and sent again
        byte for byte: nothing is parsed or verified again, as the same bytes cannot verify
        otherwise, but the signature's time is checked (as `verify` checks it) and the block
        must be held now; else None (nothing counted): the request is parsed as any other."""
        kept = self._kept.get(request)
        if kept is None:
            return None
        if abs(time.time() - kept.signed_at) > MAX_SKEW:
            self._kept.pop(request)
            return None
        assert self._serve_block_now is not None  # only answer_now keeps
        data = self._serve_block_now(*kept.block)
        if data is None:
            return None
        self._count("block", REPLAYED)
        return _body_headers(len(data)), data, kept.keep_alive

    def _count(self, outcome: str, way: int = ASGI) -> None:
        """One answer, with `outcome`, made the `way` it was (gateway.hitanswers)."""
        served = self.served
        served[outcome] += 1
        if way != ASGI:
            served["below_asgi"] += 1
            if way == REPLAYED:
                served["replayed"] += 1

    def _signed(self, scope: Scope, query: str) -> tuple[int, bool]:
        """(200 if a secret signs the request, else 401 (no or malformed signature) before 403
        (a wrong one); whether it is this node's own secret, i.e. a sibling worker asks)."""
        header = next((v.decode("latin-1") for n, v in scope["headers"] if n == _AUTH_HEADER), None)
        raw_path = scope.get("raw_path", scope["path"].encode()).decode("latin-1")
        checked = [(verify(secret, header, scope["method"], raw_path, query), sibling)
                   for secret, sibling in self._secrets]
        return min(checked, default=(401, False))


_Described = tuple[str, str, str, str, int]  # bucket, key, etag, version id or "", object size


def _described(params: dict[str, str]) -> _Described:
    """The object a peer request names; KeyError or ValueError when it does not."""
    return params["bucket"], params["key"], params["etag"], params["vid"], int(params["size"])


def _block_asked(params: dict[str, str]) -> tuple[str, str, str, str, int, int]:
    """(the object, the block's index) a block, take or lent request names."""
    return *_described(params), int(params["index"])


def _held_question(params: dict[str, str]) -> tuple[_Described, int, int]:
    """(the object, first, mask) of a `held` question; KeyError or ValueError when it names no
    object, no blocks, or too many."""
    described = _described(params)
    first, mask = int(params["first"]), int(params["mask"], 16)
    if first < 0 or mask <= 0 or mask.bit_length() > HELD_MAX:
        raise ValueError("a held question of no blocks, or of too many")
    return described, first, mask


def _listing_query(query: str) -> list[tuple[str, str]]:
    """A listing's parameters as PeerClient.listing sent them (encode_query), in their order."""
    return parse_qsl(query, keep_blank_values=True, encoding="utf-8", errors="surrogateescape")


def _held_answer(first: int, mask: int, held: set[int]) -> bytes:
    answer = sum(1 << (index - first) for index in held if 0 <= index - first < HELD_MAX) & mask
    return orjson.dumps({"held": f"{answer:x}"})


_AUTH_HEADER = AUTH_HEADER.encode()
_NOT_KEPT = KeptBlock(("", "", "", "", 0, -1), 0)  # what answer_now gives for an answer never to keep
_IN_FILE = [(BLOCK_HEADER.encode(), b"file")]
_CACHED = [(CACHED_HEADER.encode(), b"1")]
_FETCHED = [(FETCHED_HEADER.encode(), b"1")]


def _body_headers(length: int, content_type: bytes = b"application/octet-stream") -> list[tuple[bytes, bytes]]:
    return [(b"content-type", content_type), (b"content-length", str(length).encode())]


async def _answer(send: Send, status: int, body: bytes, content_type: bytes = b"application/json",
                  extra: list[tuple[bytes, bytes]] | None = None) -> None:
    headers = [*_body_headers(len(body), content_type), *(extra or [])]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
