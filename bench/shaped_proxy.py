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
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gateway.config import parse_duration, parse_size

_CHUNK = 64 * 1024
COUNTS = {"connections": 0, "answers": 0}  # printed when the proxy is stopped (SIGTERM or SIGINT)


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

    async def upstream(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        pacer = _Pacer(self.rate)
        while data := await reader.read(_CHUNK):
            self.awaiting_answer = True
            await pacer.pace(len(data))
            writer.write(data)
            await writer.drain()
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
            await pacer.pace(len(data))
            writer.write(data)
            await writer.drain()
        writer.close()


async def _relay(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter, host: str, port: int,
                 latency: float, rate: float, connect_latency: float) -> None:
    try:
        if connect_latency:
            await asyncio.sleep(connect_latency)
        origin_r, origin_w = await asyncio.open_connection(host, port)
    except OSError:
        client_w.close()
        return
    COUNTS["connections"] += 1
    conn = _Connection(latency, rate)
    up = asyncio.create_task(conn.upstream(client_r, origin_w))
    down = asyncio.create_task(conn.downstream(origin_r, client_w))
    try:
        await down  # the origin closed (moto does after each answer) or the client went away
    except (ConnectionError, OSError):
        pass
    finally:
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
    print(f"shaped_proxy: {COUNTS['connections']} connections, {COUNTS['answers']} answers", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True, help="host:port of the origin (moto)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency", default="0", help="added before the first byte of every answer, e.g. 25ms")
    parser.add_argument("--rate", default="0", help="per-connection bytes/s in each direction, e.g. 80MB (0: no cap)")
    parser.add_argument("--connect-latency", default="0", help="delay before each new connection is relayed")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.host, args.port, args.upstream, parse_duration(args.latency, "--latency"),
                      float(parse_size(args.rate, "--rate")), parse_duration(args.connect_latency, "--connect-latency")))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        pass
