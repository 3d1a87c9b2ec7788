"""Builds the ASGI app: the lifespan opens the origin client and closes it again."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
from collections.abc import Coroutine
from typing import Any

from starlette.types import Receive, Scope, Send

from gateway import log
from gateway.admin.api import AdminApp
from gateway.admin.nodefeed import DELAY as FEED_DELAY
from gateway.admin.nodefeed import INTERVAL as FEED_INTERVAL
from gateway.admin.nodefeed import NodeFeed
from gateway.advisor.shadow import ShadowAdvisor
from gateway.advisor.simulate import spec_from_settings
from gateway.admin.node import Node
from gateway.cluster.fleet import Fleet
from gateway.cluster.membership import Membership, identity
from gateway.cluster.peer_api import KeptBlock, NodeMetadata, PeerApp
from gateway.cluster.peers import PEER_PREFIX, PeerClient
from gateway.cluster.pins import RuntimePins
from gateway.cluster.replication import Replication
from gateway.cluster.shared import Shared
from gateway.config import CacheSettings, Settings
from gateway.engine import Engine
from gateway.events import SqsConsumer
from gateway.heat import HeatCounter, HeatSender
from gateway.httpserver import Later
from gateway.node.journal import Journal
from gateway.node.workers import WorkerSet, placement
from gateway.origin import Origin
from gateway.periodic import run_every
from gateway.s3api.hits import HitPath, http_head
from gateway.s3api.replays import Keeper, LaterReplay
from gateway.s3api.responses import load_streaming
from gateway.s3api.server import S3App
from gateway.store.disk import DiskTier
from gateway.store.blocks import BlockId
from gateway.store.hitnotes import HitNotes
from gateway.store.memory import MemoryTier
from gateway.store.policy import make_policy
from gateway.store.shared import SharedTier
from gateway.store.tier import Tier
from gateway.store.tiers import TieredStore


class GatewayApp:
    """The whole gateway as one ASGI callable: the S3 endpoint, and the admin API under admin.path."""

    def __init__(self, settings: Settings, workers: WorkerSet | None = None) -> None:
        self.settings = settings
        self.workers = workers or WorkerSet()  # this process among its node's workers
        self.s3: S3App | None = None
        self.hits: HitPath | None = None  # cache hits answered below ASGI (server.hit_path)
        self.admin: AdminApp | None = None
        self.peer: PeerApp | None = None  # the peer API, when the fleet is on
        self.fleet: Fleet | None = None
        self.feed: NodeFeed | None = None  # a node of several workers: heat and shadow gathered in the first
        self.replication: Replication | None = None  # the fleet's hot-object replication
        self._invalidations: asyncio.Task[None] | None = None
        self._events: SqsConsumer | None = None
        self._tasks: list[asyncio.Task[None]] = []

    async def startup(self) -> None:
        store = build_store(self.settings.cache, self.workers)
        if store is not None:
            await store.open()
        # With Redis: metadata and listings shared by the nodes, and their invalidations.
        shared = Shared.connect(self.settings.redis) if self.settings.redis.url else None
        # With Redis and a cluster secret: a fleet, whose members share the block cache.
        cluster = self.settings.cluster
        if shared is not None and self.settings.fleet:
            membership = Membership(shared.redis, identity(self.settings), interval=cluster.heartbeat_interval,
                                    ttl=cluster.member_ttl)
            self.fleet = Fleet(cluster, membership, PeerClient(cluster))
        # Access heat (GETs served per object): the hottest-objects view, and replication's input;
        # the node's, counted by its first worker (the others send theirs: admin.nodefeed).
        capacity = max(10_000, 4 * cluster.hot_objects)
        heat = HeatCounter(capacity, cluster.heat_half_life) if self.workers.first else HeatSender(capacity)
        # With several workers: what one forgets after a write, the others do before their next lookup.
        journal = None if self.workers.alone else Journal(self.workers.journal_path)
        cache = self.settings.cache
        if not self.workers.alone:  # the node's read buffer, shared out among its workers
            cache = dataclasses.replace(cache, read_buffer=max(1, cache.read_buffer // self.workers.count))
        engine = Engine(Origin(self.settings.origin), self.settings.metadata, self.settings.listing,
                        store=store, cache=cache, shared=shared, fleet=self.fleet, heat=heat,
                        workers=self.workers, cluster=cluster, journal=journal)  # engine.aclose closes it
        self.peer = self._peer_app(engine) if self.fleet is not None or not self.workers.alone else None
        if self.fleet is not None:
            await self.fleet.membership.heartbeat()  # join now (Redis down: alone until it is back)
            self._tasks.append(asyncio.create_task(self.fleet.membership.run(), name="gateway-membership"))
        if shared is not None:
            self._invalidations = asyncio.create_task(
                shared.invalidation.listen(engine.invalidate_local, on_resync=engine.forget_here),
                name="gateway-invalidations")
        if self.settings.events.sqs_queue_url and self.workers.first:  # one consumer per node
            self._events = SqsConsumer(self.settings.events, engine.changed)
            self._tasks.append(asyncio.create_task(self._events.run(), name="gateway-sqs-events"))
        if store is not None and self.settings.cache.ttl:
            self._tasks.append(asyncio.create_task(_expiring(store), name="gateway-cache-ttl"))
        # Pins set at runtime (admin API): with Redis, the fleet's, read now and refreshed.
        pins = RuntimePins(((r.bucket, r.prefix) for r in self.settings.cache.pinned),
                           store.set_pinned if store is not None else None,
                           shared.redis if shared is not None else None)
        if shared is not None:
            await pins.refresh()
            self._tasks.append(asyncio.create_task(pins.run(), name="gateway-pins"))
        self.s3 = S3App(self.settings, engine)
        if self.settings.server.hit_path:
            self.hits = HitPath(self.s3.services, self.s3.authenticator, self.s3.accounts)
        if shared is not None and self.fleet is not None and cluster.hot_replication and self.workers.first:
            self.replication = Replication(cluster, shared.redis, self.fleet, engine.heat, engine.rebalance)
            self._tasks.append(asyncio.create_task(self.replication.run(), name="gateway-replication"))
        shadow = self._shadow(heat, store is not None)
        name = self.fleet.me.id if self.fleet is not None else f"{socket.gethostname()}:{self.settings.server.port}"
        node = Node(name, engine, self.s3.accounts.stats, pins,
                    membership=self.fleet.membership if self.fleet is not None else None, shadow=shadow,
                    replication=self.replication, feed=self.feed)
        self.admin = AdminApp(self.settings.admin, node, self.workers)  # answers for the node's workers
        if not self.workers.alone:  # a (re)started worker takes the runtime pins its siblings hold
            self._tasks.append(asyncio.create_task(self.admin.adopt_pins(), name="gateway-adopt-pins"))
            # and keeps its counts where the worker after it goes on from them (admin.ledger)
            self._tasks.append(asyncio.create_task(self.admin.keep_counts(), name="gateway-counts"))

    def _shadow(self, heat: HeatCounter, store: bool) -> ShadowAdvisor | None:
        """The shadow estimates (with a store and cache.shadow_rate), fed every request; in a node
        of several workers, heat and the shadow's sample sent to the first worker (admin.nodefeed).
        The shadow the admin API shows: the node's, the first worker's (the others only send)."""
        assert self.s3 is not None
        shadow = build_shadow(self.settings.cache, self.workers) if store else None
        if shadow is not None:
            self.s3.accounts.shadow = shadow
        if self.workers.alone:
            return shadow
        self.feed = NodeFeed(self.workers, heat, shadow)
        self.feed.open()
        if self.workers.first:
            return shadow
        self._tasks.append(asyncio.create_task(
            run_every(FEED_INTERVAL, self.feed.send_round, "sending this worker's reads to the first", logger=log.engine),
            name="gateway-node-feed"))
        return None

    def _peer_app(self, engine: Engine) -> PeerApp:
        """What other nodes (signed with the cluster secret) and this node's other workers (its own
        secret) ask this worker: blocks, opens, holds, and blocks lent to it."""
        return PeerApp(self.settings.cluster.secret if self.fleet is not None else "", self.workers.secret.hex(),
                       engine.serve_block, engine.serve_open, engine.serve_hold, engine.serve_block_now,
                       serve_take=engine.serve_take, serve_lent=engine.serve_lent, serve_held=engine.serve_held,
                       serve_held_now=engine.serve_held_now, serve_part=engine.serve_part,
                       node_metadata=None if engine.shared is not None else  # (with Redis, L2 shares them)
                       NodeMetadata(engine.serve_meta, engine.metadata.told, engine.serve_listing))

    async def shutdown(self) -> None:
        await _stop([task for task in [self._invalidations, *self._tasks] if task is not None])
        self._invalidations, self._tasks = None, []
        if self.replication is not None:
            await self.replication.leave()
            self.replication = None
        if self.fleet is not None:  # leave while Redis is still open to us
            await self.fleet.membership.leave()
            await self.fleet.aclose()
            self.fleet, self.peer = None, None
        if self._events is not None:
            await self._events.aclose()
            self._events = None
        if self.feed is not None:
            self.feed.close()
            self.feed = None
        if self.admin is not None:  # its sessions to the sibling workers
            await self.admin.aclose()
        if self.s3 is not None:
            await self.s3.engine.aclose()
            self.s3, self.hits = None, None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        # The lifespan builds everything before the server accepts requests (lifespan="on").
        assert self.s3 is not None and self.admin is not None
        if self.peer is not None and self.peer.handles(scope["path"]):
            await self.peer(scope, receive, send)
        elif self.admin.handles(scope["path"]):
            await self.admin(scope, receive, send)
        else:
            await self.s3(scope, receive, send)

    def hit(self, scope: dict[str, Any], default_headers: list[tuple[bytes, bytes]],
            keep_alive: bool) -> tuple[list[bytes | memoryview], Keeper | KeptBlock] | Later | None:
        """A cache hit answered below ASGI (gateway.httpserver.Hits), or None: __call__ answers."""
        hits, path = self.hits, scope["path"]
        if hits is None or (self.admin is not None and self.admin.handles(path)):
            return None
        if self.peer is not None and self.peer.handles(path):  # a block another node or worker asks for
            answer = self.peer.answer_now(scope)
            if answer is None:
                return None
            headers, body, kept = answer
            return [http_head(200, default_headers, headers, keep_alive), body], kept._replace(keep_alive=keep_alive)
        return hits.answer(scope, default_headers, keep_alive)

    def keep(self, request: bytes, keeper: Keeper | KeptBlock) -> None:
        """`request`, read whole, was answered by `hit`: a block request kept to be answered
        again (PeerApp.keep), an S3 request if it arrived before (s3api.replays)."""
        if isinstance(keeper, KeptBlock):
            if self.peer is not None:
                self.peer.keep(request, keeper)
        elif self.hits is not None:
            self.hits.replays.keep(request, keeper)

    def replay(self, request: bytes, default_headers: list[tuple[bytes, bytes]],
               ) -> tuple[list[bytes | memoryview], bool] | LaterReplay | None:
        """The answer to a kept request sent again byte for byte (a LaterReplay: once its block
        came from another node), or None: it is parsed as any other."""
        if self.peer is not None and request.startswith(_PEER_REQUEST):
            again = self.peer.replay(request)
            if again is None:
                return None
            headers, body, keep_alive = again
            return [http_head(200, default_headers, headers, keep_alive), body], keep_alive
        hits = self.hits
        return None if hits is None else hits.replays.answer(request, default_headers)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await load_streaming()  # (before serving, not at the first streamed answer)
                    await self.startup()
                except Exception as exc:  # reported to the server, which exits
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return


def _expiring(store: TieredStore) -> Coroutine[Any, Any, None]:
    """Free blocks past their prefix's TTL even when nobody reads them, every _EXPIRE_EVERY seconds."""
    return run_every(_EXPIRE_EVERY, store.expire, "freeing blocks past their TTL", logger=log.engine)


def build_store(cache: CacheSettings, workers: WorkerSet | None = None) -> TieredStore | None:
    """The tiers of `cache.*`: memory on top, then the disk folders in the order given.

    None when no tier is configured: every read then streams from the origin. A worker of a
    node of several keeps the blocks it owns within its share of each quota; the memory
    tier is then block files on tmpfs, which every worker of the node reads (store.shared).
    """
    if cache.memory_quota == 0 and not cache.disk:
        return None
    workers = workers or WorkerSet()
    alone, share, mine = workers.alone, workers.count, workers.index

    def owns(block: BlockId) -> bool:  # WorkerSet.owns, in one call: asked on every hit of a tier
        return alone or placement(block.bucket, block.key, block.index) % share == mine

    def owner(block: BlockId) -> int:
        return placement(block.bucket, block.key, block.index) % share

    def notes(tier: str) -> HitNotes:  # the hits of other workers' blocks, told to their owners
        return HitNotes(os.path.join(workers.run_dir, "hits"), tier, mine, share, owner)

    memory: MemoryTier | SharedTier | None = None
    if cache.memory_quota > 0 and alone:
        memory = MemoryTier(cache.memory_quota, make_policy(cache.policy, cache.memory_quota))
    elif cache.memory_quota > 0:
        quota = cache.memory_quota // share
        memory = SharedTier(workers.memory_path, quota, make_policy(cache.policy, quota), owns, medium="memory",
                            name="mem", notes=notes("mem"))
    disks: list[Tier] = []
    for i, d in enumerate(cache.disk):
        if alone:
            disks.append(DiskTier(d.path, d.quota, make_policy(cache.policy, d.quota), medium=d.medium, name=f"disk{i}"))
        else:
            quota = d.quota // share
            disks.append(SharedTier(d.path, quota, make_policy(cache.policy, quota), owns, medium=d.medium,
                                    name=f"disk{i}", notes=notes(f"disk{i}")))
    return TieredStore(
        memory, disks, promote=cache.promote,
        pinned=tuple((r.bucket, r.prefix) for r in cache.pinned),
        ttl=tuple((r.bucket, r.prefix, r.seconds) for r in cache.ttl), owns=owns,
    )


def build_shadow(cache: CacheSettings, workers: WorkerSet | None = None) -> ShadowAdvisor | None:
    """Shadow models of this node's store at 1x, 2x and 4x its quotas (issue 8's online
    estimate: what more cache would buy), fed a `cache.shadow_rate` sample of the traffic.
    In a node of several workers the first worker's models are the node's (its N stores of 1/N
    of each quota, as `gateway advise --workers N` models it), fed every worker's sample; the
    others' only send theirs (`sends`, gateway.admin.nodefeed)."""
    if cache.shadow_rate <= 0:
        return None
    workers = workers or WorkerSet()
    spec = spec_from_settings(cache, workers=workers.count)
    several = not workers.alone
    return ShadowAdvisor({f"{k}x": spec.scaled(k) for k in (1, 2, 4)}, rate=cache.shadow_rate,
                         sends=several and not workers.first, delay=FEED_DELAY if several else 0.0)


def create_app(settings: Settings, workers: WorkerSet | None = None) -> GatewayApp:
    return GatewayApp(settings, workers)


async def _stop(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel the node's background tasks and wait for them, asking again a few times: a
    cancellation that lands just as a timeout inside a task expires can be taken for that
    timeout, and a shutdown must not wait forever on one task."""
    pending = {task for task in tasks if not task.done()}
    for _ in range(_STOP_ROUNDS):
        if not pending:
            break
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=_STOP_WAIT)
    for task in tasks:
        if task.done() and not task.cancelled() and task.exception() is not None:
            log.cluster.warning("background task %s ended with %r", task.get_name(), task.exception())
    if pending:
        log.cluster.warning("background tasks still running at shutdown: %s", sorted(t.get_name() for t in pending))


_EXPIRE_EVERY = 30.0  # seconds between two rounds that free blocks past their TTL (cache.ttl)
_STOP_ROUNDS = 5
_STOP_WAIT = 1.0  # seconds for the tasks to end after each cancel
_PEER_REQUEST = f"GET {PEER_PREFIX}".encode()  # how the bytes of a request of the peer API begin
