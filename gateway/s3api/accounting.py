"""What every answer of the S3 endpoint leaves behind, whichever way it was made (the ASGI app,
the hit path below it, a kept request answered again): its counts (s3api.stats), the engine's
books of a read (the object's heat, the metadata hit of an answer made below ASGI:
Engine.answered), its access-log entry (logged as one JSON line and handed to the observers,
such as the shadow estimate), and the bucket it shows to exist. Each path makes a `Served`, what
the answer served; one function, `Accounts.record`, keeps every book of it: the paths differ only
in how they get to a `Served`."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from starlette.types import Message, Send

from gateway import log
from gateway.hitanswers import ASGI, BELOW_ASGI, REPLAYED
from gateway.s3api.request import S3Request
from gateway.s3api.stats import RequestStats

__all__ = ["ASGI", "Accounts", "Answered", "BELOW_ASGI", "EngineBooks", "REPLAYED", "Sending", "Served", "Shadow",
           "access_entry", "answered_for", "note_answer", "outcome_of"]


class EngineBooks(Protocol):
    """What the engine keeps of the answers of the S3 endpoint (gateway.engine.Engine)."""

    def answered(self, bucket: str, key: str, read: bool, from_fresh_now: bool) -> None:
        """A GET or HEAD of an object answered: see Engine.answered."""

    def bucket_exists(self, bucket: str) -> None:
        """A request of a known user succeeded on `bucket` (a CORS preflight for it may then ask
        the origin for its rules without a rate limit)."""


class Shadow(Protocol):
    """What the shadow estimate (gateway.advisor.shadow.ShadowAdvisor) is fed of every answer."""

    def observe_read(self, bucket: str | None, key: str | None, operation: str | None, status: int, sent: int,
                     cache: str | None) -> bool:
        """The answer counted from these fields (True), or (False) to be given its whole entry."""

    def observe_entry(self, entry: dict[str, Any]) -> None:
        """An answer's access-log entry."""


class Accounts:
    """The counts, access log and observers of one S3 endpoint, and the engine's books of the
    reads it answers (`engine`). Event loop only."""

    def __init__(self, engine: EngineBooks) -> None:
        self.stats = RequestStats()
        # Called with every request's access-log entry (a dict), logged or not.
        self.observers: list[Callable[[dict[str, Any]], None]] = []
        # The shadow estimate: shown each answer's fields, and its entry only when it asks for it.
        self.shadow: Shadow | None = None
        self._bucket_exists, self._engine_answered = engine.bucket_exists, engine.answered

    def record(self, served: Served) -> None:
        """Every book of one answer: the request counts, the engine's (a GET that read the
        object's bytes is one more hit of it; an answer made below ASGI took its metadata from
        Engine.fresh_now, which counts nothing), the bucket it shows to exist, the access log."""
        answered, cache, way = served.answered, served.cache, served.way
        operation, status, entry = answered.operation, answered.status, answered.entry
        self.stats.record(operation, status, served.seconds, cache, served.sent, way)
        read = cache is not None and status < 300 and operation == "GetObject"  # (x-cache: the engine read it)
        if read or way != ASGI:
            self._engine_answered(entry["bucket"], entry["key"], read, way != ASGI)
        if status < 400 and entry["user"] is not None and entry["bucket"] is not None:
            self._bucket_exists(entry["bucket"])
        logged, observers, shadow = log.access.isEnabledFor(logging.INFO), self.observers, self.shadow
        if shadow is not None and not shadow.observe_read(entry["bucket"], entry["key"], operation, status,
                                                          served.sent, cache):
            observers = [*observers, shadow.observe_entry]  # (an object in its sample: it reads the entry)
        if logged or observers:
            _access_log(dict(entry), served.request_id, served.sent, cache, served.seconds, observers, logged)


@dataclass(slots=True)
class Served:
    """What one answer of the S3 endpoint served, made by whichever path answered (the app:
    `Sending`; the hit path: s3api.hits; a kept request: s3api.replays) and kept in every book by
    Accounts.record: how it is counted and logged (`answered`: its operation, status, and access-log
    entry with the bucket and key), its request id, the bytes of body `sent`, its x-cache value
    (where the bytes came from: hit-mem, hit-disk, hit-peer, partial, miss; None when no read of
    the engine made the answer), the `seconds` it took and the `way` it was made
    (gateway.hitanswers: ASGI, BELOW_ASGI, REPLAYED)."""

    answered: Answered
    request_id: str
    sent: int
    cache: str | None
    seconds: float
    way: int = ASGI


class Sending:
    """One answer of the ASGI app on its way out: its status, headers and bytes noted as they go
    to the server (`send`), and recorded once (Accounts.record), as its last bytes go, or at the
    end (`done`) when they never did (an error mid-stream). `req` is set once it was parsed."""

    __slots__ = ("accounts", "method", "request_id", "started", "req", "outcome", "_send", "_recorded")

    def __init__(self, accounts: Accounts, method: str, request_id: str, send: Send,
                 req: S3Request | None = None) -> None:
        self.accounts, self.method, self.request_id, self.req = accounts, method, request_id, req
        self.started = time.perf_counter()
        self.outcome: dict[str, Any] = {"status": 500, "bytes": 0, "cache": None}
        self._send = send
        self._recorded = False

    async def send(self, message: Message) -> None:
        outcome = self.outcome
        if message["type"] == "http.response.start":
            note_answer(outcome, message["status"], message.get("headers", ()))
        elif message["type"] == "http.response.body":
            outcome["bytes"] += len(message.get("body", b""))
            if not message.get("more_body", False):
                # Recorded as its last bytes go to the server, as the hit path records its own:
                # they let the connection's next request start (pipelined, at once; else once
                # the client has read them), which the hit path answers and logs there and then,
                # while this task still closes what the answer held. Logged after that, a
                # connection's lines would not be in the order it was answered in.
                self.done()
        await self._send(message)

    def done(self) -> None:
        """Record the answer, unless it was already."""
        if not self._recorded:
            self._recorded = True
            outcome = self.outcome
            self.accounts.record(Served(answered_for(self.req, self.method, outcome), self.request_id,
                                        outcome["bytes"], outcome["cache"], time.perf_counter() - self.started))


def note_answer(outcome: dict[str, Any], status: int, headers: Iterable[tuple[bytes, bytes]]) -> None:
    """What the access log and stats keep of an answer's status line and headers: the status,
    the x-cache value, and the object's size when the answer shows it."""
    outcome["status"] = status
    for name, value in headers:
        if name == b"x-cache":
            outcome["cache"] = value.decode("latin-1")
        elif name == b"content-range":  # bytes a-b/SIZE: the object's size
            outcome["size"] = value.rpartition(b"/")[2].decode("latin-1")
        elif name == b"content-length" and status == 200:
            outcome.setdefault("size", value.decode("latin-1"))


def outcome_of(status: int, headers: dict[str, str], sent: int) -> dict[str, Any]:
    """What note_answer keeps of an answer whose headers are in hand by (lowercase) name, with
    `sent` bytes of body: the hit path's, which has them before they are lines."""
    outcome: dict[str, Any] = {"status": status, "bytes": sent, "cache": headers.get("x-cache")}
    shown = headers.get("content-range")  # bytes a-b/SIZE: the object's size
    if shown is not None:
        outcome["size"] = shown.rpartition("/")[2]
    elif status == 200 and "content-length" in headers:
        outcome["size"] = headers["content-length"]
    return outcome


@dataclass(frozen=True, slots=True)
class Answered:
    """What the counters and the access log say of an answer: its operation's name, its status,
    and its access-log entry but for the fields each answer fills in (access_entry). Made once
    for a request kept to be answered again (s3api.replays), and serving each of its answers
    (each its own `Served`)."""

    operation: str
    status: int
    entry: dict[str, Any]


def answered_for(req: S3Request | None, method: str, outcome: dict[str, Any]) -> Answered:
    """How `req`, answered with `outcome` (status and size), is counted and logged."""
    return Answered(req.operation.name if req is not None and req.operation is not None else "unknown",
                    outcome["status"],
                    access_entry(req, method, outcome))


def access_entry(req: S3Request | None, method: str, outcome: dict[str, Any]) -> dict[str, Any]:
    """A request's access-log entry with the fields its answer's status and size settle;
    time, request_id, bytes, cache and latency_ms are None, for `_access_log` to fill in.

    `user` is the access key (never a secret, a signature or the query string of a presigned
    URL); `size` the object's size when the answer shows it (a GET's Content-Range or
    whole-object Content-Length)."""
    operation = req.operation.name if req and req.operation else None
    # An object's size, from the answer to a read of it (a listing's length is no object's).
    size = outcome.get("size") if operation in ("GetObject", "HeadObject") else None
    return {
        "time": None,
        "request_id": None,
        "user": req.user.access_key if req and req.user else None,
        "operation": operation,
        "method": method,
        "bucket": req.bucket if req else None,
        "key": req.key if req else None,
        "range": req.headers.get("range") if req else None,
        "status": outcome["status"],
        "bytes": None,
        "cache": None,
        "size": int(size) if size is not None and size.isdigit() else None,
        "latency_ms": None,
    }


def _access_log(entry: dict[str, Any], request_id: str, sent: int, cache: str | None, seconds: float,
                observers: list[Callable[[dict[str, Any]], None]], logged: bool) -> None:
    """A request's access-log entry (from access_entry, completed here) handed to the
    `observers`, and `logged` as one JSON line. `cache` is the answer's x-cache value."""
    # round(x, 3) and round(x, 2) but for a value within float error of a tie, without round()'s
    # decimal conversion: the two cost a twentieth of a request sent again (s3api.replays).
    entry["time"] = int(time.time() * 1000 + 0.5) / 1000  # seconds, to the millisecond
    entry["request_id"] = request_id
    entry["bytes"] = sent
    entry["cache"] = cache
    entry["latency_ms"] = int(seconds * 100_000 + 0.5) / 100
    for observe in observers:
        try:
            observe(entry)
        except Exception:  # an estimate must never cost a request
            log.s3api.exception("an access-log observer failed")
    if logged:
        log.access.info(orjson.dumps(entry).decode())
