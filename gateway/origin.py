"""The client for the real bucket: every request re-signed with the gateway's own credentials.

Requests and responses are streamed (aiohttp), so a body of any size passes through
with bounded memory; a GET of cache blocks (get_block, get_run), a HEAD (head) and a listing
page (get_listing) go through gateway.rangeclient instead, which receives a body into one
buffer, or a run's into one per block. Transport failures become
S3Error("ServiceUnavailable") here and nowhere else; error documents from the origin
become S3Error with the origin's code and status.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from datetime import datetime, timezone
from typing import TypeVar
from urllib.parse import urlsplit

import aiohttp
from defusedxml import ElementTree
from yarl import URL

from gateway import log
from gateway.config import OriginSettings
from gateway.errors import S3Error
from gateway.rangeclient import Arrived, RangeClient, RangeResponse
from gateway.retry import ExponentialBackoff, Retry
from gateway.signing import UNSIGNED_PAYLOAD, EMPTY_SHA256, sign_request_v4, uri_encode, sha256_hex

# What an origin error status means when the response has no body (HEAD).
_STATUS_CODES = {
    301: "PermanentRedirect", 304: "NotModified", 400: "BadRequest", 403: "AccessDenied",
    404: "NoSuchKey", 405: "MethodNotAllowed", 409: "Conflict", 412: "PreconditionFailed",
    416: "InvalidRange", 500: "InternalError", 501: "NotImplemented", 503: "ServiceUnavailable",
}
_MAX_ERROR_BODY = 64 * 1024
_ERROR_HEADERS = ("content-range", "x-amz-delete-marker", "x-amz-version-id", "allow", "x-amz-bucket-region")
# aiohttp adds these unless told not to; none of them may change what the origin does.
_NO_AUTO_HEADERS = ("User-Agent", "Accept", "Accept-Encoding", "Content-Type")
# aiohttp's, and the range client's (builtin ConnectionError and TimeoutError, as asyncio.TimeoutError is).
_TRANSPORT_ERRORS = (aiohttp.ClientError, ConnectionError, TimeoutError)

BodyFactory = Callable[[], AsyncIterator[bytes]]
"""Returns a fresh iterator over the request body each call, so a request can be retried."""
_Answer = TypeVar("_Answer", "OriginResponse", "BlockResponse")
_BACKOFF = ExponentialBackoff(0.2, jitter=0.75)  # 50-200 ms after the first failure, doubling


def _busy(answer: OriginResponse | BlockResponse) -> bool:
    """An answer that asks to be sent again (S3's InternalError and SlowDown/ServiceUnavailable)."""
    return answer.status in (500, 503)


class OriginResponse:
    """A streamed origin response; the caller must `aclose()` it (or read it fully).

    `header_items` are the headers as sent (names lower-cased, values as latin-1 text, so
    every byte passes through); `headers` is the same as a dict for look-ups.
    """

    __slots__ = ("status", "headers", "header_items", "_response")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status
        self.header_items = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in response.raw_headers]
        headers: dict[str, str] = {}
        for name, value in self.header_items:
            headers[name] = f"{headers[name]},{value}" if name in headers else value
        self.headers = headers

    async def read(self) -> bytes:
        try:
            return await self._response.read()
        except _TRANSPORT_ERRORS as exc:
            raise S3Error("ServiceUnavailable", "The origin failed while sending its response.") from exc
        finally:
            self._response.release()

    async def read_at_most(self, limit: int) -> bytes:
        """The body if it is at most `limit` bytes; otherwise more than `limit` of its first
        bytes, and the connection is dropped (nothing more is read from it).

        (Not `readchunk`, which saves one join of the buffered pieces: aiohttp's shared empty
        payload of HEAD and 204 answers says "end of a chunk" from its second use on, for ever,
        and a loop reading to the end never awaited anything again.)
        """
        pieces: list[bytes] = []
        size = 0
        try:
            async for piece in self._response.content.iter_any():
                pieces.append(piece)
                size += len(piece)
                if size > limit:
                    break
        except _TRANSPORT_ERRORS as exc:
            raise S3Error("ServiceUnavailable", "The origin failed while sending its response.") from exc
        finally:
            self._response.release()  # back to the pool if the body was read to its end, else closed
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    async def read_exactly(self, count: int) -> bytes:
        """The next `count` bytes of the body; S3Error when the body ends or fails before
        them (the caller decides whether a piece read so far is of use: it is not)."""
        try:
            return await self._response.content.readexactly(count)
        except (asyncio.IncompleteReadError, *_TRANSPORT_ERRORS) as exc:
            self._response.close()
            raise S3Error("ServiceUnavailable", "The origin failed while sending its response.") from exc

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        """The body as it arrives. A failure mid-stream raises, so no truncated body looks complete."""
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except _TRANSPORT_ERRORS as exc:
            raise S3Error("ServiceUnavailable", "The origin failed while sending its response.") from exc
        finally:
            self._response.release()

    async def aclose(self) -> None:
        # A connection goes back to the pool when its body was read to the end (always so
        # for HEAD, 204 and 304); otherwise it is closed.
        self._response.release()


class BlockResponse:
    """An origin answer the range client received (Origin.get_block: a GET of at most one
    block; Origin.get_run, whose body is read in parts; Origin.head; Origin.get_listing), its
    body into one buffer (or one per part); read or closed as OriginResponse is."""

    __slots__ = ("status", "headers", "header_items", "_response")

    def __init__(self, response: RangeResponse) -> None:
        self._response = response
        self.status = response.status
        self.header_items = response.header_items
        self.headers = response.headers

    async def read_at_most(self, limit: int) -> bytes:
        """As OriginResponse.read_at_most."""
        try:
            return await self._response.read_at_most(limit)
        except _TRANSPORT_ERRORS as exc:
            raise S3Error("ServiceUnavailable", "The origin failed while sending its response.") from exc

    async def read_exactly(self, count: int, arrived: Arrived | None = None) -> bytes:
        """As OriginResponse.read_exactly, each call's bytes in a buffer of their own (a run
        read block by block: Origin.get_run); `arrived` is given them as they come, in
        stretches, before they are all in (RangeResponse.read_part)."""
        try:
            return await self._response.read_part(count, arrived)
        except _TRANSPORT_ERRORS as exc:
            raise S3Error("ServiceUnavailable", "The origin failed while sending its response.") from exc

    async def aclose(self) -> None:
        await self._response.aclose()


def _payload_hash(method: str, body: bytes | BodyFactory | None, body_length: int | None, headers: dict[str, str]) -> str:
    """The x-amz-content-sha256 the request is signed with; sets its Content-Length in `headers`."""
    if isinstance(body, bytes):
        headers["content-length"] = str(len(body))
        return sha256_hex(body) if body else EMPTY_SHA256
    if body is not None:
        headers["content-length"] = str(body_length or 0)
        return UNSIGNED_PAYLOAD
    if method in ("PUT", "POST"):
        headers["content-length"] = "0"
    return EMPTY_SHA256


class Origin:
    """Signed, streaming, retrying access to the origin bucket service."""

    def __init__(self, settings: OriginSettings) -> None:
        self.settings = settings
        parts = urlsplit(settings.endpoint)
        self._scheme = parts.scheme
        self._netloc = parts.netloc
        self._session: aiohttp.ClientSession | None = None
        self._blocks: RangeClient | None = None
        self.requests: Counter[str] = Counter()  # requests sent, by method (every attempt)
        self.failures = 0  # attempts that got no answer (refused, reset, timed out)
        # Every request is idempotent: one that got no answer, or a 500 or 503, is sent again.
        self._retry = Retry(_BACKOFF, settings.retries, _TRANSPORT_ERRORS)

    def _client(self) -> aiohttp.ClientSession:
        # Made on first use, on the loop that uses it.
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.settings.max_connections, limit_per_host=0),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.settings.connect_timeout,
                                              sock_read=self.settings.read_timeout),
                auto_decompress=False,  # bodies pass through as the origin stored them
                skip_auto_headers=_NO_AUTO_HEADERS,
            )
        return self._session

    def _block_client(self) -> RangeClient:
        if self._blocks is None:  # made on first use, on the loop that uses it
            settings = self.settings
            self._blocks = RangeClient(self._scheme, connect_timeout=settings.connect_timeout,
                                       read_timeout=settings.read_timeout, max_connections=settings.max_connections)
        return self._blocks

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._blocks is not None:
            await self._blocks.aclose()
            self._blocks = None

    async def send(
        self,
        method: str,
        bucket: str | None = None,
        key: str | None = None,
        *,
        query: Iterable[tuple[str, str]] = (),
        headers: dict[str, str] | None = None,
        body: bytes | BodyFactory | None = None,
        body_length: int | None = None,
    ) -> OriginResponse:
        """Send one request; returns any HTTP answer, raises S3Error only when none came.

        `body` is bytes, or a factory of async iterators plus `body_length` for a
        streamed body. Transport errors are retried (every S3 request we send is
        idempotent, and a streamed body can be produced again from the factory).
        """
        client = self._client()

        async def attempt(host: str, target: str, signed: dict[str, str]) -> OriginResponse:
            content = body() if callable(body) else body
            url = URL(f"{self._scheme}://{host}{target}", encoded=True)
            return OriginResponse(await client.request(method, url, headers=signed, data=content,
                                                       allow_redirects=False))

        return await self._attempts(method, bucket, key, list(query), headers, body, body_length, attempt)

    async def get_block(self, bucket: str, key: str, *, query: Iterable[tuple[str, str]] = (),
                        headers: dict[str, str]) -> BlockResponse:
        """A GET of at most one block (a ranged read), sent and retried as `send` does, its
        body received into one buffer (gateway.rangeclient) instead of aiohttp's pieces."""
        return await self._buffered("GET", bucket, key, list(query), headers)

    async def get_run(self, bucket: str, key: str, *, query: Iterable[tuple[str, str]] = (),
                      headers: dict[str, str]) -> BlockResponse:
        """A GET of an object's bytes (a run of blocks, of any length), sent and retried as `send`
        does, through the range client: its body read block by block (BlockResponse.read_exactly),
        each block received into a buffer of its own, instead of aiohttp's pieces joined."""
        return await self._buffered("GET", bucket, key, list(query), headers)

    async def head(self, bucket: str, key: str, *, query: Iterable[tuple[str, str]] = (),
                   headers: dict[str, str] | None = None) -> BlockResponse:
        """A HEAD of an object, sent and retried as `send` does, through the range client (a
        cold object's metadata: a fraction of aiohttp's work for a request, and a new connection
        opened without looking its address up in a thread)."""
        return await self._buffered("HEAD", bucket, key, list(query), headers or {})

    async def get_listing(self, bucket: str, query: Iterable[tuple[str, str]]) -> BlockResponse:
        """A GET of a bucket (a listing page, read whole by its reader), sent and retried as
        `send` does, through the range client."""
        return await self._buffered("GET", bucket, None, list(query), {})

    async def _buffered(self, method: str, bucket: str, key: str | None, query: list[tuple[str, str]],
                        headers: dict[str, str]) -> BlockResponse:
        client = self._block_client()

        async def attempt(host: str, target: str, signed: dict[str, str]) -> BlockResponse:
            return BlockResponse(await client.get(host, target, signed, method=method))

        return await self._attempts(method, bucket, key, query, headers, None, None, attempt)

    async def _attempts(self, method: str, bucket: str | None, key: str | None, query: list[tuple[str, str]],
                        headers: dict[str, str] | None, body: bytes | BodyFactory | None, body_length: int | None,
                        attempt: Callable[[str, str, dict[str, str]], Awaitable[_Answer]]) -> _Answer:
        """`attempt(host, request target, signed headers)`, signed anew each time, until it
        gives an answer other than 500 or 503, or the `origin.retries` retries are spent."""
        host, path = self._address(bucket, key)
        target = _request_target(path, query)
        base_headers = {k.lower(): v for k, v in (headers or {}).items()}
        base_headers["host"] = host
        payload_hash = _payload_hash(method, body, body_length, base_headers)

        async def once() -> _Answer:
            signed = dict(base_headers)
            signed.update(sign_request_v4(
                method=method, path=path, query=query, headers=base_headers,
                payload_hash=payload_hash, access_key=self.settings.access_key,
                secret_key=self.settings.secret_key, region=self.settings.region,
                now=datetime.now(timezone.utc),
            ))
            self.requests[method] += 1
            try:
                return await attempt(host, target, signed)
            except _TRANSPORT_ERRORS:
                self.failures += 1
                raise

        async def failed(failures: int, outcome: BaseException | _Answer) -> None:
            if isinstance(outcome, BaseException):
                log.origin.warning("origin %s %s failed (%s), retrying", method, path, outcome.__class__.__name__)
            else:
                await outcome.aclose()

        try:
            return await self._retry.call(once, again=_busy, failed=failed)
        except TimeoutError as exc:
            raise S3Error("ServiceUnavailable", "The origin did not answer in time.") from exc
        except _TRANSPORT_ERRORS as exc:
            raise S3Error("ServiceUnavailable", "The origin is unreachable.") from exc

    async def probe(self) -> int:
        """The status of a ListBuckets with the gateway's credentials (readiness: any answer
        below 500 means the origin is there); raises S3Error when it does not answer."""
        response = await self.send("GET")
        await response.aclose()
        return response.status

    async def error_from(self, response: OriginResponse | BlockResponse, resource: str | None = None) -> S3Error:
        """Turn an origin error response into an S3Error with the origin's code and status."""
        code, message = _code_for(response.status), None
        extra: dict[str, str] = {}
        try:
            body = await response.read_at_most(_MAX_ERROR_BODY)
        except S3Error:
            body = b""
        parsed = parse_error_document(body)
        if parsed:
            code, message, extra = parsed
        # Headers that belong to the error itself (a delete marker's 404/405, a 416's size).
        headers = {name: response.headers[name] for name in _ERROR_HEADERS if name in response.headers}
        return S3Error(code, message, status=response.status, resource=resource, headers=headers, extra=extra)

    async def call(
        self, method: str, bucket: str | None = None, key: str | None = None, **kwargs: object
    ) -> OriginResponse:
        """`send`, raising the origin's error as S3Error for any status >= 300."""
        response = await self.send(method, bucket, key, **kwargs)  # type: ignore[arg-type]
        if response.status >= 300:
            raise await self.error_from(response, resource=_resource(bucket, key))
        return response

    def _address(self, bucket: str | None, key: str | None) -> tuple[str, str]:
        if bucket and self.settings.addressing == "virtual":
            return f"{bucket}.{self._netloc}", "/" + (key or "")
        if bucket is None:
            return self._netloc, "/"
        return self._netloc, f"/{bucket}" + (f"/{key}" if key is not None else "")


def error_for_status(status: int, resource: str | None = None) -> S3Error:
    """The S3 error of an origin answer that had no error document (a HEAD's)."""
    return S3Error(_code_for(status), status=status, resource=resource)


def _code_for(status: int) -> str:
    return _STATUS_CODES.get(status, "BadRequest" if 400 <= status < 500 else "InternalError")


def _resource(bucket: str | None, key: str | None) -> str:
    return "/" + "/".join(p for p in (bucket, key) if p)


def _request_target(path: str, query: list[tuple[str, str]]) -> str:
    """The request's path and query, exactly as they are signed."""
    target = _encode_path(path)
    if query:
        target += "?" + "&".join(
            uri_encode(k, keep_slash=False) + ("=" + uri_encode(v, keep_slash=False) if v != "" else "")
            for k, v in query
        )
    return target


def _encode_path(path: str) -> str:
    # '.' and '..' segments are legal S3 key parts; spell them %2E so that no URL
    # library on the way removes them as dot-segments.
    segments = path.split("/")
    return "/".join(
        "%2E" * len(s) if s in (".", "..") else uri_encode(s, keep_slash=False) for s in segments
    )


def parse_error_document(body: bytes) -> tuple[str, str, dict[str, str]] | None:
    """(code, message, other children) of an S3 error document, or None for anything else."""
    if not body.strip():
        return None
    try:
        root = ElementTree.fromstring(body)
    except Exception:  # defusedxml raises several types; garbage is simply not an error document
        return None
    if root.tag.rsplit("}", 1)[-1] != "Error":
        return None
    fields = {child.tag.rsplit("}", 1)[-1]: (child.text or "") for child in root}
    code = fields.pop("Code", "")
    if not code:
        return None
    message = fields.pop("Message", "")
    for name in ("RequestId", "HostId", "Resource"):
        fields.pop(name, None)
    return code, message, fields

