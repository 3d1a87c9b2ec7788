"""A latency and bandwidth shaping TCP proxy, to make a local origin (moto) behave like a remote store.

bench/shaped_origin.py serves reads from files; this proxy shapes everything an S3 server
answers (writes, copies, deletes and listings too) by sitting in front of moto's S3 server:

- first-byte latency: the first byte of every answer is held back by --latency after it
  left the origin (added to the origin's own time, as a network round trip and a remote
  store's time to first byte would be). HTTP/1.1 clients do not pipeline, so "an answer"
  is the first data from the origin after data from the client; a `100 Continue` counts as
  an answer too (an upload that asks for it pays the latency twice, as against S3);
- bandwidth: each connection's bytes are capped at --rate per second in each direction
  (S3 gives roughly 50-100 MB/s per connection);
- --connect-latency: a delay before each new connection is relayed (a TCP + TLS handshake
  to a remote store; 0 by default, since moto closes its connection after every answer and
  clients therefore open one per request, which S3 clients would not).

    .venv/bin/python bench/shaped_proxy.py --upstream 127.0.0.1:5000 --port 9200 --latency 25ms --rate 80MB

Byte-transparent (SigV4 signatures made for the proxy's host:port are checked by moto
against the same Host header, and moto does not check the host anyway).

Counting: every request relayed is counted by kind (GET of an object, HEAD, LIST: a GET of a
bucket, other) with the body bytes of its answer (headers left out), the one place the direct
and the gateway setups of a benchmark both pass through. `GET /_shaped_proxy/counters` on the
proxy's port answers them as JSON (it is not relayed); --log PATH also writes one line per
request (seq, kind, method, target, Range, status, body bytes) once its answer ended.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gateway.config import parse_duration, parse_size

_CHUNK = 64 * 1024
COUNTS = {"connections": 0, "answers": 0}  # printed when the proxy is stopped (SIGTERM or SIGINT)
KINDS = ("GET", "HEAD", "LIST", "other")
REQUESTS = dict.fromkeys(KINDS, 0)
BODY_BYTES = dict.fromkeys(KINDS, 0)
COUNTERS_PATH = b"GET /_shaped_proxy/counters "
_REQUEST_LINE = re.compile(rb"([A-Z]+) (\S+) HTTP/1\.[01]\r?$")
_HEAD_LIMIT = 64 * 1024  # a request or answer head longer than this is not parsed further


class _Log:
    """One line per request once its answer ended (--log), numbered from 1 in the order they ended."""

    def __init__(self, path: str) -> None:
        self.file = open(path, "a", buffering=1) if path else None  # noqa: SIM115 (open for the proxy's life)
        self.seq = 0

    def write(self, request: _Request) -> None:
        self.seq += 1
        if self.file is not None:
            self.file.write(f"{self.seq}\t{request.kind}\t{request.method}\t{request.target}\t{request.range}\t"
                            f"{request.status}\t{request.body}\n")


LOG = _Log("")


def classify(method: str, target: str) -> str:
    """GET (of an object), HEAD, LIST (a GET of a bucket: path style, /bucket?list-type=2...) or other."""
    path = target.split("?", 1)[0]
    if method == "HEAD":
        return "HEAD"
    if path.startswith("/moto-api"):
        return "other"
    if method != "GET":
        return "other"
    key = path.lstrip("/").partition("/")[2]
    return "GET" if key else "LIST"


class _Request:
    """A request seen going up and the answer coming down: what is counted of it."""

    def __init__(self, head: bytes) -> None:
        line, _, rest = head.partition(b"\n")
        match = _REQUEST_LINE.match(line)
        self.method, self.target = (match[1].decode(), match[2].decode("latin-1")) if match else ("?", "?")
        self.kind = classify(self.method, self.target)
        ranges = re.search(rb"(?im)^range:[ \t]*(\S+)", rest)
        self.range = ranges[1].decode("latin-1") if ranges else "-"
        self.status = 0
        self.body = 0
        self._answer_head: bytearray | None = bytearray()  # until the blank line that ends the answer's head
        REQUESTS[self.kind] += 1

    def answered(self, data: bytes) -> None:
        """Count a chunk of the answer (only its body's bytes)."""
        if self._answer_head is not None:
            self._answer_head += data
            end = self._answer_head.find(b"\r\n\r\n")
            if end < 0 and len(self._answer_head) < _HEAD_LIMIT:
                return
            head, self._answer_head = self._answer_head, None
            status = re.match(rb"HTTP/1\.[01] (\d{3})", head)
            self.status = int(status[1]) if status else 0
            if self.status == 100 and end >= 0:  # the answer to an Expect: 100-continue: the real one follows
                self._answer_head = bytearray()
                self.answered(bytes(head[end + 4:]))
                return
            data = bytes(head[end + 4:]) if end >= 0 else b""
        self.body += len(data)
        BODY_BYTES[self.kind] += len(data)


OPEN = [0]  # connections being relayed now


def counters() -> dict[str, object]:
    return {**COUNTS, "open": OPEN[0], "requests": dict(REQUESTS), "bytes": dict(BODY_BYTES), "logged": LOG.seq}


class _Pacer:
    """Caps one direction of one connection at `rate` bytes/s (0: no cap)."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.next = 0.0

    async def pace(self, n: int) -> None:
        if not self.rate:
            return
        now = time.monotonic()
        self.next = max(self.next, now) + n / self.rate
        if self.next > now:
            await asyncio.sleep(self.next - now)


class _Connection:
    def __init__(self, latency: float, rate: float) -> None:
        self.latency = latency
        self.rate = rate
        self.awaiting_answer = False  # the client sent data the origin has not answered yet
        self.request: _Request | None = None  # the last request sent up, counted as its answer comes down
        self._head: bytearray | None = bytearray()  # a request's head being read (None: in its body)

    def _sent(self, data: bytes, new: bool) -> None:
        """Count the request a chunk going up starts (`new`: the first data since an answer began;
        HTTP/1.1 clients do not pipeline) or continues (its head may come in more than one chunk)."""
        if new and re.match(rb"[A-Z]+ ", data):  # (else: a body sent after a 100 Continue)
            self.ended()
            self._head = bytearray()
        if self._head is None:
            return
        self._head += data
        if b"\r\n\r\n" in self._head or len(self._head) >= _HEAD_LIMIT:
            if _REQUEST_LINE.match(self._head.partition(b"\n")[0]):  # not the body after a 100 Continue
                self.request = _Request(bytes(self._head))
            self._head = None

    def ended(self) -> None:
        if self.request is not None:
            LOG.write(self.request)
            self.request = None

    async def upstream(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, first: bytes) -> None:
        pacer = _Pacer(self.rate)
        data = first
        while data:
            self._sent(data, new=not self.awaiting_answer)
            self.awaiting_answer = True
            await pacer.pace(len(data))
            writer.write(data)
            await writer.drain()
            data = await reader.read(_CHUNK)
        if writer.can_write_eof():
            writer.write_eof()

    async def downstream(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        pacer = _Pacer(self.rate)
        while data := await reader.read(_CHUNK):
            if self.awaiting_answer:
                self.awaiting_answer = False
                COUNTS["answers"] += 1
                if self.latency:
                    await asyncio.sleep(self.latency)
            if self.request is not None:
                self.request.answered(data)
            await pacer.pace(len(data))
            writer.write(data)
            await writer.drain()
        writer.close()


async def _relay(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter, host: str, port: int,
                 latency: float, rate: float, connect_latency: float) -> None:
    try:
        first = await client_r.read(_CHUNK)
    except (ConnectionError, OSError):
        first = b""
    if not first:
        client_w.close()
        return
    if first.startswith(COUNTERS_PATH):  # the bench asks what was counted: answered here, not relayed
        body = json.dumps(counters()).encode()
        client_w.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n"
                       b"content-length: %d\r\n\r\n%s" % (len(body), body))
        try:
            await client_w.drain()
        except (ConnectionError, OSError):
            pass
        client_w.close()
        return
    try:
        if connect_latency:
            await asyncio.sleep(connect_latency)
        origin_r, origin_w = await asyncio.open_connection(host, port)
    except OSError:
        client_w.close()
        return
    COUNTS["connections"] += 1
    OPEN[0] += 1
    conn = _Connection(latency, rate)
    up = asyncio.create_task(conn.upstream(client_r, origin_w, first))
    down = asyncio.create_task(conn.downstream(origin_r, client_w))
    try:
        await down  # the origin closed (moto does after each answer) or the client went away
    except (ConnectionError, OSError):
        pass
    finally:
        conn.ended()
        OPEN[0] -= 1
        up.cancel()
        for w in (origin_w, client_w):
            w.close()
        await asyncio.gather(up, return_exceptions=True)


async def serve(host: str, port: int, upstream: str, latency: float, rate: float, connect_latency: float) -> None:
    up_host, _, up_port = upstream.rpartition(":")
    server = await asyncio.start_server(
        lambda r, w: _relay(r, w, up_host, int(up_port), latency, rate, connect_latency), host, port, backlog=1024)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()
    print(f"shaped_proxy: {COUNTS['connections']} connections, {COUNTS['answers']} answers; requests {REQUESTS}, "
          f"answer body bytes {BODY_BYTES}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True, help="host:port of the origin (moto)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency", default="0", help="added before the first byte of every answer, e.g. 25ms")
    parser.add_argument("--rate", default="0", help="per-connection bytes/s in each direction, e.g. 80MB (0: no cap)")
    parser.add_argument("--connect-latency", default="0", help="delay before each new connection is relayed")
    parser.add_argument("--log", default="", help="a file to append one line per request relayed to")
    args = parser.parse_args(argv)
    global LOG
    LOG = _Log(args.log)
    asyncio.run(serve(args.host, args.port, args.upstream, parse_duration(args.latency, "--latency"),
                      float(parse_size(args.rate, "--rate")), parse_duration(args.connect_latency, "--connect-latency")))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        pass
