"""Requests sent again byte for byte: a cache hit answered without parsing the request again.

Dashboards, browsers and tools fetch the same presigned URL over and over, and an engine's
workers send one signed request many times within its clock window. When the hit path
(s3api.hits) answers such a request and its bytes arrived before, it keeps what the answer
depended on, keyed by the request's bytes exactly as they arrived (method, target, every
header; the HTTP protocol hands over only a read that held one whole request and nothing
else). The same bytes again are answered here with nothing parsed, verified or authorized
again, because none of that can come out otherwise for the same bytes:

- the signature: verified once; used again only while its time checks still pass (the
  clock skew of a header signature, a presigned URL's expiry: Identity.valid_from/until)
  and its key's secret is the one it was checked with, as the signature memo does;
- the authorization: a pure function of the user, the action and the object (AccessPolicy
  is built once from the settings);
- the answer's status and headers: a pure function of the request and the object's
  metadata (and, for a request with an Origin, of the bucket's CORS rules), except for
  If-Modified-Since and If-Unmodified-Since, which compare with the clock: requests carrying
  them are not kept.

Nor are requests an AWS SDK marked as its own (`amz-sdk-invocation-id`, a new id per request,
signed anew on a retry): they are never sent again byte for byte. Other clients sign each
request anew too without saying so (DuckDB, curl and s3cmd put the second in `x-amz-date`), so
a request is kept only from its second arrival: the hashes of the last SEEN requests' bytes are
counted, and what keeping one takes is made only then (`Keeper`). A request sent once costs a
count instead of a kept answer made for nothing (and dropped later), and does not push out of
the kept ones a request that is sent again.

What can change between two sends is asked again every time, of the same functions the hit
path asks: the bucket's CORS document, for a request with an Origin, must still be the same one
the answer's headers came from (Engine.bucket_cors_now); the metadata must still be the very
object the answer was built from and fresh (Engine.fresh_now: TTLs, invalidations by writes
through any worker or node), and the bytes must be in a tier that answers at once
(Engine.read_block_now, of the block the hit path read), or, for a block another node owns,
read from it as the hit path's later answer reads it (Engine.read_block), the answer sent once
it came (LaterReplay). Any difference, and the request goes the whole way as a new one. Each
answer gets its own request id and Date and is kept in every book as the hit path's and the
app's are (a `Served`, recorded by Accounts.record, with an entry made once when the request is
kept).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gateway.engine import ObjectMeta, OneBlock
from gateway.errors import S3Error
from gateway.lru import LRU
from gateway.s3api.auth import Identity
from gateway.s3api.auth.memo import KNOWN_REQUEST_MAX, SDK_INVOCATION_ID, kept_size
from gateway.s3api.accounting import REPLAYED, Accounts, Answered, Served
from gateway.s3api.context import Services
from gateway.s3api.request import S3Request
from gateway.s3api.responses import new_request_id

# A request is kept only without these: their answer depends on the clock, not only on the
# request and the object (ranges.evaluate_preconditions ignores a date in the future).
CLOCK_HEADERS = ("if-modified-since", "if-unmodified-since")
MAX_REQUEST_BYTES = 4096  # larger requests are answered the whole way; and, as the signature memo,
# those whose kept_size (their headers counted at what each holds once parsed) is above KNOWN_REQUEST_MAX
MAX_KEPT = 2048  # requests kept per process, the oldest dropped first (each ~3 KB besides its request)
SEEN = 4 * MAX_KEPT  # requests whose arrivals are counted (by hash), the least recently seen forgotten first
_RID = b"x-amz-request-id"
_XCACHE = b"x-cache"


@dataclass(slots=True)
class Replay:
    """What answering one kept request again needs."""

    req: S3Request  # as parsed and authenticated
    access_key: str | None
    secret: str | None
    after: float  # the signature's time checks pass from `after` to `until` (inclusive, epoch seconds)
    until: float
    version_id: str | None
    checksums: bool
    meta: ObjectMeta  # the metadata the answer was built from
    read: OneBlock | None  # the block a GET's bytes are in, and which bytes (None: a HEAD)
    status_line: bytes
    raw_headers: list[tuple[bytes, bytes]]  # the answer's, but the server's default headers (Date)
    closing: bytes  # what ends the head: CRLF, with Connection: close before it when not keep_alive
    keep_alive: bool
    answered: Answered  # how each answer is counted and logged (a Served of it, Accounts.record)
    # Made when the request is first answered again (most kept requests never are): the answer's
    # head is status_line | the server's default headers | segments[0] | first slot | segments[1]
    # | second slot | segments[2], the slots being the request id and the x-cache value in the
    # order the answer had them (rid_first).
    segments: tuple[bytes, bytes, bytes] | None = None
    rid_first: bool = True
    cors: bytes | None = None  # a request with an Origin: the bucket's CORS document its answer's headers came from
    # What each answer served (`answered`, REPLAYED), made with the first: each answer sets its own
    # request id, bytes, source and time in it before Accounts.record, which keeps nothing of it.
    served: Served | None = None


Keeper = Callable[[], "Replay | None"]
"""What keeping a request answered by the hit path takes, made when it is kept (None: it may not be)."""

LaterReplay = Callable[[], Awaitable["tuple[list[bytes | memoryview], bool] | None"]]
"""A kept GET whose block another node owns: awaited, (the whole answer, keep-alive) once the
block came, or None: the request goes the whole way."""


def keepable(req: S3Request, identity: Identity, secret: str | None) -> tuple[float, float] | None:
    """The times (after, until) within which `req` may be answered again, or None when it
    may not be kept: its answer depends on the clock, it is signed by a key whose secret
    is unknown, or an SDK marked it as its own (it is never sent again byte for byte)."""
    if SDK_INVOCATION_ID in req.headers or any(name in req.headers for name in CLOCK_HEADERS):
        return None
    if identity.access_key is not None and secret is None:
        return None
    after = identity.valid_from.timestamp() if identity.valid_from is not None else float("-inf")
    until = identity.valid_until.timestamp() if identity.valid_until is not None else float("inf")
    return after, until


def head_template(raw_headers: list[tuple[bytes, bytes]], closing: bytes) -> tuple[tuple[bytes, bytes, bytes], bool]:
    """The answer's header lines and `closing` cut around the request id's and x-cache's
    values: (three segments, whether the request id comes first)."""
    pieces: list[bytes] = []
    segments: list[bytes] = []
    order: list[bytes] = []
    for name, value in raw_headers:
        pieces += (name, b": ")
        if name == _RID or name == _XCACHE:
            segments.append(b"".join(pieces))
            pieces = []
            order.append(name)
        else:
            pieces.append(value)
        pieces.append(b"\r\n")
    pieces.append(closing)
    segments.append(b"".join(pieces))
    if order != [_RID, _XCACHE] and order != [_XCACHE, _RID]:
        raise ValueError("an answer to keep carries one request id and one x-cache")
    return (segments[0], segments[1], segments[2]), order[0] == _RID


class Replays:
    """The kept requests of one process, by their bytes (at most MAX_KEPT, the oldest first
    out). Event loop only."""

    def __init__(self, services: Services, accounts: Accounts, size: int = MAX_KEPT) -> None:
        self.services, self.accounts = services, accounts
        self.size = size
        self._kept: LRU[bytes, Replay] = LRU(size)  # the oldest kept first out
        self._arrivals: LRU[int, int] = LRU(SEEN)  # hash of a request's bytes: times seen
        self._defaults: tuple[list[tuple[bytes, bytes]] | None, bytes] = (None, b"")

    def kept(self) -> list[bytes]:
        """The requests kept, oldest first."""
        return list(self._kept)

    def keep(self, request: bytes, keeper: Keeper) -> None:
        """Keep `request`, just answered by the hit path, if its bytes arrived before."""
        if len(request) > MAX_REQUEST_BYTES or self.size <= 0 or (self._arrivals.get(hash(request)) or 0) < 2:
            return
        if kept_size(len(request), request.count(b"\n")) > KNOWN_REQUEST_MAX:  # many headers: large once parsed
            return
        replay = keeper()
        if replay is None:
            return
        self._kept.put(request, replay)

    def answer(self, request: bytes, default_headers: list[tuple[bytes, bytes]],
               ) -> tuple[list[bytes | memoryview], bool] | LaterReplay | None:
        """(the whole HTTP answer, keep the connection open) to `request` sent again; for a GET
        whose block another node owns, what gives that answer once the block came (None: the
        request goes the whole way); or None (nothing counted): the hit path and the app take
        it as a new request."""
        replay = self._kept.get(request)
        if replay is None:
            self._arrived(request)
            return None
        started = time.perf_counter()
        if not self._still_holds(replay):
            self._kept.pop(request)
            self._arrived(request, again=True)  # sent again before: kept anew once answered
            return None
        engine = self.services.engine
        if replay.read is None:  # a HEAD
            return self._answered(replay, b"", "hit-mem", started, default_headers)
        hit = engine.read_block_now(replay.read, replay.meta)
        if hit is not None:
            return self._answered(replay, *hit, started, default_headers)
        if engine.peer_owns(replay.read):
            return functools.partial(self._later, replay, started, default_headers)
        return None

    async def _later(self, replay: Replay, started: float,
                     default_headers: list[tuple[bytes, bytes]]) -> tuple[list[bytes | memoryview], bool] | None:
        """A kept GET of a block another node owns, answered once the block came, read as the
        hit path's later answer reads it (s3api.hits); None (nothing counted) when it cannot be
        had: the request goes the whole way, and the app says why."""
        assert replay.read is not None  # a GET's
        try:
            got = await self.services.engine.read_block(replay.read, replay.meta)
        except S3Error:  # ObjectChanged too
            return None
        async with got:
            body = got.body
            assert body is not None  # a read within one block is in hand
        return self._answered(replay, body, got.source, started, default_headers)

    def _answered(self, replay: Replay, body: bytes | memoryview, source: str, started: float,
                  default_headers: list[tuple[bytes, bytes]]) -> tuple[list[bytes | memoryview], bool]:
        """The whole answer to a kept request from its body, counted and logged."""
        if replay.segments is None:
            replay.segments, replay.rid_first = head_template(replay.raw_headers, replay.closing)
        segments = replay.segments
        request_id = new_request_id()
        rid, label = request_id.encode("ascii"), source.encode("ascii")
        first, second = (rid, label) if replay.rid_first else (label, rid)
        made_for, default_lines = self._defaults  # (_default_lines, without its call when they did not change)
        if made_for is not default_headers:
            default_lines = self._default_lines(default_headers)
        head = b"".join((replay.status_line, default_lines, segments[0], first, segments[1], second, segments[2]))
        served = replay.served
        if served is None:
            served = replay.served = Served(replay.answered, request_id, 0, None, 0.0, REPLAYED)
        served.request_id, served.sent, served.cache, served.seconds = \
            request_id, len(body), source, time.perf_counter() - started
        self.accounts.record(served)
        return [head, body], replay.keep_alive

    def _arrived(self, request: bytes, *, again: bool = False) -> None:
        """Count an arrival of `request` (`again`: it is known to have come before); counts
        stop at 2, all `keep` asks, and at most SEEN requests are counted."""
        arrivals, name = self._arrivals, hash(request)
        arrivals.put(name, 2 if again or name in arrivals else 1)

    def _still_holds(self, replay: Replay) -> bool:
        """Whether what the kept answer depended on still holds: the signature's time window,
        its key's secret, and the very metadata the answer was built from, fresh."""
        if not replay.after <= time.time() <= replay.until:
            return False
        if replay.access_key is not None and self.services.policy.secret_for(replay.access_key) != replay.secret:
            return False
        req = replay.req
        engine = self.services.engine
        if "origin" in req.headers and engine.bucket_cors_now(req.bucket or "") != (True, replay.cors):
            return False  # the CORS rules changed, or are not in memory: their headers are made anew
        meta = engine.fresh_now(req.bucket or "", req.key or "", version_id=replay.version_id,
                                checksums=replay.checksums)
        return meta is replay.meta

    def _default_lines(self, default_headers: list[tuple[bytes, bytes]]) -> bytes:
        """The server's default headers (Date) as lines; the server makes a new list when they change."""
        source, lines = self._defaults
        if source is not default_headers:
            lines = b"".join(b"%s: %s\r\n" % (name, value) for name, value in default_headers)
            self._defaults = default_headers, lines
        return lines
