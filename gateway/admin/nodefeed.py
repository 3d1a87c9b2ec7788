"""What every worker of a node reads, gathered by its first worker: access heat and the shadow
estimates' traffic are the node's, not one worker's share.

Why: the kernel hands each connection to any worker, so each sees about 1/N of the node's
reads. The replication controller (run by the first worker) would rank objects by 1/N of
their heat, and each worker's shadow models would estimate what more cache buys from 1/N of
the traffic (a sample SHARDS then thins again). Here the first worker counts all of it: its
HeatCounter and its ShadowAdvisor, built over the node's whole quotas, are the node's.

How: every other worker keeps its hits (heat.HeatSender) and its shadow's share (the counts
of the GETs not sampled, and the sampled requests themselves: `cache.shadow_rate` of them,
ShadowAdvisor(sends=True)) and, every `INTERVAL`, sends them as datagrams to the first
worker's socket (`<run folder>/feed.sock`, a unix datagram socket). Sending never waits: what
the first worker's queue has no room for now goes with the next send (up to 1 MiB), and what
it cannot take at all (it is restarting; more than that waiting) is lost and counted
(`dropped`, `gateway_node_feed_datagrams_total`). The first worker
reads them on its event loop as they come. A request counts in the node's heat and shadow at
most `INTERVAL` after it was answered; the first worker's shadow holds the sampled requests
`DELAY` and replays them in the order they were answered (every process of the machine reads
the same monotonic clock), as one gateway's would see them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Iterator
from typing import Any

import orjson

from gateway import log
from gateway.advisor.shadow import ShadowAdvisor
from gateway.heat import HeatCounter, HeatSender
from gateway.node.workers import WorkerSet

__all__ = ["DELAY", "INTERVAL", "NodeFeed"]

INTERVAL = 0.25  # seconds between two sends of a worker
DELAY = 3 * INTERVAL  # how long the first worker holds the sampled requests to replay them in order
# Bytes of heat and sampled requests in one datagram (a key is at most 1 KiB): large, as a
# receiver queues few datagrams (net.unix.max_dgram_qlen, often 10), yet within what one takes
# (a sender's buffer, net.core.wmem_default, often 208 KiB).
_FILL = 96 * 1024
_BACKLOG = 1024 * 1024  # bytes of datagrams a sender keeps for its next send when the queue is full
_DATAGRAM = 256 * 1024  # the largest datagram read


class NodeFeed:
    """One worker's end of its node's feed: the first worker's receives (`heat` a HeatCounter,
    `shadow` the node's), every other's sends (`heat` a HeatSender, `shadow` a sending one or
    None). Event loop only."""

    def __init__(self, workers: WorkerSet, heat: HeatCounter, shadow: ShadowAdvisor | None) -> None:
        self.workers = workers
        self.heat = heat
        self.shadow = shadow
        self.path = os.path.join(workers.run_dir, "feed.sock")
        self.sent = self.dropped = self.received = 0  # datagrams
        self._socket: socket.socket | None = None
        self._backlog: list[bytes] = []  # datagrams the first worker's queue had no room for yet

    @property
    def receives(self) -> bool:
        return self.workers.first

    def open(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.setblocking(False)
        if self.receives:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)  # the socket of the first worker before this one
            sock.bind(self.path)
            asyncio.get_running_loop().add_reader(sock.fileno(), self._receive)
        else:
            with contextlib.suppress(OSError):  # (as much as net.core.wmem_max allows)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _BACKLOG)
        self._socket = sock

    def close(self) -> None:
        sock, self._socket = self._socket, None
        if sock is None:
            return
        if self.receives:
            asyncio.get_running_loop().remove_reader(sock.fileno())
        else:
            self.send()  # what came since the last round
        sock.close()

    async def send_round(self) -> None:
        """`send`, for the round the node runs every INTERVAL in each worker but the first."""
        self.send()

    def send(self) -> None:
        """This worker's heat and shadow share since the last send, to the first worker, after
        what the last send could not. Never waits: datagrams the first worker's queue has no
        room for now wait for the next send (up to _BACKLOG bytes, past that lost and counted);
        with no first worker there (restarting), they are lost and counted."""
        if self._socket is None:
            return
        datagrams, self._backlog = [*self._backlog, *self._datagrams()], []
        for at, datagram in enumerate(datagrams):
            try:
                self._socket.sendto(datagram, self.path)
            except BlockingIOError:  # its queue full: the rest next time
                self._keep(datagrams[at:])
                return
            except OSError:
                self.dropped += 1
            else:
                self.sent += 1

    def _keep(self, datagrams: list[bytes]) -> None:
        kept = 0
        for datagram in datagrams:
            if kept + len(datagram) > _BACKLOG:
                self.dropped += 1
                continue
            kept += len(datagram)
            self._backlog.append(datagram)

    @property
    def waiting(self) -> int:
        """Datagrams waiting for the next send."""
        return len(self._backlog)

    def _datagrams(self) -> Iterator[bytes]:
        """{"heat": [[bucket, key, hits], ...], "shadow": {counts, "entries": [...]}} in datagrams
        of about _FILL bytes each (the counts in the first): whatever the keys' lengths, each
        stays well below what a unix datagram socket takes."""
        heat = self.heat.take() if isinstance(self.heat, HeatSender) else {}
        share = self.shadow.take_share() if self.shadow is not None else None
        entries = [orjson.dumps(entry) for entry in share.pop("entries")] if share is not None else []
        if share is not None and not share["gets"] and not entries:
            share = None
        hits = [orjson.dumps([bucket, key, count]) for (bucket, key), count in heat.items()]
        if not hits and share is None:
            return
        counts, at = share, [0, 0]  # (next hit, next entry)
        while counts is not None or at[0] < len(hits) or at[1] < len(entries):
            part = [_take(hits, at, 0), _take(entries, at, 1)]
            shadow = b"" if share is None else \
                b',"shadow":' + orjson.dumps(counts or _NOTHING)[:-1] + b',"entries":[' + b",".join(part[1]) + b"]}"
            yield b'{"heat":[' + b",".join(part[0]) + b"]" + shadow + b"}"
            counts = None

    def _receive(self) -> None:
        sock = self._socket
        while sock is not None:
            try:
                datagram = sock.recv(_DATAGRAM)
            except BlockingIOError:
                return
            except OSError as exc:
                log.engine.warning("the node's feed socket failed: %s", exc)
                return
            self.received += 1
            try:
                self._take(orjson.loads(datagram))
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                log.engine.warning("an unreadable datagram on the node's feed ignored")

    def _take(self, part: dict[str, Any]) -> None:
        self.heat.add_all((str(bucket), str(key), int(count)) for bucket, key, count in part["heat"])
        if "shadow" in part and self.shadow is not None:
            self.shadow.add_share(part["shadow"])

    def __repr__(self) -> str:
        return f"NodeFeed({self.path!r}, {'receives' if self.receives else 'sends'})"


# The counts of a shadow share after its first datagram: none (they went with the first).
_NOTHING = {"gets": 0, "live_hits": 0, "reads": 0, "bytes": 0, "blocks": []}


def _take(items: list[bytes], at: list[int], which: int) -> list[bytes]:
    """Of `items` from `at[which]` on, as many as fill half a datagram (at least one); moves `at`."""
    start = end = at[which]
    size = 0
    while end < len(items) and (end == start or size + len(items[end]) <= _FILL // 2):
        size += len(items[end]) + 1
        end += 1
    at[which] = end
    return items[start:end]
