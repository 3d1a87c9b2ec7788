"""A small origin in memory for the engine's unit tests.

Not a mock: a real, if small, implementation of what the engine asks of gateway.origin.Origin
(`send`, `get_block`, `get_run`, `head`, `get_listing` and `error_from`), answering as S3 answers: a HEAD or GET of an object (a
304 to a matching If-None-Match, a 412 to an If-Match that is not, a 206 to a byte range), a
bucket's configuration document (`?cors`), and 404s with their error document. It counts what it is sent; `hold()` keeps every answer until `release()`
(for tests of concurrent askers), and `down` makes it unreachable, as a failed origin is to
Origin.send (S3Error ServiceUnavailable)."""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gateway.config import OriginSettings
from gateway.errors import S3Error
from gateway.origin import parse_error_document

LAST_MODIFIED = "Wed, 01 Jan 2025 00:00:00 GMT"


@dataclass(frozen=True, slots=True)
class Stored:
    body: bytes
    etag: str


class Answer:
    """An answer as Origin.send gives one (OriginResponse): status, headers, a body read once."""

    def __init__(self, status: int, headers: list[tuple[str, str]], body: bytes = b"",
                 trickle: asyncio.Event | None = None) -> None:
        self.trickle = trickle  # read_exactly's second half of a part told as it arrives waits for it
        self.status = status
        self.header_items = headers
        self.headers = dict(headers)
        self._body = body
        self.closed = False

    async def read_at_most(self, limit: int) -> bytes:
        self.closed = True
        return self._body[:limit + 1]

    async def read(self) -> bytes:
        self.closed = True
        return self._body

    async def read_exactly(self, count: int, arrived: Callable[[memoryview], None] | None = None) -> bytes:
        """The next `count` bytes; `arrived` is told their first half before they are all in, as
        the range client tells a reader what arrived (a stretch at a time)."""
        if count > len(self._body):
            raise S3Error("ServiceUnavailable", "The origin failed while sending its response.")
        part, self._body = self._body[:count], self._body[count:]
        if arrived is not None and count > 1:
            arrived(memoryview(part)[:count // 2])
            await (asyncio.sleep(0) if self.trickle is None else self.trickle.wait())
        return part

    async def aclose(self) -> None:
        self.closed = True


def _error(status: int, code: str, **extra: str) -> Answer:
    elements = "".join(f"<{name}>{value}</{name}>" for name, value in extra.items())
    body = f"<Error><Code>{code}</Code><Message>{code}</Message>{elements}</Error>".encode()
    return Answer(status, [("content-type", "application/xml"), ("content-length", str(len(body)))], body)


class MemoryOrigin:
    """Buckets of objects and of configuration documents, in dicts. Event loop only."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Stored]] = {}
        self.documents: dict[tuple[str, str], bytes] = {}  # (bucket, name: "cors") -> document
        self.requests: Counter[str] = Counter()  # by method, as Origin.requests counts them
        self.sent: list[tuple[str, str | None, str | None, dict[str, str]]] = []  # (method, bucket, key, headers)
        self.down = False
        self.settings = OriginSettings(retries=0)
        self._held: asyncio.Event | None = None
        self.trickle: asyncio.Event | None = None  # set: an object's body, read in parts, half waits for it
        self.cut: int | None = None  # set: a run's answer breaks off after so many bytes (get_run)
        # A suffix range (bytes=-N) of an empty object: S3 answers 200 and no bytes; other servers 416.
        self.empty_suffix = 200
        self.ranges = True  # False: every range is ignored (the whole object, 200), as HTTP lets a server do

    def create_bucket(self, bucket: str) -> None:
        self.objects.setdefault(bucket, {})

    def put(self, bucket: str, key: str, body: bytes) -> str:
        """Store an object (behind the gateway's back); returns its ETag."""
        etag = f'"{hashlib.md5(body).hexdigest()}"'
        self.objects.setdefault(bucket, {})[key] = Stored(body, etag)
        return etag

    def delete(self, bucket: str, key: str) -> None:
        self.objects.get(bucket, {}).pop(key, None)

    def hold(self) -> None:
        """Keep every answer from now on until `release()`."""
        self._held = asyncio.Event()

    def release(self) -> None:
        assert self._held is not None
        self._held.set()
        self._held = None

    async def send(self, method: str, bucket: str | None = None, key: str | None = None, *,
                   query: Iterable[tuple[str, str]] = (), headers: dict[str, str] | None = None,
                   body: object = None, body_length: int | None = None) -> Answer:
        headers = {name.lower(): value for name, value in (headers or {}).items()}
        self.requests[method] += 1
        self.sent.append((method, bucket, key, headers))
        if self._held is not None:
            await self._held.wait()
        if self.down:
            raise S3Error("ServiceUnavailable", "The origin is unreachable.")
        if bucket is None or bucket not in self.objects:
            return _error(404, "NoSuchBucket", BucketName=bucket or "")
        if key is None:
            return self._document(bucket, [name for name, _ in query])
        return self._object(method, bucket, key, headers)

    async def get_block(self, bucket: str, key: str, *, query: Iterable[tuple[str, str]] = (),
                        headers: dict[str, str]) -> Answer:
        """A ranged GET of at most one block (Origin.get_block)."""
        return await self.send("GET", bucket, key, query=query, headers=headers)

    async def get_run(self, bucket: str, key: str, *, query: Iterable[tuple[str, str]] = (),
                      headers: dict[str, str]) -> Answer:
        """A GET of an object's bytes, read in parts (Origin.get_run); its body breaks off after
        `cut` bytes when that is set (as a connection lost mid-answer)."""
        answer = await self.send("GET", bucket, key, query=query, headers=headers)
        if self.cut is not None:
            answer._body = answer._body[:self.cut]
        return answer

    async def head(self, bucket: str, key: str, *, query: Iterable[tuple[str, str]] = (),
                   headers: dict[str, str] | None = None) -> Answer:
        """A HEAD of an object (Origin.head)."""
        return await self.send("HEAD", bucket, key, query=query, headers=headers)

    async def get_listing(self, bucket: str, query: Iterable[tuple[str, str]]) -> Answer:
        """A GET of a bucket (Origin.get_listing)."""
        return await self.send("GET", bucket, None, query=query)

    def gets(self, key: str) -> int:
        """The GETs of `key` this origin was sent."""
        return sum(1 for method, _, sent, _ in self.sent if method == "GET" and sent == key)

    async def error_from(self, response: Answer, resource: str | None = None) -> S3Error:
        """The S3Error of an answer's error document, as Origin.error_from makes it."""
        parsed = parse_error_document(await response.read_at_most(64 * 1024))
        code, message, extra = parsed if parsed is not None else ("InternalError", "", {})
        return S3Error(code, message, status=response.status, resource=resource, extra=extra)

    def _object(self, method: str, bucket: str, key: str, headers: dict[str, str]) -> Answer:
        stored = self.objects[bucket].get(key)
        if stored is None:
            return Answer(404, []) if method == "HEAD" else _error(404, "NoSuchKey", Key=key)
        if headers.get("if-none-match") == stored.etag:
            return Answer(304, [("etag", stored.etag)])
        if headers.get("if-match", stored.etag) != stored.etag:
            return _error(412, "PreconditionFailed", Condition="If-Match")
        items = [("etag", stored.etag), ("last-modified", LAST_MODIFIED), ("content-type", "application/octet-stream")]
        size = len(stored.body)
        if method == "HEAD":
            return Answer(200, [*items, ("content-length", str(size))])
        first, _, last = headers.get("range", "").removeprefix("bytes=").partition("-") if self.ranges else ("", "", "")
        if not first and last.isdigit() and not size and self.empty_suffix == 416:
            return _error(416, "InvalidRange", ActualObjectSize="0")
        if not first and last.isdigit() and size:  # the last `last` bytes
            first, last = str(max(size - int(last), 0)), str(size - 1)
        if not first.isdigit():  # (no range, one this origin does not know, a suffix of nothing: the whole object)
            return Answer(200, [*items, ("content-length", str(size))], stored.body, self.trickle)
        if int(first) >= size:
            return _error(416, "InvalidRange", ActualObjectSize=str(size))
        end = min(int(last) if last.isdigit() else size - 1, size - 1)
        body = stored.body[int(first):end + 1]
        return Answer(206, [*items, ("content-length", str(len(body))), ("content-range", f"bytes {first}-{end}/{size}")],
                      body, self.trickle)

    def _document(self, bucket: str, names: list[str]) -> Answer:
        name = names[0] if names else ""
        document = self.documents.get((bucket, name))
        if document is None:
            return _error(404, "NoSuchCORSConfiguration" if name == "cors" else "NoSuchKey", BucketName=bucket)
        return Answer(200, [("content-length", str(len(document)))], document)
