"""An HTTP/1.1 client for GETs whose body is one cache block: the body lands in one buffer.
Also for HEADs and the GETs whose body is read whole anyway (a listing page): its requests
cost a fraction of aiohttp's, and a new connection opens without a thread's name lookup.

aiohttp hands a body over as the pieces the socket gave (64 KiB or less each), each one
through its parser, a stream reader and a wake-up of the reading task, and the reader then
joins them: for a cold 1 MiB read that was a fifth of the gateway's CPU. Here the connection
is an asyncio BufferedProtocol: once the answer's head is in and the reader says how much it
takes, the kernel's reads go straight into a buffer of the body's length, and the reading
task is woken once, when the body is whole (or, for a reader that asks to be told what
arrived, a quarter MiB at a time: a cold read's bytes reach its client as they come).

One request at a time per connection, keep-alive connections pooled per host (a connection
goes back only when its answer was read to its end and the server did not say close). Bodies
framed by Content-Length (what S3 sends for a GET), chunked or ended by the connection's
close are all read. A read timeout is the longest time without a byte, as aiohttp's
sock_read. Failures are the builtin ConnectionError and TimeoutError; a request on a pooled
connection that the server had closed meanwhile is sent again once on a new one.

Parts: `wire` (the answer's head, its body's framing, chunked decoding), `connection` (the
protocol), `fresh` (the bytes a body is received into), `client` (the pool, and the answers it gives).
It knows nothing of S3 or signing: gateway.origin reads cache blocks with it, and
gateway.cluster.peers asks peers and a node's sibling workers (over a unix socket) for them.
"""

from __future__ import annotations

from gateway.rangeclient.client import RangeClient, RangeResponse
from gateway.rangeclient.connection import Arrived
from gateway.rangeclient.wire import MalformedAnswer

__all__ = ["Arrived", "MalformedAnswer", "RangeClient", "RangeResponse"]
