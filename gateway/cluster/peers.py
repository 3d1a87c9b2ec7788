"""The peer API's wire format: its routes, and the client
a node asks its peers for blocks with (gateway.rangeclient: keep-alive, a block's body
received into one buffer).

Routes (GET, on the S3 port, only when the fleet is on):

- `/_peer/v1/block?bucket&key&etag&vid&size&index`: one block of the object version
  named by its ETag and version id (`vid`, may be empty) and size; the owner answers
  from its cache or fetches it from the origin once (single-flight) and keeps it.
- `/_peer/v1/hold?bucket&key&etag&vid&size&replicas`: a load (`gateway load`). The node
  fetches every block of the object version that it owns among `replicas` owners and
  does not hold yet (from the owners ranked above it, or the origin), keeps them, and
  answers `{"bytes": <bytes it fetched>}`.
- `/_peer/v1/open?bucket&key&vid&index`: a cold read. The owner of block `index` of an
  object whose metadata the asking node does not know fetches it with the metadata in
  one ranged GET (as a node alone does); the answer carries the block as its body and
  the metadata in `x-gateway-meta` (base64 of the shared-metadata form). 204: the
  owner could not (an empty object, a start past the end): ask the origin with a HEAD.
  Between the workers of one node, `cached=1` asks only what the worker holds (204 otherwise),
  its metadata's age in `x-gateway-age`.
- `/_peer/v1/held?bucket&key&etag&vid&size&first&mask`: which of some blocks of the object
  version the node holds now (in a tier, or on their way to it), asked before a read's answer
  starts: `mask` (hex) has bit i set for block `first + i` (at most HELD_MAX blocks); the answer
  is `{"held": "<hex mask>"}`, the same bits for the blocks held. The node asks its workers
  that own them; it never asks the origin or another node.
- `/_peer/v1/take?bucket&key&etag&vid&size&index&from&node`: a block the asking node's worker
  `from` fetched (in a run of a read of its own) that this node owns: the node takes it from
  there (`block?...&lent=1&worker=<from>` of the node `node`, a member) and keeps it, without
  asking the origin; 204 once it did, or found the block gone. Between the workers of a node,
  `file=1`: the block is in the owner's file of the node's shared memory tier (the asker wrote it
  there), taken from it and not asked for; `mvid&told&journal`: metadata told with the block, as
  `meta?...&told` tells it (`mvid`: the version it was asked for), kept before the block is taken.
- `/_peer/v1/meta?bucket&key&vid[&checksums][&cached]` (between the workers of a node without
  Redis): the object's metadata in the shared form (a 404 too) as the worker owning its first
  block knows it, or asks its origin once (`cached`: never; 204 when it knows nothing fresh), with
  its age in `x-gateway-age`; `meta?bucket&key&vid&told&journal`: metadata the asking worker's
  origin answered (base64url in `told`), kept when the node's journal published no record after
  `journal`; 204.
- `/_peer/v1/list?bucket&q` (the same workers): the origin's listing body for the query `q` as the
  worker owning it holds it or asks its origin once, its age in `x-gateway-age`.

Every request carries `x-gateway-peer: v1 <unix time> <hex HMAC-SHA256>` of the method,
path, query string and time under the cluster secret: the secret never travels, and S3
credentials mean nothing here. Between the workers of one node (signed with the node's own
secret), `held` asks only of the blocks the asked worker owns, `take` (with `node`: passing on
another node's offer) goes to the worker owning the block, and `block?...&lent=1` to the worker
that lent it. Between the workers of one node, `block` and `open` may carry `file=1`: an owner that keeps the block in the node's shared memory tier then answers 200 with
`x-gateway-block: file` and no body, and the asking worker reads the block from that file (a
copy from memory instead of the block through the socket). A `block` answer the owner did not
hold and fetched from its origin for the ask carries `x-gateway-fetched: 1` (the asker's
`x-cache` then says miss, not hit). With `lo` and `hi` (another worker of this node asks), only the
part of the block holding bytes [lo, hi) of it: the owner fetches what its piece lacks, once however
many workers ask, and answers the bytes it holds around them, `x-gateway-at` saying where in the
block they start. Answers: 200 the block; 401 no or malformed signature;
403 a wrong or stale one; 400 bad parameters; 424 the origin's S3 error, as JSON
`{"code", "message", "status", "headers", "changed"}` (`changed`: the object is no
longer that version); 503 this node cannot serve blocks.
"""

from __future__ import annotations

import base64
import ssl
import time
from collections import Counter
from typing import NamedTuple, Protocol

import orjson

from gateway.cluster.membership import Member
from gateway.cluster.peersigning import MAX_SKEW, decode_query, encode_query, sign, verify
from gateway.config import ClusterSettings
from gateway.errors import S3Error
from gateway.lru import LRU
from gateway.rangeclient import RangeClient

__all__ = ["MAX_SKEW", "PEER_PREFIX", "OpenAnswer", "PeerClient", "PeerError", "PeerRefused", "decode_query",
           "encode_query", "sign", "verify"]

PEER_PREFIX = "/_peer/"
BLOCK_PATH = "/_peer/v1/block"
OPEN_PATH = "/_peer/v1/open"
HOLD_PATH = "/_peer/v1/hold"
TAKE_PATH = "/_peer/v1/take"  # take a block another worker, or another node's, lends
HELD_PATH = "/_peer/v1/held"  # which of some blocks the node (a worker: of those it owns) holds now
HELD_MAX = 4096  # blocks one `held` question may name
META_PATH = "/_peer/v1/meta"  # an object's metadata, from the worker of this node owning its first block
LIST_PATH = "/_peer/v1/list"  # a listing page, from the worker of this node owning its parameters
AUTH_HEADER = "x-gateway-peer"
META_HEADER = "x-gateway-meta"
BLOCK_HEADER = "x-gateway-block"  # "file": the block is in the owner's file, not in the body
CACHED_HEADER = "x-gateway-cached"  # "1": an open's block came from the owner's cache, not its origin
AGE_HEADER = "x-gateway-age"  # seconds since the origin gave the answer sent (a copy is never fresh for longer)
AT_HEADER = "x-gateway-at"  # where in the block the bytes of a part's answer start
FETCHED_HEADER = "x-gateway-fetched"  # "1": a block the owner did not hold, fetched from its origin for this ask
# A request is signed for the start of its minute: the same block asked for again within it is the
# same bytes, which its owner answers as kept (PeerApp.replay); clocks may then differ by 240 s.
_SIGNED_EVERY = 60
_SIGNED_KEPT = 4096  # requests whose query string and signature are kept for their minute
_TRANSPORT_ERRORS = OSError  # the range client's ConnectionError and TimeoutError, and the name lookup's
# Idle connections are closed before the peer's server would (uvicorn: 5 s), so a request rarely
# meets a connection that is being closed under it (one that was is sent again once on a new one).
_IDLE_SECONDS = 3.0
_MAX_ERROR = 64 * 1024
_META_MAX = 64 * 1024  # an encoded metadata entry: its headers are at most S3's 2 KiB of user metadata
_LISTING_MAX = 64 * 1024 * 1024  # a listing page: 1000 keys of up to 1 KiB, with their owners and checksums


class Budget(Protocol):
    """The read budget (gateway.bytebudget.ByteBudget)."""

    async def take(self, size: int) -> int: ...

    def give(self, size: int) -> None: ...


class PeerError(Exception):
    """A peer gave no usable answer (unreachable, timed out, refused us, bad answer): ask
    the next owner or the origin instead."""


class PeerRefused(Exception):
    """The owner asked the origin and the origin said no: `error` is the S3 error it got
    (`changed`: the object is no longer the version asked for)."""

    def __init__(self, error: S3Error, changed: bool) -> None:
        super().__init__(error.code)
        self.error = error
        self.changed = changed


class OpenAnswer(NamedTuple):
    """An owner's answer to an open: the metadata in the shared form, the first block (None when
    it is in the owner's file of the node's shared memory tier), whether the owner had that
    block cached (False: it fetched it from the origin for this open), and how old the metadata
    was then (seconds; a cached open's, so that it is not fresh for longer than in the owner)."""

    meta: bytes
    data: bytes | None
    cached: bool
    age: float = 0.0


class PeerClient:
    """Asks peers for blocks. One keep-alive pool for every peer; timeouts from cluster.*."""

    def __init__(self, settings: ClusterSettings, *, max_connections: int = 256, unix_socket: str = "",
                 counts: Counter[str] | None = None) -> None:
        self.settings = settings
        # Requests made, by what they ask (`asked_name`), counted as "worker_asked_<name>" here when given.
        self._counts = counts
        self._secret = settings.secret.encode()
        self._max_connections = max_connections
        self._unix_socket = unix_socket  # every request goes to the server on this socket (another worker)
        self._clients: dict[str, RangeClient] = {}  # by scheme
        # Peers over https: verified against cluster.peer_ca_file, else the system's CAs.
        self._tls = ssl.create_default_context(cafile=settings.peer_ca_file or None)
        self.requests = 0
        self.failures = 0
        # (path, *parameters) -> (minute, query string, signature), the oldest made first out
        self._made: LRU[tuple[object, ...], tuple[int, str, str]] = LRU(_SIGNED_KEPT)

    def _client(self, scheme: str) -> RangeClient:
        client = self._clients.get(scheme)
        if client is None:  # made on first use, on the loop that uses it
            client = self._clients[scheme] = RangeClient(
                scheme, connect_timeout=self.settings.peer_connect_timeout,
                read_timeout=self.settings.peer_read_timeout, max_connections=self._max_connections,
                ssl_context=self._tls, unix_socket=self._unix_socket, idle_seconds=_IDLE_SECONDS)
        return client

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()

    async def block(self, peer: Member, bucket: str, key: str, etag: str, version_id: str | None,
                    size: int, index: int, length: int) -> bytes:
        """Block `index` (of `length` bytes) of the object version, from `peer`."""
        data, _ = await self.block_or_file(peer, bucket, key, etag, version_id, size, index, length, in_file=False)
        assert data is not None  # only an answer to `in_file` has no bytes
        return data

    async def block_or_file(self, peer: Member, bucket: str, key: str, etag: str, version_id: str | None,
                            size: int, index: int, length: int, *, in_file: bool,
                            peers: bool = False) -> tuple[bytes | None, bool]:
        """(`block`, whether the peer fetched it from its origin for this ask, not holding it); the
        bytes None when `in_file` was asked and the peer (a worker of this node) keeps the block in
        its file of the node's shared memory tier. `peers`: that worker may ask the fleet's owners
        for it (this worker's own read), else only its tiers and the origin."""
        params = [("bucket", bucket), ("key", key), ("etag", etag), ("vid", version_id or ""),
                  ("size", str(size)), ("index", str(index)), *([("file", "1")] if in_file else []),
                  *([("peers", "1")] if peers else [])]
        status, headers, body = await self._get(peer, BLOCK_PATH, params, length)
        fetched = headers.get(FETCHED_HEADER) == "1"
        if in_file and status == 200 and headers.get(BLOCK_HEADER) == "file" and not body:
            return None, fetched
        if status != 200 or len(body) != length:
            raise PeerError(f"{peer.id} answered {status} with {len(body)} of {length} bytes")
        return body, fetched

    async def part(self, peer: Member, bucket: str, key: str, etag: str, version_id: str | None, size: int,
                   index: int, length: int, lo: int, hi: int) -> tuple[int, bytes, bool]:
        """Bytes of block `index` (of `length` bytes) holding [lo, hi) (offsets in the block), from
        `peer`, a worker of this node that owns the block and fetches what its piece lacks once
        however many workers ask: (where in the block they start, the bytes, whether it fetched
        them from its origin for this ask)."""
        params = [("bucket", bucket), ("key", key), ("etag", etag), ("vid", version_id or ""),
                  ("size", str(size)), ("index", str(index)), ("lo", str(lo)), ("hi", str(hi))]
        status, headers, body = await self._get(peer, BLOCK_PATH, params, length)
        at = headers.get(AT_HEADER, "0")  # (none: the whole block, as a block it holds is answered)
        if status != 200 or not at.isdigit() or not int(at) <= lo < hi <= int(at) + len(body) <= length:
            raise PeerError(f"{peer.id} answered {status} with {len(body)} bytes at {at} for [{lo}, {hi})")
        return int(at), body, headers.get(FETCHED_HEADER) == "1"

    async def open(self, peer: Member, bucket: str, key: str, version_id: str | None, index: int, block_size: int,
                   *, budget: Budget | None = None) -> OpenAnswer | None:
        """(metadata in the shared form, block bytes) of a cold read, or None: ask with a HEAD.

        The block's size is known only from the answer: `budget` is taken for it before
        its body is read and given back after (as a node's own open does).
        """
        opened = await self.open_or_file(peer, bucket, key, version_id, index, block_size, budget=budget,
                                         in_file=False)
        if opened is None:
            return None
        assert opened.data is not None  # only an answer to `in_file` has no bytes
        return opened

    async def open_or_file(self, peer: Member, bucket: str, key: str, version_id: str | None, index: int,
                           block_size: int, *, budget: Budget | None = None,
                           in_file: bool, peers: bool = False, cached: bool = False) -> OpenAnswer | None:
        """`open`; the bytes are None when `in_file` was asked and the peer keeps the block in its
        file of the node's shared memory tier; `peers` as in `block_or_file`; `cached`: only what
        the peer (a worker of this node) holds, never its origin (None when it holds nothing)."""
        params = [("bucket", bucket), ("key", key), ("vid", version_id or ""), ("index", str(index)),
                  *([("file", "1")] if in_file else []), *([("peers", "1")] if peers else []),
                  *([("cached", "1")] if cached else [])]
        status, headers, body = await self._get(peer, OPEN_PATH, params, block_size, budget)
        if status == 204:
            return None
        meta = headers.get(META_HEADER)
        if status != 200 or meta is None:
            raise PeerError(f"{peer.id} answered {status} to an open")
        try:
            shared = base64.b64decode(meta, validate=True)
        except ValueError:
            raise PeerError(f"{peer.id} sent unreadable metadata") from None
        try:
            age = float(headers.get(AGE_HEADER, "0"))
        except ValueError:
            raise PeerError(f"{peer.id} sent an unreadable age") from None
        return OpenAnswer(shared, None if in_file and headers.get(BLOCK_HEADER) == "file" and not body else body,
                          headers.get(CACHED_HEADER) == "1", age)

    async def held(self, peer: Member, bucket: str, key: str, etag: str, version_id: str | None, size: int,
                   indexes: list[int]) -> set[int]:
        """Which of the blocks `indexes` of the object version `peer` holds now: one question for
        each HELD_MAX of them."""
        held: set[int] = set()
        for first, mask in held_masks(indexes):
            params = [("bucket", bucket), ("key", key), ("etag", etag), ("vid", version_id or ""),
                      ("size", str(size)), ("first", str(first)), ("mask", f"{mask:x}")]
            status, _, body = await self._get(peer, HELD_PATH, params, 64 + mask.bit_length() // 4)
            try:
                answer = int(orjson.loads(body)["held"], 16) if status == 200 else None
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                answer = None
            if answer is None:
                raise PeerError(f"{peer.id} answered {status} to a held question")
            held.update(mask_indexes(first, answer & mask))
        return held

    async def take(self, peer: Member, bucket: str, key: str, etag: str, version_id: str | None, size: int,
                   index: int, giver: int, node: str = "", *, told: tuple[str, bytes, int] | None = None,
                   in_file: bool = False) -> None:
        """Tell `peer` to take the block from worker `giver` of this node: `peer` is the worker of
        this node that owns it, or (`node`: this node's member id) another node that owns it.
        Between the workers of a node, `in_file`: the block is in `peer`'s file of the node's
        shared memory tier, not to be asked for; `told`: metadata told with it, as `tell_meta`
        tells it ((version asked for, shared form, journal's records published))."""
        params = [("bucket", bucket), ("key", key), ("etag", etag), ("vid", version_id or ""), ("size", str(size)),
                  ("index", str(index)), ("from", str(giver)), *([("node", node)] if node else []),
                  *([("file", "1")] if in_file else []),
                  *([("mvid", told[0]), ("told", base64.urlsafe_b64encode(told[1]).decode()),
                     ("journal", str(told[2]))] if told is not None else [])]
        status, _, _ = await self._get(peer, TAKE_PATH, params, 0)
        if status != 204:
            raise PeerError(f"{peer.id} answered {status} to a take")

    async def lent(self, peer: Member, bucket: str, key: str, etag: str, version_id: str | None, size: int,
                   index: int, length: int, worker: int | None = None) -> bytes | None:
        """The block `peer` lent to this worker, or None when it has it no more: `peer` a worker of
        this node, or another node whose worker `worker` lent it."""
        params = [("bucket", bucket), ("key", key), ("etag", etag), ("vid", version_id or ""), ("size", str(size)),
                  ("index", str(index)), ("lent", "1"), *([("worker", str(worker))] if worker is not None else [])]
        status, _, body = await self._get(peer, BLOCK_PATH, params, length)
        if status == 404:
            return None
        if status != 200 or len(body) != length:
            raise PeerError(f"{peer.id} answered {status} with {len(body)} of {length} bytes")
        return body

    async def hold(self, peer: Member, bucket: str, key: str, etag: str, version_id: str | None,
                   size: int, replicas: int, blocks: int) -> int:
        """Have `peer` keep the blocks of the object version it owns among `replicas` owners;
        the bytes it fetched. `blocks`: how many it will fetch at most, which bounds the wait
        (one read timeout per block, plus one)."""
        params = [("bucket", bucket), ("key", key), ("etag", etag), ("vid", version_id or ""),
                  ("size", str(size)), ("replicas", str(replicas))]
        wait = self.settings.peer_read_timeout * (blocks + 1)
        status, _, body = await self._get(peer, HOLD_PATH, params, 1024, read_timeout=wait)
        try:
            fetched = orjson.loads(body)["bytes"] if status == 200 else None
        except (orjson.JSONDecodeError, KeyError, TypeError):
            fetched = None
        if not isinstance(fetched, int):
            raise PeerError(f"{peer.id} answered {status} to a hold")
        return fetched

    async def meta(self, peer: Member, bucket: str, key: str, version_id: str | None, *,
                   checksums: bool, cached: bool = False) -> tuple[bytes, float] | None:
        """(the metadata of the object (version) in the shared form, a 404 included, and its age in
        seconds) as `peer`, a worker of this node, knows it or asks its origin once; PeerRefused when
        its origin refused otherwise. `cached`: only what `peer` knows, never its origin (None: nothing)."""
        params = [("bucket", bucket), ("key", key), ("vid", version_id or ""),
                  *([("checksums", "1")] if checksums else []), *([("cached", "1")] if cached else [])]
        status, headers, body = await self._get(peer, META_PATH, params, _META_MAX)
        return None if cached and status == 204 else _aged(peer, "metadata", status, headers, body)

    async def tell_meta(self, peer: Member, bucket: str, key: str, version_id: str | None, meta: bytes,
                        published: int) -> None:
        """Tell `peer`, the worker of this node owning the object's first block, what this worker's
        origin just answered about it (the shared form), when the node's journal had published
        `published` records: `peer` keeps it only if no write was published since."""
        params = [("bucket", bucket), ("key", key), ("vid", version_id or ""),
                  ("told", base64.urlsafe_b64encode(meta).decode()), ("journal", str(published))]
        status, _, _ = await self._get(peer, META_PATH, params, 0)
        if status != 204:
            raise PeerError(f"{peer.id} answered {status} to told metadata")

    async def listing(self, peer: Member, bucket: str, query: list[tuple[str, str]]) -> tuple[bytes, float]:
        """(the origin's listing body for exactly `query`, its age in seconds) as `peer`, a worker of
        this node, holds it or asks its origin once; PeerRefused when its origin refused."""
        params = [("bucket", bucket), ("q", encode_query(query))]
        return _aged(peer, "listing", *await self._get(peer, LIST_PATH, params, _LISTING_MAX))

    def _signed(self, path: str, params: list[tuple[str, str]]) -> tuple[str, str]:
        """(the query string, the x-gateway-peer value) of a request, signed for the start of its
        minute: made once a minute for the same path and parameters (a block asked for again)."""
        now = int(time.time())
        minute = now - now % _SIGNED_EVERY
        name: tuple[object, ...] = (path, *params)
        made = self._made.get(name)
        if made is None or made[0] != minute:
            query = encode_query(params)
            made = (minute, query, sign(self._secret, "GET", path, query, minute))
            self._made.put(name, made)
        return made[1], made[2]

    async def _get(self, peer: Member, path: str, params: list[tuple[str, str]], limit: int,
                   budget: Budget | None = None, *, read_timeout: float | None = None,
                   ) -> tuple[int, dict[str, str], bytes]:
        try:
            query, signature = self._signed(path, params)
        except UnicodeEncodeError:  # not a key a client could have sent; the origin is asked instead
            raise PeerError("a key that cannot be sent to a peer") from None
        scheme, _, host = peer.url.partition("://")
        headers = {"host": host, AUTH_HEADER: signature}
        self.requests += 1
        if self._counts is not None:
            self._counts["worker_asked_" + asked_name(path, params)] += 1
        try:
            response = await self._client(scheme).get(host, f"{path}?{query}", headers, read_timeout=read_timeout)
            try:
                length = response.headers.get("content-length", "")
                if not length.isdigit() or int(length) > limit + _MAX_ERROR:  # never more than a block
                    raise PeerError(f"{peer.id} answered {response.status} with a body of {length or 'unknown'} bytes")
                held = await budget.take(int(length)) if budget is not None and response.status == 200 else 0
                try:
                    body = await response.read_at_most(int(length))
                finally:
                    if budget is not None:
                        budget.give(held)
            finally:
                await response.aclose()
        except _TRANSPORT_ERRORS as exc:
            self.failures += 1
            raise PeerError(f"{peer.id}: {exc.__class__.__name__}") from exc
        if response.status == 424:
            raise _refused(body)
        return response.status, response.headers, body


def _aged(peer: Member, what: str, status: int, headers: dict[str, str], body: bytes) -> tuple[bytes, float]:
    """(body, age) of a `meta` or `list` answer."""
    try:
        age = float(headers.get(AGE_HEADER, ""))
    except ValueError:
        age = -1.0
    if status != 200 or not 0 <= age < 1e9:
        raise PeerError(f"{peer.id} answered {status} to a {what} question")
    return body, age


def asked_name(path: str, params: list[tuple[str, str]]) -> str:
    """What a request asks, as its count names it: its route (block, open, held, take, meta, list, hold),
    or lent, part, told (a block lent, part of a block, metadata told), and open_cached, meta_cached."""
    route = path.rsplit("/", 1)[1]
    names = {name for name, _ in params}
    if route == "take":
        return "take_in_file" if "file" in names else route
    for param, name in (("lent", "lent"), ("lo", "part"), ("told", "told")):
        if param in names:
            return name
    return f"{route}_cached" if "cached" in names else route


def held_masks(indexes: list[int]) -> list[tuple[int, int]]:
    """Block indexes as `held` names them: (first, mask), bit i of mask for block first + i, each
    mask covering at most HELD_MAX blocks."""
    masks: list[tuple[int, int]] = []
    for index in sorted(set(indexes)):
        if not masks or index - masks[-1][0] >= HELD_MAX:
            masks.append((index, 0))
        first, mask = masks[-1]
        masks[-1] = (first, mask | 1 << (index - first))
    return masks


def mask_indexes(first: int, mask: int) -> list[int]:
    """The block indexes a (first, mask) of `held` names."""
    return [first + i for i in range(mask.bit_length()) if mask >> i & 1]


def _refused(body: bytes) -> Exception:
    try:
        doc = orjson.loads(body)
        error = S3Error(str(doc["code"]), str(doc["message"]) or None, status=int(doc["status"]),
                        headers={str(k): str(v) for k, v in doc["headers"].items()},
                        extra={str(k): str(v) for k, v in doc.get("extra", {}).items()})
        return PeerRefused(error, bool(doc.get("changed")))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        return PeerError("a peer sent an unreadable error")


def refusal(error: S3Error, changed: bool) -> bytes:
    """The 424 body for an S3 error the origin gave the owner."""
    return orjson.dumps({"code": error.code, "message": error.message, "status": error.status,
                         "headers": error.headers, "extra": error.extra, "changed": changed})
