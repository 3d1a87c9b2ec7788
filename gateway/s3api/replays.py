"""Requests sent again, byte for byte or by their shape: a cache hit answered without parsing the
request again.

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

Requests an AWS SDK signs each anew (their own x-amz-date, Credential date, Signature,
`amz-sdk-invocation-id` and `amz-sdk-request`) are never sent again byte for byte: they are kept by
their shape instead (auth.shaped): the request head with those values cut out, every other byte the
same (method, target, every other header and value, the access key, region, signed headers). Such a
request's answer, authorization and access-log entry are a function of those bytes and the object,
so a request of a kept shape is answered as the kept one once its signature is checked anew: the
Credential's date is x-amz-date's, the clock within the skew of x-amz-date, the access key's secret
still the one it was kept with, and the signature of its canonical request (the kept one's, its new
values put in their places) matched in constant time. Presigned URLs made anew (a web page's
images, a notebook's generate_presigned_url per read) are kept the same way, with X-Amz-Date, the
Credential's date and X-Amz-Signature cut out of the query and the URL's window checked anew. An
engine reads a warm file's row groups and column chunks each with its own Range: the Range's value
is cut out of the shape too (and put back in its place in the canonical request, so the signature
still covers it), and each request of a kept shape with a Range is answered for its own Range as
the hit path answers it (reads.object_answer): the kept answer was a 206 of the same object, so
only Content-Range, Content-Length and the bytes differ, read from the block that holds them
(Engine.one_block, Engine.read_block_now); a Range the hit path would answer otherwise (416, one
S3 ignores: 200) or whose bytes are not in one block at hand goes the whole way. Other
clients sign each request anew too without saying so (DuckDB, curl and s3cmd put the second in
`x-amz-date`: kept by their bytes and by their shape), so a request is kept only from its second
arrival (the same bytes, or the same shape): the hashes of the last SEEN requests' bytes and shapes
are counted, and what keeping one takes is made only then (`Keeper`). A request sent once costs a
count instead of a kept answer made for nothing (and dropped later), and does not push out of the
kept ones a request that is sent again.

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

import dataclasses
import functools
import operator
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from gateway.engine import ObjectMeta, OneBlock
from gateway.errors import S3Error
from gateway.lru import LRU
from gateway.s3api.auth import Identity
from gateway.s3api.auth.shaped import RANGE, Shape, Template, shape_of, signed_anew, template
from gateway.s3api.auth.memo import KNOWN_REQUEST_MAX, SDK_INVOCATION_ID, kept_size
from gateway.s3api.accounting import REPLAYED, Accounts, Answered, Served
from gateway.s3api.context import Services
from gateway.s3api.ranges import ByteRange, parse_range
from gateway.s3api.request import S3Request
from gateway.s3api.responses import new_request_id

# A request is kept only without these: their answer depends on the clock, not only on the
# request and the object (ranges.evaluate_preconditions ignores a date in the future).
CLOCK_HEADERS = ("if-modified-since", "if-unmodified-since")
MAX_REQUEST_BYTES = 4096  # larger requests are answered the whole way; and, as the signature memo,
# those whose kept_size (their headers counted at what each holds once parsed) is above KNOWN_REQUEST_MAX
MAX_KEPT = 2048  # requests kept per process, the oldest dropped first (each ~3 KB besides its request)
MAX_SHAPED = MAX_KEPT  # shapes kept per process (auth.shaped), the oldest dropped first
SEEN = 4 * MAX_KEPT  # requests and shapes whose arrivals are counted (by hash), the least recently seen forgotten first
_RID = b"x-amz-request-id"
_SDK_INVOCATION_ID = SDK_INVOCATION_ID.encode("ascii")
_XCACHE = b"x-cache"
_CUT = (_RID, _XCACHE)  # the headers each answer to a kept request says anew
_CUT_RANGED = (*_CUT, b"content-range", b"content-length")  # and to a kept shape with a Range


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
    # head as a %-format (head_format) of the server's default headers and the values of the headers
    # _CUT names (_CUT_RANGED for a kept shape with a Range), which `pick` puts in the answer's order
    # out of (default lines, *values in _CUT's order).
    head: bytes | None = None
    pick: Callable[[tuple[bytes, ...]], tuple[bytes, ...]] | None = None
    cors: bytes | None = None  # a request with an Origin: the bucket's CORS document its answer's headers came from
    # What each answer served (`answered`, REPLAYED), made with the first: each answer sets its own
    # request id, bytes, source and time in it before Accounts.record, which keeps nothing of it.
    served: Served | None = None
    template: Template | None = None  # kept by its shape: its canonical request, cut around what changes


Keeper = Callable[[], "Replay | None"]
"""What keeping a request answered by the hit path takes, made when it is kept (None: it may not be)."""

LaterReplay = Callable[[], Awaitable["tuple[list[bytes | memoryview], bool] | None"]]
"""A kept GET whose block another node owns: awaited, (the whole answer, keep-alive) once the
block came, or None: the request goes the whole way."""


_Ranged = tuple[ByteRange, str]  # (the bytes a kept shape's request asks with its Range, the Range)


def keepable(req: S3Request, identity: Identity, secret: str | None) -> tuple[float, float] | None:
    """The times (after, until) within which `req` may be answered again, or None when it
    may not be kept: its answer depends on the clock, or it is signed by a key whose secret
    is unknown. (One an SDK marked as its own is never sent again byte for byte: Replays.keep
    keeps it by its shape only.)"""
    if any(name in req.headers for name in CLOCK_HEADERS):
        return None
    if identity.access_key is not None and secret is None:
        return None
    after = identity.valid_from.timestamp() if identity.valid_from is not None else float("-inf")
    until = identity.valid_until.timestamp() if identity.valid_until is not None else float("inf")
    return after, until


def head_template(raw_headers: list[tuple[bytes, bytes]], closing: bytes, cut: tuple[bytes, ...] = _CUT,
                  ) -> tuple[tuple[bytes, ...], tuple[int, ...]]:
    """The answer's header lines and `closing` cut around the values of the headers `cut` names:
    (the segments, and for each value cut out in the answer's order, the place of its name in `cut`)."""
    pieces: list[bytes] = []
    segments: list[bytes] = []
    order: list[int] = []
    for name, value in raw_headers:
        pieces += (name, b": ")
        if name in cut:
            segments.append(b"".join(pieces))
            pieces = []
            order.append(cut.index(name))
        else:
            pieces.append(value)
        pieces.append(b"\r\n")
    pieces.append(closing)
    segments.append(b"".join(pieces))
    if sorted(order) != list(range(len(cut))):
        raise ValueError(f"an answer to keep carries one of each of {cut}")
    return tuple(segments), tuple(order)


def head_format(status_line: bytes, raw_headers: list[tuple[bytes, bytes]], closing: bytes, cut: tuple[bytes, ...],
                ) -> tuple[bytes, Callable[[tuple[bytes, ...]], tuple[bytes, ...]]]:
    """The head of an answer as one %-format: status_line | %s (the server's default headers) |
    the header lines and `closing`, a %s for each value of the headers `cut` names (head_template);
    with what picks, out of (default lines, *those values in `cut`'s order), the format's values."""
    segments, order = head_template(raw_headers, closing, cut)
    escaped = [piece.replace(b"%", b"%%") for piece in (status_line, *segments)]
    pick = operator.itemgetter(0, *(at + 1 for at in order))  # (_CUT: at least two, so a tuple)
    return escaped[0] + b"%s" + b"%s".join(escaped[1:]), pick


def answers_ranges(replay: Replay) -> bool:
    """Whether a request of a kept shape with a Range may be answered for its own Range from
    `replay`: its answer was a 206 (the Range honoured: If-Range, if any, held for the object
    `replay.meta`), with one Content-Range and one Content-Length."""
    names = [name for name, _ in replay.raw_headers]
    return replay.answered.status == 206 and names.count(b"content-range") == names.count(b"content-length") == 1


def _byte_range(value: str, size: int) -> ByteRange | None:
    """The bytes a Range asks of an object of `size` bytes when the hit path answers it 206; None
    when it answers otherwise (416, or the whole object for a Range S3 ignores)."""
    try:
        return parse_range(value, size)
    except S3Error:
        return None


class Replays:
    """The kept requests of one process, by their bytes and by their shapes (at most MAX_KEPT
    and MAX_SHAPED, the oldest first out). Event loop only."""

    def __init__(self, services: Services, accounts: Accounts, size: int = MAX_KEPT,
                 max_skew: timedelta = timedelta(seconds=900)) -> None:
        self.services, self.accounts = services, accounts
        self.size, self.max_skew = size, max_skew
        self._kept: LRU[bytes, Replay] = LRU(size)  # the oldest kept first out
        self._shaped: LRU[bytes, Replay] = LRU(min(size, MAX_SHAPED))  # by shape key (auth.shaped)
        self._arrivals: LRU[int, int] = LRU(SEEN)  # hash of a request's bytes or shape key: times seen
        self._defaults: tuple[list[tuple[bytes, bytes]] | None, bytes] = (None, b"")
        self._last: tuple[bytes | None, Shape | None] = (None, None)  # the last request shaped, its shape
        self.by_shape = 0  # answers given to requests of a kept shape

    def kept(self) -> list[bytes]:
        """The requests kept, oldest first."""
        return list(self._kept)

    def shapes(self) -> list[bytes]:
        """The shape keys kept, oldest first."""
        return list(self._shaped)

    def keep(self, request: bytes, keeper: Keeper) -> None:
        """Keep `request`, just answered by the hit path, if its bytes (or its shape) arrived before."""
        if len(request) > MAX_REQUEST_BYTES or self.size <= 0:
            return
        if kept_size(len(request), request.count(b"\n")) > KNOWN_REQUEST_MAX:  # many headers: large once parsed
            return
        again = (self._arrivals.get(hash(request)) or 0) >= 2
        shape = self._shape(request)
        again_shaped = shape is not None and (self._arrivals.get(hash(shape[0])) or 0) >= 2
        if not again and not again_shaped:
            return
        replay = keeper()
        if replay is None:
            return
        if again and _SDK_INVOCATION_ID not in request.lower():  # (an SDK's never comes again byte for byte)
            self._kept.put(request, replay)
        if (again_shaped and shape is not None and replay.access_key is not None and replay.secret is not None
                and (shape[RANGE] is None or answers_ranges(replay))):
            made = template(replay.req.view, shape, replay.secret, self.max_skew)
            if made is not None:  # its own window checked anew for each request of the shape
                self._shaped.put(shape[0], dataclasses.replace(replay, after=float("-inf"), until=float("inf"),
                                                               template=made, served=None, head=None))

    def answer(self, request: bytes, default_headers: list[tuple[bytes, bytes]],
               ) -> tuple[list[bytes | memoryview], bool] | LaterReplay | None:
        """(the whole HTTP answer, keep the connection open) to `request` sent again (or of a
        kept shape, signed anew); for a GET whose block another node owns, what gives that answer
        once the block came (None: the request goes the whole way); or None (nothing counted):
        the hit path and the app take it as a new request."""
        replay = self._kept.get(request)
        if replay is not None:
            return self._again(replay, request, self._kept, default_headers)
        shape = self._shape(request)
        if shape is not None:
            replay = self._shaped.get(shape[0])
            if replay is not None and self._signed_anew(replay, shape):
                return self._again(replay, shape[0], self._shaped, default_headers, shape[RANGE])
            self._arrived(shape[0])
        self._arrived(request)
        return None

    def _shape(self, request: bytes) -> Shape | None:
        """auth.shaped.shape_of(request), made once for the answer and the keeping of a request."""
        last, shape = self._last
        if last is not request:
            shape = shape_of(request) if len(request) <= MAX_REQUEST_BYTES else None
            self._last = request, shape
        return shape

    def _signed_anew(self, replay: Replay, shape: Shape) -> bool:
        """Whether a request of a kept shape is signed anew as auth.shaped checks it, with the
        secret its shape was kept with."""
        assert replay.template is not None and replay.secret is not None  # (kept by shape only with both)
        return signed_anew(replay.template, shape, replay.secret, datetime.now(timezone.utc), self.max_skew)

    def _again(self, replay: Replay, key: bytes, kept: LRU[bytes, Replay], default_headers: list[tuple[bytes, bytes]],
               range_value: str | None = None) -> tuple[list[bytes | memoryview], bool] | LaterReplay | None:
        """The answer to a request kept (in `kept`, under `key`), as `answer` says; `range_value`:
        a kept shape's with a Range, this request's own Range."""
        started = time.perf_counter()
        if not self._still_holds(replay):
            kept.pop(key)
            self._arrived(key, again=True)  # sent again before: kept anew once answered
            return None
        engine = self.services.engine
        ranged: _Ranged | None = None
        if range_value is not None:
            byte_range = _byte_range(range_value, replay.meta.size)
            if byte_range is None:
                return None  # not a 206: the hit path answers it
            ranged = byte_range, range_value
        read = replay.read
        if read is None:  # a HEAD
            return self._answered(replay, b"", "hit-mem", started, default_headers, ranged)
        if ranged is not None:
            req, (start, end) = replay.req, (ranged[0].start, ranged[0].end)
            found = engine.one_block(req.bucket or "", req.key or "", replay.meta, start, end)
            if found is None:
                return None  # not within one block
            read = found
        hit = engine.read_block_now(read, replay.meta)
        if hit is not None:
            return self._answered(replay, *hit, started, default_headers, ranged)
        if engine.peer_owns(read):
            return functools.partial(self._later, replay, read, started, default_headers, ranged)
        return None

    async def _later(self, replay: Replay, read: OneBlock, started: float, default_headers: list[tuple[bytes, bytes]],
                     ranged: _Ranged | None) -> tuple[list[bytes | memoryview], bool] | None:
        """A kept GET of a block another node owns (`read`), answered once the block came, read as
        the hit path's later answer reads it (s3api.hits); None (nothing counted) when it cannot be
        had: the request goes the whole way, and the app says why."""
        try:
            got = await self.services.engine.read_block(read, replay.meta)
        except S3Error:  # ObjectChanged too
            return None
        async with got:
            body = got.body
            assert body is not None  # a read within one block is in hand
        return self._answered(replay, body, got.source, started, default_headers, ranged)

    def _answered(self, replay: Replay, body: bytes | memoryview, source: str, started: float,
                  default_headers: list[tuple[bytes, bytes]], ranged: _Ranged | None = None,
                  ) -> tuple[list[bytes | memoryview], bool]:
        """The whole answer to a kept request from its body (`ranged`: for its own Range), counted
        and logged."""
        if replay.head is None or replay.pick is None:
            replay.head, replay.pick = head_format(replay.status_line, replay.raw_headers, replay.closing,
                                                   _CUT if ranged is None else _CUT_RANGED)
        made_for, default_lines = self._defaults  # (_default_lines, without its call when they did not change)
        if made_for is not default_headers:
            default_lines = self._default_lines(default_headers)
        request_id = new_request_id()
        values: tuple[bytes, ...] = (default_lines, request_id.encode("ascii"), source.encode("ascii"))
        if ranged is not None:
            byte_range = ranged[0]
            values += (byte_range.content_range(replay.meta.size).encode("ascii"), b"%d" % byte_range.length)
        head = replay.head % replay.pick(values)
        served = replay.served
        if served is None:
            served = replay.served = Served(replay.answered, request_id, 0, None, 0.0, REPLAYED)
        if ranged is not None:  # its access-log entry names its own Range
            answered = replay.answered
            served.answered = Answered(answered.operation, answered.status, {**answered.entry, "range": ranged[1]})
        served.request_id, served.sent, served.cache, served.seconds = \
            request_id, len(body), source, time.perf_counter() - started
        self.accounts.record(served)
        self.by_shape += replay.template is not None
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
