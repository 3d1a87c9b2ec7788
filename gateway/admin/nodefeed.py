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
worker's socket (`<run folder>/feed.sock`, a unix datagram socket). Sending never waits: a
datagram the socket does not take now (the first worker restarting, its queue full) is lost
and counted (`dropped`, in `stats` and `gateway_node_feed_dropped_total`). The first worker
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
_PER_DATAGRAM = 256  # objects' heat, or sampled requests, in one datagram (some 25 KiB at most)
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
        """This worker's heat and shadow share since the last send, to the first worker."""
        if self._socket is None:
            return
        for datagram in self._datagrams():
            try:
                self._socket.sendto(datagram, self.path)
            except OSError:  # not there (restarting), or its queue full: lost, counted, never waited for
                self.dropped += 1
            else:
                self.sent += 1

    def _datagrams(self) -> Iterator[bytes]:
        heat = self.heat.take() if isinstance(self.heat, HeatSender) else {}
        share = self.shadow.take_share() if self.shadow is not None else None
        hits = [[bucket, key, count] for (bucket, key), count in heat.items()]
        entries: list[dict[str, Any]] = share.pop("entries") if share is not None else []
        if share is not None and not share["gets"] and not entries:
            share = None
        first = True
        while first or hits or entries:
            part: dict[str, Any] = {"heat": hits[:_PER_DATAGRAM]}
            if share is not None:
                part["shadow"] = {**(share if first else _NOTHING), "entries": entries[:_PER_DATAGRAM]}
            del hits[:_PER_DATAGRAM], entries[:_PER_DATAGRAM]
            if first and not part["heat"] and share is None:
                return
            first = False
            yield orjson.dumps(part)

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
        for bucket, key, count in part["heat"]:
            self.heat.add(str(bucket), str(key), int(count))
        if "shadow" in part and self.shadow is not None:
            self.shadow.add_share(part["shadow"])

    def __repr__(self) -> str:
        return f"NodeFeed({self.path!r}, {'receives' if self.receives else 'sends'})"


# The counts of a shadow share after its first datagram: none (they went with the first).
_NOTHING = {"gets": 0, "live_hits": 0, "reads": 0, "bytes": 0, "blocks": []}
