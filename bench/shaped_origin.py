"""A small, fast, optionally shaped S3-like origin for benchmarks: GET and HEAD of files.

moto, the origin the tests use, is slow as a server (hundreds of requests per second) and
reads a whole object to answer a byte range, so with moto behind it a cold gateway read
(a HEAD, then one ranged GET per block) measures moto more than the gateway. This origin
answers the read side of S3 from a folder, at a cost proportional to the bytes asked for:

- GET and HEAD of /<bucket>/<key> -> <root>/<bucket>/<key>: Content-Length, ETag (quoted
  hex, from the file's inode, size and mtime), Last-Modified, Accept-Ranges;
- single byte ranges (bytes=a-b, a-, -n) -> 206 with Content-Range, or 416;
- If-Match (412) and If-None-Match (304), which the gateway uses to pin a version and to
  revalidate; a missing file is S3's NoSuchKey (404, XML body on GET);
- any Authorization is accepted and ignored; HTTP/1.1 keep-alive;
- bodies go out with the kernel's sendfile (asyncio's selector loop, zero-copy) unless
  shaped.

Shaping, both off by default: --latency adds a delay before the first byte of every
answer (S3's time to first byte is tens of milliseconds), --rate caps each connection's
body bytes per second (S3 gives roughly 50-100 MB/s per connection).

    .venv/bin/python bench/shaped_origin.py --root /tmp/objects --port 9100 [--latency 20ms] [--rate 80MB]

Objects are plain files: create them under <root>/<bucket>/ (hard links make cheap copies).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import sys
import time
from email.utils import formatdate
from pathlib import Path
from urllib.parse import unquote

import httptools

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gateway.config import parse_duration, parse_size

_CHUNK = 256 * 1024


class _Request:
    __slots__ = ("headers", "keep_alive", "method", "url")

    def __init__(self) -> None:
        self.method = ""
        self.url = b""
        self.headers: dict[str, str] = {}
        self.keep_alive = True


class OriginProtocol(asyncio.Protocol):
    """One client connection: requests are parsed by httptools and answered one at a time."""

    def __init__(self, root: Path, latency: float, rate: float) -> None:
        self.root = root
        self.latency = latency
        self.rate = rate
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.queue: asyncio.Queue[_Request | None] = asyncio.Queue()
        self.current = _Request()
        self.worker: asyncio.Task[None] | None = None
        self._can_write = asyncio.Event()
        self._can_write.set()

    # --- transport callbacks ---
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.worker = asyncio.get_running_loop().create_task(self._serve())

    def connection_lost(self, exc: Exception | None) -> None:
        self.queue.put_nowait(None)
        self._can_write.set()

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            self.transport.close()

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    # --- parser callbacks ---
    def on_message_begin(self) -> None:
        self.current = _Request()

    def on_url(self, url: bytes) -> None:
        self.current.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.current.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_message_complete(self) -> None:
        self.current.method = self.parser.get_method().decode()
        self.current.keep_alive = self.parser.should_keep_alive()
        self.queue.put_nowait(self.current)

    # --- answering ---
    async def _serve(self) -> None:
        assert self.transport is not None
        try:
            while (request := await self.queue.get()) is not None:
                if self.transport.is_closing():
                    return
                await self._answer(request)
                if not request.keep_alive:
                    self.transport.close()
                    return
        except (ConnectionError, OSError):
            self.transport.close()

    def _head(self, status: str, headers: list[tuple[str, str]], keep_alive: bool) -> bytes:
        lines = [f"HTTP/1.1 {status}"]
        lines += [f"{k}: {v}" for k, v in headers]
        lines.append("date: " + formatdate(usegmt=True))
        lines.append("server: shaped-origin")
        if not keep_alive:
            lines.append("connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def _answer(self, req: _Request) -> None:
        assert self.transport is not None
        if self.latency:
            await asyncio.sleep(self.latency)
        path = unquote(req.url.split(b"?", 1)[0].decode("latin-1"))
        request_id = os.urandom(8).hex().upper()
        if req.method not in ("GET", "HEAD"):
            self._error(req, "405 Method Not Allowed", "MethodNotAllowed", request_id)
            return
        parts = [p for p in path.split("/") if p]
        if len(parts) < 2 or any(p in (".", "..") for p in parts):
            self._error(req, "404 Not Found", "NoSuchKey", request_id)
            return
        file = self.root.joinpath(*parts)
        try:
            fh = open(file, "rb")  # noqa: ASYNC230, SIM115 (a local file; closed by the with below)
        except OSError:
            self._error(req, "404 Not Found", "NoSuchKey", request_id)
            return
        with fh:
            st = os.fstat(fh.fileno())
            size = st.st_size
            etag = '"' + hashlib.md5(f"{st.st_ino}-{size}-{st.st_mtime_ns}".encode()).hexdigest() + '"'
            base = [("etag", etag), ("last-modified", formatdate(st.st_mtime, usegmt=True)),
                    ("accept-ranges", "bytes"), ("x-amz-request-id", request_id)]
            if_match = req.headers.get("if-match")
            if if_match is not None and if_match.strip() not in ("*", etag):
                self._error(req, "412 Precondition Failed", "PreconditionFailed", request_id)
                return
            if_none_match = req.headers.get("if-none-match")
            if if_none_match is not None and if_none_match.strip() in ("*", etag):
                self.transport.write(self._head("304 Not Modified", base, req.keep_alive))
                return
            status, first, length = "200 OK", 0, size
            headers = list(base)
            spec = req.headers.get("range")
            if spec is not None and spec.startswith("bytes=") and "," not in spec:
                start_text, _, end_text = spec[6:].strip().partition("-")
                try:
                    if start_text:
                        first = int(start_text)
                        last = min(int(end_text), size - 1) if end_text else size - 1
                    else:
                        first = max(0, size - int(end_text))
                        last = size - 1
                except ValueError:
                    first, last = 0, size - 1
                else:
                    if first >= size or first > last:
                        headers.append(("content-range", f"bytes */{size}"))
                        self._error(req, "416 Requested Range Not Satisfiable", "InvalidRange", request_id,
                                    headers=headers)
                        return
                    status, length = "206 Partial Content", last - first + 1
                    headers.append(("content-range", f"bytes {first}-{last}/{size}"))
            headers += [("content-type", "application/octet-stream"), ("content-length", str(length))]
            self.transport.write(self._head(status, headers, req.keep_alive))
            if req.method == "HEAD" or length == 0:
                return
            await self._body(fh, first, length)

    async def _body(self, fh, first: int, length: int) -> None:  # type: ignore[no-untyped-def]
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        if not self.rate:
            if length <= _CHUNK:
                self.transport.write(os.pread(fh.fileno(), length, first))
                return
            await self._can_write.wait()
            await loop.sendfile(self.transport, fh, first, length)
            return
        started = time.monotonic()
        sent = 0
        while sent < length:
            n = min(_CHUNK, length - sent)
            self.transport.write(os.pread(fh.fileno(), n, first + sent))
            sent += n
            await self._can_write.wait()
            ahead = sent / self.rate - (time.monotonic() - started)
            if ahead > 0:
                await asyncio.sleep(ahead)
            if self.transport.is_closing():
                return

    def _error(self, req: _Request, status: str, code: str, request_id: str,
               headers: list[tuple[str, str]] | None = None) -> None:
        assert self.transport is not None
        body = b"" if req.method == "HEAD" else (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{code}</Message>'
            f"<RequestId>{request_id}</RequestId></Error>").encode()
        out = [h for h in (headers or []) if h[0] == "content-range"]
        out += [("x-amz-request-id", request_id), ("content-type", "application/xml"),
                ("content-length", str(len(body)))]
        self.transport.write(self._head(status, out, req.keep_alive) + body)


async def serve(root: Path, host: str, port: int, latency: float, rate: float) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: OriginProtocol(root, latency, rate), host, port, backlog=1024)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", required=True, help="folder holding <bucket>/<key> files")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency", default="0", help="delay before every answer's first byte, e.g. 20ms")
    parser.add_argument("--rate", default="0", help="per-connection body rate in bytes/s, e.g. 80MB (0: unlimited)")
    args = parser.parse_args(argv)
    latency = parse_duration(args.latency, "--latency")
    rate = float(parse_size(args.rate, "--rate"))
    # The default selector loop: its loop.sendfile is the kernel's sendfile (uvloop copies).
    asyncio.run(serve(Path(args.root), args.host, args.port, latency, rate))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        pass
